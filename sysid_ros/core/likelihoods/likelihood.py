"""Gaussian output-error likelihood of a set of trajectories, single or multiple shooting.

After Heiden et al. 2022 (CSVGD), §2.3 and supplement §1.2-1.3. Data (`TrajectoryData`): K
trajectories of T control steps on one time grid of period dt, with measured initial states
x0 (K, S) (S = 2 nv, x = [q; qd]), commands (K, T, nv) and observations (K, T + 1, O). The
observation model (`shooting_windows.observe`) stacks the observed state dimensions
(`ShootingLikelihood.observed`) and then, for each of F tracked body frames, the world
positions of its origin and of its three axis tips (`observations.mocap_points`), 12 per
frame: O = len(observed) + 12 F.

Shooting windows (`shooting_windows`): each trajectory is cut into W windows of H = T / W steps;
window w >= 1 starts at a free shooting state s_w of the particle (K, W - 1, S). The defects
d_w = x_end(window w) - s_{w+1}, divided by the state scale, are the equality constraints
of CSVGD. W = 1 is single shooting (no shooting states, no defects). Window 0
starts at the measured x0 (`start: 'measured'`) or at the profiled start (`start:
'profiled'`, single shooting only; `profiled_start`).

Likelihood of trajectory k, independent Gaussian noise with a standard deviation per
observed dimension:

  log p_k = -1/2 sum_{t, o} ((y_sim[t, o] - y[t, o]) / sigma_o)^2
            - (T + 1) sum_o log(sqrt(2 pi) sigma_o).

Over the set: 'product' (independent draws of one parameter vector) log p = sum_k log p_k;
'sum' (an equally weighted mixture, trajectories that may come from different parameters)
log p = log(1/K sum_k p_k).

Normalisation: shooting states are optimised as s = state_mean + state_scale * s_hat, with
the mean and standard deviation of each measured state dimension (the standard deviation
rather than the paper's variance, so that the dimensions become unitless); residuals are
divided by the noise standard deviations.

The estimators read every likelihood through generic functions (`functools.singledispatch`):
`select_trajectories`, `initial_shooting_states`, `log_likelihood`, `residual_noise_std` and
`residual_normaliser` here, `shooting_windows.window_residuals` and
`profiled_start.fit_window_starts`; `equation_error` registers its own for its setting and
data, so every estimator runs on either likelihood.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import integrators
from sysid_ros.core.dynamics import observations
from sysid_ros.core.likelihoods import losses
from sysid_ros.core.likelihoods import profiled_start
from sysid_ros.core.likelihoods.shooting_windows import (observe, predicted_trajectories,
                                                         simulate_windows, window_residuals)
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'COMBINE',
    'STARTS',
    'TrajectoryData',
    'LikelihoodTerms',
    'ShootingLikelihood',
    'make_trajectory_data',
    'select_trajectories',
    'make_shooting_likelihood',
    'initial_shooting_states',
    'log_likelihood',
    'combine_trajectories',
    'residual_noise_std',
    'residual_normaliser',
    'residual_loss',
]

COMBINE = ('sum', 'product')
STARTS = ('measured', 'profiled')


class TrajectoryData(NamedTuple):
    """A set of K measured trajectories (build with `make_trajectory_data`).

    Attributes:
      x0: (K, S) measured initial state [q; qd] of each trajectory (start of window 0).
      controls: (K, T, nv) commanded joint torques/forces [N m, N], held for dt each.
      observations: (K, T + 1, O) measured observations (observed state dimensions [rad,
        m, rad/s, m/s] or motion-capture points [m]), the one at x0 first.
      noise_std: (O,) observation noise standard deviation of each observed dimension.
      state_mean: (S,) mean of each state dimension (normalisation of shooting states).
      state_scale: (S,) spread of each state dimension (normalisation of shooting states and
        defects).
      states: (K, T + 1, S) measured states, or None. Set by `make_trajectory_data`; the
        motion-capture model starts its shooting states on them (`initial_shooting_states`).
    """

    x0: jax.Array
    controls: jax.Array
    observations: jax.Array
    noise_std: jax.Array
    state_mean: jax.Array
    state_scale: jax.Array
    states: jax.Array | None = None

    @property
    def num_trajectories(self) -> int:
        return int(self.controls.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.controls.shape[1])


class LikelihoodTerms(NamedTuple):
    """Output of `log_likelihood` for one parameter vector.

    Attributes:
      log_lik: () combined log-likelihood of the set (sum or product form).
      per_trajectory: (K,) log-likelihood of each trajectory.
      defects: (K, W - 1, S) normalised defects, end of window w minus start of window w + 1.
      profile: the carried `profiled_start.StartProfile` after this evaluation (its start
        moved by the chord step), or None when none was given.
    """

    log_lik: jax.Array
    per_trajectory: jax.Array
    defects: jax.Array
    profile: profiled_start.StartProfile | None = None


@dataclasses.dataclass(frozen=True)
class ShootingLikelihood:
    """Simulator, observation model and likelihood settings (static, hashable).

    Attributes:
      model: static tree.
      dt: control period [s].
      num_windows: W, shooting windows per trajectory (1: single shooting).
      combine: 'sum' (mixture over trajectories) or 'product' (independent trajectories).
      observed: indices of the observed state dimensions in [q; qd]; empty: all of them
        without `mocap`, none with it.
      integrator, actuator, substeps: simulator settings, see `integrators.rollout`.
      mocap: tracked frames of the motion-capture observations (`observations`), after the
        observed state dimensions; () for none.
      batch_scale: factor of the 'product' log-likelihood: K / B when each step sees a
        mini-batch of B of the K trajectories (`select_trajectories`), which makes it an
        unbiased estimate of the whole set's; `residual_loss` divides it out again.
      start: 'measured' or 'profiled' start of window 0 (module doc).
    """

    model: RobotModel
    dt: float
    num_windows: int = 1
    combine: str = 'sum'
    observed: tuple[int, ...] = ()
    integrator: object = 'semi_implicit_euler'
    actuator: object = 'viscous'
    substeps: int = 1
    mocap: tuple[observations.MocapFrame, ...] = ()
    batch_scale: float = 1.0
    start: str = 'measured'

    @property
    def state_dim(self) -> int:
        return 2 * self.model.nv

    @property
    def observed_dims(self) -> tuple[int, ...]:
        """Observed state dimensions: `observed`, else all of them without motion capture
        and none with it."""
        if self.observed or self.mocap:
            return self.observed
        return tuple(range(self.state_dim))

    @property
    def observation_dim(self) -> int:
        """O, the size of one observation: the observed state dims + 12 per tracked frame."""
        return len(self.observed_dims) + sum(frame.dim for frame in self.mocap)

    def observation_scale(self, data: TrajectoryData) -> jax.Array:
        """(O,) typical spread of each observation dimension over the data.

        The state scale of the observed state dimensions; for the motion-capture points the
        standard deviation of each measured coordinate over all samples, floored at its
        noise standard deviation. CSVGD weights its constraint terms with it.
        """
        dims = np.asarray(self.observed_dims, dtype=int)
        o = data.observations.shape[-1]
        points = data.observations.reshape(-1, o)[:, len(dims):]
        spread = jnp.maximum(jnp.std(points, axis=0), data.noise_std[len(dims):])
        return jnp.concatenate([data.state_scale[dims], spread])

    def window_length(self, num_steps: int) -> int:
        """H = T / W (checked by `make_trajectory_data` / `check_data`)."""
        return num_steps // self.num_windows

    def shooting_shape(self, data: TrajectoryData) -> tuple[int, int, int]:
        """(K, W - 1, S): shape of one particle's shooting states."""
        return (data.num_trajectories, self.num_windows - 1, self.state_dim)

    def num_constraints(self, data: TrajectoryData) -> int:
        """C = K (W - 1) S defects per particle."""
        k, w, s = self.shooting_shape(data)
        return k * w * s

    def check_data(self, data: TrajectoryData) -> None:
        """Raise ValueError (before any compilation) if `data` does not fit these settings."""
        k, t, nv = data.controls.shape
        if nv != self.model.nv:
            raise ValueError(f'likelihood: controls have {nv} joints, model '
                             f'{self.model.name!r} has {self.model.nv}')
        if data.x0.shape != (k, self.state_dim):
            raise ValueError(f'likelihood: x0: expected shape {(k, self.state_dim)}, got '
                             f'{tuple(data.x0.shape)}')
        obs = self.observation_dim
        what = _observation_layout(self)
        if data.observations.shape != (k, t + 1, obs):
            raise ValueError(f'likelihood: observations: expected shape {(k, t + 1, obs)} '
                             f'(K, T + 1, {what}), got {tuple(data.observations.shape)}')
        if data.noise_std.shape != (obs,):
            raise ValueError(f'likelihood: noise_std: expected shape {(obs,)}, got '
                             f'{tuple(data.noise_std.shape)}')
        if self.mocap and data.states is None and self.num_windows > 1:
            raise ValueError('likelihood: a motion-capture likelihood with several shooting '
                             'windows needs the measured states (TrajectoryData.states) to '
                             'start its shooting states on; build the data with '
                             'make_trajectory_data')
        if data.states is not None and data.states.shape != (k, t + 1, self.state_dim):
            raise ValueError(f'likelihood: states: expected shape {(k, t + 1, self.state_dim)}'
                             f', got {tuple(data.states.shape)}')
        if t % self.num_windows:
            raise ValueError(f'likelihood: num_windows={self.num_windows} does not divide the '
                             f'{t} steps of each trajectory; choose a divisor of {t}')


def make_shooting_likelihood(model: RobotModel, dt: float, num_windows: int = 1,
                             combine: str = 'sum', observed: Sequence[int] | None = None,
                             integrator='semi_implicit_euler', actuator='viscous',
                             substeps: int = 1, mocap=None,
                             start: str = 'measured') -> ShootingLikelihood:
    """Build and validate a `ShootingLikelihood` (see the module doc).

    Args:
      model: static tree.
      dt: control period [s].
      num_windows: W shooting windows per trajectory.
      combine: 'sum' or 'product' over trajectories.
      observed: observed state dimensions (default: all without mocap, none with it).
      integrator, actuator, substeps: simulator settings, see `integrators.rollout`.
      mocap: tracked frames whose motion-capture points are observed after the state
        dimensions (link names, body indices, `observations.MocapFrame`s or (body, offset
        (6,)) pairs; see `observations.make_mocap_frames`), or None.
      start: 'measured' or 'profiled' start of window 0 (module doc).

    Raises:
      ValueError: unknown combine, integrator, actuator or start; dt <= 0; num_windows < 1;
        substeps < 1; observed indices outside [0, 2 nv) or repeated; an invalid tracked
        frame; a profiled start with several windows.
    """
    if combine not in COMBINE:
        raise ValueError(f'likelihood: combine: expected one of {" | ".join(COMBINE)}, '
                         f'got {combine!r}')
    if start not in STARTS:
        raise ValueError(f'likelihood: start: expected one of {" | ".join(STARTS)}, '
                         f'got {start!r}')
    if start == 'profiled' and num_windows != 1:
        raise ValueError(f'likelihood: start: profiled needs single shooting (num_windows '
                         f'1), got num_windows={num_windows!r}')
    if not float(dt) > 0.0:
        raise ValueError(f'likelihood: dt: expected > 0, got {dt!r}')
    if int(num_windows) != num_windows or num_windows < 1:
        raise ValueError(f'likelihood: num_windows: expected int >= 1, got {num_windows!r}')
    if int(substeps) != substeps or substeps < 1:
        raise ValueError(f'likelihood: substeps: expected int >= 1, got {substeps!r}')
    integrators.get_integrator(integrator)
    actuators.get_actuator(actuator)
    state_dim = 2 * model.nv
    observed = tuple(int(i) for i in (observed if observed is not None else ()))
    if any(not 0 <= i < state_dim for i in observed) or len(set(observed)) != len(observed):
        raise ValueError(f'likelihood: observed: expected distinct indices in [0, {state_dim}),'
                         f' got {observed}')
    frames = ()
    if mocap is not None:
        frames = observations.make_mocap_frames(model, mocap)
    return ShootingLikelihood(model=model, dt=float(dt), num_windows=int(num_windows),
                              combine=combine, observed=observed, integrator=integrator,
                              actuator=actuator, substeps=int(substeps), mocap=frames,
                              start=start)


def make_trajectory_data(likelihood: ShootingLikelihood, states, controls, noise_std,
                         observations=None) -> TrajectoryData:
    """Stack and validate measured trajectories (NumPy, on the host, before any compilation).

    Args:
      likelihood: the settings the data is for (model size, observation model, windows).
      states: (K, T + 1, S) measured states [q; qd] or a sequence of K such (T + 1, S)
        arrays; x0 is the first sample, the normalisation the mean/std over all samples. A
        motion-capture likelihood also starts its shooting states on them.
      controls: (K, T, nv) commands, or a sequence of (T, nv) arrays.
      noise_std: scalar or (O,) observation noise standard deviation per observation
        dimension (the observed state dimensions, then 12 per tracked frame [m]).
      observations: (K, T + 1, O) observations (or a sequence of (T + 1, O) arrays): the
        observed state dimensions, then the motion-capture points [m] of each tracked frame
        (`observations.pose_points` of measured poses); None to take `states[..., observed]`
        where no frame is tracked.

    Returns:
      TrajectoryData.

    Raises:
      ValueError: naming the problem: no trajectory, trajectories of unequal length or
        dimension, NaN/inf in the data, noise_std <= 0, a window count that does not
        divide T, or no observations for a motion-capture likelihood.
    """
    def stack(arrays, what):
        if isinstance(arrays, np.ndarray) or hasattr(arrays, 'shape'):
            out = np.asarray(arrays, dtype=float)
            if out.ndim == 2:
                out = out[None]
            return out
        arrays = [np.asarray(a, dtype=float) for a in arrays]
        if not arrays:
            raise ValueError(f'trajectory data: {what}: no trajectory given')
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f'trajectory data: {what}: trajectories of unequal length or '
                             f'dimension: {sorted(shapes)}')
        return np.stack(arrays)

    states = stack(states, 'states')
    controls = stack(controls, 'controls')
    model = likelihood.model
    s = likelihood.state_dim
    if states.ndim != 3 or states.shape[0] == 0 or states.shape[2] != s:
        raise ValueError(f'trajectory data: states: expected (K, T + 1, {s}) for the '
                         f'{model.nv} joints of {model.name!r}, got {states.shape}')
    k, t1 = states.shape[:2]
    if controls.shape != (k, t1 - 1, model.nv):
        raise ValueError(f'trajectory data: controls: expected {(k, t1 - 1, model.nv)} '
                         f'(K, T, nv), got {controls.shape}')
    if t1 < 2:
        raise ValueError('trajectory data: need at least one control step per trajectory')
    dims = list(likelihood.observed_dims)
    num_obs = likelihood.observation_dim
    if observations is None:
        if likelihood.mocap:
            raise ValueError(f'trajectory data: observations: a motion-capture likelihood '
                             f'needs the measured observations (K, T + 1, {num_obs}): '
                             f'{_observation_layout(likelihood)}; got None')
        observations = states[..., dims]
    else:
        observations = stack(observations, 'observations')
    if observations.shape != (k, t1, num_obs):
        raise ValueError(f'trajectory data: observations: expected {(k, t1, num_obs)} '
                         f'({_observation_layout(likelihood)}), got {observations.shape}')
    for name, array in (('states', states), ('controls', controls),
                        ('observations', observations)):
        if not np.all(np.isfinite(array)):
            bad = np.argwhere(~np.isfinite(array))[0]
            raise ValueError(f'trajectory data: {name} holds NaN or inf (first at index '
                             f'{tuple(int(i) for i in bad)})')
    try:
        noise = np.broadcast_to(np.asarray(noise_std, dtype=float), (num_obs,)).copy()
    except ValueError:
        raise ValueError(f'trajectory data: noise_std: expected a number or {num_obs} numbers '
                         f'(one per observation dimension), got shape '
                         f'{np.shape(noise_std)}') from None
    if not np.all(np.isfinite(noise) & (noise > 0.0)):
        raise ValueError(f'trajectory data: noise_std: expected > 0 per observed dimension, '
                         f'got {noise}')
    if (t1 - 1) % likelihood.num_windows:
        raise ValueError(f'trajectory data: num_windows={likelihood.num_windows} does not '
                         f'divide the {t1 - 1} steps of each trajectory')
    flat = states.reshape(-1, s)
    mean = flat.mean(axis=0)
    scale = losses.floored_state_scale(flat.std(axis=0), model.nv)
    return TrajectoryData(x0=jnp.asarray(states[:, 0]), controls=jnp.asarray(controls),
                          observations=jnp.asarray(observations), noise_std=jnp.asarray(noise),
                          state_mean=jnp.asarray(mean), state_scale=jnp.asarray(scale),
                          states=jnp.asarray(states))


@functools.singledispatch
def select_trajectories(data: TrajectoryData, index) -> TrajectoryData:
    """The trajectories `index` (B,) of `data` (a mini-batch); the noise and the state
    normalisation stay those of the whole set."""
    return data._replace(x0=data.x0[index], controls=data.controls[index],
                         observations=data.observations[index],
                         states=None if data.states is None else data.states[index])


@functools.singledispatch
def initial_shooting_states(likelihood: ShootingLikelihood, data: TrajectoryData) -> jax.Array:
    """(K, W - 1, S) shooting states at the measured data.

    Without motion capture: the observation at the start of each window where the dimension
    is observed, the state mean elsewhere. With motion capture: the measured states
    `data.states` at the start of each window, or the state mean where the data carries none.
    """
    k, w1, s = likelihood.shooting_shape(data)
    h = likelihood.window_length(data.num_steps)
    index = h * np.arange(1, w1 + 1)
    mean = jnp.broadcast_to(data.state_mean, (k, w1, s))
    if likelihood.mocap:
        return mean if data.states is None else data.states[:, index]
    starts = data.observations[:, index]                                 # (K, W - 1, O)
    return mean.at[..., np.asarray(likelihood.observed_dims, dtype=int)].set(starts)


@functools.singledispatch
def log_likelihood(likelihood: ShootingLikelihood, params: Params, shooting: jax.Array,
                   data: TrajectoryData, profile: profiled_start.StartProfile | None = None
                   ) -> LikelihoodTerms:
    """Multiple-shooting log-likelihood of the trajectory set for one parameter vector.

    Args:
      likelihood: settings.
      params: physical parameters.
      shooting: (K, W - 1, S) shooting states in physical units (empty for W = 1).
      data: the measured trajectories.
      profile: with `start: profiled`, a carried `profiled_start.StartProfile` of this data
        (from `profiled_start.refresh_start_profile`): the profile by one Gauss-Newton step
        with its Jacobian instead of a fit from the measured start.

    Returns:
      LikelihoodTerms (log_lik, per_trajectory, normalised defects, the profile moved by
      its step). NaN/inf where the simulation diverged.
    """
    if profile is not None and likelihood.start == 'profiled':
        return _carried_profile(likelihood, params, data, profile)
    x0 = data.x0
    if likelihood.start == 'profiled':
        # Fitted at constant parameters: no derivative is traced through the fit.
        x0 = profiled_start.fit_window_starts(likelihood, jax.lax.stop_gradient(params),
                                              data, profiled_start.PROFILE_ITERATIONS)
    windows = simulate_windows(likelihood, params, x0, shooting, data.controls)
    predicted = observe(likelihood, params, predicted_trajectories(windows))
    residual = (predicted - data.observations) / data.noise_std
    log_norm = _trajectory_log_normaliser(data)
    per_trajectory = -0.5 * jnp.sum(jnp.square(residual), axis=(1, 2)) - log_norm
    log_lik = combine_trajectories(likelihood, per_trajectory)
    defects = (windows[:, :-1, -1] - shooting) / data.state_scale
    return LikelihoodTerms(log_lik=log_lik, per_trajectory=per_trajectory, defects=defects)


def _carried_profile(likelihood: ShootingLikelihood, params: Params, data: TrajectoryData,
                     profile: profiled_start.StartProfile) -> LikelihoodTerms:
    """`log_likelihood` of single-shooting windows from a carried profile
    (`profiled_start.carried_residuals`)."""
    k = data.num_trajectories
    projected, moved = profiled_start.carried_residuals(likelihood, params, data, profile)
    per_trajectory = (-0.5 * jnp.sum(jnp.square(projected), axis=1)
                      - _trajectory_log_normaliser(data))
    return LikelihoodTerms(log_lik=combine_trajectories(likelihood, per_trajectory),
                           per_trajectory=per_trajectory,
                           defects=jnp.zeros((k, 0, likelihood.state_dim), projected.dtype),
                           profile=moved)


def combine_trajectories(likelihood, per_trajectory: jax.Array) -> jax.Array:
    """() log-likelihood of the set from its trajectories' (K,) by `likelihood.combine`:
    'product' batch_scale sum_k, 'sum' log(1/K sum_k exp) (module doc)."""
    if likelihood.combine == 'product':
        return likelihood.batch_scale * jnp.sum(per_trajectory)
    return jax.nn.logsumexp(per_trajectory) - jnp.log(per_trajectory.shape[0])


@functools.singledispatch
def residual_noise_std(likelihood: ShootingLikelihood, params: Params, data: TrajectoryData,
                       num_free: int) -> jax.Array:
    """(O,) noise std per observed dimension from the residuals of single-shooting windows
    started at `data.x0`: data.noise_std times the root mean square of the normalised
    residuals, with `num_free` fitted values (parameters and starts) taken from the degrees
    of freedom in proportion to the dimensions."""
    k, num_samples, o = data.observations.shape
    r = window_residuals(likelihood, params, data.x0, data).reshape(k, num_samples, o)
    dof = jnp.maximum(k * num_samples - num_free / o, 1.0)
    return data.noise_std * jnp.sqrt(jnp.sum(jnp.square(r), axis=(0, 1)) / dof)


def _observation_layout(likelihood: ShootingLikelihood) -> str:
    """What the O observation columns hold, for error messages."""
    parts = ([f'{len(likelihood.observed_dims)} observed state dims']
             if likelihood.observed_dims else [])
    if likelihood.mocap:
        parts.append(f'12 per tracked frame x {len(likelihood.mocap)}')
    return ' + '.join(parts)


def _trajectory_log_normaliser(data: TrajectoryData) -> jax.Array:
    """() log normaliser of one trajectory's Gaussian noise: (T + 1) sum_o log(sqrt(2 pi) s_o)."""
    num_samples = data.observations.shape[1]
    return num_samples * jnp.sum(jnp.log(jnp.sqrt(2.0 * jnp.pi) * data.noise_std))


@functools.singledispatch
def residual_normaliser(likelihood: ShootingLikelihood, data: TrajectoryData
                        ) -> tuple[jax.Array, int]:
    """(c, n) with `residual_loss` = -2 (log_lik / batch_scale + c) / n: c the log normaliser
    of the Gaussian noise, n the number of observed values (per trajectory under 'sum')."""
    k, num_samples, num_obs = data.observations.shape
    log_norm = _trajectory_log_normaliser(data)
    if likelihood.combine == 'product':
        return k * log_norm, k * num_samples * num_obs
    return log_norm, num_samples * num_obs


def residual_loss(likelihood: ShootingLikelihood, data: TrajectoryData,
                  log_lik: jax.Array) -> jax.Array:
    """(...,) the mean squared noise-normalised residual ((y_sim - y) / sigma)^2 of
    log-likelihoods (...,): about 1 at the truth when the noise std is right."""
    c, n = residual_normaliser(likelihood, data)
    return -2.0 * (log_lik / likelihood.batch_scale + c) / n
