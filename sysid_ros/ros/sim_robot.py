"""`sim_robot`: a simulated robot driver, the hardware of the live demo.

    ros2 run sysid_ros sim_robot --ros-args -p config:=config/double_pendulum.yaml \
        -p publish_rate:=200.0 -p noise:=0.001

It integrates a ground-truth model of the configured robot at `sim_rate` (1 kHz) with the
configured integrator and actuator model, driven by `excitation`: `torque` (default), a
sum-of-sines joint torque (`simulation.excitation`, peaks of `torque_scale` times a typical
torque of each joint, the excitation of `pipeline.simulate`), or `joint_sines`, a sum of
sines in joint space about the middle of each joint's range (`simulation.joint_sines`: at
least `position_margin` of the half range from each limit, at most `speed_fraction` of the
velocity limit) followed by the computed-torque law below, so that an arm under gravity
stays inside its limits; and publishes what a driver would:

  * `joint_states` (sensor_msgs/JointState, reliable; `qos_overrides./joint_states.publisher.
    reliability:=best_effort` publishes it as drivers with the sensor-data QoS do) at
    `publish_rate`: positions and velocities with Gaussian noise of standard deviation
    `noise` [rad, rad/s], efforts = the applied torque as a joint torque sensor measures it,
    with Gaussian noise of std `effort_noise` [N m]; the effort at a stamp is the command
    held from that stamp on;
  * `torque_commands` (std_msgs/Float64MultiArray, model joint order), if `publish_commands`;
  * `mocap/<mocap_link>/pose` (geometry_msgs/PoseStamped, frame `mocap_frame`), if
    `mocap_link` names a link: the link frame's pose, position noise `mocap_noise` [m];
  * `~/ground_truth` (diagnostic_msgs/DiagnosticArray, transient local): the true value of
    every configured parameter (names as in the configuration), the payload and the seed;
    the estimator is not told, the demo reads it to score the estimate.

Ground truth (`core.model.edits.perturb_params`): the configuration's nominal model,
perturbed with the seed: each link's inertial 10-vector is scaled by a factor drawn uniformly
from [1 - p, 1 + p] (p = `perturbation`; mass, first moment and inertia together, so the
centre of mass stays and the body stays physically consistent) and each joint's viscous
damping becomes `nominal * U(1 - p, 1 + p) + true_damping * U(0.5, 1.5)` [N m s/rad], its
Coulomb torque `nominal * U(1 - p, 1 + p) + true_coulomb * U(0.5, 1.5)` [N m]. Of that
perturbed model only the configured parameters are kept (the rest stays nominal: freeing
`link1.mass` keeps the inertia about the centre of mass), so that the estimator's model class
contains the truth; `perturb_unidentified:=true` keeps the whole perturbation instead
(unmodelled dynamics, e.g. to test robustness).

Following a trajectory (e.g. `sysid excite`'s, or `excitation:=joint_sines`): with
`trajectory` (a JointTrajectory YAML, followed from the start, the robot starting at its
first point) or on every
trajectory_msgs/JointTrajectory message on `trajectory_topic` (followed from its arrival;
e.g. `/joint_trajectory_controller/joint_trajectory`, where `trajectory_publisher` sends),
the torques come from a computed-torque law instead of the sum of sines
(`core.dynamics.control.track`): the controller knows the nominal model (not the ground
truth, not the payload), its error dynamics have the natural frequency `tracking_frequency`,
each command is held over one publish period and clipped to the effort limits. The reference
is interpolated linearly between the points; after the last point the robot holds it, and
before the first message on `trajectory_topic` it holds its rest pose.

Payload (`core.model.edits.add_rigid_body`): a rigid body of mass `payload_mass` [kg],
centre of mass `payload_position` (in the frame of `payload_link`; default: that link's
centre of mass) and inertia `payload_inertia` about it (default: none, a point mass) is added
at `payload_time` [s after start] if >= 0, or on the `~/pick_up_payload` service
(std_srvs/Trigger); `~/drop_payload` removes it. The simulation goes on without a jump.
Where the configuration identifies a `model.payload` on the same link, the truths of its
`payload.*` parameters are the held payload's mass and centre of mass in the payload frame
(mass 0 while none is held); its inertia stays hidden.

Timing: a timer ticks every `B / publish_rate` seconds (B messages per tick, so that ticks
stay at or below `MAX_TICK_RATE` = 100 Hz) and runs one jitted call that integrates B * K
steps (K = sim_rate / publish_rate) and returns the B states to publish. Stamps are
`start + k / publish_rate` from the node clock; a tick that comes late runs the missed ticks
at once while the lag is at most `MAX_LAG`; beyond that the lost time is skipped (a gap in
the stamps, counted as an overrun and reported). Ctrl-C or SIGTERM stop the node cleanly and
print a summary (messages, simulated time, real-time factor, CPU use).

This node is the simulated hardware: it calls the core's integrator but holds no estimator.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
import jax
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.qos_overriding_options import QoSOverridingOptions
from scipy.spatial.transform import Rotation
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from sysid_ros.core.model import edits, inertia
from sysid_ros.core.model.parameters import PAYLOAD_ATTRIBUTES
from sysid_ros.core.dynamics import control
from sysid_ros.core.dynamics import integrators
from sysid_ros.core.dynamics import kinematics
from sysid_ros.io import excitation, pipeline, simulation
from sysid_ros.io.errors import InputError
from sysid_ros.ros import messages

__all__ = ['MAX_TICK_RATE', 'MAX_LAG', 'SimRobot', 'main']

DEFAULT_CONFIG = 'double_pendulum.yaml'
# Highest timer rate [Hz]; faster publishing sends several messages per tick.
MAX_TICK_RATE = 100.0
# Late ticks are run at once while the simulation is at most this far behind the clock [s];
# more lost time is skipped (a gap in the stamps).
MAX_LAG = 0.5


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
    """Simulated robot driver (see the module doc for topics, parameters and timing)."""

    def __init__(self, **kwargs):
        super().__init__('sim_robot', **kwargs)
        p = self._declare_parameters()
        # Timing: K integration steps per message, B messages per tick.
        ratio = p['sim_rate'] / p['publish_rate']
        self._steps = int(round(ratio))
        if self._steps < 1 or abs(ratio - self._steps) > 1e-6 * ratio:
            raise InputError(f'parameter publish_rate: expected sim_rate '
                             f'({p["sim_rate"]:g} Hz) divided by a whole number, got '
                             f'{p["publish_rate"]:g} Hz')
        self._batch = max(1, math.ceil(p['publish_rate'] / MAX_TICK_RATE))
        self._dt = 1.0 / p['sim_rate']
        self._period = 1.0 / p['publish_rate']

        self._problem = problem = pipeline.build_problem(p['config'])
        model = problem.model
        self._model, self._nv = model, model.nv
        self._integrator = problem.config.model.integrator
        self._actuator = problem.config.model.actuator

        # Ground truth and payload.
        perturbed = edits.perturb_params(problem.base_params, p['seed'], p['perturbation'],
                                         p['true_damping'], p['true_coulomb'])
        if p['perturb_unidentified']:
            self._nominal = perturbed
        else:   # only the configured parameters differ: the estimator's model holds the truth
            self._nominal = problem.spec.to_params(problem.spec.from_params(perturbed),
                                                   problem.base_params)
        link = p['payload_link'] or model.link_names[-1]
        if link not in model.link_names:
            raise InputError(f'parameter payload_link: expected one of '
                             f'{", ".join(model.link_names)}, got {link!r}')
        self._payload_body = model.link_names.index(link)
        position = p['payload_position']
        if len(position) == 0:                  # default: the link's centre of mass
            _, com, _ = inertia.physical_from_inertial(self._nominal.inertial)
            position = np.asarray(com[self._payload_body])
        if len(position) != 3:
            raise InputError(f'parameter payload_position: expected 3 numbers [m], '
                             f'got {list(position)}')
        self._payload_position = np.asarray(position, float)
        self._payload_mass = p['payload_mass']
        entries = p['payload_inertia']
        if len(entries) not in (0, 6):
            raise InputError(f'parameter payload_inertia: expected 6 numbers ixx, ixy, ixz, '
                             f'iyy, iyz, izz [kg m^2] (one number or empty: none), got '
                             f'{list(entries)}')
        payload_inertia = (inertia.inertia_matrix_from_entries(*entries) if entries
                           else np.zeros((3, 3)))
        # Both ground truths (and their published values) are computed before the timer
        # starts: eager JAX ops compile on first use, which would stall the simulation.
        self._with_payload = edits.add_rigid_body(self._nominal, self._payload_body,
                                                  self._payload_mass, self._payload_position,
                                                  payload_inertia)
        self._truth_table = {held: self._truths(held) for held in (False, True)}
        self._payload_time = p['payload_time']
        self._payload_held = False
        self._payload_timer_done = self._payload_time < 0.0
        self._truth = self._nominal

        # Excitation: the same sum of sines on every call (a generator from a fixed seed).
        rng = np.random.default_rng([p['seed'], 1])
        scale = p['torque_scale'] * pipeline.typical_torque(model, self._nominal, rng)
        limit = np.asarray(model.effort_max or [np.inf] * self._nv, float)
        self._limit = np.where(limit > 0.0, limit, np.inf)
        self._excitation = functools.partial(
            pipeline.excitation, scale=scale, num_sines=p['num_sines'],
            max_frequency=p['max_frequency'])
        self._excitation_seed = [p['seed'], 2]
        self._sines = None
        if p['excitation'] == 'joint_sines':
            self._sines = functools.partial(
                simulation.joint_sines, q_min=model.q_min or np.full(self._nv, np.inf),
                q_max=model.q_max or np.full(self._nv, np.inf),
                v_max=model.v_max or np.full(self._nv, np.inf),
                num_sines=p['num_sines'], max_frequency=p['max_frequency'],
                margin=p['position_margin'], speed=p['speed_fraction'])
        # Torques are evaluated for about a second of ticks at once (`_controls`).
        self._block_ticks = max(1, int(round(p['publish_rate'] / self._batch)))
        self._block = (None, None)              # (first tick, (block * B * K + 1, nv) torques)
        # Rest pose: q = 0, clipped into the joint limits.
        q_rest = np.clip(np.zeros(self._nv), model.q_min or -np.inf, model.q_max or np.inf)
        # Trajectory following: (first control instant, reference) or None; reference(times
        # (T,) [s from that instant]) -> q, qd, qdd (T, nv).
        self._reference = None
        self._following = (bool(p['trajectory'] or p['trajectory_topic'])
                           or self._sines is not None)
        if self._following and self._actuator not in control.ADDITIVE_ACTUATORS:
            raise InputError(f'parameters trajectory, trajectory_topic, excitation: following '
                             f'needs an actuator of {", ".join(control.ADDITIVE_ACTUATORS)}, got '
                             f'{self._actuator!r}')
        self._tracking_frequency = 2.0 * np.pi * p['tracking_frequency']
        if p['trajectory']:
            ref = excitation.load_joint_trajectory(p['trajectory'])
            self._follow(ref.joint_names, ref.t, ref.q, ref.qd, ref.qdd, first=0)
        elif self._sines is not None:
            self._reference = (0, self._sines_at)
            self.get_logger().info('following joint-space sines inside the limits')
        elif self._following:                   # hold the rest pose until a trajectory comes
            hold = np.stack([q_rest, q_rest])
            zero = np.zeros_like(hold)
            self._follow(model.joint_names, np.array([0.0, 1.0]), hold, zero, zero, first=0)
        self._rng = np.random.default_rng([p['seed'], 3])
        self._noise_std = p['noise']
        self._effort_noise = p['effort_noise']

        self._mocap_body = None
        if p['mocap_link']:
            if p['mocap_link'] not in model.link_names:
                raise InputError(f'parameter mocap_link: expected one of '
                                 f'{", ".join(model.link_names)} or empty, got '
                                 f'{p["mocap_link"]!r}')
            self._mocap_body = model.link_names.index(p['mocap_link'])
        self._mocap_noise = p['mocap_noise']
        self._mocap_frame = p['mocap_frame']
        self._frame_id = p['frame_id']

        # State: at rest (or at the start of the trajectory to follow).
        self._x0 = np.concatenate([q_rest, np.zeros(self._nv)])
        if self._reference is not None:
            q0, qd0, _ = self._reference[1](np.zeros(1))
            self._x0 = np.concatenate([q0[0], qd0[0]])
        self._x = self._x0
        self._ticks = 0                          # ticks simulated since start
        self._published = 0
        self._overruns = 0
        self._resets = 0
        self._compile_s = self._warm_up()

        # Interfaces.
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self._joint_pub = self.create_publisher(
            JointState, 'joint_states', qos,
            qos_overriding_options=QoSOverridingOptions.with_default_policies())
        self._command_pub = (self.create_publisher(Float64MultiArray, 'torque_commands', qos)
                             if p['publish_commands'] else None)
        self._pose_pub = (self.create_publisher(
            PoseStamped, f'mocap/{p["mocap_link"]}/pose', qos) if self._mocap_body is not None
            else None)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._truth_pub = self.create_publisher(DiagnosticArray, '~/ground_truth', latched)
        self.create_service(Trigger, '~/pick_up_payload', self._on_pick_up)
        self.create_service(Trigger, '~/drop_payload', self._on_drop)
        self._trajectory_topic = p['trajectory_topic']
        if self._trajectory_topic:
            self.create_subscription(JointTrajectory, self._trajectory_topic,
                                     self._on_trajectory, 10)

        self._start = None                      # clock time of simulated t = 0 (first tick)
        self._wall_start = self._wall_last = time.monotonic()
        self._cpu_start = time.process_time()
        self._publish_truth()
        self._timer = self.create_timer(self._batch * self._period, self._on_tick)
        self.get_logger().info(
            f'{model.name}: {self._nv} joints, integrating at {p["sim_rate"]:g} Hz '
            f'({self._integrator}), publishing joint_states at {p["publish_rate"]:g} Hz '
            f'({self._batch} per tick); compiled in {self._compile_s:.1f} s; ground truth '
            f'{self._truth_text()}')

    # ------------------------------------------------------------------------------------------
    # Parameters
    # ------------------------------------------------------------------------------------------

    def _declare_parameters(self) -> dict:
        """Declare every parameter (read-only: all are read once, at start) with its
        description; return the validated values."""
        specs = [
            ('config', _default_config(), 'problem YAML (model, integrator, actuator, '
             'parameters whose truth is published)'),
            ('publish_rate', 200.0, 'joint_states rate [Hz]; sim_rate / publish_rate must be '
             'a whole number'),
            ('sim_rate', 1000.0, 'integration rate [Hz]'),
            ('noise', 0.001, 'sensor noise std of positions [rad, m] and velocities '
             '[rad/s, m/s]'),
            ('effort_noise', 0.0, 'noise std of the published efforts [N m, N]'),
            ('seed', 0, 'seed of the ground truth, the excitation and the noise'),
            ('perturbation', 0.2, 'relative half-width of the ground-truth scale factors'),
            ('perturb_unidentified', False, 'perturb the whole inertials, not only the '
             'configured parameters (dynamics the estimator cannot represent)'),
            ('true_damping', 0.1, 'scale of the damping added to the nominal one '
             '[N m s/rad]'),
            ('true_coulomb', 0.0, 'scale of the Coulomb torque added to the nominal one '
             '[N m]'),
            ('excitation', 'torque', 'torque (sum of sines in joint torque) or joint_sines '
             '(sum of sines in joint space inside the limits, tracked)'),
            ('position_margin', 0.1, 'joint_sines: fraction of each half range kept free at '
             'both limits'),
            ('speed_fraction', 0.5, 'joint_sines: largest fraction of each velocity limit'),
            ('torque_scale', 1.0, 'excitation peak per joint, times a typical torque'),
            ('num_sines', 5, 'sines per joint in the excitation'),
            ('max_frequency', 1.0, 'highest excitation frequency [Hz]'),
            ('payload_mass', 0.5, 'mass of the payload [kg]'),
            ('payload_link', '', 'link that picks up the payload (empty: the last one)'),
            ('payload_position', [0.0], 'payload position in the link frame [m] (3 numbers; '
             'one number or empty: the link\'s centre of mass)'),
            ('payload_inertia', [0.0], 'payload inertia about its centre of mass in link axes: '
             'ixx, ixy, ixz, iyy, iyz, izz [kg m^2] (one number or empty: a point mass)'),
            ('payload_time', -1.0, 'pick up the payload this long after start [s] '
             '(negative: only on ~/pick_up_payload)'),
            ('mocap_link', '', 'link whose pose is published on mocap/<link>/pose (empty: '
             'none)'),
            ('mocap_noise', 0.0, 'position noise std of the mocap pose [m]'),
            ('mocap_frame', 'world', 'frame_id of the mocap poses'),
            ('frame_id', '', 'frame_id of the joint states'),
            ('publish_commands', False, 'also publish the torques on torque_commands '
             '(std_msgs/Float64MultiArray)'),
            ('trajectory', '', 'JointTrajectory YAML (sysid excite) to follow from the start '
             'instead of the sum of sines; the robot starts at its first point'),
            ('trajectory_topic', '', 'trajectory_msgs/JointTrajectory topic whose messages '
             'are followed on arrival (empty: none)'),
            ('tracking_frequency', 5.0, 'natural frequency of the computed-torque tracking '
             '[Hz]'),
        ]
        values = {}
        for name, default, description in specs:
            # Typed here rather than by rclpy, so that `-p publish_rate:=500` (an int) is
            # accepted and a wrong type gives one clear message instead of a traceback.
            self.declare_parameter(name, default, ParameterDescriptor(
                description=description, read_only=True, dynamic_typing=True))
            values[name] = _typed(name, self.get_parameter(name).value, default)
        for name in ('payload_position', 'payload_inertia'):
            values[name] = [] if len(values[name]) < 2 else list(values[name])
        if values['excitation'] not in ('torque', 'joint_sines'):
            raise InputError(f'parameter excitation: expected torque or joint_sines, got '
                             f'{values["excitation"]!r}')
        if not 0.0 <= values['position_margin'] < 1.0:
            raise InputError(f'parameter position_margin: expected a number in [0, 1), got '
                             f'{values["position_margin"]!r}')
        for name, low in (('publish_rate', 0.0), ('sim_rate', 0.0), ('max_frequency', 0.0),
                          ('tracking_frequency', 0.0)):
            if not values[name] > low:
                raise InputError(f'parameter {name}: expected a number > {low:g}, '
                                 f'got {values[name]!r}')
        for name in ('noise', 'effort_noise', 'true_damping', 'true_coulomb', 'torque_scale',
                     'payload_mass', 'mocap_noise', 'speed_fraction'):
            if not values[name] >= 0.0:
                raise InputError(f'parameter {name}: expected a number >= 0, got '
                                 f'{values[name]!r}')
        if not 0.0 <= values['perturbation'] < 1.0:
            raise InputError(f'parameter perturbation: expected a number in [0, 1), '
                             f'got {values["perturbation"]!r}')
        if values['num_sines'] < 1:
            raise InputError(f'parameter num_sines: expected an int >= 1, got '
                             f'{values["num_sines"]!r}')
        return values

    # ------------------------------------------------------------------------------------------
    # Simulation
    # ------------------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _controls(self, tick: int) -> np.ndarray:
        """(B K + 1, nv) torques at the integration steps of `tick` and at its end."""
        n = self._batch * self._steps
        first, block = self._block
        if first is None or not first <= tick < first + self._block_ticks:
            first = tick
            t = (first * n + np.arange(self._block_ticks * n + 1)) * self._dt
            block = np.clip(self._excitation(t, rng=np.random.default_rng(self._excitation_seed)),
                            -self._limit, self._limit)
            self._block = (first, block)
        offset = (tick - first) * n
        return block[offset:offset + n + 1]

    def _warm_up(self) -> float:
        """Compile the step (and the pose) functions once before the timer starts."""
        begin = time.monotonic()
        self._advance = integrators.make_advance_fn(self._model, self._dt, self._steps,
                                                    self._integrator, self._actuator)
        states = self._advance(self._nominal, self._x0, self._controls(0)[:-1])
        if self._following:
            model, period, limit = self._model, self._period, self._limit

            def track(params, control_params, x, q_ref, qd_ref, qdd_ref):
                return control.track(model, params, control_params, x, q_ref, qd_ref,
                                     qdd_ref, period, limit, self._tracking_frequency,
                                     integrator=self._integrator, actuator=self._actuator,
                                     substeps=self._steps)

            self._track = jax.jit(track)
            rest = np.broadcast_to(self._x0[:self._nv], (self._batch + 1, self._nv))
            zero = np.zeros_like(rest)
            self._track(self._nominal, self._problem.base_params, self._x0, rest, zero, zero)
        if self._mocap_body is not None:
            self._poses = kinematics.make_pose_fn(self._model, self._mocap_body)
            self._poses(self._nominal, states[:, :self._nv])
        jax.block_until_ready(states)
        return time.monotonic() - begin

    def _on_tick(self) -> None:
        now = self._now()
        if self._start is None:                 # the first tick publishes the first batch
            self._start = now - self._batch * self._period
            self._wall_start, self._cpu_start = time.monotonic(), time.process_time()
        tick_period = self._batch * self._period
        behind = int(math.floor((now - self._start) / tick_period)) - self._ticks
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
        tick = self._ticks
        sim_t = tick * self._batch * self._period
        if not self._payload_timer_done and sim_t >= self._payload_time:
            self._payload_timer_done = True
            if not self._payload_held:
                self._set_payload(True, 'payload_time')
        if self._reference is None:
            u = self._controls(tick)
            states = np.asarray(self._advance(self._truth, self._x, u[:-1]))
            efforts = u[self._steps::self._steps]   # the torque held from each stamp on
        else:
            states, efforts = self._tracked(tick)
        if not np.all(np.isfinite(states)):
            self._resets += 1
            self.get_logger().error('simulation diverged; back to rest',
                                    throttle_duration_sec=5.0)
            states = np.broadcast_to(self._x0, states.shape)
        self._x = states[-1]
        self._ticks += 1
        q_true = states[:, :self._nv]
        q, qd = q_true, states[:, self._nv:]
        if self._noise_std > 0.0:
            q = q + self._rng.normal(0.0, self._noise_std, q.shape)
            qd = qd + self._rng.normal(0.0, self._noise_std, qd.shape)
        tau = efforts
        if self._effort_noise > 0.0:
            tau = efforts + self._rng.normal(0.0, self._effort_noise, efforts.shape)
        if self._pose_pub is not None:
            rots, origins = self._poses(self._truth, q_true)
            quats = Rotation.from_matrix(np.asarray(rots)).as_quat()     # [x, y, z, w]
            origins = np.asarray(origins)
            if self._mocap_noise > 0.0:
                origins = origins + self._rng.normal(0.0, self._mocap_noise, origins.shape)
        names = self._model.joint_names
        for b in range(self._batch):
            stamp = self._start + (tick * self._batch + b + 1) * self._period
            self._joint_pub.publish(messages.arrays_to_joint_state(
                stamp, names, q[b], qd[b], tau[b], frame_id=self._frame_id))
            if self._command_pub is not None:
                self._command_pub.publish(messages.array_to_torque_command(efforts[b]))
            if self._pose_pub is not None:
                self._pose_pub.publish(messages.arrays_to_pose(
                    stamp, origins[b], quats[b], frame_id=self._mocap_frame))
        self._published += self._batch

    def _follow(self, names, t, q, qd, qdd, first: int) -> None:
        """Follow (t (K,) [s] from `first`'s control instant on, q, qd, qdd (K, nv) in the
        order of `names`)."""
        order = [list(names).index(j) if j in names else -1 for j in self._model.joint_names]
        if -1 in order or len(names) != self._nv:
            raise InputError(f'trajectory: expected the joints '
                             f'{", ".join(self._model.joint_names)}, got {", ".join(names)}')
        t = np.asarray(t, float)
        q, qd, qdd = (np.asarray(a, float)[:, order] for a in (q, qd, qdd))

        def reference(times):
            return [np.stack([np.interp(times, t, a[:, j]) for j in range(self._nv)], axis=1)
                    for a in (q, qd, qdd)]

        self._reference = (first, reference)
        self.get_logger().info(f'following a trajectory of {len(t)} points, '
                               f'{t[-1] - t[0]:.2f} s, from t = '
                               f'{first * self._period:.3f} s')

    def _sines_at(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, qd, qdd (T, nv) of the joint-space sines at `times` (T,) [s] (the same sines on
        every call: a generator from a fixed seed)."""
        return self._sines(times, rng=np.random.default_rng(self._excitation_seed))

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        arrays = messages.trajectory_to_arrays(msg)
        if len(arrays.t) == 0:
            return
        qdd = arrays.qdd if arrays.qdd is not None else np.zeros_like(arrays.q)
        try:
            self._follow(arrays.names, arrays.t - messages.stamp_to_seconds(msg.header.stamp),
                         arrays.q, arrays.qd, qdd, first=self._ticks * self._batch)
        except InputError as exc:
            self.get_logger().error(f'ignored a trajectory on {self._trajectory_topic}: {exc}')

    def _tracked(self, tick: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, 2 nv) states and (B, nv) commands held from their stamps of `tick` under the
        computed-torque law following the reference."""
        first, reference = self._reference
        times = (tick * self._batch + np.arange(self._batch + 1) - first) * self._period
        states, u = self._track(self._truth, self._problem.base_params, self._x,
                                *reference(times))
        return np.asarray(states[1:]), np.asarray(u[1:])

    # ------------------------------------------------------------------------------------------
    # Payload and ground truth
    # ------------------------------------------------------------------------------------------

    def _set_payload(self, held: bool, why: str) -> None:
        self._payload_held = held
        self._truth = self._with_payload if held else self._nominal
        self._publish_truth()
        action = 'picked up' if held else 'dropped'
        self.get_logger().info(
            f'{action} a {self._payload_mass:g} kg payload on '
            f'{self._model.link_names[self._payload_body]} ({why}, t = '
            f'{self._ticks * self._batch * self._period:.3f} s); ground truth '
            f'{self._truth_text()}')

    def _on_pick_up(self, request, response):
        if self._payload_held:
            response.success, response.message = False, 'the payload is already held'
            return response
        self._set_payload(True, 'service')
        response.success, response.message = True, f'picked up; truth {self._truth_text()}'
        return response

    def _on_drop(self, request, response):
        if not self._payload_held:
            response.success, response.message = False, 'no payload is held'
            return response
        self._set_payload(False, 'service')
        response.success, response.message = True, f'dropped; truth {self._truth_text()}'
        return response

    def _truths(self, held: bool) -> dict[str, float]:
        """The value of every configured parameter with or without the payload (module doc).

        Raises:
          InputError: `payload.*` parameters of a `model.payload` on another link.
        """
        spec = self._problem.spec
        values = {n: float(v) for n, v in zip(spec.names, np.asarray(
            spec.from_params(self._with_payload if held else self._nominal)))}
        payload = spec.payload
        free = [n for n in spec.names if n.startswith('payload.')]
        if payload is None or not free:
            return values
        if payload.body != self._payload_body:
            raise InputError(f'parameter payload_link: expected the link of model.payload '
                             f'({self._model.link_names[payload.body]}) to publish the '
                             f'truths of {", ".join(free)}, got '
                             f'{self._model.link_names[self._payload_body]}')
        rotation = np.reshape(payload.rotation, (3, 3))
        com = rotation.T @ (self._payload_position - np.asarray(payload.translation))
        truth = dict(zip(PAYLOAD_ATTRIBUTES, [self._payload_mass if held else 0.0, *com]))
        values.update({n: float(truth[n.partition('.')[2]]) for n in free})
        return values

    def _truth_values(self) -> dict[str, float]:
        return self._truth_table[self._payload_held]

    def _truth_text(self) -> str:
        return ', '.join(f'{k} = {v:.4g}' for k, v in self._truth_values().items())

    def _publish_truth(self) -> None:
        values = self._truth_values()
        spec = self._problem.spec
        outside = [n for n, lo, hi in zip(spec.names, spec.lower_bounds, spec.upper_bounds)
                   if not lo <= values[n] <= hi]
        status = DiagnosticStatus(
            level=DiagnosticStatus.WARN if outside else DiagnosticStatus.OK,
            name=f'{self.get_fully_qualified_name()}: ground truth',
            hardware_id=self._model.name,
            message=('outside the configured bounds: ' + ', '.join(outside)) if outside
            else 'ground truth (hidden from the estimator)')
        extra = {'payload_held': str(self._payload_held),
                 'payload_mass': repr(float(self._payload_mass)),
                 'payload_link': self._model.link_names[self._payload_body],
                 'seed': str(self.get_parameter('seed').value)}
        status.values = ([KeyValue(key=k, value=repr(v)) for k, v in values.items()]
                         + [KeyValue(key=k, value=v) for k, v in extra.items()])
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._truth_pub.publish(msg)

    def summary(self) -> str:
        """One line: messages and rate, simulated time and real-time factor (both up to the
        last tick), CPU use of the process since the first tick, overruns."""
        span = max(self._wall_last - self._wall_start, 1e-9)
        cpu = time.process_time() - self._cpu_start
        wall = max(time.monotonic() - self._wall_start, 1e-9)
        sim = self._ticks * self._batch * self._period
        return (f'published {self._published} joint_states in {span:.2f} s '
                f'({self._published / span:.1f} Hz); simulated {sim:.2f} s '
                f'(real-time factor {sim / span:.3f}); CPU {cpu:.2f} s '
                f'({100.0 * cpu / wall:.1f} % of one core); overruns '
                f'{self._overruns}; resets {self._resets}')


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
