"""A designed trajectory run through ros2_control from inside a node's coroutine (the
estimator's identify_payload with `excite`): the steps of `trajectory_publisher` (the
current state, the goal checked against every limit, the controller's
control_msgs/action/FollowJointTrajectory action found on the graph, the goal and its result),
waited for without blocking the node's executor.
"""

from __future__ import annotations

import time

from control_msgs.action import FollowJointTrajectory
import numpy as np
from rclpy.action import ActionClient
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node

from sysid_ros.io import drivers, excitation
from sysid_ros.io.problem import Problem
from sysid_ros.ros import coroutines, trajectory_action
from sysid_ros.ros.interfaces import ACTION_CLIENT, create, Endpoint

__all__ = ['FOLLOW_JOINT_TRAJECTORY', 'TrajectoryRun']

FOLLOW_JOINT_TRAJECTORY = Endpoint(
    '{controller}/' + trajectory_action.ACTION_SUFFIX, FollowJointTrajectory, ACTION_CLIENT,
    'with payload_excitation, for an identify_payload goal with excite: the trajectory '
    'controller (payload_controller, or the one found on the graph) runs the move from the '
    'current state and the trajectory as one goal')

_POLL = 0.05                    # [s] wake-up period while waiting on the graph or the goal


class TrajectoryRun:
    """One trajectory file, run on request through the robot's trajectory controller.

    Args:
      node: the node whose coroutine runs it.
      problem: the configured problem (limits, driver profile's trajectory controller).
      path: JointTrajectory YAML (`sysid excite`'s trajectory.yaml), read here.
      controller: the controller whose action runs it ('': the only one on the graph, else
        the driver profile's `trajectory_controller`).
      group: the callback group of the coroutine (its waits and the action client's).
      wait_timeout: longest wait for the action and the goal's acceptance [s].
      start_tolerance: how far the current position may lie outside the position limits
        [rad, m].

    Raises:
      InputError: an unreadable trajectory, or one whose joints are not the model's.
    """

    def __init__(self, node: Node, problem: Problem, path: str, controller: str,
                 group: CallbackGroup, wait_timeout: float = 10.0,
                 start_tolerance: float = 0.01):
        self._node, self._problem, self._source = node, problem, path
        self._trajectory = excitation.load_joint_trajectory(path)
        self._order = trajectory_action.joint_order(problem, self._trajectory, path)
        self._controller, self._group = controller, group
        self._wait, self._tolerance = wait_timeout, start_tolerance
        self._client: ActionClient | None = None
        self._handle = None
        self._result = None
        self.duration = 0.0                 # [s] of the goal sent last (move included)

    async def start(self, q0: np.ndarray) -> str:
        """Check the goal from the current positions q0 (nv,) in model joint order, find the
        action and send it; '' once the controller accepted it, else why not (nothing
        moves then)."""
        q0 = np.asarray(q0, dtype=float)[self._order]
        sent, _, refusals = trajectory_action.checked_goal(
            self._problem, self._trajectory, q0, self._tolerance, source=self._source)
        if refusals:
            return 'refused, nothing sent: ' + '; '.join(refusals)
        action, why = await self._find_action()
        if action is None:
            return why
        self.destroy()
        self._client = create(self._node, FOLLOW_JOINT_TRAJECTORY, callback_group=self._group,
                              controller=action[:-len(trajectory_action.ACTION_SUFFIX) - 1])
        if not await self._until(self._client.server_is_ready, self._wait):
            return f'{action}: no action server within {self._wait:g} s; nothing sent'
        self.duration = float(sent.t[-1])
        future = self._client.send_goal_async(trajectory_action.make_goal(sent, 0.0, 0.0, 0.0))
        if not await self._until(future.done, self._wait):
            return f'{action}: no answer to the goal within {self._wait:g} s'
        self._handle = future.result()
        if not self._handle.accepted:
            return (f'{action}: goal rejected (is the controller active, and does it command '
                    'these joints?)')
        self._result = self._handle.get_result_async()
        return ''

    def done(self) -> bool:
        """Whether the goal sent last has ended."""
        return self._result is not None and self._result.done()

    def outcome(self) -> str:
        """'' when the goal sent last succeeded, else how it ended
        (`trajectory_action.outcome`); call once `done`."""
        response = self._result.result()
        return trajectory_action.outcome(response.status, response.result.error_code,
                                         response.result.error_string)

    def cancel(self) -> None:
        """Ask the controller to stop the goal sent last, if it still runs."""
        if self._handle is not None and not self.done():
            self._handle.cancel_goal_async()

    def destroy(self) -> None:
        """Release the action client."""
        if self._client is not None:
            self._client.destroy()
            self._client = None

    async def _find_action(self) -> tuple[str | None, str]:
        """(the action's name, ''), or (None, why there is none)."""
        if self._controller:
            return trajectory_action.action_name(self._controller), ''
        found: set[str] = set()

        def look() -> bool:
            found.update(trajectory_action.offered_actions(self._node))
            return bool(found)

        if await self._until(look, self._wait):
            await coroutines.sleep(self._node, trajectory_action.DISCOVERY_SETTLE, self._group)
            look()
        profile = drivers.DRIVERS[self._problem.config.data.driver]
        try:
            return trajectory_action.pick_action(found, profile.trajectory_controller), ''
        except trajectory_action.ControllerChoiceError as exc:
            return None, str(exc)

    async def _until(self, predicate, timeout: float) -> bool:
        """Wait until `predicate()` or `timeout` [s]; returns `predicate()`."""
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            await coroutines.sleep(self._node, _POLL, self._group)
        return bool(predicate())
