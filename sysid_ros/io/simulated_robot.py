"""A simulated robot: a hidden ground truth integrated under an excitation, measured with noise.

    robot = SimulatedRobot(build_problem('config/double_pendulum.yaml'),
                           SimulatedRobotSettings(publish_rate=200.0, noise=1e-3), batch=2)
    tick = robot.step()          # the next `batch` samples: tick.q (2, nv), tick.effort, ...

The hardware behind the `sim_robot` node, without ROS. The robot integrates its ground truth
at `sim_rate` with the configured integrator and actuator, samples at `publish_rate` and
returns `batch` samples per `step`. Its torques are either a sum of sines in joint torque
(`excitation='torque'`, peaks of `torque_scale` times a typical torque of each joint) or a
computed-torque law (`core.dynamics.control.track`, on the nominal model, clipped to the
effort limits, each command held over one sample period) that follows a reference: sines in
joint space inside the limits (`excitation='joint_sines'`), a trajectory file, or whatever
`follow` is given (the rest pose until then).

Ground truth (`core.model.edits.perturb_params`): the configuration's nominal model with each
link's inertial 10-vector scaled by U(1 - p, 1 + p) (p = `perturbation`) and each joint's
damping and Coulomb torque drawn as `nominal * U(1 - p, 1 + p) + true_* * U(0.5, 1.5)`; only
the configured parameters keep their perturbation unless `perturb_unidentified`, so that the
estimator's model class contains the truth. A rigid payload (`payload_*`) is added to it while
held. Every draw comes from generators seeded with `seed`: the same settings give the same
samples.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, NamedTuple

import jax
import numpy as np
from scipy.spatial.transform import Rotation

from sysid_ros.core.dynamics import control, integrators, kinematics
from sysid_ros.core.model import edits, inertia
from sysid_ros.core.model.parameters import PAYLOAD_ATTRIBUTES
from sysid_ros.io import excitation as excitation_io
from sysid_ros.io import simulation
from sysid_ros.io.errors import InputError
from sysid_ros.io.problem import Problem

__all__ = ['EXCITATIONS', 'SimulatedRobotSettings', 'Tick', 'SimulatedRobot']

EXCITATIONS = ('torque', 'joint_sines')
# Torques are computed this many seconds of samples at a time (about).
_TORQUE_BLOCK_S = 1.0


@dataclasses.dataclass(frozen=True)
class SimulatedRobotSettings:
    """What the simulated robot does; errors name a field as `parameter <field>`.

    Attributes:
      publish_rate: sample rate [Hz]; `sim_rate / publish_rate` must be a whole number.
      sim_rate: integration rate [Hz].
      noise: std of the Gaussian noise on positions [rad, m] and velocities [rad/s, m/s].
      effort_noise: std of the Gaussian noise on the measured efforts [N m, N].
      seed: seed of the ground truth, the excitation and the noise.
      perturbation: relative half-width p of the ground-truth scale factors, in [0, 1).
      perturb_unidentified: keep the perturbation of parameters that are not configured
        (dynamics the estimator cannot represent).
      true_damping: scale of the viscous damping added to the nominal one [N m s/rad].
      true_coulomb: scale of the Coulomb torque added to the nominal one [N m].
      excitation: `torque` (sum of sines in joint torque) or `joint_sines` (sum of sines in
        joint space inside the limits, tracked).
      position_margin: joint_sines: fraction of each half range kept free at both limits.
      speed_fraction: joint_sines: largest fraction of each velocity limit.
      torque_scale: excitation peak per joint, times a typical torque of that joint [-].
      num_sines: sines per joint in the excitation.
      max_frequency: highest excitation frequency [Hz].
      payload_mass: mass of the payload [kg].
      payload_link: link that picks up the payload ('': the last one).
      payload_position: (3,) payload centre of mass in the link frame [m] (None: the link's
        centre of mass).
      payload_inertia: ixx, ixy, ixz, iyy, iyz, izz of the payload about its centre of mass
        in link axes [kg m^2] (None: a point mass).
      payload_time: pick up the payload this long after start [s] (negative: never by
        itself).
      mocap_link: link whose pose each sample carries ('': none).
      mocap_noise: std of the Gaussian noise on the mocap position [m].
      trajectory: JointTrajectory YAML (`sysid excite`) followed from the start, which the
        robot starts at ('': none).
      follows: follow a reference from the start: the rest pose until `follow` is called.
      tracking_frequency: natural frequency of the computed-torque tracking [Hz].
    """

    publish_rate: float = 200.0
    sim_rate: float = 1000.0
    noise: float = 0.001
    effort_noise: float = 0.0
    seed: int = 0
    perturbation: float = 0.2
    perturb_unidentified: bool = False
    true_damping: float = 0.1
    true_coulomb: float = 0.0
    excitation: str = 'torque'
    position_margin: float = 0.1
    speed_fraction: float = 0.5
    torque_scale: float = 1.0
    num_sines: int = 5
    max_frequency: float = 1.0
    payload_mass: float = 0.5
    payload_link: str = ''
    payload_position: tuple[float, ...] | None = None
    payload_inertia: tuple[float, ...] | None = None
    payload_time: float = -1.0
    mocap_link: str = ''
    mocap_noise: float = 0.0
    trajectory: str = ''
    follows: bool = False
    tracking_frequency: float = 5.0

    def __post_init__(self):
        if self.excitation not in EXCITATIONS:
            raise InputError(f'parameter excitation: expected torque or joint_sines, got '
                             f'{self.excitation!r}')
        if not 0.0 <= self.position_margin < 1.0:
            raise InputError(f'parameter position_margin: expected a number in [0, 1), got '
                             f'{self.position_margin!r}')
        for name in ('publish_rate', 'sim_rate', 'max_frequency', 'tracking_frequency'):
            if not getattr(self, name) > 0.0:
                raise InputError(f'parameter {name}: expected a number > 0, '
                                 f'got {getattr(self, name)!r}')
        for name in ('noise', 'effort_noise', 'true_damping', 'true_coulomb', 'torque_scale',
                     'payload_mass', 'mocap_noise', 'speed_fraction'):
            if not getattr(self, name) >= 0.0:
                raise InputError(f'parameter {name}: expected a number >= 0, got '
                                 f'{getattr(self, name)!r}')
        if not 0.0 <= self.perturbation < 1.0:
            raise InputError(f'parameter perturbation: expected a number in [0, 1), '
                             f'got {self.perturbation!r}')
        if self.num_sines < 1:
            raise InputError(f'parameter num_sines: expected an int >= 1, got '
                             f'{self.num_sines!r}')
        ratio = self.sim_rate / self.publish_rate
        if round(ratio) < 1 or abs(ratio - round(ratio)) > 1e-6 * ratio:
            raise InputError(f'parameter publish_rate: expected sim_rate '
                             f'({self.sim_rate:g} Hz) divided by a whole number, got '
                             f'{self.publish_rate:g} Hz')
        if self.payload_position is not None and len(self.payload_position) != 3:
            raise InputError(f'parameter payload_position: expected 3 numbers [m], '
                             f'got {list(self.payload_position)}')
        if self.payload_inertia is not None and len(self.payload_inertia) != 6:
            raise InputError(f'parameter payload_inertia: expected 6 numbers ixx, ixy, ixz, '
                             f'iyy, iyz, izz [kg m^2] (one number or empty: none), got '
                             f'{list(self.payload_inertia)}')


class Tick(NamedTuple):
    """The samples of one `SimulatedRobot.step`, B = `batch` of them.

    Attributes:
      start: simulated time at the start of the tick [s since the robot started].
      t: (B,) simulated time of each sample [s since start], one sample period apart.
      q, qd: (B, nv) measured positions and velocities, in the model's joint order [rad, m;
        rad/s, m/s].
      effort: (B, nv) measured efforts [N m, N]: the command held from each sample on.
      command: (B, nv) the commands themselves, without noise [N m, N].
      mocap_position: (B, 3) measured origin of the mocap link in the world frame [m], or
        None without `mocap_link`.
      mocap_orientation: (B, 4) its orientation, quaternion [x, y, z, w], or None.
      picked_up: the payload was picked up at `payload_time`, before these samples.
      diverged: the integration diverged; the robot went back to rest.
    """

    start: float
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    effort: np.ndarray
    command: np.ndarray
    mocap_position: np.ndarray | None
    mocap_orientation: np.ndarray | None
    picked_up: bool
    diverged: bool


class SimulatedRobot:
    """The ground truth of `problem`'s robot, integrated under its excitation.

    Args:
      problem: the configured problem: model, integrator, actuator, the parameters whose
        truths `truths` reports.
      settings: what the robot does.
      batch: samples returned per `step`.

    Raises:
      InputError: a setting that does not fit the model (a link name, a trajectory's joints,
        following with an actuator that is not additive, `payload.*` truths on another link).

    Attributes:
      model: the static tree; `nv` its joint count.
      nominal: the ground truth without payload; `with_payload`: with it.
      payload_body: index of the payload's link; `mocap_body`: of the mocap link, or None.
      state: (2 nv,) current state [q; qd] [rad, m; rad/s, m/s].
      ticks: `step` calls so far.
      payload_held: whether the payload is held.
      reference: what the robot follows, in words, or None (open-loop torques).
      resets: ticks whose integration diverged.
      compile_time: seconds taken to compile the step functions [s].
    """

    def __init__(self, problem: Problem, settings: SimulatedRobotSettings, batch: int = 1):
        s = settings
        self.settings = settings
        self.problem = problem
        self.model = model = problem.model
        self.nv = model.nv
        self.batch = batch
        self.steps = int(round(s.sim_rate / s.publish_rate))   # integration steps per sample
        self.period = 1.0 / s.publish_rate
        self._dt = 1.0 / s.sim_rate
        self._integrator = problem.config.model.integrator
        self._actuator = problem.config.model.actuator
        self._init_truth()
        self._init_excitation()
        self._init_reference()
        self._rng = np.random.default_rng([s.seed, 3])
        self.mocap_body = None
        if s.mocap_link:
            if s.mocap_link not in model.link_names:
                raise InputError(f'parameter mocap_link: expected one of '
                                 f'{", ".join(model.link_names)} or empty, got '
                                 f'{s.mocap_link!r}')
            self.mocap_body = model.link_names.index(s.mocap_link)
        # At rest, or at the start of the reference.
        self._x0 = np.concatenate([self._q_rest, np.zeros(self.nv)])
        if self._reference is not None:
            q0, qd0, _ = self._reference[1](np.zeros(1))
            self._x0 = np.concatenate([q0[0], qd0[0]])
        self.state = self._x0
        self.ticks = 0
        self.resets = 0
        self.compile_time = self._compile()

    def _init_truth(self) -> None:
        """Ground truth, payload and both truth tables."""
        s, problem, model = self.settings, self.problem, self.model
        perturbed = edits.perturb_params(problem.base_params, s.seed, s.perturbation,
                                         s.true_damping, s.true_coulomb)
        if s.perturb_unidentified:
            self.nominal = perturbed
        else:   # only the configured parameters differ: the estimator's model holds the truth
            self.nominal = problem.spec.to_params(problem.spec.from_params(perturbed),
                                                  problem.base_params)
        link = s.payload_link or model.link_names[-1]
        if link not in model.link_names:
            raise InputError(f'parameter payload_link: expected one of '
                             f'{", ".join(model.link_names)}, got {link!r}')
        self.payload_body = model.link_names.index(link)
        position = s.payload_position
        if position is None:                    # the link's centre of mass
            _, com, _ = inertia.physical_from_inertial(self.nominal.inertial)
            position = np.asarray(com[self.payload_body])
        self.payload_position = np.asarray(position, float)
        self.payload_inertia = np.asarray(
            inertia.inertia_matrix_from_entries(*s.payload_inertia)
            if s.payload_inertia is not None else np.zeros((3, 3)), float)
        # Both truths are computed before the first step: eager JAX ops compile on first use,
        # which would stall a real-time loop.
        self.with_payload = edits.add_rigid_body(self.nominal, self.payload_body,
                                                 s.payload_mass, self.payload_position,
                                                 self.payload_inertia)
        self._truth_table = {held: self.truths(held) for held in (False, True)}
        self.payload_held = False
        self._payload_due = s.payload_time >= 0.0
        self._truth = self.nominal

    def _init_excitation(self) -> None:
        """The sum of sines in torque and, for joint_sines, in joint space."""
        s, model, nv = self.settings, self.model, self.nv
        rng = np.random.default_rng([s.seed, 1])
        scale = s.torque_scale * simulation.typical_torque(model, self.nominal, rng)
        limit = np.asarray(model.effort_max or [np.inf] * nv, float)
        self._limit = np.where(limit > 0.0, limit, np.inf)
        self._torques = functools.partial(simulation.excitation, scale=scale,
                                          num_sines=s.num_sines,
                                          max_frequency=s.max_frequency)
        self._excitation_seed = [s.seed, 2]
        self._sines = None
        if s.excitation == 'joint_sines':
            self._sines = functools.partial(
                simulation.joint_sines, q_min=model.q_min or np.full(nv, np.inf),
                q_max=model.q_max or np.full(nv, np.inf),
                v_max=model.v_max or np.full(nv, np.inf), num_sines=s.num_sines,
                max_frequency=s.max_frequency, margin=s.position_margin,
                speed=s.speed_fraction)
        self._block_ticks = max(1, int(round(_TORQUE_BLOCK_S * s.publish_rate / self.batch)))
        self._block = (None, None)              # (first tick, (block * B * K + 1, nv) torques)

    def _init_reference(self) -> None:
        """What the computed-torque law follows, if anything."""
        s, model = self.settings, self.model
        self._q_rest = np.clip(np.zeros(self.nv), model.q_min or -np.inf,
                               model.q_max or np.inf)
        # (first sample index, reference(times (T,) [s from it]) -> q, qd, qdd (T, nv)).
        self._reference: tuple[int, Callable] | None = None
        self.reference = None
        self.following = bool(s.trajectory or s.follows) or self._sines is not None
        if self.following and self._actuator not in control.ADDITIVE_ACTUATORS:
            raise InputError(f'parameters trajectory, trajectory_topic, excitation: following '
                             f'needs an actuator of {", ".join(control.ADDITIVE_ACTUATORS)}, got '
                             f'{self._actuator!r}')
        if s.trajectory:
            ref = excitation_io.load_joint_trajectory(s.trajectory)
            self.follow(ref.joint_names, ref.t, ref.q, ref.qd, ref.qdd, first=0)
        elif self._sines is not None:
            self._reference = (0, self._sines_at)
            self.reference = 'joint-space sines inside the limits'
        elif self.following:                    # hold the rest pose until a trajectory comes
            hold = np.stack([self._q_rest, self._q_rest])
            zero = np.zeros_like(hold)
            self.follow(model.joint_names, np.array([0.0, 1.0]), hold, zero, zero, first=0)

    def _compile(self) -> float:
        """Compile the step (and the pose) functions; returns the seconds taken."""
        begin = time.monotonic()
        self._advance = integrators.make_advance_fn(self.model, self._dt, self.steps,
                                                    self._integrator, self._actuator)
        states = self._advance(self.nominal, self._x0, self._controls(0)[:-1])
        if self.following:
            model, period, limit = self.model, self.period, self._limit
            frequency = 2.0 * np.pi * self.settings.tracking_frequency

            def track(params, control_params, x, q_ref, qd_ref, qdd_ref):
                return control.track(model, params, control_params, x, q_ref, qd_ref,
                                     qdd_ref, period, limit, frequency,
                                     integrator=self._integrator, actuator=self._actuator,
                                     substeps=self.steps)

            self._track = jax.jit(track)
            rest = np.broadcast_to(self._x0[:self.nv], (self.batch + 1, self.nv))
            zero = np.zeros_like(rest)
            self._track(self.nominal, self.problem.base_params, self._x0, rest, zero, zero)
        if self.mocap_body is not None:
            self._poses = kinematics.make_pose_fn(self.model, self.mocap_body)
            self._poses(self.nominal, states[:, :self.nv])
        jax.block_until_ready(states)
        return time.monotonic() - begin

    @property
    def time(self) -> float:
        """Simulated time [s since start] at the end of the last tick."""
        return self.ticks * self.batch * self.period

    def step(self) -> Tick:
        """Integrate one tick: `batch` sample periods; returns their samples."""
        tick = self.ticks
        start = self.time
        picked_up = False
        if self._payload_due and start >= self.settings.payload_time:
            self._payload_due = False
            picked_up = self.set_payload(True)
        if self._reference is None:
            u = self._controls(tick)
            states = np.asarray(self._advance(self._truth, self.state, u[:-1]))
            command = u[self.steps::self.steps]     # the torque held from each sample on
        else:
            states, command = self._tracked(tick)
        diverged = not np.all(np.isfinite(states))
        if diverged:
            self.resets += 1
            states = np.broadcast_to(self._x0, states.shape)
        self.state = states[-1]
        self.ticks += 1
        return Tick(start, (tick * self.batch + np.arange(1, self.batch + 1)) * self.period,
                    *self._measure(states, command), picked_up, diverged)

    def _measure(self, states: np.ndarray, command: np.ndarray):
        """q, qd, effort, command, mocap position and orientation (Tick) of (B, 2 nv) true
        states and (B, nv) commands; draws the noise in a fixed order."""
        s, nv = self.settings, self.nv
        q_true = states[:, :nv]
        q, qd = q_true, states[:, nv:]
        if s.noise > 0.0:
            q = q + self._rng.normal(0.0, s.noise, q.shape)
            qd = qd + self._rng.normal(0.0, s.noise, qd.shape)
        effort = command
        if s.effort_noise > 0.0:
            effort = command + self._rng.normal(0.0, s.effort_noise, command.shape)
        position = orientation = None
        if self.mocap_body is not None:
            rots, origins = self._poses(self._truth, q_true)
            orientation = Rotation.from_matrix(np.asarray(rots)).as_quat()  # [x, y, z, w]
            position = np.asarray(origins)
            if s.mocap_noise > 0.0:
                position = position + self._rng.normal(0.0, s.mocap_noise, position.shape)
        return q, qd, effort, command, position, orientation

    def _controls(self, tick: int) -> np.ndarray:
        """(B K + 1, nv) open-loop torques at the integration steps of `tick` and at its end."""
        n = self.batch * self.steps
        first, block = self._block
        if first is None or not first <= tick < first + self._block_ticks:
            first = tick
            t = (first * n + np.arange(self._block_ticks * n + 1)) * self._dt
            block = np.clip(self._torques(t, rng=np.random.default_rng(self._excitation_seed)),
                            -self._limit, self._limit)
            self._block = (first, block)
        offset = (tick - first) * n
        return block[offset:offset + n + 1]

    def _tracked(self, tick: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, 2 nv) states and (B, nv) commands held from their samples of `tick` under the
        computed-torque law following the reference."""
        first, reference = self._reference
        times = (tick * self.batch + np.arange(self.batch + 1) - first) * self.period
        states, u = self._track(self._truth, self.problem.base_params, self.state,
                                *reference(times))
        return np.asarray(states[1:]), np.asarray(u[1:])

    def follow(self, names, t, q, qd, qdd, first: int | None = None) -> None:
        """Follow a trajectory from sample `first` on (default: the next sample).

        Args:
          names: its joint names, every joint of the model once.
          t: (K,) times of its points [s from sample `first`], increasing; linear
            interpolation between them, the last point held after them.
          q, qd, qdd: (K, nv) positions, velocities, accelerations in the order of `names`.
          first: index of the sample from which `t` counts.

        Raises:
          InputError: joints that are not the model's.
        """
        joints = self.model.joint_names
        order = [list(names).index(j) if j in names else -1 for j in joints]
        if -1 in order or len(names) != self.nv:
            raise InputError(f'trajectory: expected the joints '
                             f'{", ".join(joints)}, got {", ".join(names)}')
        first = self.ticks * self.batch if first is None else first
        t = np.asarray(t, float)
        q, qd, qdd = (np.asarray(a, float)[:, order] for a in (q, qd, qdd))

        def reference(times):
            return [np.stack([np.interp(times, t, a[:, j]) for j in range(self.nv)], axis=1)
                    for a in (q, qd, qdd)]

        self._reference = (first, reference)
        self.reference = (f'a trajectory of {len(t)} points, {t[-1] - t[0]:.2f} s, from '
                          f't = {first * self.period:.3f} s')

    def _sines_at(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, qd, qdd (T, nv) of the joint-space sines at `times` (T,) [s] (the same sines on
        every call: a generator from a fixed seed)."""
        return self._sines(times, rng=np.random.default_rng(self._excitation_seed))

    def set_payload(self, held: bool) -> bool:
        """Pick up (`held`) or drop the payload, without a jump in the state; returns whether
        that changed anything."""
        changed = held != self.payload_held
        self.payload_held = held
        self._truth = self.with_payload if held else self.nominal
        return changed

    def truths(self, held: bool) -> dict[str, float]:
        """{name: true value} of every configured parameter with or without the payload, in
        physical units; `payload.*` parameters are the held payload's mass and inertia (0
        while none is held) and centre of mass in the frame of `model.payload`.

        Raises:
          InputError: `payload.*` parameters of a `model.payload` on another link.
        """
        spec = self.problem.spec
        values = {n: float(v) for n, v in zip(spec.names, np.asarray(
            spec.from_params(self.with_payload if held else self.nominal)))}
        payload = spec.payload
        free = [n for n in spec.names if n.startswith('payload.')]
        if payload is None or not free:
            return values
        if payload.body != self.payload_body:
            names = self.model.link_names
            raise InputError(f'parameter payload_link: expected the link of model.payload '
                             f'({names[payload.body]}) to publish the truths of '
                             f'{", ".join(free)}, got {names[self.payload_body]}')
        rotation = np.reshape(payload.rotation, (3, 3))
        com = rotation.T @ (self.payload_position - np.asarray(payload.translation))
        mass = self.settings.payload_mass if held else 0.0
        inertia_c = rotation.T @ self.payload_inertia @ rotation if held else np.zeros((3, 3))
        truth = dict(zip(PAYLOAD_ATTRIBUTES,
                         [mass, *com, *np.asarray(inertia.inertia_entries(inertia_c))]))
        values.update({n: float(truth[n.partition('.')[2]]) for n in free})
        return values

    def truth(self) -> dict[str, float]:
        """{name: true value} of every configured parameter now (`truths`)."""
        return self._truth_table[self.payload_held]

    def truth_outside_bounds(self) -> list[str]:
        """Names of the configured parameters whose truth lies outside their bounds now."""
        spec, values = self.problem.spec, self.truth()
        return [n for n, lo, hi in zip(spec.names, spec.lower_bounds, spec.upper_bounds)
                if not lo <= values[n] <= hi]
