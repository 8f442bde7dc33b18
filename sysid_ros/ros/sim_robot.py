"""`sim_robot`: a simulated robot driver, the hardware of the live demo.

    ros2 run sysid_ros sim_robot --ros-args -p config:=config/double_pendulum.yaml -p seed:=3

Publishes what a driver would (`ENDPOINTS`) from an `io.simulated_robot.SimulatedRobot` set by
its parameters (`PARAMETERS`, all read-only: read once, at start):

  * `joint_states` (sensor_msgs/JointState) at `publish_rate`: noisy positions, velocities and
    efforts (the command held from each stamp on), in the model's joint order;
  * `torque_commands` (std_msgs/Float64MultiArray), if `publish_commands`;
  * `mocap/<mocap_link>/pose` (geometry_msgs/PoseStamped, frame `mocap_frame`), if
    `mocap_link` names a link;
  * `~/ground_truth` (diagnostic_msgs/DiagnosticArray, latched): the true value of every
    configured parameter, the payload and the seed, for scoring (the estimator is not told);
  * services `~/pick_up_payload` and `~/drop_payload` (std_srvs/Trigger);
  * it follows each trajectory_msgs/JointTrajectory on `trajectory_topic` from its arrival.

With `driver` (a `data.driver` profile, `io.drivers`) other than generic it stands in for that
robot's driver, as the estimator meets it on a real robot:

  * joint states on the profile's topic (franka: `/franka/joint_states`, plus the 30 Hz
    republish on `/joint_states` that franka_bringup's joint_state_publisher makes, stamped on
    receipt); with `effort_gains` the efforts are motor currents (torque / gain [A]), as the UR
    driver's are;
  * the profile's payload service with the vendor's interface (franka_msgs/srv/SetLoad,
    ur_msgs/srv/SetPayload): it takes what it is handed and publishes it in `~/ground_truth`
    (`handed_payload_mass`, `handed_payload_com`, in the profile's payload frame);
  * the profile's trajectory controller's control_msgs/action/FollowJointTrajectory action:
    each goal is followed from its arrival under computed-torque control (the rest pose until
    the first), and succeeds when its last point's time has passed.

Timing: a timer ticks every `B / publish_rate` seconds (B messages per tick, so that ticks
stay at or below `MAX_TICK_RATE`) and steps the robot once (B samples). Stamps are
`start + k / publish_rate` from the node clock; a late tick runs the missed ticks at once while
the lag is at most `MAX_LAG`; beyond that the lost time is skipped (a gap in the stamps, counted
as an overrun). Ctrl-C or SIGTERM stop the node cleanly and print a summary (messages,
simulated time, real-time factor, CPU use); a bad parameter exits with status 2.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
import time

from control_msgs.action import FollowJointTrajectory
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
import jax
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.qos_overriding_options import QoSOverridingOptions
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from sysid_ros.io import drivers
from sysid_ros.io.errors import InputError
from sysid_ros.io.problem import build_problem
from sysid_ros.io.simulated_robot import SimulatedRobot, SimulatedRobotSettings, Tick
from sysid_ros.ros import coroutines, messages, qos
from sysid_ros.ros.interfaces import (ACTION_SERVER, create, Endpoint, NodeParameter,
                                      PUBLISHER, SERVICE, SUBSCRIPTION)
from sysid_ros.ros.payload_action import handed_payload, service_type

__all__ = ['NODE_NAME', 'ENDPOINTS', 'PARAMETERS', 'MAX_TICK_RATE', 'MAX_LAG', 'SimRobot',
           'main']

NODE_NAME = 'sim_robot'
DEFAULT_CONFIG = 'double_pendulum.yaml'
# Highest timer rate [Hz]; faster publishing sends several messages per tick.
MAX_TICK_RATE = 100.0
# Late ticks are run at once while the simulation is at most this far behind the clock [s];
# more lost time is skipped (a gap in the stamps).
MAX_LAG = 0.5

_RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
JOINT_STATES = Endpoint(
    '{joint_states_topic}', JointState, PUBLISHER,
    "joint_states, or with `driver` the profile's joint-state topic: positions and velocities "
    'with Gaussian noise of std `noise` [rad, rad/s]; efforts: the '
    'torque held from the stamp on, with noise of std `effort_noise` [N m] (divided by '
    '`effort_gains` where given: currents [A]); at '
    '`publish_rate`; reliable, or best effort with '
    '`qos_overrides./joint_states.publisher.reliability:=best_effort` as drivers publish',
    _RELIABLE, QoSOverridingOptions.with_default_policies())
TORQUE_COMMANDS = Endpoint(
    'torque_commands', Float64MultiArray, PUBLISHER,
    'the torques without noise, in model joint order [N m]; if `publish_commands`', _RELIABLE)
MOCAP_POSE = Endpoint(
    'mocap/{mocap_link}/pose', PoseStamped, PUBLISHER,
    'pose of the `mocap_link` frame in frame `mocap_frame`, position noise of std '
    '`mocap_noise` [m]; if `mocap_link` is set', _RELIABLE)
GROUND_TRUTH = Endpoint(
    '~/ground_truth', DiagnosticArray, PUBLISHER,
    'true value of every configured parameter (names as in the configuration), '
    'payload_held, payload_mass, payload_link and seed; on start and on each payload change',
    qos.LATCHED)
PICK_UP_PAYLOAD = Endpoint(
    '~/pick_up_payload', Trigger, SERVICE,
    'add the payload to the ground truth (fails if it is held)')
DROP_PAYLOAD = Endpoint(
    '~/drop_payload', Trigger, SERVICE,
    'remove the payload from the ground truth (fails if none is held)')
TRAJECTORY = Endpoint(
    '{trajectory_topic}', JointTrajectory, SUBSCRIPTION,
    "a trajectory to follow from its arrival under computed-torque control (the points' "
    'times from the header stamp); if `trajectory_topic` is set', 10)
REPUBLISHED = Endpoint(
    '{republished_topic}', JointState, PUBLISHER,
    'driver franka: the latest joint state at `republish_rate`, stamped on publishing, as '
    "franka_bringup's joint_state_publisher republishes it on /joint_states", _RELIABLE)
PAYLOAD_SERVICE = Endpoint(
    '{payload_service}', None, SERVICE,
    "with `driver`: the profile's payload service, with the vendor's type (franka_msgs/srv/"
    'SetLoad, ur_msgs/srv/SetPayload); what it is handed goes into ~/ground_truth')
FOLLOW_TRAJECTORY = Endpoint(
    '/{controller}/follow_joint_trajectory', FollowJointTrajectory, ACTION_SERVER,
    "with `driver`: the profile's trajectory controller; each goal is followed from its "
    'arrival and succeeds after its last point')
ENDPOINTS = (JOINT_STATES, TORQUE_COMMANDS, MOCAP_POSE, GROUND_TRUTH, PICK_UP_PAYLOAD,
             DROP_PAYLOAD, TRAJECTORY, REPUBLISHED, PAYLOAD_SERVICE, FOLLOW_TRAJECTORY)

_SIM = {f.name: f.default for f in dataclasses.fields(SimulatedRobotSettings)}
PARAMETERS = (
    NodeParameter('config', '', 'problem YAML (model, integrator, actuator, parameters whose '
                  'truth is published); empty: the packaged config/' + DEFAULT_CONFIG),
    NodeParameter('publish_rate', _SIM['publish_rate'], 'joint_states rate [Hz]; sim_rate / '
                  'publish_rate must be a whole number'),
    NodeParameter('sim_rate', _SIM['sim_rate'], 'integration rate [Hz]'),
    NodeParameter('noise', _SIM['noise'], 'sensor noise std of positions [rad, m] and '
                  'velocities [rad/s, m/s]'),
    NodeParameter('effort_noise', _SIM['effort_noise'], 'noise std of the published efforts '
                  '[N m, N]'),
    NodeParameter('seed', _SIM['seed'], 'seed of the ground truth, the excitation and the '
                  'noise'),
    NodeParameter('perturbation', _SIM['perturbation'], 'relative half-width of the '
                  'ground-truth scale factors'),
    NodeParameter('perturb_unidentified', _SIM['perturb_unidentified'], 'perturb the whole '
                  'inertials, not only the configured parameters (dynamics the estimator '
                  'cannot represent)'),
    NodeParameter('true_damping', _SIM['true_damping'], 'scale of the damping added to the '
                  'nominal one [N m s/rad]'),
    NodeParameter('true_coulomb', _SIM['true_coulomb'], 'scale of the Coulomb torque added '
                  'to the nominal one [N m]'),
    NodeParameter('excitation', _SIM['excitation'], 'torque (sum of sines in joint torque) '
                  'or joint_sines (sum of sines in joint space inside the limits, tracked)'),
    NodeParameter('position_margin', _SIM['position_margin'], 'joint_sines: fraction of each '
                  'half range kept free at both limits'),
    NodeParameter('speed_fraction', _SIM['speed_fraction'], 'joint_sines: largest fraction '
                  'of each velocity limit'),
    NodeParameter('torque_scale', _SIM['torque_scale'], 'excitation peak per joint, times a '
                  'typical torque'),
    NodeParameter('num_sines', _SIM['num_sines'], 'sines per joint in the excitation'),
    NodeParameter('max_frequency', _SIM['max_frequency'], 'highest excitation frequency '
                  '[Hz]'),
    NodeParameter('payload_mass', _SIM['payload_mass'], 'mass of the payload [kg]'),
    NodeParameter('payload_link', _SIM['payload_link'], 'link that picks up the payload '
                  '(empty: the last one)'),
    NodeParameter('payload_position', [0.0], 'payload position in the link frame [m] (3 '
                  "numbers; one number or empty: the link's centre of mass)"),
    NodeParameter('payload_inertia', [0.0], 'payload inertia about its centre of mass in '
                  'link axes: ixx, ixy, ixz, iyy, iyz, izz [kg m^2] (one number or empty: a '
                  'point mass)'),
    NodeParameter('payload_time', _SIM['payload_time'], 'pick up the payload this long '
                  'after start [s] (negative: only on ~/pick_up_payload)'),
    NodeParameter('mocap_link', _SIM['mocap_link'], 'link whose pose is published on '
                  'mocap/<link>/pose (empty: none)'),
    NodeParameter('mocap_noise', _SIM['mocap_noise'], 'position noise std of the mocap pose '
                  '[m]'),
    NodeParameter('mocap_frame', 'world', 'frame_id of the mocap poses'),
    NodeParameter('frame_id', '', 'frame_id of the joint states'),
    NodeParameter('publish_commands', False, 'also publish the torques on torque_commands '
                  '(std_msgs/Float64MultiArray)'),
    NodeParameter('trajectory', _SIM['trajectory'], 'JointTrajectory YAML (sysid excite) to '
                  'follow from the start instead of the sum of sines; the robot starts at its '
                  'first point'),
    NodeParameter('trajectory_topic', '', 'trajectory_msgs/JointTrajectory topic whose '
                  'messages are followed on arrival (empty: none)'),
    NodeParameter('tracking_frequency', _SIM['tracking_frequency'], 'natural frequency of '
                  'the computed-torque tracking [Hz]'),
    NodeParameter('driver', 'generic', 'the driver profile (io.drivers) to stand in for: its '
                  'topics, payload service and trajectory action (generic: joint_states only)'),
    NodeParameter('effort_gains', [0.0], 'the true torque per unit of published effort [N m / '
                  'A], one or one per joint; the efforts are torque / gain (one number 0 or '
                  'empty: torques)'),
    NodeParameter('republish_rate', 30.0, 'driver franka: rate of the /joint_states '
                  'republish [Hz]'),
)


def _default_config() -> str:
    """The packaged double-pendulum config: source checkout, then the ament share."""
    candidates = [pathlib.Path(__file__).resolve().parents[2] / 'config' / DEFAULT_CONFIG,
                  pathlib.Path(sys.prefix) / 'share' / 'sysid_ros' / 'config' / DEFAULT_CONFIG]
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.append(pathlib.Path(get_package_share_directory('sysid_ros')) / 'config'
                          / DEFAULT_CONFIG)
    except Exception:                           # not in an ament index: the other candidates
        pass
    return str(next((c for c in candidates if c.is_file()), candidates[0]))


def _typed(name: str, value, default):
    """`value` as the type of `default` (an int is a float, a list of ints a list of floats).

    Raises:
      InputError: for another type.
    """
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if isinstance(default, bool):
        ok, out, what = isinstance(value, bool), value, 'true or false'
    elif isinstance(default, int):
        ok, out, what = isinstance(value, int) and not isinstance(value, bool), value, 'an int'
    elif isinstance(default, float):
        ok, out, what = number(value), float(value) if number(value) else None, 'a number'
    elif isinstance(default, str):
        ok, out, what = isinstance(value, str), value, 'a string'
    else:
        ok = isinstance(value, (list, tuple)) and all(number(v) for v in value)
        out, what = [float(v) for v in value] if ok else None, 'a list of numbers'
    if not ok:
        raise InputError(f'parameter {name}: expected {what}, got {value!r}')
    return out


class SimRobot(Node):
    """Simulated robot driver (see the module doc for topics, parameters and timing).

    Attributes:
      robot: the simulation it publishes.
    """

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        p = self._declare_parameters()
        names = {f.name for f in dataclasses.fields(SimulatedRobotSettings)}
        values = {k: v for k, v in p.items() if k in names}
        self.profile = drivers.DRIVERS.get(p['driver'])
        if self.profile is None:
            raise InputError(f'parameter driver: expected one of {", ".join(drivers.DRIVERS)}, '
                             f'got {p["driver"]!r}')
        stand_in = self.profile.name != 'generic'
        values.update(follows=bool(p['trajectory_topic']) or stand_in,
                      payload_position=tuple(p['payload_position']) or None,
                      payload_inertia=tuple(p['payload_inertia']) or None)
        settings = SimulatedRobotSettings(**values)
        batch = max(1, math.ceil(p['publish_rate'] / MAX_TICK_RATE))
        self.robot = robot = SimulatedRobot(build_problem(p['config']), settings, batch)
        if robot.reference is not None:
            self.get_logger().info(f'following {robot.reference}')
        self._frame_id, self._mocap_frame = p['frame_id'], p['mocap_frame']
        self._published = 0
        self._overruns = 0

        self._gains = (drivers.torque_gains(p['effort_gains'], robot.nv) if any(
            p['effort_gains']) else np.ones(robot.nv))
        self._given_gains = drivers.torque_gains(robot.problem.config.data.torque_gains,
                                                 robot.nv)
        self._joint_pub = create(self, JOINT_STATES, joint_states_topic=(
            self.profile.joint_states_topic if stand_in else 'joint_states'))
        self._latest: JointState | None = None
        self._handed: dict[str, str] = {}
        if stand_in:
            self._stand_in(p['republish_rate'])
        self._command_pub = create(self, TORQUE_COMMANDS) if p['publish_commands'] else None
        self._pose_pub = (create(self, MOCAP_POSE, mocap_link=p['mocap_link'])
                          if robot.mocap_body is not None else None)
        self._truth_pub = create(self, GROUND_TRUTH)
        create(self, PICK_UP_PAYLOAD, self._on_pick_up)
        create(self, DROP_PAYLOAD, self._on_drop)
        self._trajectory_topic = p['trajectory_topic']
        if self._trajectory_topic:
            create(self, TRAJECTORY, self._on_trajectory,
                   trajectory_topic=self._trajectory_topic)

        self._start = None                      # clock time of simulated t = 0 (first tick)
        self._wall_start = self._wall_last = time.monotonic()
        self._cpu_start = time.process_time()
        self._publish_truth()
        self._timer = self.create_timer(batch * robot.period, self._on_tick)
        self.get_logger().info(
            f'{robot.model.name}: {robot.nv} joints, integrating at {p["sim_rate"]:g} Hz '
            f'({robot.problem.config.model.integrator}), publishing joint_states at '
            f'{p["publish_rate"]:g} Hz ({batch} per tick); compiled in '
            f'{robot.compile_time:.1f} s; ground truth {self._truth_text()}')

    def _declare_parameters(self) -> dict:
        """Declare every parameter of `PARAMETERS` (read-only) with its description; return
        the values, `config` resolved and the payload lists empty where not given."""
        values = {}
        for name, default, description, _ in PARAMETERS:
            # Typed here rather than by rclpy, so that `-p publish_rate:=500` (an int) is
            # accepted and a wrong type gives one clear message instead of a traceback.
            if name == 'config':
                default = _default_config()
            self.declare_parameter(name, default, ParameterDescriptor(
                description=description, read_only=True, dynamic_typing=True))
            values[name] = _typed(name, self.get_parameter(name).value, default)
        for name in ('payload_position', 'payload_inertia'):
            values[name] = [] if len(values[name]) < 2 else list(values[name])
        return values

    # ------------------------------------------------------------------------------------------
    # Timer: step the robot, publish its samples
    # ------------------------------------------------------------------------------------------

    def _on_tick(self) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        tick_period = self.robot.batch * self.robot.period
        if self._start is None:                 # the first tick publishes the first batch
            self._start = now - tick_period
            self._wall_start, self._cpu_start = time.monotonic(), time.process_time()
        behind = int(math.floor((now - self._start) / tick_period)) - self.robot.ticks
        limit = max(1, int(MAX_LAG / tick_period))
        if behind > limit:                      # too late: skip the lost time
            self._overruns += 1
            self._start += (behind - limit) * tick_period
            self.get_logger().warning(
                f'behind real time by {behind * tick_period:.2f} s; skipping '
                f'{(behind - limit) * tick_period:.2f} s', throttle_duration_sec=5.0)
            behind = limit
        for _ in range(max(behind, 0)):
            self._step_and_publish()
        self._wall_last = time.monotonic()

    def _step_and_publish(self) -> None:
        tick: Tick = self.robot.step()
        if tick.picked_up:
            self._payload_changed('payload_time', tick.start)
        if tick.diverged:
            self.get_logger().error('simulation diverged; back to rest',
                                    throttle_duration_sec=5.0)
        names = self.robot.model.joint_names
        for b, t in enumerate(tick.t):
            stamp = self._start + float(t)
            self._latest = messages.arrays_to_joint_state(
                stamp, names, tick.q[b], tick.qd[b], tick.effort[b] / self._gains,
                frame_id=self._frame_id)
            self._joint_pub.publish(self._latest)
            if self._command_pub is not None:
                self._command_pub.publish(messages.array_to_torque_command(tick.command[b]))
            if self._pose_pub is not None:
                self._pose_pub.publish(messages.arrays_to_pose(
                    stamp, tick.mocap_position[b], tick.mocap_orientation[b],
                    frame_id=self._mocap_frame))
        self._published += len(tick.t)

    def _follow(self, msg: JointTrajectory) -> float | None:
        """Follow `msg` from now (its points' times from its header stamp); returns the time
        of its last point [s], None for a trajectory without points.

        Raises:
          InputError: joints that are not the model's.
        """
        arrays = messages.trajectory_to_arrays(msg)
        if len(arrays.t) == 0:
            return None
        qdd = arrays.qdd if arrays.qdd is not None else np.zeros_like(arrays.q)
        t = arrays.t - messages.stamp_to_seconds(msg.header.stamp)
        self.robot.follow(arrays.names, t, arrays.q, arrays.qd, qdd)
        return float(t[-1])

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        try:
            if self._follow(msg) is None:
                return
        except InputError as exc:
            self.get_logger().error(f'ignored a trajectory on {self._trajectory_topic}: {exc}')
            return
        self.get_logger().info(f'following {self.robot.reference}')

    # ------------------------------------------------------------------------------------------
    # Driver stand-in
    # ------------------------------------------------------------------------------------------

    def _stand_in(self, republish_rate: float) -> None:
        """The profile's republish, payload service and trajectory action."""
        profile, group = self.profile, ReentrantCallbackGroup()
        for topic in profile.republished_topics:
            publisher = create(self, REPUBLISHED, republished_topic=topic)
            self.create_timer(1.0 / republish_rate, lambda pub=publisher: self._republish(pub))
        if profile.payload_service:
            self._payload_type = service_type(profile.payload_service_type)
            create(self, PAYLOAD_SERVICE, self._on_payload, msg_type=self._payload_type,
                   payload_service=profile.payload_service)
        create(self, FOLLOW_TRAJECTORY, self._on_goal, callback_group=group,
               controller=profile.trajectory_controller)
        self._group = group

    def _republish(self, publisher) -> None:
        if self._latest is not None:
            msg = self._latest
            msg.header.stamp = self.get_clock().now().to_msg()
            publisher.publish(msg)

    def _on_payload(self, request, response):
        mass, com = handed_payload(request)
        self._handed = {'handed_payload_mass': repr(float(mass)),
                        'handed_payload_com': repr([float(c) for c in com])}
        self._publish_truth()
        self.get_logger().info(f'handed a payload of {mass:.4g} kg at '
                               f'{self._handed["handed_payload_com"]} m through '
                               f'{self.profile.payload_service}')
        response.success = True
        return response

    async def _on_goal(self, goal_handle):
        """Follow the goal's trajectory from now; succeed after its last point."""
        result = FollowJointTrajectory.Result()
        try:
            duration = self._follow(goal_handle.request.trajectory)
        except InputError as exc:
            result.error_code, result.error_string = result.INVALID_JOINTS, str(exc)
            goal_handle.abort()
            return result
        if duration is None:
            result.error_code, result.error_string = result.INVALID_GOAL, 'empty trajectory'
            goal_handle.abort()
            return result
        end = self.robot.time + duration
        self.get_logger().info(f'following {self.robot.reference} (action goal)')
        while self.robot.time < end:
            await coroutines.sleep(self, 0.1, self._group)
        result.error_code = result.SUCCESSFUL
        goal_handle.succeed()
        return result

    # ------------------------------------------------------------------------------------------
    # Payload and ground truth
    # ------------------------------------------------------------------------------------------

    def _payload_changed(self, why: str, t: float) -> None:
        """Publish and log the ground truth after the payload changed at `t` [s]."""
        self._publish_truth()
        action = 'picked up' if self.robot.payload_held else 'dropped'
        robot = self.robot
        self.get_logger().info(
            f'{action} a {robot.settings.payload_mass:g} kg payload on '
            f'{robot.model.link_names[robot.payload_body]} ({why}, t = {t:.3f} s); ground '
            f'truth {self._truth_text()}')

    def _on_pick_up(self, request, response):
        if not self.robot.set_payload(True):
            response.success, response.message = False, 'the payload is already held'
            return response
        self._payload_changed('service', self.robot.time)
        response.success, response.message = True, f'picked up; truth {self._truth_text()}'
        return response

    def _on_drop(self, request, response):
        if not self.robot.set_payload(False):
            response.success, response.message = False, 'no payload is held'
            return response
        self._payload_changed('service', self.robot.time)
        response.success, response.message = True, f'dropped; truth {self._truth_text()}'
        return response

    def _truth_text(self) -> str:
        return ', '.join(f'{k} = {v:.4g}' for k, v in self.truth().items())

    def truth(self) -> dict[str, float]:
        """The simulation's ground truth, each configured `<joint>.gain` being the torque per
        unit of the effort the estimator reads: the hidden `effort_gains` over the
        configuration's `data.torque_gains`."""
        values = self.robot.truth()
        joints = self.robot.model.joint_names
        for name in values:
            joint, attribute = name.rsplit('.', 1)
            if attribute == 'gain':
                values[name] = float(self._gains[joints.index(joint)]
                                     / self._given_gains[joints.index(joint)])
        return values

    def _publish_truth(self) -> None:
        robot = self.robot
        outside = robot.truth_outside_bounds()
        status = DiagnosticStatus(
            level=DiagnosticStatus.WARN if outside else DiagnosticStatus.OK,
            name=f'{self.get_fully_qualified_name()}: ground truth',
            hardware_id=robot.model.name,
            message=('outside the configured bounds: ' + ', '.join(outside)) if outside
            else 'ground truth (hidden from the estimator)')
        extra = {'payload_held': str(robot.payload_held),
                 'payload_mass': repr(float(robot.settings.payload_mass)),
                 'payload_link': robot.model.link_names[robot.payload_body],
                 'seed': str(self.get_parameter('seed').value), **self._handed}
        status.values = ([KeyValue(key=k, value=repr(v)) for k, v in self.truth().items()]
                         + [KeyValue(key=k, value=v) for k, v in extra.items()])
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._truth_pub.publish(msg)

    def summary(self) -> str:
        """One line: messages and rate, simulated time and real-time factor (both up to the
        last tick), CPU use of the process since the first tick, overruns, resets."""
        span = max(self._wall_last - self._wall_start, 1e-9)
        cpu = time.process_time() - self._cpu_start
        wall = max(time.monotonic() - self._wall_start, 1e-9)
        sim = self.robot.time
        return (f'published {self._published} joint_states in {span:.2f} s '
                f'({self._published / span:.1f} Hz); simulated {sim:.2f} s '
                f'(real-time factor {sim / span:.3f}); CPU {cpu:.2f} s '
                f'({100.0 * cpu / wall:.1f} % of one core); overruns '
                f'{self._overruns}; resets {self.robot.resets}')


def main(args=None) -> int:
    """Run the node until Ctrl-C / SIGTERM; a bad parameter exits with status 2."""
    jax.config.update('jax_enable_x64', True)
    node = None
    try:
        with rclpy.init(args=args):
            try:
                node = SimRobot()
                rclpy.spin(node)
            except (KeyboardInterrupt, ExternalShutdownException):
                pass
            except Exception:
                if rclpy.ok():                  # a real failure, not the shutdown racing a
                    raise                       # publish or a service call
            finally:
                if node is not None:
                    print(f'sim_robot: {node.summary()}', file=sys.stderr, flush=True)
                    node.destroy_node()
    except InputError as exc:
        print(f'sim_robot: error: {exc}', file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
