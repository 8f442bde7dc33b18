"""Equation-error likelihood: joint-torque residuals through inverse dynamics.

Model. With an additive actuator model (`dynamics.control.ADDITIVE_ACTUATORS`) the command
that moves the joints along (q, qd, qdd) is

    u = RNEA(q, qd, qdd; params) + k |RNEA| sgn(qd) + f(q, qd; params),
    f = -actuator(q, qd, u = 0) without the load-dependent friction

(RNEA with the armature, k = `params.load_coulomb` the load-dependent friction of
`dynamics.actuators`, f the friction and offset torques, divided by the gain where one is
identified). The residual r = tau - u of the measured command is Gaussian, independent over
the kept samples, with a standard deviation sigma_j per joint; for one piece k of N samples

    log p_k = -1/2 sum_{n, j} (r_knj / sigma_j)^2 - N sum_j log(sqrt(2 pi) sigma_j),

combined over the K pieces as the shooting likelihood combines its trajectories ('product'
or 'sum', `likelihood.combine_trajectories`). Nothing is simulated: a step costs one RNEA
per kept sample, and u is linear in the inertial parameters and friction coefficients (but
for k |RNEA|).

Causal filter (`filter_samples`; Savitzky & Golay 1964). q, qd and tau go through one causal
FIR of L = 2 D + 1 taps, the least-squares cubic through the last L samples read at their
middle sample: its value smooths q, qd and tau, its slope through the measured velocities
gives the unmeasured qdd (exact for polynomials of degree 4). The model's u is filtered like
tau: RNEA, smooth in the states, at the filtered q, qd, qdd, and f as the value filter of f at
the L measured samples, since Coulomb friction's sign jumps at a velocity reversal, where the
filtered torque ramps over the window and f at the filtered velocity would jump (that
mismatch biased viscous friction up and Coulomb friction down by several of their stds). The
output at t_k uses samples up to t_k only and estimates every signal at t_{k - D} (one delay
for all, so q, qd, qdd and tau stay aligned). tau[k] is held from t_k to t_{k+1}, so the
torque at the instant t_k is (tau[k-1] + tau[k]) / 2. The first L - 1 samples of a
trajectory only fill the filter.

Timing (`TorqueData.timing_std`). Torques and joint states offset in time by delta give
tau(t + delta) ~ tau(t) + delta tau'(t). Each piece k carries an unknown offset
delta_k ~ N(0, s_t^2), marginalised: its residuals have the covariance
diag(sigma^2) + s_t^2 v_k v_k^T, v_k the piece's torque rates tau' (the filter's slope of the
torque) stacked over samples and joints. With r~ and v~ divided by sigma
(Sherman-Morrison),

    log p_k = -1/2 (|r~|^2 - s_t^2 (v~^T r~)^2 / (1 + s_t^2 |v~|^2))
              - 1/2 log(1 + s_t^2 |v~|^2) - N sum_j log(sqrt(2 pi) sigma_j),

and the whitened residual r~ - (1 - 1 / sqrt(1 + s_t^2 |v~|^2)) v~ (v~^T r~) / |v~|^2 has
that squared norm (what Gauss-Newton methods take). s_t = 0 is the white-noise likelihood.

Independence: the filter correlates noise over L samples, so every L-th output is kept; the
kept samples' supports do not overlap and white measurement noise leaves independent
residuals.

Noise (`residual_noise_std`): configured, or the root mean square of each joint's residuals
at a fit (`fit_noise_std`), with M / nv of each joint's samples taken as the M fitted
parameters' degrees of freedom. The root mean square rather than the median absolute
deviation, because the residuals are heavy-tailed (Coulomb friction at velocity reversals).

The estimators see this likelihood through the generic functions of `likelihood`,
`shooting_windows` and `profiled_start`, registered here: a piece has no shooting states,
no start state (both of size 0) and no defects, so every estimator runs on it unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import actuators, rigid_body
from sysid_ros.core.dynamics.control import ADDITIVE_ACTUATORS
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import profiled_start, shooting_windows
from sysid_ros.core.model.parameters import ParameterSpec
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'RESIDUALS',
    'MIN_TAPS',
    'NOISE_FIT_ITERATIONS',
    'EquationErrorLikelihood',
    'TorqueData',
    'make_equation_error_likelihood',
    'savitzky_golay_kernels',
    'filter_samples',
    'make_torque_data',
    'torque_residuals',
    'whitened_residuals',
    'residual_noise_std',
    'fit_noise_std',
]

# The two likelihood families (`estimator.residual`).
RESIDUALS = ('output_error', 'equation_error')
# Fewest filter taps: a cubic through 5 samples.
MIN_TAPS = 5
# Gauss-Newton steps of the fit whose residuals give the noise std (`fit_noise_std`).
NOISE_FIT_ITERATIONS = 3


@dataclasses.dataclass(frozen=True)
class EquationErrorLikelihood:
    """Settings of the equation-error likelihood (static, hashable).

    Attributes:
      model: static tree.
      actuator: additive actuator model (name or callable), see `actuators.get_actuator`.
      combine: 'sum' (mixture over pieces) or 'product' (independent pieces).
      batch_scale: K / B when a step sees a mini-batch of B of the K pieces, as in
        `likelihood.ShootingLikelihood`.
    """

    model: RobotModel
    actuator: object = 'viscous'
    combine: str = 'product'
    batch_scale: float = 1.0

    @property
    def num_windows(self) -> int:
        """One block per piece (no shooting windows)."""
        return 1

    def shooting_shape(self, data: TorqueData) -> tuple[int, int, int]:
        """(K, 0, 0): no shooting states."""
        return (data.num_trajectories, 0, 0)

    def num_constraints(self, data: TorqueData) -> int:
        """No defects."""
        return 0

    def window_length(self, num_steps: int) -> int:
        """The piece is the one block: its N samples."""
        return num_steps

    def observation_scale(self, data: TorqueData) -> jax.Array:
        """(nv,) spread of each joint's filtered torque, floored at its noise std."""
        return jnp.maximum(jnp.std(data.tau.reshape(-1, self.model.nv), axis=0),
                           data.noise_std)

    def check_data(self, data: TorqueData) -> None:
        """Raise ValueError (before any compilation) if `data` does not fit the model."""
        nv = self.model.nv
        for name in ('q', 'qd', 'qdd', 'tau', 'tau_rate'):
            shape = getattr(data, name).shape
            if len(shape) != 3 or shape[2] != nv or shape != data.tau.shape:
                raise ValueError(f'equation error: {name}: expected (K, N, {nv}) like tau '
                                 f'{tuple(data.tau.shape)}, got {tuple(shape)}')
        taps = data.tau.shape[:2] + data.smooth.shape + (nv,)
        for name in ('q_taps', 'qd_taps'):
            shape = getattr(data, name).shape
            if shape != taps:
                raise ValueError(f'equation error: {name}: expected (K, N, L, nv) = {taps}, '
                                 f'got {tuple(shape)}')
        if data.noise_std.shape != (nv,):
            raise ValueError(f'equation error: noise_std: expected shape {(nv,)}, got '
                             f'{tuple(data.noise_std.shape)}')


class TorqueData(NamedTuple):
    """K pieces of N filtered, kept samples (build with `make_torque_data`).

    Attributes:
      q, qd, qdd: (K, N, nv) joint positions [rad, m], velocities, accelerations.
      tau: (K, N, nv) measured commands at the same instants [N m, N].
      noise_std: (nv,) residual noise std per joint [N m, N].
      x0: (K, 0) start states of the pieces: none (lm fits a start per block).
      tau_rate: (K, N, nv) the torques' rates at the same instants [N m/s, N/s].
      timing_std: () std of each piece's offset between torques and states [s] (module
        doc; 0: none).
      q_taps, qd_taps: (K, N, L, nv) the measured positions and velocities that each kept
        sample was filtered from, oldest first.
      smooth: (L,) the value filter's weights [-] (`savitzky_golay_kernels` row 0).
    """

    q: jax.Array
    qd: jax.Array
    qdd: jax.Array
    tau: jax.Array
    noise_std: jax.Array
    x0: jax.Array
    tau_rate: jax.Array
    timing_std: jax.Array
    q_taps: jax.Array
    qd_taps: jax.Array
    smooth: jax.Array

    @property
    def num_trajectories(self) -> int:
        return int(self.tau.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.tau.shape[1])

    @property
    def state_mean(self) -> jax.Array:
        """(0,): the shooting states' normalisation, empty."""
        return jnp.zeros((0,), self.tau.dtype)

    @property
    def state_scale(self) -> jax.Array:
        """(0,): the shooting states' normalisation, empty."""
        return jnp.ones((0,), self.tau.dtype)


def make_equation_error_likelihood(model: RobotModel, actuator='viscous',
                                   combine: str = 'product') -> EquationErrorLikelihood:
    """Build and validate an `EquationErrorLikelihood`.

    Raises:
      ValueError: an actuator model that is not additive, an unknown combine form.
    """
    if not callable(actuator) and actuator not in ADDITIVE_ACTUATORS:
        raise ValueError(f'equation error: actuator {actuator!r} is not additive; expected '
                         f'one of {sorted(ADDITIVE_ACTUATORS)}')
    actuators.get_actuator(actuator)
    if combine not in lik.COMBINE:
        raise ValueError(f'equation error: combine: expected one of {" | ".join(lik.COMBINE)},'
                         f' got {combine!r}')
    return EquationErrorLikelihood(model=model, actuator=actuator, combine=combine)


def savitzky_golay_kernels(num_taps: int, dt: float) -> np.ndarray:
    """(2, L) causal FIR weights, oldest sample first: the value (row 0, [-]) and the slope
    (row 1, [1/s]) at the middle sample of the least-squares cubic through L samples of
    period dt [s] (module doc).

    Raises:
      ValueError: L even or below MIN_TAPS, dt <= 0.
    """
    if num_taps < MIN_TAPS or num_taps % 2 == 0:
        raise ValueError(f'equation error: filter taps: expected an odd number >= {MIN_TAPS},'
                         f' got {num_taps}')
    if not dt > 0.0:
        raise ValueError(f'equation error: dt: expected > 0, got {dt!r}')
    offsets = (np.arange(num_taps) - num_taps // 2) * dt                  # [s]
    vandermonde = offsets[:, None] ** np.arange(4)
    return np.linalg.pinv(vandermonde)[:2]


def _fir(signal: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(T - L + 1, D): output k of the causal FIR `weights` (L,) over samples k .. k + L - 1
    of `signal` (T, D), oldest first."""
    windows = np.lib.stride_tricks.sliding_window_view(signal, weights.size, axis=0)
    return windows @ weights


def _windows(signal: np.ndarray, num_taps: int) -> np.ndarray:
    """(T - L + 1, L, D): the samples k .. k + L - 1 of `signal` (T, D), oldest first."""
    return np.lib.stride_tricks.sliding_window_view(signal, num_taps, axis=0).swapaxes(1, 2)


def filter_samples(q, qd, tau, dt: float, num_taps: int) -> dict[str, np.ndarray]:
    """Filtered, aligned and thinned samples of one trajectory (module doc).

    Args:
      q, qd: (T, nv) measured joint positions and velocities.
      tau: (T, nv) commands, tau[k] held from t_k to t_{k+1}.
      dt: sample period [s].
      num_taps: L, odd filter length.

    Returns:
      {q, qd, qdd, tau, tau_rate}: (floor((T - L) / L) + 1, nv) each, every L-th filter
      output, all estimates at the instant D = (L - 1) / 2 samples before the newest sample
      they use (tau_rate: the slope through the torques, [N m/s, N/s]), and
      {q_taps, qd_taps}: (floor((T - L) / L) + 1, L, nv) the samples each output used.

    Raises:
      ValueError: as `savitzky_golay_kernels`, or fewer than L samples.
    """
    smooth, slope = savitzky_golay_kernels(num_taps, dt)
    q, qd, tau = (np.asarray(a, dtype=float) for a in (q, qd, tau))
    if q.shape[0] < num_taps:
        raise ValueError(f"equation error: {q.shape[0]} samples, fewer than the filter's "
                         f'{num_taps} taps')
    at_instants = np.concatenate([tau[:1], 0.5 * (tau[1:] + tau[:-1])])
    out = {'q': _fir(q, smooth), 'qd': _fir(qd, smooth), 'qdd': _fir(qd, slope),
           'tau': _fir(at_instants, smooth), 'tau_rate': _fir(at_instants, slope),
           'q_taps': _windows(q, num_taps), 'qd_taps': _windows(qd, num_taps)}
    return {name: value[::num_taps] for name, value in out.items()}


def make_torque_data(setting: EquationErrorLikelihood, q, qd, qdd, tau, tau_rate, q_taps,
                     qd_taps, smooth, noise_std, timing_std: float = 0.0) -> TorqueData:
    """TorqueData of K pieces (K, N, nv) each and their filters' samples (K, N, L, nv)
    (`filter_samples`' arrays), the value filter's weights (L,), the noise std (scalar or
    (nv,)) and the timing std [s] (0: no timing term).

    Raises:
      ValueError: shapes that do not fit the model, NaN/inf, noise_std <= 0, timing_std < 0.
    """
    arrays = [np.asarray(a, dtype=float) for a in (q, qd, qdd, tau, tau_rate, q_taps, qd_taps)]
    nv = setting.model.nv
    try:
        noise = np.broadcast_to(np.asarray(noise_std, dtype=float), (nv,)).copy()
    except ValueError:
        raise ValueError(f'equation error: noise_std: expected a number or {nv} numbers, got '
                         f'shape {np.shape(noise_std)}') from None
    if not np.all(np.isfinite(noise) & (noise > 0.0)):
        raise ValueError(f'equation error: noise_std: expected > 0 per joint, got {noise}')
    if not timing_std >= 0.0:
        raise ValueError(f'equation error: timing_std: expected >= 0, got {timing_std!r}')
    for name, array in zip(('q', 'qd', 'qdd', 'tau', 'tau_rate', 'q_taps', 'qd_taps'), arrays):
        if not np.all(np.isfinite(array)):
            raise ValueError(f'equation error: {name} holds NaN or inf')
    q, qd, qdd, tau, tau_rate, q_taps, qd_taps = (jnp.asarray(a) for a in arrays)
    data = TorqueData(q, qd, qdd, tau, noise_std=jnp.asarray(noise),
                      x0=jnp.zeros((arrays[3].shape[0], 0)), tau_rate=tau_rate,
                      timing_std=jnp.asarray(float(timing_std)), q_taps=q_taps,
                      qd_taps=qd_taps, smooth=jnp.asarray(np.asarray(smooth, dtype=float)))
    setting.check_data(data)
    return data


def torque_residuals(setting: EquationErrorLikelihood, params: Params, data: TorqueData
                     ) -> jax.Array:
    """(K, N, nv) residuals tau - (RNEA + k |RNEA| sgn(qd) + f(q, qd)) / gain [N m, N], f and
    the sign through the value filter at the measured samples, k the load-dependent friction
    (`actuators`; module doc)."""
    actuator_fn = actuators.get_actuator(setting.actuator)
    model = setting.model
    nv = model.nv
    zero = jnp.zeros(nv, data.tau.dtype)

    def rigid(q, qd, qdd):
        return rigid_body.rnea(model, params, q, qd, qdd)

    unloaded = actuators.without_load_friction(params)

    def passive(q, qd):
        return actuator_fn(model, unloaded, q, qd, zero)

    flat = [a.reshape(-1, nv) for a in (data.q, data.qd, data.qdd)]
    taps = [a.reshape(-1, nv) for a in (data.q_taps, data.qd_taps)]
    at_taps = jax.vmap(passive)(*taps).reshape(data.q_taps.shape)
    filtered = jnp.einsum('l,knlj->knj', data.smooth, at_taps)
    rnea = jax.vmap(rigid)(*flat).reshape(data.tau.shape)
    # Load-dependent friction: k |tau| at the kept sample, its sign filtered at the taps.
    sign = jnp.einsum('l,knlj->knj', data.smooth, actuators.smooth_sign(data.qd_taps))
    load = params.load_coulomb * jnp.abs(rnea) * sign
    return data.tau - (rnea + load - filtered) / params.gain


def residual_noise_std(residuals: jax.Array, num_free: int) -> jax.Array:
    """(nv,) per-joint noise std of residuals (K, N, nv): sqrt(sum r^2 / (n - num_free / nv))
    over the n = K N samples of each joint."""
    nv = residuals.shape[-1]
    r = residuals.reshape(-1, nv)
    dof = max(r.shape[0] - num_free / nv, 1.0)
    return jnp.sqrt(jnp.sum(jnp.square(r), axis=0) / dof)


def fit_noise_std(setting: EquationErrorLikelihood, spec: ParameterSpec, base_params: Params,
                  theta0, data: TorqueData,
                  iterations: int = NOISE_FIT_ITERATIONS) -> tuple[jax.Array, jax.Array]:
    """(noise std (nv,), fitted theta (M,)): `residual_noise_std` of the residuals after
    `iterations` Gauss-Newton steps on the raw torque residuals from theta0 (M,), each a
    least-squares step in bounds-scaled units clipped into the spec's bounds (jit-able with
    `setting` and `spec` static)."""
    theta0 = jnp.asarray(theta0)
    lower, upper = spec.lower.astype(theta0.dtype), spec.upper.astype(theta0.dtype)
    width = jnp.where(jnp.isfinite(upper - lower), upper - lower,
                      jnp.maximum(jnp.abs(theta0), 1.0))

    def residual(theta):
        return torque_residuals(setting, spec.to_params(theta, base_params), data).reshape(-1)

    def step(theta, _):
        jac = jax.jacfwd(residual)(theta) * width
        dz = jnp.linalg.lstsq(jac, -residual(theta))[0]
        return jnp.clip(theta + width * dz, lower, upper), None

    theta = jax.lax.scan(step, theta0, None, length=iterations)[0]
    residuals = torque_residuals(setting, spec.to_params(theta, base_params), data)
    noise = residual_noise_std(residuals, theta.size)
    return noise, theta


# ------------------------------------------------------------------------------------------
# The likelihoods' generic functions for this setting and its data
# ------------------------------------------------------------------------------------------

def _log_normaliser(data: TorqueData) -> jax.Array:
    """() N sum_j log(sqrt(2 pi) sigma_j) of one piece."""
    return data.num_steps * jnp.sum(jnp.log(jnp.sqrt(2.0 * jnp.pi) * data.noise_std))


@lik.select_trajectories.register(TorqueData)
def _select(data: TorqueData, index) -> TorqueData:
    return data._replace(q=data.q[index], qd=data.qd[index], qdd=data.qdd[index],
                         tau=data.tau[index], x0=data.x0[index],
                         tau_rate=data.tau_rate[index], q_taps=data.q_taps[index],
                         qd_taps=data.qd_taps[index])


@lik.initial_shooting_states.register(EquationErrorLikelihood)
def _initial_shooting_states(likelihood, data) -> jax.Array:
    return jnp.zeros(likelihood.shooting_shape(data), data.tau.dtype)


def whitened_residuals(setting: EquationErrorLikelihood, params: Params, data: TorqueData
                       ) -> tuple[jax.Array, jax.Array]:
    """((K, N nv) residuals whitened against the noise and the timing offset, (K,) the log
    determinant log(1 + s_t^2 |v~|^2) of each piece's covariance over diag(sigma^2)) (module
    doc: Timing)."""
    k = data.num_trajectories
    r = (torque_residuals(setting, params, data) / data.noise_std).reshape(k, -1)
    v = (data.tau_rate / data.noise_std).reshape(k, -1)
    vv = jnp.sum(jnp.square(v), axis=1)
    grow = jnp.square(data.timing_std) * vv                          # s_t^2 |v~|^2, (K,)
    # (1 - 1 / sqrt(1 + g)) / |v~|^2, written to stay finite where v~ = 0.
    root = jnp.sqrt(1.0 + grow)
    shrink = jnp.square(data.timing_std) / (root * (1.0 + root))
    white = r - (shrink * jnp.sum(v * r, axis=1))[:, None] * v
    return white, jnp.log1p(grow)


@lik.log_likelihood.register(EquationErrorLikelihood)
def _log_likelihood(likelihood, params, shooting, data) -> lik.LikelihoodTerms:
    r, log_det = whitened_residuals(likelihood, params, data)
    per_piece = -0.5 * (jnp.sum(jnp.square(r), axis=1) + log_det) - _log_normaliser(data)
    return lik.LikelihoodTerms(log_lik=lik.combine_trajectories(likelihood, per_piece),
                               per_trajectory=per_piece,
                               defects=jnp.zeros(likelihood.shooting_shape(data), r.dtype))


@shooting_windows.window_residuals.register(EquationErrorLikelihood)
def _window_residuals(likelihood, params, starts, data) -> jax.Array:
    return whitened_residuals(likelihood, params, data)[0]


@profiled_start.fit_window_starts.register(EquationErrorLikelihood)
def _fit_window_starts(likelihood, params, data, iterations=0) -> jax.Array:
    return data.x0


@lik.residual_noise_std.register(EquationErrorLikelihood)
def _residual_noise_std(likelihood, params, data, num_free) -> jax.Array:
    return residual_noise_std(torque_residuals(likelihood, params, data), num_free)


@lik.residual_normaliser.register(EquationErrorLikelihood)
def _residual_normaliser(likelihood, data) -> tuple[jax.Array, int]:
    k, n, nv = data.tau.shape
    if likelihood.combine == 'product':
        return k * _log_normaliser(data), k * n * nv
    return _log_normaliser(data), n * nv
