"""The data each estimator's step takes, built once from prepared trajectories, and the
`Target` (model, spec, likelihood or loss) its factory takes (`core.inference.methods`).

Which data a method takes is its registry entry's `data` kind (`core.inference.registry`):

  * 'shooting' (`shooting_problem`): the trajectories, resampled at `data.rate`, are cut into
    shooting windows of H steps, and W = `estimator.shooting_windows` consecutive windows
    make a piece of T = W H steps; every trajectory gives floor(steps / T) consecutive
    pieces and the steps left at its end are dropped (`info['dropped_steps']`). Each piece
    starts at its measured state and is simulated under its measured commands, so pieces
    count as independent experiments under `estimator.likelihood: product` and as members
    of the mixture under `sum`; within a piece, windows 1 .. W - 1 start at free shooting
    states (CSVGD). H (>= MIN_WINDOW_STEPS) comes from `estimator.window`: seconds, or
    `all` (T the shortest trajectory), or `auto` (the default): the horizon over which
    open-loop predictions from measured states at the starting parameters stay within
    AUTO_WINDOW_SIGMAS noise stds (RMS over the state dimensions, median over
    AUTO_WINDOW_STARTS starts spread over the data), bounded to AUTO_WINDOW_S: long enough
    to see the dynamics, short enough that a chaotic system's windows keep their gradient.
    The Bayesian methods that start from the lm estimate (`estimator.init: point`) measure
    it there again. Observations: [q; qd] at every sample. Noise: `data.noise_std`
    holds one value for all 2 nv observed dimensions or one per dimension (q of each joint,
    then qd); left empty, it is estimated per dimension from the data: the robust spread
    (1.4826 x MAD) of the third differences divided by sqrt(20) (white noise of std s has
    third differences of std sqrt(20) s, a smooth signal sampled fast hardly any), floored at
    NOISE_FLOOR times the dimension's spread. Motion capture (`data.mocap_frames`, resolved
    into `Problem.mocap`): every trajectory carries the poses of the tracked frames
    (`Trajectory.mocap_position`, `mocap_orientation`); they become the 12 points per frame
    of `core.dynamics.observations.pose_points` and are observed after [q; qd]: the joint
    states stay in the likelihood beside the poses (O = 2 nv + 12 F), since they carry most
    of the information about the arm and the poses add the held object's. Their noise is
    `data.mocap_noise_std` on every coordinate, or left empty one value estimated like the
    joints' from the third differences of all coordinates pooled (floored at
    MOCAP_NOISE_FLOOR). The other data kinds below leave the poses out.
    With `estimator.residual: equation_error` the same methods take the equation-error
    likelihood instead (`equation_error_problem`): each trajectory goes through the causal
    filter of `estimator.filter_window` (`core.likelihoods.equation_error.filter_samples`:
    L taps, every L-th output kept) and is cut into pieces of `estimator.window` seconds
    (`auto`: EQUATION_PIECE_S; `all`: the shortest trajectory), the samples left at its end
    dropped. Noise: `data.torque_noise_std` (one value or one per joint), or left empty
    estimated per joint (`equation_error.fit_noise_std`: residual RMS after a few
    Gauss-Newton steps from `theta`, default the spec's starting values). The poses of
    motion capture are not used.
  * 'segments' (`segments`): DiffNEA's rollout segments of `estimator.rollout_horizon` steps
    with the loss `estimator.loss` (one-step or rollout).
  * 'regressor' (`regressor_data`): NEA's inverse-dynamics samples (`nea_samples`).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators, observations
from sysid_ros.core.inference import registry
from sysid_ros.core.inference.kernels import nea
from sysid_ros.core.inference.methods import Target
from sysid_ros.core.likelihoods import equation_error
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import losses
from sysid_ros.core.model.parameters import INERTIA_ATTRIBUTES, PAYLOAD
from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io.config import config_error, ConfigError
from sysid_ros.io.config_schema import one_or_each
from sysid_ros.io.problem import Problem
from sysid_ros.io.trajectory import DataError, Trajectory

__all__ = [
    'MIN_WINDOW_STEPS',
    'AUTO_WINDOW_S',
    'AUTO_WINDOW_SIGMAS',
    'AUTO_WINDOW_STARTS',
    'auto_window_steps',
    'stretches',
    'NOISE_FLOOR',
    'MOCAP_NOISE_FLOOR',
    'NEA_EDGE_SAMPLES',
    'EQUATION_PIECE_S',
    'NOISE_MISMATCH',
    'residual_stats_at',
    'RESIDUAL_CORRELATION',
    'correlated_residuals_warning',
    'noise_mismatch',
    'ACCELERATION_NOISE_SHARE',
    'DEFAULT_FILTER_WINDOW_S',
    'acceleration_noise_share',
    'longer_filter_window',
    'acceleration_noise_warning',
    'ShootingProblem',
    'MethodData',
    'Residual',
    'RESIDUAL_FAMILIES',
    'residual_family',
    'check_bounds',
    'estimate_noise_std',
    'configured_noise_std',
    'noise_std',
    'configured_torque_noise_std',
    'mocap_points',
    'window_start',
    'shooting_problem',
    'filter_taps',
    'equation_error_problem',
    'segments',
    'nea_samples',
    'regressor_data',
    'method_data',
]

# Fewest control steps per shooting window.
MIN_WINDOW_STEPS = 2
# `estimator.window: auto`: shortest and longest window [s]; the normalised prediction error
# (RMS over state dimensions, median over AUTO_WINDOW_STARTS starts) at which a window ends.
AUTO_WINDOW_S = (0.25, 2.0)
AUTO_WINDOW_SIGMAS = 3.0
AUTO_WINDOW_STARTS = 32
# Floor of the estimated noise std, relative to each observed dimension's spread.
NOISE_FLOOR = 1e-3
# Floor of the estimated motion-capture noise std [m].
MOCAP_NOISE_FLOOR = 1e-6
# Samples dropped at both ends of each trajectory for NEA (filter edge effects).
NEA_EDGE_SAMPLES = 3
# `estimator.window: auto` of the equation error: piece duration [s].
EQUATION_PIECE_S = 1.0


def _error(problem: Problem, key: str, message: str) -> ConfigError:
    return config_error(problem.config, key, message)


def check_bounds(problem: Problem, method: str) -> None:
    """Raise ConfigError naming the parameters without a finite min and max (min < max is
    checked with the configuration)."""
    spec = problem.spec
    unbounded = [f'{name} [{lo:g}, {hi:g}]'
                 for name, lo, hi in zip(spec.names, spec.lower_bounds, spec.upper_bounds)
                 if not (np.isfinite(lo) and np.isfinite(hi))]
    if unbounded:
        raise _error(problem, 'parameters', f'{method} samples within the bounds and needs a '
                     f'finite min and max for every parameter; unbounded: '
                     f'{", ".join(unbounded)}')


def _window_steps(problem: Problem, trajs: Sequence[Trajectory], noise: np.ndarray,
                  theta) -> tuple[int, str]:
    """(steps per shooting window, how they were chosen), see the module doc."""
    cfg = problem.config
    setting = cfg.estimator.window
    shortest = min(t.num_samples for t in trajs) - 1
    if setting == 'all':
        return shortest // cfg.estimator.shooting_windows, 'all'
    if setting == 'auto':
        return auto_window_steps(problem, trajs, noise, theta), 'auto'
    return max(int(round(setting * cfg.data.rate)), 1), 'config'


def auto_window_steps(problem: Problem, trajs: Sequence[Trajectory], noise: np.ndarray,
                      theta=None) -> int:
    """Steps over which open-loop predictions at `theta` (default: the spec's starting
    values) from measured states stay within AUTO_WINDOW_SIGMAS noise stds (module doc),
    within AUTO_WINDOW_S and so that a piece of `shooting_windows` windows fits into the
    shortest trajectory."""
    rate = problem.config.data.rate
    windows = problem.config.estimator.shooting_windows
    shortest = (min(t.num_samples for t in trajs) - 1) // windows
    lowest = min(max(int(round(AUTO_WINDOW_S[0] * rate)), MIN_WINDOW_STEPS), shortest)
    longest = min(max(int(round(AUTO_WINDOW_S[1] * rate)), lowest), shortest)
    if all(t.num_samples <= longest for t in trajs):
        return lowest
    measured, controls = stretches(trajs, longest, AUTO_WINDOW_STARTS)
    spec = problem.spec
    theta = spec.initial_theta(problem.base_params) if theta is None else theta
    params = spec.to_params(jnp.asarray(theta), problem.base_params)
    cfg = problem.config.model
    predicted = np.asarray(integrators.rollout_batch(
        problem.model, params, jnp.asarray(measured[:, 0]), jnp.asarray(controls), problem.dt,
        integrator=cfg.integrator, actuator=cfg.actuator, substeps=problem.substeps))
    error = np.sqrt(np.mean(np.square((predicted - measured) / noise), axis=-1))
    median = np.median(np.where(np.isfinite(error), error, np.inf), axis=0)
    beyond = np.flatnonzero(median > AUTO_WINDOW_SIGMAS)
    steps = int(beyond[0]) if beyond.size else longest
    return int(np.clip(steps, lowest, longest))


def stretches(trajs: Sequence[Trajectory], steps: int, count: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` stretches of `steps` steps spread evenly over the data (starts half a
    stretch apart, as many trajectories as have them): measured states (S, steps + 1, 2 nv)
    and commands (S, steps, nv). Raises ValueError where no trajectory is longer than
    `steps`."""
    starts = [(k, i) for k, t in enumerate(trajs)
              for i in range(0, t.num_samples - steps, max(steps // 2, 1))]
    if not starts:
        raise ValueError(f'stretches: no trajectory longer than {steps} steps')
    pick = np.linspace(0, len(starts) - 1, min(count, len(starts)))
    chosen = [starts[int(round(j))] for j in pick]
    measured = np.stack([np.concatenate([trajs[k].q, trajs[k].qd], axis=1)[i:i + steps + 1]
                         for k, i in chosen])
    controls = np.stack([trajs[k].tau[i:i + steps] for k, i in chosen])
    return measured, controls


def _cut_pieces(problem: Problem, trajs: Sequence[Trajectory], window: int, points=None):
    """States (K, T + 1, S), commands (K, T, nv) of the pieces of `shooting_windows`
    windows of `window` steps each, their observations (K, T + 1, S + 12 F) [q; qd; points]
    where `points` gives each trajectory's motion-capture points (N_k, 12 F) (else None),
    and the layout (module doc)."""
    windows = problem.config.estimator.shooting_windows
    steps = [t.num_samples - 1 for t in trajs]
    shortest = min(steps)
    piece = window * windows
    if window < MIN_WINDOW_STEPS or piece > shortest:
        rate = problem.config.data.rate
        if problem.config.estimator.window == 'all':
            raise _error(problem, 'estimator.shooting_windows', f'expected at most '
                         f'{max(shortest // MIN_WINDOW_STEPS, 1)} windows of >= '
                         f'{MIN_WINDOW_STEPS} steps for the shortest trajectory ({shortest} '
                         f'steps at {rate:g} Hz), got {windows}')
        raise _error(problem, 'estimator.window', f'expected {windows} window(s) of '
                     f'{MIN_WINDOW_STEPS} to {shortest // windows} steps '
                     f'({MIN_WINDOW_STEPS / rate:g} to {shortest // windows / rate:g} s) for the '
                     f'shortest trajectory '
                     f'({shortest} steps at {rate:g} Hz), got {window} steps')
    states, controls, observed = [], [], []
    for i, traj in enumerate(trajs):
        x = np.concatenate([traj.q, traj.qd], axis=1)
        y = None if points is None else np.concatenate([x, points[i]], axis=1)
        for k in range((traj.num_samples - 1) // piece):
            begin = k * piece
            states.append(x[begin:begin + piece + 1])
            controls.append(traj.tau[begin:begin + piece])
            if y is not None:
                observed.append(y[begin:begin + piece + 1])
    states, controls = np.stack(states), np.stack(controls)
    observed = np.stack(observed) if observed else None
    info = {'num_pieces': len(states), 'piece_steps': piece, 'window_steps': window,
            'window_s': window * problem.dt, 'shooting_windows': windows,
            'dropped_steps': int(sum(steps) - len(states) * piece)}
    return states, controls, observed, info


def _third_differences(signals: Sequence[np.ndarray]) -> np.ndarray:
    """Third differences in time (sum_k (N_k - 3), D) of signals (N_k, D) each."""
    return np.concatenate([np.diff(x, n=3, axis=0) for x in signals])


def _white_noise_std(third: np.ndarray) -> np.ndarray:
    """(D,) white-noise std per column of third differences (N, D): 1.4826 x MAD / sqrt(20)
    (module doc)."""
    mad = np.median(np.abs(third - np.median(third, axis=0)), axis=0)
    return 1.4826 * mad / np.sqrt(20.0)


def estimate_noise_std(states: Sequence[np.ndarray], nv: int) -> np.ndarray:
    """(S,) noise std per state dimension of trajectories (N_k, S) each, see the module
    doc."""
    spread = losses.floored_state_scale(np.concatenate(list(states)).std(axis=0), nv)
    return np.maximum(_white_noise_std(_third_differences(states)), NOISE_FLOOR * spread)


def mocap_points(problem: Problem, trajs: Sequence[Trajectory]) -> list[np.ndarray]:
    """The motion-capture observations (N_k, 12 F) [m] of each trajectory's poses of the
    F tracked frames of `problem.mocap` (`observations.pose_points`).

    Raises:
      DataError: a trajectory without the poses of every tracked frame.
    """
    num = len(problem.mocap)
    for traj in trajs:
        if traj.num_tracked != num:
            topics = ', '.join(problem.config.data.mocap_topics)
            raise DataError(f'{traj.source or "trajectory"}: mocap_position: expected the '
                            f'poses of {num} tracked frame(s) (data.mocap_topics: {topics}), '
                            f'got {traj.num_tracked}')
    return [np.asarray(observations.pose_points(traj.mocap_position, traj.mocap_orientation))
            for traj in trajs]


def _mocap_noise_std(problem: Problem, points: Sequence[np.ndarray]) -> tuple[float, str]:
    """One noise std [m] for every motion-capture coordinate and where it came from."""
    given = problem.config.data.mocap_noise_std
    if given is not None:
        return float(given), 'config'
    sigma = float(_white_noise_std(_third_differences(points).reshape(-1, 1))[0])
    return max(sigma, MOCAP_NOISE_FLOOR), 'estimated'


def configured_noise_std(problem: Problem) -> np.ndarray | None:
    """(2 nv,) `data.noise_std` per state dimension [rad or m, rad/s or m/s] (q, then qd),
    or None where it is not configured.

    Raises:
      ConfigError: neither 1 value nor 2 nv.
    """
    joints = ', '.join(problem.model.joint_names)
    return _one_or_each(problem, 'data.noise_std', 2 * problem.model.nv,
                        f'q of {joints}, then qd')


def configured_torque_noise_std(problem: Problem) -> np.ndarray | None:
    """(nv,) `data.torque_noise_std` per joint [N m or N], or None where it is not
    configured.

    Raises:
      ConfigError: neither 1 value nor nv.
    """
    return _one_or_each(problem, 'data.torque_noise_std', problem.model.nv,
                        f'one per joint: {", ".join(problem.model.joint_names)}')


def _one_or_each(problem: Problem, key: str, count: int, each: str) -> np.ndarray | None:
    """The configured list `key` as (count,) values (one value stands for all), or None
    where it is empty; ConfigError naming `each` (what the count values are) for another
    length."""
    section, name = key.split('.')
    return one_or_each(getattr(getattr(problem.config, section), name), count,
                       problem.config.source, key, each)


def noise_std(problem: Problem, trajs: Sequence[Trajectory]) -> tuple[np.ndarray, str]:
    """(2 nv,) noise std per state dimension and where it came from ('config', else
    'estimated' from the trajectories' third differences; module doc)."""
    configured = configured_noise_std(problem)
    if configured is not None:
        return configured, 'config'
    states = [np.concatenate([t.q, t.qd], axis=1) for t in trajs]
    return estimate_noise_std(states, problem.model.nv), 'estimated'


def window_start(estimator) -> str:
    """The likelihood's start of each piece's first window (`likelihood.STARTS`) for an
    `EstimatorConfig`: `auto` is `profiled` for single shooting, else `measured`."""
    if estimator.start != 'auto':
        return estimator.start
    return 'profiled' if estimator.shooting_windows == 1 else 'measured'


def shooting_problem(problem: Problem, trajs: Sequence[Trajectory], theta=None
                     ) -> ShootingProblem:
    """Cut prepared trajectories into pieces and build the shooting likelihood (module doc);
    `theta` (M,): the parameters at which `window: auto` measures the prediction horizon
    (default: the spec's starting values).

    Raises:
      ConfigError: a window count that leaves windows of fewer than MIN_WINDOW_STEPS steps,
        a `data.noise_std` of the wrong length.
      DataError: no trajectory, NaN or inf in the data, a trajectory without the poses of
        the tracked frames.
    """
    if not trajs:
        raise DataError('no trajectories given')
    cfg = problem.config
    noise, source = noise_std(problem, trajs)
    window, window_source = _window_steps(problem, trajs, noise, theta)
    points = mocap_points(problem, trajs) if problem.mocap else None
    states, controls, observed, info = _cut_pieces(problem, trajs, window, points)
    info['window_source'] = window_source
    if points is not None:
        mocap_noise, mocap_source = _mocap_noise_std(problem, points)
        noise = np.concatenate([noise, np.full(points[0].shape[1], mocap_noise)])
        source = 'config' if source == mocap_source == 'config' else 'estimated'
        info.update(mocap_frames=list(cfg.data.mocap_frames), mocap_noise_std=mocap_noise)
    try:
        setting = lik.make_shooting_likelihood(
            problem.model, problem.dt, cfg.estimator.shooting_windows,
            cfg.estimator.likelihood,
            observed=range(2 * problem.model.nv) if problem.mocap else None,
            integrator=cfg.model.integrator, actuator=cfg.model.actuator,
            substeps=problem.substeps, mocap=problem.mocap or None,
            start=window_start(cfg.estimator))
        data = lik.make_trajectory_data(setting, states, controls, noise, observed)
    except ValueError as exc:
        raise DataError(str(exc)) from exc
    info.update(noise_std=[float(v) for v in noise], noise_std_source=source,
                likelihood=cfg.estimator.likelihood)
    return ShootingProblem(likelihood=setting, data=data, info=info)


class ShootingProblem(NamedTuple):
    """The measured data in the form a likelihood of the 'shooting' methods takes.

    Attributes:
      likelihood: the output-error setting (simulator, windows, observation model ([q; qd],
        then the motion-capture points of `Problem.mocap`) and combine form) or the
        equation-error one.
      data: K pieces (`likelihood.TrajectoryData` of T steps or
        `equation_error.TorqueData`).
      info: plain description of the layout and the noise (goes into `FitResult.info`).
    """

    likelihood: lik.ShootingLikelihood
    data: lik.TrajectoryData
    info: dict


def filter_taps(problem: Problem) -> int:
    """L: `estimator.filter_window` (empty: DEFAULT_FILTER_WINDOW_S) in samples of
    `data.rate`, rounded to an odd number of at least `equation_error.MIN_TAPS`."""
    cfg = problem.config
    seconds = cfg.estimator.filter_window or DEFAULT_FILTER_WINDOW_S
    taps = int(round(seconds * cfg.data.rate))
    return max(equation_error.MIN_TAPS, taps + 1 - taps % 2)


_fit_noise_std = jax.jit(equation_error.fit_noise_std, static_argnums=(0, 1))
# A joint's torque residuals at the estimate more than this factor off the noise std the fit
# assumed make `noise_mismatch` warn.
NOISE_MISMATCH = 3.0
# Accelerations whose noise is more than this share of their variance make
# `acceleration_noise_warning` warn [-].
ACCELERATION_NOISE_SHARE = 0.02
# [s] the equation error's filter where `estimator.filter_window` is empty.
DEFAULT_FILTER_WINDOW_S = 0.05
# Torque residuals correlated beyond this from one kept sample to the next make
# `correlated_residuals_warning` warn [-].
RESIDUAL_CORRELATION = 0.5


@functools.partial(jax.jit, static_argnums=(0, 1))
def _residual_stats_at(setting, spec, base_params, theta, data) -> tuple[jax.Array, jax.Array]:
    """(nv,) per-joint std and lag-one correlation (within pieces) of the equation error's
    torque residuals at theta (M,)."""
    residuals = equation_error.torque_residuals(setting, spec.to_params(theta, base_params),
                                                data)
    lagged = jnp.sum(residuals[:, 1:] * residuals[:, :-1], axis=(0, 1))
    power = jnp.sum(jnp.square(residuals), axis=(0, 1))
    return (equation_error.residual_noise_std(residuals, spec.num_params),
            lagged / jnp.where(power > 0.0, power, 1.0))


def residual_stats_at(prepared: MethodData, theta) -> tuple[np.ndarray, np.ndarray] | None:
    """((nv,) per-joint std [N m or N], (nv,) lag-one correlation [-]) of the equation
    error's torque residuals at theta (M,), consecutive kept samples within each piece;
    None for the output error (whose check is the loss, `diagnosis.diagnose`)."""
    if prepared.info.get('residual') != 'equation_error':
        return None
    target = prepared.target
    std, correlation = _residual_stats_at(target.likelihood, target.spec, target.base_params,
                                          jnp.asarray(theta), prepared.data)
    return np.asarray(std, dtype=float), np.asarray(correlation, dtype=float)


def correlated_residuals_warning(problem: Problem, info: dict) -> list[str]:
    """A warning line where the equation error's torque residuals at the estimate
    (`info['residual_correlation']`, `residual_stats_at`) are correlated from one kept
    sample to the next beyond RESIDUAL_CORRELATION on some joint: the kept samples' noise is
    independent (`equation_error`: Independence), so the residuals hold dynamics the model
    lacks (rotor inertia, elastic joints, friction that grows with the load, gains, a
    payload's own inertia where only its mass and centre are identified) or coloured noise,
    and the intervals assume neither. Empty otherwise."""
    correlation = np.asarray(info.get('residual_correlation', ()), dtype=float)
    if not correlation.size or np.max(correlation) <= RESIDUAL_CORRELATION:
        return []
    joints = problem.model.joint_names
    listed = ', '.join(f'{joints[j]} {v:.2f}' for j, v in enumerate(correlation)
                       if v > RESIDUAL_CORRELATION)
    names = set(problem.names)
    held = (f'{PAYLOAD}.mass' in names
            and not any(f'{PAYLOAD}.{a}' in names for a in INERTIA_ATTRIBUTES))
    payload = ('; a payload of some size: identify parameters.payload.inertia' if held else '')
    return [f'the torque residuals at the estimate are correlated from sample to sample '
            f'({listed}; independent noise gives about 0): the model misses dynamics in the '
            'data (reflected rotor inertia: identify parameters.<joint>.armature; elastic '
            f'joints; friction or gains that change with the load{payload}) or the noise is '
            'coloured; the estimate may be biased and its intervals too narrow']


def acceleration_noise_share(velocity_noise, dt: float, taps: int, spread) -> np.ndarray:
    """(nv,) variance of the noise that the filter's slope of `taps` samples at period dt
    [s] passes from velocities of noise std `velocity_noise` (nv,) into the accelerations,
    over the filtered accelerations' variance `spread`^2 (nv,) [-]."""
    slope = np.linalg.norm(equation_error.savitzky_golay_kernels(taps, dt)[1])
    noise = np.square(slope * np.asarray(velocity_noise, float))
    return noise / np.maximum(np.square(np.asarray(spread, float)), 1e-300)


def longer_filter_window(problem: Problem, info: dict) -> float | None:
    """The shortest `estimator.filter_window` [s] that brings every joint's acceleration
    noise share (`info`'s `acceleration_noise_share`, at `info`'s `filter_taps`) to a tenth
    of ACCELERATION_NOISE_SHARE (the noise through the filter's slope falls with its
    length^3), where some joint's share is above it; None otherwise, for the output error,
    or where no filter up to 20 times longer does."""
    share = np.asarray(info.get('acceleration_noise_share', ()), dtype=float)
    if not share.size or np.max(share) <= ACCELERATION_NOISE_SHARE:
        return None
    taps = int(info['filter_taps'])

    def slope_norm(n: int) -> float:
        return float(np.linalg.norm(equation_error.savitzky_golay_kernels(n, problem.dt)[1]))

    target = 0.1 * ACCELERATION_NOISE_SHARE / np.max(share) * slope_norm(taps) ** 2
    longer = next((n for n in range(taps + 2, 20 * taps, 2) if slope_norm(n) ** 2 <= target),
                  None)
    return None if longer is None else longer / problem.config.data.rate


def acceleration_noise_warning(problem: Problem, info: dict) -> list[str]:
    """A warning line where the equation error's accelerations carry noise of more than
    ACCELERATION_NOISE_SHARE of their variance on some joint (`info`'s
    `acceleration_noise_share`): least squares on noisy regressors shrinks the inertia they
    multiply by about that share (errors in variables), a payload's mass with it. The line
    names `longer_filter_window`. Empty otherwise (and for the output error). Measured on
    `bench/realistic.py`'s recordings (100 Hz, velocity noise 2 mrad/s): shares of 2.4 % and
    13 % with payloads 4.7 % and 10.7 % light."""
    share = np.asarray(info.get('acceleration_noise_share', ()), dtype=float)
    if not share.size or np.max(share) <= ACCELERATION_NOISE_SHARE:
        return []
    cfg = problem.config
    taps = int(info['filter_taps'])
    longer = longer_filter_window(problem, info)
    joints = problem.model.joint_names
    listed = ', '.join(f'{joints[j]} {100 * v:.1f} %' for j, v in enumerate(share)
                       if v > ACCELERATION_NOISE_SHARE)
    advice = (f'set estimator.filter_window: {longer:.3g} (now {taps / cfg.data.rate:.3g} s) '
              'or record the joint states faster'
              if longer else 'record the joint states faster or with less velocity noise')
    return [f'the accelerations the equation error derives from the velocities carry noise of '
            f'{listed} of their variance: inertia estimates (a payload mass) come out too small, '
            f'by roughly that share or more (errors in variables); {advice}']


def noise_mismatch(problem: Problem, info: dict) -> list[str]:
    """Warning lines where the torque residuals at the estimate
    (`info['residual_noise_std']`, `residual_stats_at`) are more than NOISE_MISMATCH times
    smaller or larger than the noise std the equation-error fit weighed them with
    (`info['noise_std']`, configured or estimated at the start, where a poor start leaves
    residuals of tens of N m); the line names the value to configure. Empty without
    `residual_noise_std` (the output error)."""
    if 'residual_noise_std' not in info:
        return []
    fitted = np.asarray(info['residual_noise_std'], dtype=float)
    assumed = np.asarray(info['noise_std'], dtype=float)
    ratio = fitted / assumed
    off = [j for j in range(len(ratio))
           if not 1.0 / NOISE_MISMATCH <= ratio[j] <= NOISE_MISMATCH]
    if not off:
        return []
    joints = problem.model.joint_names
    listed = ', '.join(f'{joints[j]} {assumed[j]:.3g} (residuals {fitted[j]:.3g})'
                       for j in off)
    suggested = ', '.join(f'{v:.3g}' for v in fitted)
    return [f'the torque noise std the fit weighed the joints with ({info["noise_std_source"]}'
            f') is off the residuals at the estimate by more than a factor '
            f'{NOISE_MISMATCH:g}: {listed} [N m or N]; the joints are weighed wrongly, and a '
            f"posterior's width with them: set data.torque_noise_std: [{suggested}] and fit "
            'again']


def equation_error_problem(problem: Problem, trajs: Sequence[Trajectory], theta=None
                           ) -> ShootingProblem:
    """Filter, thin and cut prepared trajectories into the equation error's pieces and
    build its likelihood (module doc); `theta` (M,): where the noise fit starts.

    Raises:
      ConfigError: an actuator model that is not additive, a `data.torque_noise_std` of
        the wrong length, trajectories shorter than the filter or than one piece.
      DataError: no trajectory, NaN or inf in the data.
    """
    cfg = problem.config
    nv = problem.model.nv
    given = configured_torque_noise_std(problem)
    if not trajs:
        raise DataError('no trajectories given')
    try:
        setting = equation_error.make_equation_error_likelihood(
            problem.model, cfg.model.actuator, cfg.estimator.likelihood)
    except ValueError as exc:
        raise _error(problem, 'model.actuator', f'{exc} (estimator.residual: '
                     'equation_error)') from exc
    taps = filter_taps(problem)
    shortest = min(t.num_samples for t in trajs)
    if shortest < 2 * taps:
        raise _error(problem, 'estimator.filter_window', f'expected at most '
                     f'{shortest // 2} samples ({shortest // 2 / cfg.data.rate:g} s) for the '
                     f'shortest trajectory ({shortest} samples), got {taps}')
    kept = [equation_error.filter_samples(t.q, t.qd, t.tau, problem.dt, taps) for t in trajs]
    smooth = equation_error.savitzky_golay_kernels(taps, problem.dt)[0]
    fewest = min(k['tau'].shape[0] for k in kept)
    window = cfg.estimator.window
    if window == 'all':
        piece = fewest
    else:
        seconds = EQUATION_PIECE_S if window == 'auto' else window
        piece = int(np.clip(round(seconds * cfg.data.rate / taps), 1, fewest))
    arrays = {name: np.stack([k[name][i * piece:(i + 1) * piece] for k in kept
                              for i in range(k['tau'].shape[0] // piece)])
              for name in ('q', 'qd', 'qdd', 'tau', 'tau_rate', 'q_taps', 'qd_taps')}
    try:
        data = equation_error.make_torque_data(setting, **arrays, smooth=smooth,
                                               noise_std=1.0 if given is None else given,
                                               timing_std=cfg.data.torque_timing_std)
    except ValueError as exc:
        raise DataError(str(exc)) from exc
    source = 'config'
    if given is None:
        spec = problem.spec
        theta = spec.initial_theta(problem.base_params) if theta is None else theta
        noise, _ = _fit_noise_std(setting, spec, problem.base_params, jnp.asarray(theta),
                                  data)
        floor = NOISE_FLOOR * jnp.std(data.tau.reshape(-1, nv), axis=0)
        data, source = data._replace(noise_std=jnp.maximum(noise, floor)), 'estimated'
    k, n = data.num_trajectories, data.num_steps
    share = acceleration_noise_share(noise_std(problem, trajs)[0][nv:], problem.dt, taps,
                                     np.std(np.asarray(data.qdd).reshape(-1, nv), axis=0))
    info = {'residual': 'equation_error', 'num_pieces': k, 'piece_samples': n,
            'acceleration_noise_share': share.tolist(),
            'piece_s': n * taps * problem.dt, 'filter_taps': taps,
            'filter_delay_s': (taps - 1) / 2 * problem.dt,
            'noise_std': [float(v) for v in data.noise_std], 'noise_std_source': source,
            'torque_timing_std_s': cfg.data.torque_timing_std,
            'likelihood': cfg.estimator.likelihood}
    return ShootingProblem(likelihood=setting, data=data, info=info)


def nea_samples(traj: Trajectory) -> dict[str, np.ndarray]:
    """Inverse-dynamics samples of one trajectory for NEA: {q, qd, qdd, tau} (N, nv).

    Without measured accelerations, q, qd and qdd come from a Savitzky-Golay filter of the
    measurements (`trajectory.with_acceleration`). That symmetric estimate of qdd at t_k
    averages the accelerations just before and after t_k; since `tau[k]` is held from t_k to
    t_k+1 (the `Trajectory` convention, which DiffNEA integrates), the torque that goes with it
    is the mean of the commands either side, (tau[k-1] + tau[k]) / 2. Measured accelerations
    are used with the torques as they are. `NEA_EDGE_SAMPLES` are dropped at both ends, where
    the filter is one-sided.
    """
    measured = traj.qdd is not None
    traj = trajectory_io.with_acceleration(traj)
    tau = traj.tau if measured else np.concatenate([traj.tau[:1],
                                                    0.5 * (traj.tau[1:] + traj.tau[:-1])])
    edge = NEA_EDGE_SAMPLES if traj.num_samples > 4 * NEA_EDGE_SAMPLES else 0
    inner = slice(edge, traj.num_samples - edge)
    return {'q': traj.q[inner], 'qd': traj.qd[inner], 'qdd': traj.qdd[inner], 'tau': tau[inner]}


def regressor_data(problem: Problem, trajs: Sequence[Trajectory]
                   ) -> nea.RegressorData:
    """NEA's data: the samples of all trajectories stacked (see `nea_samples`)."""
    parts = {k: [] for k in ('q', 'qd', 'qdd', 'tau')}
    for traj in trajs:
        for k, v in nea_samples(traj).items():
            parts[k].append(v)
    arrays = {k: jnp.asarray(np.concatenate(v)) for k, v in parts.items()}
    return _stack_regressor(problem.model, problem.base_params, arrays['q'], arrays['qd'],
                            arrays['qdd'], arrays['tau'])


_stack_regressor = jax.jit(nea.make_regressor_data, static_argnums=0)


def segments(problem: Problem, trajs: Sequence[Trajectory], horizon: int) -> losses.Segments:
    """Rollout segments of `horizon` steps (at most the shortest trajectory's length).

    Raises:
      DataError: trajectories too short for one segment.
    """
    shortest = min(t.num_samples for t in trajs)
    horizon = max(1, min(horizon, shortest - 1))
    try:
        return losses.make_segments([t.q for t in trajs], [t.qd for t in trajs],
                                    [t.tau for t in trajs], horizon)
    except ValueError as exc:
        raise DataError(str(exc)) from exc


class Residual(NamedTuple):
    """What a likelihood family (`estimator.residual`) sets in the io layer.

    Attributes:
      shooting: the builder of its 'shooting' data (`shooting_problem`,
        `equation_error_problem`).
      data_kinds: the registry data kinds (`registry.DATA_KINDS`) whose methods fit it.
      simulates: whether its fit simulates the model, so that an integration step is to be
        chosen (`io.integration_step`); else its residuals are torques through the inverse
        dynamics of filtered signals, whose noise the excitation design weighs
        (`io.excitation`).
      misfit: what to try where its loss stays far above 1 (`diagnosis.diagnose`).
    """

    shooting: Callable
    data_kinds: tuple[str, ...]
    simulates: bool
    misfit: str


# The one table of the likelihood families, by `estimator.residual`.
RESIDUAL_FAMILIES = {
    'output_error': Residual(
        shooting_problem, registry.DATA_KINDS, True,
        'a simulation that cannot follow the recorded motion (a velocity-controlled arm, '
        'friction or elasticity the model lacks) runs away from it: with measured torques, '
        'estimator.residual: equation_error compares them without simulating; else shorten '
        'estimator.window'),
    'equation_error': Residual(
        equation_error_problem, ('shooting',), False,
        'check that the torques are joint torques (not currents: data gains) and '
        'model.actuator (friction), data.torque_noise_std'),
}


def residual_family(name: str) -> Residual:
    """The entry of `RESIDUAL_FAMILIES` of a residual name (`config_sections.RESIDUALS`)."""
    return RESIDUAL_FAMILIES[name]


class MethodData(NamedTuple):
    """What a method needs beside its options.

    Attributes:
      target: model, spec and likelihood or loss for the method's factory.
      data: the step's data (TrajectoryData, Segments or RegressorData).
      info: plain description of the data (goes into `FitResult.info`).
    """

    target: Target
    data: object
    info: dict


def method_data(problem: Problem, trajs: Sequence[Trajectory], kind: str,
                theta=None) -> MethodData:
    """The Target and the data of a registry data kind (module doc) from prepared
    trajectories; `theta`: see `shooting_problem`.

    Raises:
      ConfigError, DataError: as `shooting_problem` and `segments`.
    """
    cfg = problem.config
    target = Target(model=problem.model, base_params=problem.base_params, spec=problem.spec,
                    actuator=cfg.model.actuator)
    family = residual_family(cfg.estimator.residual)
    if kind not in family.data_kinds:
        raise _error(problem, 'estimator.residual', f'{cfg.estimator.residual} is a '
                     'likelihood of lm and the Bayesian methods '
                     f'({", ".join(registry.BAYESIAN_METHODS)}); '
                     f'{cfg.estimator.method} takes {kind} data: set output_error (nea '
                     'regresses torques already, diffnea has estimator.loss)')
    if kind == 'shooting':
        sp = family.shooting(problem, trajs, theta)
        return MethodData(target._replace(likelihood=sp.likelihood), sp.data, sp.info)
    if kind == 'segments':
        loss_fn = losses.make_loss_fn(problem.model, cfg.estimator.loss, problem.dt,
                                      integrator=cfg.model.integrator,
                                      actuator=cfg.model.actuator, substeps=problem.substeps)
        data = segments(problem, trajs, cfg.estimator.rollout_horizon)
        return MethodData(target._replace(loss_fn=loss_fn), data,
                          {'num_segments': data.num_segments, 'horizon': data.horizon})
    if kind == 'regressor':
        return MethodData(target, regressor_data(problem, trajs), {})
    raise ValueError(f'unknown data kind {kind!r}; expected one of {registry.DATA_KINDS}')
