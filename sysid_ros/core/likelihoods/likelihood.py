"""Single- and multiple-shooting Gaussian likelihoods over a set of trajectories (seed 000).

Data: K trajectories of T control steps each, on one time grid of period dt, with measured
initial states x0 (K, S) (S = 2 nv, x = [q; qd]), commands (K, T, nv) and observations
(K, T + 1, O). The observation model y = h(params, x) stacks

  * state dimensions: joint positions and/or velocities (`ShootingLikelihood.observed`; by
    default all of them without motion capture, none with it);
  * then motion capture (`ShootingLikelihood.mocap`, seed 000 §2.5): for each of F tracked
    body frames the world positions of its origin and of its three axis tips 1 m out, 12 per
    frame (`observations.mocap_points`, through forward kinematics of the predicted q);

so O = len(observed) + 12 F: the seed's box observes the frames only, an arm that holds a
tracked object observes its joint encoders and the object's pose (`observed` and `mocap`).

h is applied to every predicted sample of every trajectory (vmapped).

Multiple shooting (seed 000 §2.3; Bock & Plitt 1984). Each trajectory is cut into W windows
of H = T / W steps. Window 0 starts at the measured x0, window w >= 1 at a free shooting
state s_w, an extra decision variable of the particle (K, W - 1, S). All K W windows are
simulated in one vmapped call of `integrators.rollout`. The predicted trajectory takes the
samples w H .. w H + H - 1 from window w (its start state first) and the last sample from the
end of the last window. The defects d_w = x_end(window w) - s_{w+1}, w = 0 .. W - 2, are the
equality constraints that make the prediction one continuous simulation; they are returned
divided by the per-dimension state scale (seed §1.3) for the constraint solver (`csvgd`).
W = 1 is single shooting (no shooting states, no defects).

Start of window 0 (`ShootingLikelihood.start`): 'measured' starts it at the measured x0;
'profiled' (single shooting only) starts it, for each parameter vector, at the state that
fits the whole window best (`fit_window_starts`, a few Gauss-Newton steps from x0), held
constant under differentiation. A noisy measured start carries its noise through every
predicted sample, which biases the posterior and narrows it (errors in variables); the
profiled start removes that. Its gradient is exact by the envelope theorem (the residual is
stationary in the start at the fitted one), and the profile stands in for the marginal over
the start (their difference, the log determinant of the start's Gauss-Newton Hessian, varies
little with the parameters).

A profiled start carried from step to step (`StartProfile`; `csvgd` carries one per
particle): fitting the start costs a forward-mode Jacobian in every step, more than the
step's own simulation and gradient. An estimator whose particles move little from step to
step instead keeps each window's fitted start s and the Jacobian J of the residuals r with
respect to the start from its last refresh (`refresh_start_profile`: Gauss-Newton from the
measured start on new data, one step from the carried start every PROFILE_REFRESH steps),
and `log_likelihood(..., profile=)` takes the Gauss-Newton step with that J inside the one
simulation from s that the likelihood runs anyway (variable projection with a frozen
Jacobian, Golub & Pereyra 1973):

  delta = -(J^T J)^-1 J^T r(theta, s),   r_p = r + J delta = (I - J (J^T J)^-1 J^T) r,

the log-likelihood from r_p (the residual at the start s + delta to first order) and the
carried start moved to s + delta (a chord step). Its gradient is the envelope gradient of the
linearised profile, 2 (dr / dtheta)^T r_p. Replayed along the particles of a live session
(double pendulum, 16 particles, noise 0.002), after 30 steps on a window the start sat within
0.1 of its posterior std of the fully converged profile, the squared-residual sum within
0.013 of it and the gradient within 0.2 %; two Gauss-Newton steps from the measured start:
0.04, 0.002.

Likelihood of one trajectory k: independent Gaussian observation noise with a standard
deviation per observed dimension,

  log p_k = -1/2 sum_{t, o} ((y_sim[t, o] - y[t, o]) / sigma_o)^2
            - (T + 1) sum_o log(sqrt(2 pi) sigma_o).

Over the set (seed §1.2): 'product' (the trajectories are independent draws of one
parameter vector) log p = sum_k log p_k; 'sum' (an equally weighted mixture: the trajectories
may come from different parameters) log p = log(1/K sum_k p_k), a log-sum-exp.

Normalisation (seed §1.3): shooting states are optimised in normalised units
s = state_mean + state_scale * s_hat, with the mean and standard deviation of each measured
state dimension (the seed writes w_i / sigma_i^2; dividing by the standard deviation is what
makes the dimensions unitless and comparable, so that is what is done here); residuals are
normalised by the noise standard deviations.

Initial shooting states (`initial_shooting_states`): the measured data at the start of each
window. Without motion capture, the observation where a dimension is observed and the state
mean elsewhere. With motion capture, which observes the state through forward kinematics
(beside the observed dimensions, if any), they are taken from the measured states passed to
`make_trajectory_data` (kept in `TrajectoryData.states`: joint encoders, with the angles of
unactuated joints reconstructed from the tracked frames).

The estimators read every likelihood through this module: `select_trajectories` (by the type
of its data), `initial_shooting_states`, `log_likelihood`, `window_residuals`,
`fit_window_starts`, `residual_noise_std` and `residual_normaliser` (by the type of the
setting) are generic functions (`functools.singledispatch`), and the equation-error
likelihood (`equation_error`) registers its own for its setting and data, so every method
runs on either.
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
from sysid_ros.core.likelihoods import losses
from sysid_ros.core.dynamics import observations
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'COMBINE',
    'STARTS',
    'TrajectoryData',
    'LikelihoodTerms',
    'StartProfile',
    'ShootingLikelihood',
    'make_trajectory_data',
    'select_trajectories',
    'make_shooting_likelihood',
    'initial_shooting_states',
    'simulate_windows',
    'predicted_trajectories',
    'observe',
    'log_likelihood',
    'combine_trajectories',
    'window_residuals',
    'fit_window_starts',
    'start_profile',
    'profile_due',
    'refresh_start_profile',
    'residual_noise_std',
    'residual_normaliser',
    'residual_loss',
]

COMBINE = ('sum', 'product')
STARTS = ('measured', 'profiled')
# Gauss-Newton steps of a profiled start from the measured one: the residual is nearly
# linear in the start at noise-sized offsets, so two steps reach it to a small fraction of
# the noise.
PROFILE_ITERATIONS = 2
# Steps of a carried `StartProfile` between refreshes of its Jacobian (module doc): on the
# replayed live windows refreshing every step, every 3, 10 or 30 steps ended each window
# within 0.1 posterior stds of the converged start alike; 10 bounds the drift of the
# Jacobian while the particles still move early in a window.
PROFILE_REFRESH = 10


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
      profile: the carried `StartProfile` after this evaluation (its start moved by the
        chord step), or None when none was given.
    """

    log_lik: jax.Array
    per_trajectory: jax.Array
    defects: jax.Array
    profile: 'StartProfile | None' = None


class StartProfile(NamedTuple):
    """A profiled start carried between steps of an estimator (module doc).

    Attributes:
      x0: (K, S) measured starts of the data it was fitted on (NaN: not fitted yet).
      starts: (K, S) fitted start of each window [q; qd].
      jacobian: (K, N, S) Jacobian of the window's noise-normalised residuals (N = (T + 1)
        O, `window_residuals`) with respect to its start, at the last refresh.
      age: () int, evaluations since the last refresh.
    """

    x0: jax.Array
    starts: jax.Array
    jacobian: jax.Array
    age: jax.Array


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
        noise standard deviation. `csvgd` weights its constraint terms with it.
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


def simulate_windows(likelihood: ShootingLikelihood, params: Params, x0: jax.Array,
                     shooting: jax.Array, controls: jax.Array) -> jax.Array:
    """All K W shooting windows in one vmapped rollout.

    Args:
      likelihood: settings.
      params: physical parameters (one particle).
      x0: (K, S) start of window 0 of each trajectory.
      shooting: (K, W - 1, S) start states of windows 1 .. W - 1.
      controls: (K, T, nv) commands.

    Returns:
      (K, W, H + 1, S) states of each window, its start state first.
    """
    k, t, nv = controls.shape
    w = likelihood.num_windows
    h = t // w
    s = x0.shape[-1]
    starts = jnp.concatenate([x0[:, None].astype(shooting.dtype), shooting], axis=1)

    def simulate(start, window_controls):
        return integrators.rollout(likelihood.model, params, start, window_controls,
                                   likelihood.dt, integrator=likelihood.integrator,
                                   actuator=likelihood.actuator, substeps=likelihood.substeps)

    states = jax.vmap(simulate)(starts.reshape(k * w, s), controls.reshape(k * w, h, nv))
    return states.reshape(k, w, h + 1, s)


def predicted_trajectories(windows: jax.Array) -> jax.Array:
    """(K, W, H + 1, S) window states -> (K, T + 1, S) predicted trajectory (module doc)."""
    k, w, h1, s = windows.shape
    body = windows[:, :, :-1].reshape(k, w * (h1 - 1), s)
    return jnp.concatenate([body, windows[:, -1, -1:]], axis=1)


def observe(likelihood: ShootingLikelihood, params: Params, states: jax.Array) -> jax.Array:
    """The observation model applied to states.

    Args:
      likelihood: settings (observation model).
      params: physical parameters (forward kinematics of the motion-capture model).
      states: (..., S) states [q; qd].

    Returns:
      (..., O) observations: the observed state dimensions, then the motion-capture points
      [m] of every tracked frame (`observations.mocap_trajectory`).
    """
    observed = states[..., np.asarray(likelihood.observed_dims, dtype=int)]
    if not likelihood.mocap:
        return observed
    points = observations.mocap_trajectory(likelihood.model, params, states, likelihood.mocap)
    return jnp.concatenate([observed.astype(points.dtype), points], axis=-1)


@functools.singledispatch
def log_likelihood(likelihood: ShootingLikelihood, params: Params, shooting: jax.Array,
                   data: TrajectoryData, profile: StartProfile | None = None
                   ) -> LikelihoodTerms:
    """Multiple-shooting log-likelihood of the trajectory set for one parameter vector.

    Args:
      likelihood: settings.
      params: physical parameters.
      shooting: (K, W - 1, S) shooting states in physical units (empty for W = 1).
      data: the measured trajectories.
      profile: with `start: profiled`, a carried `StartProfile` of this data (from
        `refresh_start_profile`): the profile by one Gauss-Newton step with its Jacobian
        (module doc) instead of a fit from the measured start.

    Returns:
      LikelihoodTerms (log_lik, per_trajectory, normalised defects, the profile moved by
      its step). NaN/inf where the simulation diverged.
    """
    if profile is not None and likelihood.start == 'profiled':
        return _carried_profile(likelihood, params, data, profile)
    x0 = data.x0
    if likelihood.start == 'profiled':
        # Fitted at constant parameters: no derivative is traced through the fit.
        x0 = fit_window_starts(likelihood, jax.lax.stop_gradient(params), data,
                               PROFILE_ITERATIONS)
    windows = simulate_windows(likelihood, params, x0, shooting, data.controls)
    predicted = observe(likelihood, params, predicted_trajectories(windows))
    residual = (predicted - data.observations) / data.noise_std
    log_norm = _trajectory_log_normaliser(data)
    per_trajectory = -0.5 * jnp.sum(jnp.square(residual), axis=(1, 2)) - log_norm
    log_lik = combine_trajectories(likelihood, per_trajectory)
    defects = (windows[:, :-1, -1] - shooting) / data.state_scale
    return LikelihoodTerms(log_lik=log_lik, per_trajectory=per_trajectory, defects=defects)


def _carried_profile(likelihood: ShootingLikelihood, params: Params, data: TrajectoryData,
                     profile: StartProfile) -> LikelihoodTerms:
    """`log_likelihood` of single-shooting windows from a carried profile (module doc)."""
    k = data.num_trajectories
    residual = window_residuals(likelihood, params, profile.starts, data)       # (K, N)
    jac = profile.jacobian                                                      # (K, N, S)
    delta = jax.vmap(_gauss_newton_step)(jac, residual)                         # (K, S)
    projected = residual + jnp.einsum('kni,ki->kn', jac, delta)
    per_trajectory = (-0.5 * jnp.sum(jnp.square(projected), axis=1)
                      - _trajectory_log_normaliser(data))
    moved = profile.starts + jax.lax.stop_gradient(delta)
    moved = jnp.where(jnp.isfinite(moved), moved, profile.starts)
    return LikelihoodTerms(log_lik=combine_trajectories(likelihood, per_trajectory),
                           per_trajectory=per_trajectory,
                           defects=jnp.zeros((k, 0, likelihood.state_dim), residual.dtype),
                           profile=profile._replace(starts=moved, age=profile.age + 1))


def combine_trajectories(likelihood, per_trajectory: jax.Array) -> jax.Array:
    """() log-likelihood of the set from its trajectories' (K,) by `likelihood.combine`:
    'product' batch_scale sum_k, 'sum' log(1/K sum_k exp) (module doc)."""
    if likelihood.combine == 'product':
        return likelihood.batch_scale * jnp.sum(per_trajectory)
    return jax.nn.logsumexp(per_trajectory) - jnp.log(per_trajectory.shape[0])


@functools.singledispatch
def window_residuals(likelihood: ShootingLikelihood, params: Params, starts: jax.Array,
                     data: TrajectoryData) -> jax.Array:
    """(K, (T + 1) O) noise-normalised residuals (y_sim - y) / sigma of single-shooting
    windows (W = 1), window k simulated from the start state `starts[k]` (K, S) (a free
    variable of the Gauss-Newton methods, `inference.levenberg_marquardt`; `data.x0` is the
    measured one), every sample in time order, the start's first; NaN/inf where a
    simulation diverged."""
    k = data.num_trajectories
    windows = simulate_windows(likelihood, params, starts,
                               jnp.zeros((k, 0, starts.shape[-1]), starts.dtype), data.controls)
    predicted = observe(likelihood, params, windows[:, 0])
    return ((predicted - data.observations) / data.noise_std).reshape(k, -1)


@functools.singledispatch
def fit_window_starts(likelihood: ShootingLikelihood, params: Params, data: TrajectoryData,
                      iterations: int = 5) -> jax.Array:
    """(K, S) start states of single-shooting windows fitted to their whole windows at
    fixed `params`: Gauss-Newton on `window_residuals` from the measured `data.x0`, each
    window on its own (S x S normal equations, Jacobian by forward mode).

    A window that starts at its noisy measured state carries that noise through every
    predicted sample, which biases a fit and narrows its posterior (errors in variables);
    the fitted start uses the whole window, so its error is a fraction of the noise."""
    return _fitted_starts(likelihood, params, data, data.x0, iterations)[0]


def _fitted_starts(likelihood: ShootingLikelihood, params: Params, data: TrajectoryData,
                   guess: jax.Array, iterations) -> tuple[jax.Array, jax.Array]:
    """((K, S) starts, (K, N, S) Jacobians of the last step) of `iterations` Gauss-Newton
    steps on each single-shooting window's `window_residuals`, from `guess` (K, S)."""
    def residual(start, controls, observations):
        one = data._replace(x0=start[None], controls=controls[None],
                            observations=observations[None], states=None)
        return window_residuals(likelihood, params, start[None], one)[0]

    def refine(start, controls, observations):
        return _gauss_newton(functools.partial(residual, controls=controls,
                                               observations=observations), start, iterations)

    return jax.vmap(refine)(guess, data.controls, data.observations)


def _gauss_newton_step(jac: jax.Array, residual: jax.Array) -> jax.Array:
    """(S,) Gauss-Newton step -(J^T J)^-1 J^T r for a Jacobian (N, S) and residuals (N,),
    the normal matrix regularised by 1e-12 of its trace."""
    normal = jac.T @ jac
    normal = normal + 1e-12 * jnp.trace(normal) * jnp.eye(normal.shape[0], dtype=normal.dtype)
    return -jnp.linalg.solve(normal, jac.T @ residual)


def _gauss_newton(residual, start: jax.Array, iterations) -> tuple[jax.Array, jax.Array]:
    """(start (S,), Jacobian (N, S) at the last iterate before it) after `iterations` (an
    int or a traced one >= 1) Gauss-Newton steps on `residual(start) -> (N,)`; a step to a
    non-finite start keeps the start."""
    def with_value(x):
        r = residual(x)
        return r, r

    def step(_, carry):
        x, _ = carry
        jac, r = jax.jacfwd(with_value, has_aux=True)(x)
        new = x + _gauss_newton_step(jac, r)
        return jnp.where(jnp.all(jnp.isfinite(new)), new, x), jac

    size = jax.eval_shape(residual, start).shape[0]
    jac0 = jnp.zeros((size, start.shape[0]), start.dtype)
    return jax.lax.fori_loop(0, iterations, step, (start, jac0))


def start_profile(likelihood: ShootingLikelihood, data: TrajectoryData) -> StartProfile:
    """An empty `StartProfile` for data shaped like `data` (fitted by the first
    `refresh_start_profile`)."""
    k, s = data.num_trajectories, likelihood.state_dim
    n = data.observations.shape[1] * data.observations.shape[2]
    nan = jnp.full((k, s), jnp.nan, data.x0.dtype)
    return StartProfile(x0=nan, starts=jnp.zeros((k, s), data.x0.dtype),
                        jacobian=jnp.zeros((k, n, s), data.x0.dtype),
                        age=jnp.zeros((), jnp.int32))


def profile_due(profile: StartProfile, data: TrajectoryData) -> jax.Array:
    """() bool: profiles (StartProfile, or a batch of them with a leading particle axis) that
    `refresh_start_profile` must refit: fitted on other data, or PROFILE_REFRESH evaluations
    old."""
    other = jnp.any(profile.x0 != data.x0)
    return other | jnp.any(profile.age >= PROFILE_REFRESH)


def refresh_start_profile(likelihood: ShootingLikelihood, params: Params, data: TrajectoryData,
                          profile: StartProfile) -> StartProfile:
    """`profile` refitted at `params` (module doc): on new data PROFILE_ITERATIONS
    Gauss-Newton steps from the measured starts, else one from the carried starts; the
    Jacobian that the last step used, age 0."""
    same = jnp.all(profile.x0 == data.x0)
    guess = jnp.where(same, profile.starts, data.x0)
    iterations = jnp.where(same, 1, PROFILE_ITERATIONS)
    starts, jacobian = _fitted_starts(likelihood, params, data, guess, iterations)
    return StartProfile(x0=data.x0, starts=starts, jacobian=jacobian,
                        age=jnp.zeros((), jnp.int32))


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
