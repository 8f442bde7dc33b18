"""Excitation design for a configured problem (`sysid excite`): configuration -> design
problem -> optimised motion -> files; and the limit check of a trajectory file before it
runs on a robot (`ros.trajectory_publisher`, `ros.sim_robot`).

The design (`core.excitation`) maximises the Fisher information of exactly the parameters
the configuration frees (inertials, payload, friction, offsets), at a design point: the
`--prior` estimate's values where given, else the configured start values moved at least
`DESIGN_POINT_INSET` of each bound's width inside the bounds (a payload of nominal mass 0
would carry no information about its position). Likelihood: the configured one
(`estimator.residual`). Noise: the velocity std of `data.noise_std` (`DEFAULT_VELOCITY_STD`
if none is configured) seen at `data.rate` (`core.excitation.information`); for the equation
error (`equation_noise`) the position and velocity stds of `data.noise_std` and the torque
std of `data.torque_noise_std` (0 if none) through the causal Savitzky-Golay filter of
`estimator.filter_window`, whose every L-th output the fit keeps, and the residual weights of
`data.torque_noise_std`, or, when it is not configured, those the fit estimates from the
residuals (their predicted root mean square). Prior: the uniform prior over the bounds as a
Gaussian of the same variance (width^2 / 12), replaced by the `--prior` estimate's std where it
has one.

Files written by `write_excitation` into the output folder:

  * `trajectory.yaml`: a `trajectory_msgs/JointTrajectory` as YAML (`joint_names`, `points`
    with `positions`, `velocities`, `accelerations`, `time_from_start: {sec, nanosec}`), at
    `data.rate`; what `ros.trajectory_publisher` sends to a joint_trajectory_controller.
  * `trajectory.csv`: t, q_*, qd_*, tau_* (the command at the design point), qdd_* per sample
    (`io.trajectory` format).
  * `excitation.yaml`: per parameter the predicted posterior std, the prior std and the
    design point; the condition number of the scaled information; log det before and after;
    the limits and the peak use of each; the noise; the Fourier coefficients.
  * `excitation.png`: positions, velocities, accelerations and commands over time with
    their limits.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from sysid_ros.core.dynamics import control
from sysid_ros.core.excitation import design as design_lib
from sysid_ros.core.excitation import limits as limits_lib
from sysid_ros.core.likelihoods import equation_error
from sysid_ros.io import earlier_estimate, estimator_data
from sysid_ros.io.config import config_error
from sysid_ros.io.config_schema import one_or_each
from sysid_ros.io.errors import InputError, located, read_yaml
from sysid_ros.io.problem import Problem
from sysid_ros.io.trajectory import save_trajectory, Trajectory

__all__ = [
    'DEFAULT_VELOCITY_STD',
    'DESIGN_POINT_INSET',
    'EFFORT_PRIOR_STDS',
    'USE_TOLERANCE',
    'Excitation',
    'JointTrajectoryData',
    'excitation_limits',
    'design_point',
    'design_problem',
    'design',
    'write_excitation',
    'trajectory_dict',
    'load_joint_trajectory',
    'limit_violations',
]

DEFAULT_VELOCITY_STD = 1e-3     # [rad/s] velocity noise std without data.noise_std
DESIGN_POINT_INSET = 0.1        # [-] share of each bound's width the design point keeps inside
EFFORT_PRIOR_STDS = 2.0         # [-] prior stds over which the effort limits must hold
USE_TOLERANCE = 1e-9            # [-] a use ratio up to 1 + this passes the check
_UNIFORM_PRECISION = 12.0       # [-] 1 / variance of a uniform distribution of unit width


@dataclasses.dataclass(frozen=True)
class Excitation:
    """A designed motion and what it is predicted to identify.

    Attributes:
      problem: the identification problem it was designed for.
      design: the core design problem (limits, grids, noise, prior, design point).
      result: the optimiser's outcome (coefficients, log det, iterations).
      t: (K,) times at data.rate [s]; q, qd, qdd, u: (K, nv) the motion and its commands at
        the design point [rad, rad/s, rad/s^2, N m (m, m/s, m/s^2, N for prismatic joints)].
      predicted_std: (M,) posterior std of each parameter after one run of the motion
        [physical units]; prior_std: (M,) the prior's.
      condition_number: of the information in scaled parameters (S F S) [-].
      peak: `limits.Usage` of (nv,) largest use of each limit [-].
      velocity_std: (nv,) velocity noise std assumed [rad/s, m/s]; noise_source: 'config'
        or 'default'.
    """

    problem: Problem
    design: design_lib.DesignProblem
    result: design_lib.DesignResult
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    u: np.ndarray
    predicted_std: np.ndarray
    prior_std: np.ndarray
    condition_number: float
    peak: limits_lib.Usage
    velocity_std: np.ndarray
    noise_source: str

    @property
    def largest_use(self) -> float:
        """Largest use of any limit on the dense grid [-]."""
        return max(float(np.max(r)) for r in self.peak)

    @property
    def passed(self) -> bool:
        """Whether every limit holds on the dense grid."""
        return self.largest_use <= 1.0 + USE_TOLERANCE


@dataclasses.dataclass(frozen=True)
class JointTrajectoryData:
    """A trajectory file's content: joint_names (nv,), t (K,) [s], q, qd, qdd (K, nv)."""

    joint_names: tuple[str, ...]
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray


def _per_joint(problem: Problem, key: str, given: Sequence[float], fallback) -> np.ndarray:
    """(nv,) values of `excitation.<key>`: one number for all joints or one per joint; the
    fallback (nv,) where none is given."""
    nv = problem.model.nv
    values = one_or_each(given, nv, problem.config.source, f'excitation.{key}',
                         f'one per joint: {", ".join(problem.joint_names)}')
    if values is None:
        return np.asarray(fallback if len(fallback) else [math.inf] * nv, dtype=float)
    return values


def _require_finite(problem: Problem, key: str, values: np.ndarray, source: str) -> None:
    missing = [j for j, v in zip(problem.joint_names, values) if not math.isfinite(v)]
    if missing:
        raise config_error(problem.config, f'excitation.{key}', f'expected a finite limit for '
                           f'every joint ({source} has none for {", ".join(missing)})')


def excitation_limits(problem: Problem) -> limits_lib.Limits:
    """The limits of the configured robot: positions from the model shrunk by
    `excitation.position_margin`, velocity and effort from `excitation` or the URDF
    (required), acceleration from `excitation` (optional).

    Raises:
      ConfigError: a list of the wrong length, a joint without a finite velocity or effort
        limit, or a margin that leaves no position range.
    """
    cfg, model = problem.config.excitation, problem.model
    margin = cfg.position_margin
    q_min = np.asarray(model.q_min or [-math.inf] * model.nv, dtype=float) + margin
    q_max = np.asarray(model.q_max or [math.inf] * model.nv, dtype=float) - margin
    narrow = [j for j, lo, hi in zip(problem.joint_names, q_min, q_max) if not lo < hi]
    if narrow:
        raise config_error(problem.config, 'excitation.position_margin', f'expected a margin '
                           f'that leaves a position range, got {margin:g} (joint '
                           f'{narrow[0]})')
    velocity = _per_joint(problem, 'velocity', cfg.velocity, model.v_max)
    _require_finite(problem, 'velocity', velocity, 'the model')
    effort = _per_joint(problem, 'effort', cfg.effort, model.effort_max)
    _require_finite(problem, 'effort', effort, 'the model')
    acceleration = _per_joint(problem, 'acceleration', cfg.acceleration, ())
    return limits_lib.Limits(q_min=jnp.asarray(q_min), q_max=jnp.asarray(q_max),
                             qd_max=jnp.asarray(velocity), qdd_max=jnp.asarray(acceleration),
                             u_max=jnp.asarray(effort))


def _start(problem: Problem, limits: limits_lib.Limits) -> np.ndarray:
    """(nv,) start and end position: `excitation.start`, else the middle of the range."""
    q_min, q_max = np.asarray(limits.q_min), np.asarray(limits.q_max)
    bounded = np.isfinite(q_min) & np.isfinite(q_max)
    middle = 0.5 * (np.where(bounded, q_min, 0.0) + np.where(bounded, q_max, 0.0))
    given = problem.config.excitation.start
    start = _per_joint(problem, 'start', given, middle)
    outside = [j for j, q, lo, hi in zip(problem.joint_names, start, q_min, q_max)
               if not lo <= q <= hi]
    if outside:
        raise config_error(problem.config, 'excitation.start', f'expected positions within '
                           f'the limits less the margin, got {start.tolist()} (joint '
                           f'{outside[0]})')
    return start


def _state_noise_std(problem: Problem) -> tuple[np.ndarray, str]:
    """(2 nv,) position and velocity noise std and where they came from: `data.noise_std`
    ('config'), else DEFAULT_VELOCITY_STD on both ('default')."""
    configured = estimator_data.configured_noise_std(problem)
    if configured is None:
        return np.full(2 * problem.model.nv, DEFAULT_VELOCITY_STD), 'default'
    return np.asarray(configured, dtype=float), 'config'


def _velocity_std(problem: Problem) -> tuple[np.ndarray, str]:
    """(nv,) velocity noise std and where it came from (`_state_noise_std`'s qd entries)."""
    state, source = _state_noise_std(problem)
    return state[problem.model.nv:], source


def equation_noise(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """The equation error's noise after its filter (module doc): (state_var (3, nv) of the
    filtered q, qd, qdd; torque_var (nv,) of the filtered torques; the configured torque
    std (nv,) or None; the filter's taps L).

    White noise of std s through a FIR of weights w has the std s |w|: the value kernel w0
    smooths q and qd, the slope kernel w1 (of order 1 / (L dt)) turns the velocity noise into
    the qdd noise that dominates the residual, and the torques are averaged over neighbouring
    samples (`equation_error.filter_samples`) before the value kernel.
    """
    nv = problem.model.nv
    taps = estimator_data.filter_taps(problem)
    smooth, slope = equation_error.savitzky_golay_kernels(taps, problem.dt)
    state, _ = _state_noise_std(problem)
    q_var, qd_var = np.square(state[:nv]), np.square(state[nv:])
    state_var = np.stack([q_var * np.sum(smooth ** 2), qd_var * np.sum(smooth ** 2),
                          qd_var * np.sum(slope ** 2)])
    torque_std = estimator_data.configured_torque_noise_std(problem)
    torque_gain = np.sum(np.convolve(smooth, [0.5, 0.5]) ** 2)
    torque_var = (np.zeros(nv) if torque_std is None
                  else np.square(torque_std) * torque_gain)
    return state_var, torque_var, torque_std, taps


def _require_additive(problem: Problem) -> str:
    """The configured actuator, if the command of a motion has a closed form with it."""
    actuator = problem.config.model.actuator
    if actuator not in control.ADDITIVE_ACTUATORS:
        raise config_error(problem.config, 'model.actuator', f'the command of a planned '
                           f'motion needs an actuator of '
                           f'{" | ".join(control.ADDITIVE_ACTUATORS)}, got {actuator!r}')
    return actuator


def design_point(problem: Problem, prior: str | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M,) each: the design point [physical units] (module doc), the unit of each scaled
    parameter (its bounds' width, else max(|value|, 1)) and the prior precision in scaled
    units (12 for a uniform prior over the bounds, (scale / std)^2 from `prior`'s
    estimate.yaml, 0 for an unbounded parameter without one)."""
    spec = problem.spec
    lower, upper = np.asarray(spec.lower), np.asarray(spec.upper)
    width = upper - lower
    bounded = np.isfinite(width)
    theta = np.asarray(spec.initial_theta(problem.base_params), dtype=float)
    inset = np.where(bounded, DESIGN_POINT_INSET * np.where(bounded, width, 0.0), 0.0)
    theta = np.clip(theta, lower + inset, upper - inset)
    scale = np.where(bounded, width, np.maximum(np.abs(theta), 1.0))
    precision = np.where(bounded, _UNIFORM_PRECISION, 0.0)
    if prior is not None:
        for name, (mean, std) in earlier_estimate.read_means_and_stds(prior, spec.names).items():
            k = spec.index(name)
            theta[k] = mean
            precision[k] = (scale[k] / std) ** 2
    return theta, scale, precision


def design_problem(problem: Problem, prior: str | None = None,
                   duration: float | None = None) -> design_lib.DesignProblem:
    """The core design problem of a configured problem (module doc).

    Args:
      problem: the identification problem.
      prior: path of a saved estimate.yaml whose means and stds become the design point and
        the prior of the parameters it holds.
      duration: motion length [s] (default `excitation.duration`).

    Raises:
      ConfigError: a mechanism, an actuator without an inverse, bad limits or start.
      InputError: an unreadable prior.
    """
    if problem.config.model.mechanism is not None:
        raise config_error(problem.config, 'model.mechanism', 'sysid excite designs for '
                           'kinematic trees (model.urdf or model.builder)')
    cfg = problem.config
    _require_additive(problem)
    ex = cfg.excitation
    duration = float(duration if duration is not None else ex.duration)
    if not duration > 0.0:
        raise InputError(f'duration: expected a number > 0 [s], got {duration!r}')
    theta, scale, precision = design_point(problem, prior)
    limits = excitation_limits(problem)
    velocity_std, _ = _velocity_std(problem)
    rate = cfg.data.rate
    t_design = np.linspace(0.0, duration, max(int(round(duration * ex.design_rate)), 2) + 1)
    samples = rate * duration / (len(t_design) - 1)          # recorded per design sample
    noise = {}
    if not estimator_data.residual_family(cfg.estimator.residual).simulates:
        state_var, torque_var, torque_std, taps = equation_noise(problem)
        noise = {'residual': cfg.estimator.residual, 'state_var': state_var,
                 'torque_var': torque_var, 'torque_std': torque_std}
        samples /= taps                                       # the fit keeps every L-th
    return design_lib.DesignProblem(
        model=problem.model, spec=problem.spec, base=problem.base_params, theta=theta,
        actuator=cfg.model.actuator, limits=limits, q0=_start(problem, limits),
        duration=duration, base_frequency=ex.base_frequency, harmonics=ex.harmonics,
        t_design=t_design, t_check=_grid(duration, rate),
        accel_std=np.sqrt(2.0) * velocity_std * rate,
        weight=samples, scale=scale, prior_precision=precision,
        effort_radius=effort_radius(problem, theta, scale, precision), **noise)


def effort_radius(problem: Problem, theta, scale, precision) -> np.ndarray:
    """(M,) how far each parameter may still lie from the design point theta (M,) [physical
    units]: EFFORT_PRIOR_STDS prior stds (scale / sqrt(precision)), at most the distance to
    the farther bound; the effort limits hold over that box (`design.effort_envelope`)."""
    lower, upper = np.asarray(problem.spec.lower), np.asarray(problem.spec.upper)
    farther = np.maximum(upper - theta, theta - lower)
    with np.errstate(divide='ignore'):
        prior = EFFORT_PRIOR_STDS * scale / np.sqrt(precision)
    return np.where(np.isfinite(np.minimum(farther, prior)), np.minimum(farther, prior), 0.0)


def _grid(duration: float, rate: float) -> np.ndarray:
    """Times 0, 1 / rate, ..., duration [s] (the last step shortened to end at duration)."""
    t = np.arange(int(math.floor(duration * rate + 1e-9)) + 1) / rate
    return t if math.isclose(t[-1], duration) else np.append(t, duration)


def design(problem: Problem, prior: str | None = None, duration: float | None = None,
           log: Callable[[str], None] | None = None) -> Excitation:
    """Design the excitation of a configured problem (module doc).

    Args:
      problem: the identification problem.
      prior: a saved estimate.yaml (see `design_problem`).
      duration: motion length [s] (default `excitation.duration`).
      log: receives progress lines.

    Returns:
      Excitation on the dense grid (data.rate); `passed` tells whether every limit holds.
    """
    dp = design_problem(problem, prior, duration)
    ex = problem.config.excitation
    fns = design_lib.make_design_functions(dp)
    result = design_lib.design_trajectory(dp, jax.random.PRNGKey(ex.seed), ex.iterations, log,
                                          functions=fns)
    motion, peak = fns.check(jnp.asarray(result.coeffs))
    info = np.asarray(fns.information(jnp.asarray(result.coeffs)))
    scaled = info * dp.scale[:, None] * dp.scale[None, :]
    covariance = np.linalg.inv(scaled + np.diag(dp.prior_precision))
    velocity_std, source = _velocity_std(problem)
    with np.errstate(divide='ignore'):
        prior_std = dp.scale / np.sqrt(dp.prior_precision)
    return Excitation(
        problem=problem, design=dp, result=result, t=np.asarray(motion.t),
        q=np.asarray(motion.q), qd=np.asarray(motion.qd), qdd=np.asarray(motion.qdd),
        u=np.asarray(motion.u), predicted_std=dp.scale * np.sqrt(np.diagonal(covariance)),
        prior_std=prior_std, condition_number=float(np.linalg.cond(scaled)),
        peak=limits_lib.Usage(*(np.asarray(r) for r in peak)),
        velocity_std=velocity_std, noise_source=source)


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------

def _stamp(t: float) -> dict[str, int]:
    """builtin_interfaces/Duration {sec, nanosec} of t >= 0 [s]."""
    nanoseconds = int(round(t * 1e9))
    return {'sec': nanoseconds // 1_000_000_000, 'nanosec': nanoseconds % 1_000_000_000}


def trajectory_dict(joint_names: Sequence[str], t, q, qd, qdd) -> dict:
    """A trajectory_msgs/JointTrajectory as plain data (joint_names, points with positions,
    velocities, accelerations, time_from_start {sec, nanosec}); t (K,) [s], q, qd, qdd
    (K, nv)."""
    return {'joint_names': list(joint_names),
            'points': [{'positions': [float(v) for v in q[k]],
                        'velocities': [float(v) for v in qd[k]],
                        'accelerations': [float(v) for v in qdd[k]],
                        'time_from_start': _stamp(float(t[k]))} for k in range(len(t))]}


def load_joint_trajectory(path: str | os.PathLike) -> JointTrajectoryData:
    """Read a JointTrajectory YAML (`trajectory_dict`'s layout, e.g. `sysid excite`'s).

    Raises:
      InputError: unreadable file, missing keys, ragged points or times that do not
        increase.
    """
    path = os.fspath(path)
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        raise InputError(f'{path}: expected a map with joint_names and points')
    names = data.get('joint_names')
    points = data.get('points')
    if not isinstance(names, list) or not names:
        raise InputError(located(path, 'joint_names', f'expected a list of joints, got '
                                 f'{names!r}'))
    if not isinstance(points, list) or len(points) < 2:
        raise InputError(located(path, 'points', 'expected a list of at least 2 points'))
    columns = {key: [] for key in ('positions', 'velocities', 'accelerations')}
    t = []
    for k, point in enumerate(points):
        for key, values in columns.items():
            row = point.get(key) if isinstance(point, Mapping) else None
            if not isinstance(row, list) or len(row) != len(names):
                raise InputError(located(path, f'points[{k}].{key}', f'expected '
                                         f'{len(names)} numbers, got {row!r}'))
            values.append(row)
        stamp = point.get('time_from_start')
        if not isinstance(stamp, Mapping) or not {'sec', 'nanosec'} <= set(stamp):
            raise InputError(located(path, f'points[{k}].time_from_start',
                                     'expected {sec, nanosec}'))
        t.append(float(stamp['sec']) + 1e-9 * float(stamp['nanosec']))
    t = np.asarray(t)
    if not np.all(np.diff(t) > 0.0):
        raise InputError(located(path, 'points', 'expected increasing time_from_start'))
    q, qd, qdd = (np.asarray(columns[k], dtype=float)
                  for k in ('positions', 'velocities', 'accelerations'))
    return JointTrajectoryData(tuple(str(n) for n in names), t, q, qd, qdd)


def limit_violations(problem: Problem, trajectory: JointTrajectoryData,
                     prior: str | None = None, positions_from: float = -np.inf) -> list[str]:
    """Every limit of `excitation_limits` that the trajectory breaks, checked at its points
    with the commands (friction included) at the design point (`design_point`: the model
    `sysid excite` designs with); one line per joint and limit naming the first time, the
    largest value and the limit. Empty: all hold. Positions count from `positions_from` [s]
    on: before it a move from a robot's state at rest near a limit goes into the range,
    which the caller checks.

    Raises:
      InputError: joints that do not match the configured ones.
      ConfigError: as `excitation_limits`.
    """
    model = problem.model
    if set(trajectory.joint_names) != set(model.joint_names):
        raise InputError(f'joint_names: expected {", ".join(model.joint_names)}, got '
                         f'{", ".join(trajectory.joint_names)}')
    order = [trajectory.joint_names.index(j) for j in model.joint_names]
    q, qd, qdd = (a[:, order] for a in (trajectory.q, trajectory.qd, trajectory.qdd))
    limits = excitation_limits(problem)
    u = _commands(problem, design_point(problem, prior)[0], q, qd, qdd)
    use = limits_lib.usage(limits, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd),
                           jnp.asarray(u))
    values = {'position': q, 'velocity': qd, 'acceleration': qdd, 'effort': u}
    bounds = {'position': np.stack([limits.q_min, limits.q_max], axis=1).tolist(),
              'velocity': np.asarray(limits.qd_max), 'acceleration': np.asarray(limits.qdd_max),
              'effort': np.asarray(limits.u_max)}
    lines = []
    for kind, ratio in zip(limits_lib.Usage._fields, use):
        ratio = np.array(ratio)
        if kind == 'position':
            ratio[np.asarray(trajectory.t) < positions_from] = 0.0
        for j, joint in enumerate(model.joint_names):
            over = np.nonzero(ratio[:, j] > 1.0 + USE_TOLERANCE)[0]
            if len(over):
                worst = over[np.argmax(ratio[over, j])]
                lines.append(f'{joint}: {kind} {values[kind][worst, j]:.4g} at t = '
                             f'{trajectory.t[over[0]]:.3f} s (first) exceeds the limit '
                             f'{bounds[kind][j]} ({100 * ratio[worst, j]:.1f} % of it)')
    return lines


def _commands(problem: Problem, theta, q, qd, qdd) -> np.ndarray:
    """(K, nv) commands at the parameters theta (M,) for the motion (K, nv) each."""
    actuator = _require_additive(problem)
    params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
    fn = jax.jit(jax.vmap(lambda a, b, c: control.command_torque(
        problem.model, params, a, b, c, actuator)))
    return np.asarray(fn(jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))


def _units(problem: Problem) -> tuple[str, str, str, str]:
    """Axis units of position, velocity, acceleration and command."""
    prismatic = set(problem.model.joint_types) == {'prismatic'}
    mixed = len(set(problem.model.joint_types)) > 1
    if mixed:
        return 'rad or m', 'rad/s or m/s', 'rad/s^2 or m/s^2', 'N m or N'
    return (('m', 'm/s', 'm/s^2', 'N') if prismatic
            else ('rad', 'rad/s', 'rad/s^2', 'N m'))


def _plot(path: str, excitation: Excitation) -> None:
    """Positions, velocities, accelerations and commands over time with dashed limits."""
    from matplotlib.figure import Figure

    from sysid_ros.io import report

    limits = excitation.design.limits
    names = excitation.problem.joint_names
    units = _units(excitation.problem)
    rows = (('position', excitation.q, (limits.q_min, limits.q_max)),
            ('velocity', excitation.qd, (-limits.qd_max, limits.qd_max)),
            ('acceleration', excitation.qdd, (-limits.qdd_max, limits.qdd_max)),
            ('command', excitation.u, (-limits.u_max, limits.u_max)))
    fig = Figure(figsize=(9.0, 10.0), dpi=100, layout='constrained')
    axes = fig.subplots(len(rows), 1, sharex=True)
    for ax, (label, values, (low, high)), unit in zip(axes, rows, units):
        for j, name in enumerate(names):
            line, = ax.plot(excitation.t, values[:, j], label=name, linewidth=1.0)
            for bound in (float(low[j]), float(high[j])):
                if math.isfinite(bound):
                    ax.axhline(bound, color=line.get_color(), linestyle='--', linewidth=0.6)
        ax.set_ylabel(f'{label} [{unit}]')
        ax.grid(alpha=0.3)
    axes[0].legend(loc='upper right', fontsize='small', ncol=min(len(names), 4))
    axes[0].set_title(f'designed excitation of {excitation.problem.model.name} '
                      '(dashed: limits, margins applied)')
    axes[-1].set_xlabel('time [s]')
    report.save_figure(fig, path)


def _summary(excitation: Excitation) -> dict:
    """The content of excitation.yaml."""
    dp, result, spec = excitation.design, excitation.result, excitation.problem.spec
    limits = dp.limits
    joints = excitation.problem.joint_names
    return {
        'robot': excitation.problem.model.name,
        'joints': list(joints),
        'passed': bool(excitation.passed),
        'duration': float(dp.duration),
        'base_frequency': float(dp.base_frequency),
        'harmonics': int(dp.harmonics),
        'start': [float(v) for v in dp.q0],
        'objective': 'D-optimal: log det of the scaled information plus prior precision',
        'log_det': result.log_det,
        'start_log_det': result.start_log_det,
        'condition_number': excitation.condition_number,
        'residual': dp.residual,
        'noise': {'velocity_std': [float(v) for v in excitation.velocity_std],
                  'source': excitation.noise_source,
                  **({'acceleration_std': [float(v) for v in dp.accel_std]}
                     if estimator_data.residual_family(dp.residual).simulates else
                     {'filtered_state_std': np.sqrt(dp.state_var).tolist(),
                      'filtered_torque_std': np.sqrt(dp.torque_var).tolist(),
                      'torque_std': (None if dp.torque_std is None
                                     else [float(v) for v in dp.torque_std])})},
        'parameters': {name: {'predicted_std': float(excitation.predicted_std[k]),
                              'prior_std': float(excitation.prior_std[k]),
                              'design_point': float(dp.theta[k]),
                              'scale': float(dp.scale[k])}
                       for k, name in enumerate(spec.names)},
        'limits': {joint: {'position': [float(limits.q_min[j]), float(limits.q_max[j])],
                           'velocity': float(limits.qd_max[j]),
                           'acceleration': float(limits.qdd_max[j]),
                           'effort': float(limits.u_max[j])} for j, joint in enumerate(joints)},
        'peak_use': {joint: {kind: float(getattr(excitation.peak, kind)[j])
                             for kind in limits_lib.Usage._fields}
                     for j, joint in enumerate(joints)},
        'optimiser': {'iterations': result.iterations, 'message': result.message,
                      'shrink': result.shrink},
        'coefficients': {'sin': np.asarray(result.coeffs[0]).tolist(),
                         'cos': np.asarray(result.coeffs[1]).tolist()},
    }


def write_excitation(out_dir: str | os.PathLike, excitation: Excitation) -> list[str]:
    """Write the files of the module doc into `out_dir` (created); returns their paths."""
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    names = excitation.problem.joint_names
    paths = [os.path.join(out_dir, name) for name in
             ('trajectory.yaml', 'trajectory.csv', 'excitation.yaml', 'excitation.png')]
    with open(paths[0], 'w', encoding='utf-8') as f:
        yaml.safe_dump(trajectory_dict(names, excitation.t, excitation.q, excitation.qd,
                                       excitation.qdd), f, sort_keys=False)
    save_trajectory(paths[1], Trajectory(t=excitation.t, q=excitation.q, qd=excitation.qd,
                                         tau=excitation.u, qdd=excitation.qdd,
                                         joint_names=names, source='sysid excite'))
    with open(paths[2], 'w', encoding='utf-8') as f:
        yaml.safe_dump(_summary(excitation), f, sort_keys=False)
    _plot(paths[3], excitation)
    return paths
