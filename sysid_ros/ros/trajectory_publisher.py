r"""`trajectory_publisher`: runs a designed trajectory (`sysid excite`'s trajectory.yaml) on a
robot through ros2_control, as a control_msgs/action/FollowJointTrajectory goal, after checking
it against the robot's limits from the robot's current state.

    ros2 run sysid_ros trajectory_publisher --ros-args -p config:=config/panda.yaml \
        -p trajectory:=excite/trajectory.yaml -p dry_run:=true

In order, each step ending the run with its exit status when it fails:

1. The current positions: the first sensor_msgs/JointState on the configuration's
   `data.joint_states_topic` (the driver profile's, `io.drivers`), within `wait_timeout`
   (else NO_STATE); a position more than `start_tolerance` outside the model's position
   limits is refused (REFUSED).
2. The goal: a quintic move at rest at both ends from the current positions (at time 0) to
   the trajectory's first point, within half the speed and acceleration limits and at least
   1 s long (`ros.trajectory_action`), then the trajectory, its times shifted by the move's
   duration. A trajectory that does not start at rest is refused (REFUSED).
3. The limit check of the whole goal (`io.excitation.limit_violations`, times from the
   goal's start): the URDF's (or the configuration's `excitation` section's) position range
   less `excitation.position_margin` (from the end of the move on: the move runs from the
   checked current state to the first point), speed, acceleration and effort, the effort
   through the configured model at its design point (friction included). A violation is logged, one
   line per joint and limit, and nothing is sent (REFUSED).
4. The controller: `/<controller>/follow_joint_trajectory`; with `controller` empty, the
   FollowJointTrajectory actions on the graph, found within `wait_timeout`: the only one,
   or else the driver profile's `trajectory_controller` (UR: the scaled one) where several
   are offered (an inactive controller offers its action too, and rejects goals). None, or
   several without the profile's, or an action without a server within `wait_timeout`:
   NO_CONTROLLER, naming them.
5. With `dry_run` the controller, joints, points, duration and the move are logged and
   nothing is sent (exit 0). Otherwise the goal is sent, stamped 0 (the controller starts it
   on arrival) with positions, velocities and accelerations and the tolerances of
   `path_tolerance`, `goal_tolerance` and `goal_time_tolerance` (0: the controller's own);
   progress is logged at each quarter of the duration. A goal rejected or not answered
   within `wait_timeout` (REJECTED), a goal the controller aborts or cancels (ABORTED, with
   the result's error_code and error_string), or no result within the duration plus
   `result_margin` (TIMED_OUT; the goal is cancelled) ends the run with one error line;
   Ctrl-C cancels the goal (exit 130). Success exits 0.

Exit statuses: 0, REFUSED, 2 (bad parameters or files), NO_CONTROLLER, NO_STATE, REJECTED,
ABORTED, TIMED_OUT, 130. Parameters (`PARAMETERS`) are read once, at start; the joint-state
subscription and the action client are `ENDPOINTS`.
"""

from __future__ import annotations

import signal
import sys
import time

from control_msgs.action import FollowJointTrajectory
import jax
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState

from sysid_ros.io import drivers, excitation
from sysid_ros.io.errors import InputError
from sysid_ros.io.problem import build_problem
from sysid_ros.ros import messages, trajectory_action
from sysid_ros.ros.interfaces import ACTION_CLIENT, create, Endpoint, NodeParameter, SUBSCRIPTION

__all__ = ['NODE_NAME', 'ENDPOINTS', 'PARAMETERS', 'TrajectoryPublisher', 'main', 'REFUSED',
           'NO_CONTROLLER', 'NO_STATE', 'REJECTED', 'ABORTED', 'TIMED_OUT', 'INTERRUPTED']

NODE_NAME = 'trajectory_publisher'
REFUSED = 1                 # exit status: a limit or the start state; nothing was sent
NO_CONTROLLER = 3           # exit status: no FollowJointTrajectory action, or an ambiguous one
NO_STATE = 4                # exit status: no joint state within wait_timeout
REJECTED = 5                # exit status: the controller rejected the goal
ABORTED = 6                 # exit status: the controller aborted (or cancelled) the goal
TIMED_OUT = 7               # exit status: no result in time; the goal was cancelled
INTERRUPTED = 130           # exit status: Ctrl-C; a sent goal was cancelled
CANCEL_WAIT = 5.0           # [s] longest wait for the answer to a cancel request

PARAMETERS = (
    NodeParameter('config', '', 'problem configuration YAML (robot, limits, actuator, '
                  'data.driver, data.joint_states_topic); required'),
    NodeParameter('trajectory', '', 'JointTrajectory YAML to check and run; required'),
    NodeParameter('prior', '', 'estimate.yaml whose means are the design point of the effort '
                  "check, as sysid excite --prior (empty: the configuration's)"),
    NodeParameter('controller', '', 'controller whose follow_joint_trajectory action runs '
                  "the goal (empty: the only one on the graph, else the driver profile's)"),
    NodeParameter('dry_run', False, 'check and log what would be sent, send nothing'),
    NodeParameter('wait_timeout', 10.0, 'longest wait for the joint state, the action and '
                  "the goal's acceptance [s]", 0.0),
    NodeParameter('start_tolerance', 0.01, 'how far the current position may lie outside '
                  "the model's position limits [rad, m]", 0.0),
    NodeParameter('path_tolerance', 0.0, 'position error allowed along the path on every '
                  "joint [rad, m] (0: the controller's)", 0.0),
    NodeParameter('goal_tolerance', 0.0, 'position error allowed at the end on every joint '
                  "[rad, m] (0: the controller's)", 0.0),
    NodeParameter('goal_time_tolerance', 0.0, 'time allowed past the end to reach the goal '
                  "tolerance [s] (0: the controller's)", 0.0),
    NodeParameter('result_margin', 10.0, "wait for the result past the goal's duration "
                  'before cancelling it [s]', 0.0),
)
JOINT_STATES = Endpoint(
    '{joint_states_topic}', JointState, SUBSCRIPTION,
    "data.joint_states_topic (default: the driver profile's): the current positions, read "
    'once before the goal is built; joints matched by name; best effort, volatile',
    QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
FOLLOW_JOINT_TRAJECTORY = Endpoint(
    '{controller}/' + trajectory_action.ACTION_SUFFIX, FollowJointTrajectory, ACTION_CLIENT,
    'the controller (the controller parameter, or the one found on the graph): the move '
    'from the current state and the trajectory as one goal, with the tolerances of the '
    'parameters; its result ends the run')
ENDPOINTS = (JOINT_STATES, FOLLOW_JOINT_TRAJECTORY)


class TrajectoryPublisher(Node):
    """Checks a trajectory from the current state and runs it as a goal (module doc)."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        for name, default, description, minimum in PARAMETERS:
            self.declare_parameter(name, default, ParameterDescriptor(
                description=description, read_only=True))
            value = self.get_parameter(name).value
            if minimum is not None and value < minimum:
                raise InputError(f'parameter {name}: expected >= {minimum:g}, got {value}')
        value = {p.name: self.get_parameter(p.name).value for p in PARAMETERS}
        for name in ('config', 'trajectory'):
            if not value[name]:
                raise InputError(f'parameter {name}: expected a file (-p {name}:=PATH)')
        self._problem = build_problem(value['config'])
        self._trajectory = excitation.load_joint_trajectory(value['trajectory'])
        self._source = value['trajectory']
        self._value = value
        self._feedback_quarter = 1
        self._goal_duration = 0.0

    # ----------------------------------------------------------------------------------
    # Steps (module doc), each returning None or an exit status
    # ----------------------------------------------------------------------------------

    def run(self) -> int:
        """Read the state, build and check the goal, find the controller, send; returns the
        exit status."""
        log = self.get_logger()
        q0 = self._current_positions()
        if q0 is None:
            return NO_STATE
        goal = self._checked_goal(q0)
        if goal is None:
            return REFUSED
        sent, move = goal
        action = self._find_action()
        if action is None:
            return NO_CONTROLLER
        client = create(self, FOLLOW_JOINT_TRAJECTORY,
                        controller=action[:-len(trajectory_action.ACTION_SUFFIX) - 1])
        if not client.wait_for_server(timeout_sec=self._value['wait_timeout']):
            log.error(f'{action}: no action server within {self._value["wait_timeout"]:g} s; '
                      'nothing sent')
            return NO_CONTROLLER
        traj = self._trajectory
        log.info(f'{action}: {len(sent.t)} points of {", ".join(sent.joint_names)}, '
                 f'{sent.t[-1]:.2f} s: a {move:.2f} s move from {_rounded(q0)} to '
                 f'{_rounded(traj.q[0])}, then {self._source} ({len(traj.t)} points, '
                 f'{traj.t[-1] - traj.t[0]:.2f} s); within every limit')
        if self._value['dry_run']:
            log.info('dry run: nothing sent')
            return 0
        return self._follow(client, action, sent)

    def _current_positions(self) -> np.ndarray | None:
        """(nv,) positions in the trajectory's joint order from the first joint state."""
        topic = self._problem.config.data.joint_states_topic
        received = []
        subscription = create(self, JOINT_STATES, received.append,
                              joint_states_topic=topic)
        try:
            if not self._spin_until(lambda: received, self._value['wait_timeout']):
                self.get_logger().error(f'no sensor_msgs/JointState on {topic} within '
                                        f'{self._value["wait_timeout"]:g} s; nothing sent')
                return None
        finally:
            self.destroy_subscription(subscription)
        state = messages.joint_state_to_arrays(received[0])
        try:
            return messages.reorder_by_name(state.names, state.position,
                                            self._trajectory.joint_names)
        except ValueError as exc:
            self.get_logger().error(f'{topic}: {exc}; nothing sent')
            return None

    def _checked_goal(self, q0: np.ndarray):
        """(the trajectory after the move from q0, the move's duration [s]), or None after
        logging why it is refused (`trajectory_action.checked_goal`)."""
        sent, move, refusals = trajectory_action.checked_goal(
            self._problem, self._trajectory, q0, self._value['start_tolerance'],
            self._value['prior'] or None, self._source)
        if refusals:
            log = self.get_logger()
            for line in refusals:
                log.error(line)
            log.error('refused; nothing sent')
            return None
        return sent, move

    def _find_action(self) -> str | None:
        """The FollowJointTrajectory action to send to (module doc, step 4), or None after
        logging why there is none."""
        given = self._value['controller']
        if given:
            return trajectory_action.action_name(given)
        found = set()

        def look() -> bool:
            found.update(trajectory_action.offered_actions(self))
            return bool(found)

        if self._spin_until(look, self._value['wait_timeout']):
            self._spin_until(lambda: False, trajectory_action.DISCOVERY_SETTLE)
            look()
        profile = drivers.DRIVERS[self._problem.config.data.driver]
        try:
            return trajectory_action.pick_action(found, profile.trajectory_controller)
        except trajectory_action.ControllerChoiceError as exc:
            self.get_logger().error(f'{exc}; nothing sent')
            return None

    def _follow(self, client, action: str, sent: excitation.JointTrajectoryData) -> int:
        """Send the goal through `client` (of `action`), wait for its result (module doc,
        step 5)."""
        log = self.get_logger()
        value = self._value
        self._goal_duration = float(sent.t[-1])
        goal = trajectory_action.make_goal(sent, value['path_tolerance'],
                                           value['goal_tolerance'],
                                           value['goal_time_tolerance'])
        handle = None
        try:
            future = client.send_goal_async(goal, feedback_callback=self._on_feedback)
            if not self._spin_until(future.done, value['wait_timeout']):
                log.error(f'{action}: no answer to the goal within '
                          f'{value["wait_timeout"]:g} s; taken as rejected')
                return REJECTED
            handle = future.result()
            if not handle.accepted:
                log.error(f'{action}: goal rejected (is the controller active, and does it '
                          'command these joints?)')
                return REJECTED
            log.info(f'{action}: goal accepted, {self._goal_duration:.2f} s')
            result = handle.get_result_async()
            wait = self._goal_duration + value['result_margin']
            if not self._spin_until(result.done, wait):
                self._cancel(handle)
                log.error(f'{action}: no result within {wait:.2f} s (the goal plus '
                          'result_margin); goal cancelled')
                return TIMED_OUT
        except KeyboardInterrupt:
            if handle is not None and handle.accepted:
                self._cancel(handle)
                log.warning(f'{action}: interrupted; goal cancelled')
            return INTERRUPTED
        response = result.result()
        ended = trajectory_action.outcome(response.status, response.result.error_code,
                                          response.result.error_string)
        if not ended:
            log.info(f'{action}: goal succeeded')
            return 0
        log.error(f'{action}: {ended}')
        return ABORTED

    # ----------------------------------------------------------------------------------
    # Callbacks and helpers
    # ----------------------------------------------------------------------------------

    def _on_feedback(self, message) -> None:
        """Log progress at each quarter of the goal's duration."""
        feedback = message.feedback
        elapsed = messages.stamp_to_seconds(feedback.desired.time_from_start)
        if self._goal_duration <= 0.0 or elapsed < self._feedback_quarter * (
                self._goal_duration / 4):
            return
        self._feedback_quarter = int(4 * elapsed / self._goal_duration) + 1
        error = np.max(np.abs(feedback.error.positions), initial=0.0)
        self.get_logger().info(f'{elapsed:.2f} of {self._goal_duration:.2f} s, largest '
                               f'position error {error:.3g}')

    def _cancel(self, handle) -> None:
        """Request the goal's cancellation and wait up to CANCEL_WAIT for the answer."""
        self._spin_until(handle.cancel_goal_async().done, CANCEL_WAIT)

    def _spin_until(self, predicate, timeout: float) -> bool:
        """Spin this node until `predicate()` is true or `timeout` [s] passes."""
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            rclpy.spin_once(self, timeout_sec=0.05)
        return bool(predicate())


def _rounded(q: np.ndarray) -> list[float]:
    """Positions rounded to 4 decimals, for the log."""
    return [round(float(v), 4) for v in q]


def main(args=None) -> int:
    """Run the node; exit status (module doc). Without rclpy's signal handlers, Ctrl-C reaches
    the node as KeyboardInterrupt with the context intact, so a goal can still be
    cancelled. The handler is installed here: a process started in the background by a
    shell inherits SIGINT ignored, and Python then keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    jax.config.update('jax_enable_x64', True)
    code = 0
    try:
        with rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO):
            node = TrajectoryPublisher()
            try:
                code = node.run()
            finally:
                node.destroy_node()
    except InputError as exc:
        print(f'trajectory_publisher: error: {exc}', file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return INTERRUPTED
    return code


if __name__ == '__main__':
    sys.exit(main())
