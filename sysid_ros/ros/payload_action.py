"""The estimator's payload hand-off: `~/identify_payload` (an action) and `~/restore_payload`.

The action follows the live posterior's `payload.*` parameters window by window (feedback: the
mean and std in the robot's payload frame), waits until the estimate passes the gate
(`payload_handoff.refusals`: steady over the estimator's `steady_windows` windows, stds below
`payload_max_mass_std` / `payload_max_com_std`, inside its bounds, and with the goal's
`load_change` heavier or lighter than the robot's current load by two mass stds) or the goal's
timeout passes, and with `apply` hands it to the robot through the driver profile's service:
franka_msgs/srv/SetLoad (mass, centre of mass, inertia column-major, in the flange frame) or
ur_msgs/srv/SetPayload in either of its layouts (mass and centre of gravity; or a
geometry_msgs/Inertia and a transition time), in `tool0`. The action fails, and nothing is
applied, when the estimate does not pass the gate in time, the service is missing, or the robot
refuses it; the result says why.

With the goal's `excite` the node runs `payload_excitation` (a trajectory file, `sysid
excite`'s) through the robot's trajectory controller first (`ros.trajectory_run`: checked
against every limit from the current state, the controller's FollowJointTrajectory action),
follows the estimate while it runs (feedback stage `excite`), and hands nothing to the robot
before the motion has ended; the goal's timeout counts from then. A refused, rejected or
aborted motion ends the goal with nothing applied.

The load before the first hand-off (`payload_before`: mass and centre of mass in the payload
frame; the robot's configured load) is kept, and `~/restore_payload` (std_srvs/Trigger) hands
it back to the robot.
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Callable

from geometry_msgs.msg import Inertia, Vector3
import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from std_srvs.srv import Trigger

from sysid_ros_interfaces.action import IdentifyPayload

from sysid_ros.io.drivers import DriverProfile
from sysid_ros.io.payload_handoff import (expressed_in, GateLimits, held_payload, HeldPayload,
                                          refusals)
from sysid_ros.io.problem import Problem
from sysid_ros.ros import coroutines
from sysid_ros.ros.interfaces import (ACTION_SERVER, CLIENT, create, Endpoint, NodeParameter,
                                      SERVICE)
from sysid_ros.ros.trajectory_run import TrajectoryRun

__all__ = ['PARAMETERS', 'IDENTIFY', 'RESTORE', 'SET_PAYLOAD', 'service_type',
           'payload_request', 'handed_payload', 'PayloadAction']

PARAMETERS = (
    NodeParameter('payload_max_mass_std', 0.05, 'the identify_payload gate: largest mass '
                  'standard deviation handed to the robot [kg]', 0.0),
    NodeParameter('payload_max_com_std', 0.01, 'the identify_payload gate: largest standard '
                  'deviation of a centre-of-mass coordinate [m]', 0.0),
    NodeParameter('payload_timeout', 60.0, 'longest wait of identify_payload for an estimate '
                  'that passes the gate, where the goal gives none [s]', 0.0),
    NodeParameter('payload_service_timeout', 5.0, "longest wait for the robot's payload "
                  'service and its response [s]', 0.0),
    NodeParameter('payload_excitation', '', 'JointTrajectory YAML that an identify_payload '
                  "goal with excite runs first (sysid excite's trajectory.yaml; empty: excite "
                  'is refused)'),
    NodeParameter('payload_controller', '', 'controller whose follow_joint_trajectory action '
                  'runs payload_excitation (empty: the only one on the graph, else the driver '
                  "profile's)"),
    NodeParameter('payload_before', [0.0, 0.0, 0.0, 0.0], "the robot's load before the first "
                  'hand-off, which restore_payload hands back: mass [kg] and centre of mass '
                  "(3) [m] in the driver profile's payload frame"),
)
IDENTIFY = Endpoint(
    '~/identify_payload', IdentifyPayload, ACTION_SERVER,
    "with a driver profile's payload service and payload.* parameters: follow the payload "
    "estimate (feedback), gate it and, with the goal's apply, hand it to the robot")
RESTORE = Endpoint('~/restore_payload', Trigger, SERVICE,
                   "with a driver profile's payload service: hand the load before the first "
                   'hand-off (payload_before) back to the robot')
SET_PAYLOAD = Endpoint(
    '{payload_service}', None, CLIENT,
    "the driver profile's payload service (data.driver: franka_msgs/srv/SetLoad on "
    '/service_server/set_load, ur_msgs/srv/SetPayload on /io_and_status_controller/'
    'set_payload), called by identify_payload and restore_payload')
# Wake-up period of the action while it waits for windows or a response [s] (steady time).
_POLL = 0.05


def service_type(name: str) -> type:
    """The service class of `package/srv/Name`.

    Raises:
      ImportError: the interface package is not installed (its message names it).
    """
    package, _, service = name.split('/')
    try:
        return getattr(importlib.import_module(f'{package}.srv'), service)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f'{name} is not installed: install the package {package} (the '
                          "robot driver's interfaces)") from exc


# The payload layouts of the robots' services, told apart by their request fields.
_SET_LOAD, _UR_GRAVITY, _UR_INERTIA = 'set_load', 'ur_gravity', 'ur_inertia'


def _layout(request) -> str | None:
    """_SET_LOAD (franka_msgs SetLoad), _UR_GRAVITY (ur_msgs SetPayload up to 2.0: mass and
    centre of gravity), _UR_INERTIA (newer ur_msgs: a geometry_msgs/Inertia), or None."""
    fields = request.get_fields_and_field_types()
    if {'mass', 'center_of_mass', 'load_inertia'} <= set(fields):
        return _SET_LOAD
    if {'mass', 'center_of_gravity'} <= set(fields):
        return _UR_GRAVITY
    if fields.get('payload') == 'geometry_msgs/Inertia':
        return _UR_INERTIA
    return None


def payload_request(srv: type, payload: HeldPayload):
    """The request of `srv` (franka_msgs SetLoad, or ur_msgs SetPayload in either layout)
    that hands `payload` (in the robot's payload frame) to the robot.

    Raises:
      TypeError: a service whose request has none of those layouts.
    """
    request = srv.Request()
    layout = _layout(request)
    com = [float(c) for c in payload.com]
    if layout == _SET_LOAD:
        request.mass = float(payload.mass)
        request.center_of_mass = com
        request.load_inertia = [float(v) for v in np.asarray(payload.inertia).T.ravel()]
    elif layout == _UR_GRAVITY:
        request.mass = float(payload.mass)
        request.center_of_gravity = Vector3(x=com[0], y=com[1], z=com[2])
    elif layout == _UR_INERTIA:
        i = np.asarray(payload.inertia, dtype=float)
        centre = Vector3(x=com[0], y=com[1], z=com[2])
        request.payload = Inertia(m=float(payload.mass), com=centre,
                                  ixx=i[0, 0], ixy=i[0, 1], ixz=i[0, 2], iyy=i[1, 1],
                                  iyz=i[1, 2], izz=i[2, 2])
    else:
        raise TypeError(f'{srv.__module__}.{srv.__name__}: no payload layout known '
                        f'(request fields {sorted(request.get_fields_and_field_types())})')
    return request


def handed_payload(request) -> tuple[float, list[float]]:
    """(mass [kg], centre of mass (3,) [m]) that a `payload_request` layout hands over.

    Raises:
      TypeError: a request with none of those layouts.
    """
    layout = _layout(request)
    if layout == _SET_LOAD:
        return float(request.mass), [float(c) for c in request.center_of_mass]
    if layout == _UR_GRAVITY:
        c = request.center_of_gravity
        return float(request.mass), [float(c.x), float(c.y), float(c.z)]
    if layout == _UR_INERTIA:
        c = request.payload.com
        return float(request.payload.m), [float(c.x), float(c.y), float(c.z)]
    raise TypeError(f'{type(request).__name__}: no payload layout known')


def _accepted(response) -> tuple[bool, str]:
    """(taken, the robot's reason) from a SetLoad / SetPayload response."""
    return bool(response.success), str(getattr(response, 'error', ''))


class PayloadAction:
    """The identify_payload action server and restore_payload service of one estimator.

    Args:
      node: the estimator node (its parameters `PARAMETERS` are declared here).
      profile: the driver profile, whose payload service and frame are used.
      names: (M,) the estimator's parameter names.
      bounds: the configured bounds of the `payload.*` parameters it identifies.
      link: the payload link (`model.payload.link`), the frame of the estimate.
      nominal: (10,) the configuration's payload (`Payload.nominal`).
      offset: (rotation (3, 3), translation (3,) [m]) of the link in the profile's payload
        frame (`payload_handoff.frame_offset`).
      settings: the node's values of `PARAMETERS` (and `steady_windows`).
      problem: the configured problem, whose limits and driver profile `payload_excitation`
        runs with (needed where it is set).
      positions: returns the current joint positions (nv,) in model joint order, or None
        before any (needed where `payload_excitation` is set).

    Raises:
      InputError: `payload_excitation` unreadable, or not of the model's joints.
    """

    def __init__(self, node: Node, profile: DriverProfile, names, bounds, link: str, nominal,
                 offset, settings: dict, problem: Problem | None = None,
                 positions: Callable[[], np.ndarray | None] | None = None):
        self._node, self._profile = node, profile
        self._names, self._bounds, self._link, self._nominal = names, bounds, link, nominal
        self._offset = offset
        self._limits = GateLimits(settings['payload_max_mass_std'],
                                  settings['payload_max_com_std'],
                                  settings['steady_windows'])
        self._timeout = settings['payload_timeout']
        self._service_timeout = settings['payload_service_timeout']
        before = [float(v) for v in settings['payload_before']]
        if len(before) != 4:
            raise ValueError(f'payload_before: expected mass and a centre of mass (4 values), '
                             f'got {len(before)}')
        self.before = HeldPayload(profile.payload_frame, before[0], 0.0, np.array(before[1:]),
                                  np.zeros(3), np.zeros((3, 3)))
        self.applied: HeldPayload | None = None
        self._lock = threading.Lock()
        self._latest: tuple[int, HeldPayload, bool] | None = None    # (window, estimate, steady)
        self._srv = service_type(profile.payload_service_type)
        # Reentrant: the service and the action wait on their own timers and responses.
        group = self._group = ReentrantCallbackGroup()
        self.client = create(node, SET_PAYLOAD, msg_type=self._srv, callback_group=group,
                             payload_service=profile.payload_service)
        self.service = create(node, RESTORE, self._on_restore, callback_group=group)
        self.server = create(node, IDENTIFY, self._execute, callback_group=group)
        self._excitation = None
        if settings.get('payload_excitation'):
            self._excitation = (TrajectoryRun(node, problem, settings['payload_excitation'],
                                              settings['payload_controller'], group),
                                positions)

    def destroy(self) -> None:
        """Release the action server, service and clients."""
        if self._excitation is not None:
            self._excitation[0].cancel()
            self._excitation[0].destroy()
        self.server.destroy()
        self._node.destroy_service(self.service)
        self._node.destroy_client(self.client)

    def offer(self, index: int, mean, std, steady: bool) -> None:
        """One window's posterior (M,) mean and std, and whether it is steady
        (`payload_handoff.SteadyMean`); called by the estimator's worker thread."""
        estimate = held_payload(self._names, mean, std, self._link, self._nominal)
        with self._lock:
            self._latest = (index, estimate, steady)

    def in_robot_frame(self, payload: HeldPayload) -> HeldPayload:
        """`payload` (in the payload link) in the profile's payload frame."""
        return expressed_in(payload, self._profile.payload_frame, *self._offset)

    # ------------------------------------------------------------------------------------------

    async def _call(self, payload: HeldPayload) -> tuple[bool, str]:
        """Hand `payload` (robot frame) to the robot: (taken, why not)."""
        deadline = time.monotonic() + self._service_timeout
        while not self.client.service_is_ready():
            if time.monotonic() > deadline:
                return False, (f'the payload service {self._profile.payload_service} '
                               f'({self._profile.payload_service_type}) is not available')
            await coroutines.sleep(self._node, _POLL, self._group)
        future = self.client.call_async(payload_request(self._srv, payload))
        while not future.done():
            if time.monotonic() > deadline:
                self.client.remove_pending_request(future)
                return False, f'no response from {self._profile.payload_service} in time'
            await coroutines.sleep(self._node, _POLL, self._group)
        taken, why = _accepted(future.result())
        return taken, '' if taken else f'the robot refused the payload: {why or "no reason"}'

    async def _excite(self) -> str:
        """Start the excitation; '' once the controller runs it, else why not."""
        if self._excitation is None:
            return 'no payload_excitation trajectory is configured'
        run, positions = self._excitation
        q0 = positions()
        if q0 is None:
            return 'no joint state received yet'
        return await run.start(q0)

    async def _execute(self, goal_handle):
        goal = goal_handle.request
        result = IdentifyPayload.Result()
        timeout = goal.timeout if goal.timeout > 0 else self._timeout
        start_window, seen, why = None, -1, ['no window estimated yet']
        estimate, stage = None, 'estimate'
        if goal.excite:
            not_started = await self._excite()
            if not_started:
                goal_handle.abort()
                result.message = f'excite: {not_started}'
                return result
            stage = 'excite'
        run = self._excitation[0] if goal.excite else None
        deadline = time.monotonic() + timeout + (run.duration if run else 0.0)
        while time.monotonic() < deadline:
            if stage == 'excite' and run.done():
                ended = run.outcome()
                if ended:
                    goal_handle.abort()
                    result.message = f'excite: {ended}; nothing applied'
                    return result
                stage, deadline = 'estimate', time.monotonic() + timeout
            with self._lock:
                latest = self._latest
            if latest is not None and latest[0] != seen:
                seen, estimate, steady = latest
                start_window = seen if start_window is None else start_window
                why = refusals(estimate, steady, self._limits, self._bounds,
                               (self.applied or self.before).mass, goal.load_change)
                shown = self.in_robot_frame(estimate)
                feedback = IdentifyPayload.Feedback(
                    stage=stage, windows=seen - start_window + 1, mass=shown.mass,
                    mass_std=shown.mass_std, center_of_mass=shown.com.tolist(),
                    center_of_mass_std=shown.com_std.tolist())
                goal_handle.publish_feedback(feedback)
            if not why and stage == 'estimate':
                break
            await coroutines.sleep(self._node, _POLL, self._group)
        if stage == 'excite':
            run.cancel()
            goal_handle.abort()
            result.message = (f'excite: the motion did not end within its {run.duration:.1f} s '
                              f'and {timeout:g} s more; cancelled, nothing applied')
            return result
        if estimate is not None:
            shown = self.in_robot_frame(estimate)
            result.mass, result.mass_std = shown.mass, shown.mass_std
            result.center_of_mass, result.center_of_mass_std = (shown.com.tolist(),
                                                                shown.com_std.tolist())
            result.inertia = np.asarray(shown.inertia).ravel().tolist()
        if why:
            result.message = f'no estimate passed the gate within {timeout:g} s: ' + \
                '; '.join(why)
            goal_handle.abort()
            return result
        result.success = True
        if not goal.apply:
            result.message = 'estimated (apply: false, nothing handed to the robot)'
            goal_handle.succeed()
            return result
        taken, why_not = await self._call(shown)
        if not taken:
            result.success = False
            result.message = why_not
            goal_handle.abort()
            return result
        previous, self.applied = self.applied, shown
        result.applied = True
        result.message = (f'applied {_describe(shown)} through '
                          f'{self._profile.payload_service}')
        self._node.get_logger().info(result.message + ' (replacing '
                                     + _describe(previous or self.before) + ')')
        goal_handle.succeed()
        return result

    async def _on_restore(self, request, response):
        """Hand `before` back to the robot."""
        response.success, why = await self._call(self.before)
        if response.success:
            self.applied = None
            response.message = 'restored ' + _describe(self.before)
        else:
            response.message = why
        self._node.get_logger().info(response.message)
        return response


def _describe(payload: HeldPayload) -> str:
    return (f'{payload.mass:.4g} kg at ({", ".join(f"{c:.4g}" for c in payload.com)}) m in '
            f'{payload.frame}')
