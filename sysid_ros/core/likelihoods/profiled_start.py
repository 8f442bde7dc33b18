"""Profiled start of single-shooting windows: the start state fitted to the whole window.

A window simulated from its noisy measured start carries that noise through every predicted
sample, which biases a fit and narrows its posterior (errors in variables). With
`ShootingLikelihood.start == 'profiled'` the start of each window is instead the state that
fits the window best at the given parameters (`fit_window_starts`: a few Gauss-Newton steps
from the measured start, held constant under differentiation). Its gradient is exact by the
envelope theorem (the residual is stationary in the start at the fitted one); the profile
stands in for the marginal over the start.

A profile carried from step to step (`StartProfile`): an estimator whose particles move
little between steps keeps each window's fitted start s and the Jacobian J of its residuals
r with respect to the start from its last refresh (`refresh_start_profile`), and the
likelihood takes one Gauss-Newton step with that J inside its one simulation from s
(`carried_residuals`; variable projection with a frozen Jacobian, Golub & Pereyra 1973):

  delta = -(J^T J)^-1 J^T r(theta, s),   r_p = r + J delta = (I - J (J^T J)^-1 J^T) r,

the likelihood taken from r_p and the carried start moved to s + delta. Its gradient is the
envelope gradient of the linearised profile, 2 (dr / dtheta)^T r_p. This saves the
forward-mode Jacobian of a fit in every step.

`likelihood` is a `likelihood.ShootingLikelihood` with one window (W = 1), read through its
attributes; `data` a `likelihood.TrajectoryData`. Residuals are those of
`shooting_windows.window_residuals`: N = (T + 1) O per window.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from sysid_ros.core.likelihoods import shooting_windows
from sysid_ros.core.model.types import Params

__all__ = [
    'PROFILE_ITERATIONS',
    'PROFILE_REFRESH',
    'StartProfile',
    'fit_window_starts',
    'start_profile',
    'profile_due',
    'refresh_start_profile',
    'carried_residuals',
]

# Gauss-Newton steps of a profiled start from the measured one: the residual is nearly
# linear in the start at noise-sized offsets, so two steps reach it to a small fraction of
# the noise.
PROFILE_ITERATIONS = 2
# Evaluations of a carried `StartProfile` between refreshes of its Jacobian: bounds the
# Jacobian's drift while the particles still move early in a window.
PROFILE_REFRESH = 10


class StartProfile(NamedTuple):
    """A profiled start carried between steps of an estimator (module doc).

    Attributes:
      x0: (K, S) measured starts of the data it was fitted on (NaN: not fitted yet).
      starts: (K, S) fitted start of each window [q; qd].
      jacobian: (K, N, S) Jacobian of the window's noise-normalised residuals (N = (T + 1)
        O, `shooting_windows.window_residuals`) with respect to its start at the last
        refresh.
      age: () int, evaluations since the last refresh.
    """

    x0: jax.Array
    starts: jax.Array
    jacobian: jax.Array
    age: jax.Array


@functools.singledispatch
def fit_window_starts(likelihood, params: Params, data, iterations: int = 5) -> jax.Array:
    """Start states of single-shooting windows fitted to their whole windows.

    Gauss-Newton on `shooting_windows.window_residuals` at fixed `params` from the measured
    `data.x0`, each window on its own (S x S normal equations, Jacobian by forward mode).

    Args:
      likelihood: settings (W = 1).
      params: physical parameters (one particle).
      data: the measured trajectories.
      iterations: Gauss-Newton steps.

    Returns:
      (K, S) fitted start of each window [q; qd].
    """
    return _fitted_starts(likelihood, params, data, data.x0, iterations)[0]


def _fitted_starts(likelihood, params: Params, data, guess: jax.Array,
                   iterations) -> tuple[jax.Array, jax.Array]:
    """((K, S) starts, (K, N, S) Jacobians of the last step) of `iterations` Gauss-Newton
    steps on each single-shooting window's `window_residuals`, from `guess` (K, S)."""
    def residual(start, controls, observations):
        one = data._replace(x0=start[None], controls=controls[None],
                            observations=observations[None], states=None)
        return shooting_windows.window_residuals(likelihood, params, start[None], one)[0]

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


def start_profile(likelihood, data) -> StartProfile:
    """An empty `StartProfile` for data shaped like `data` (fitted by the first
    `refresh_start_profile`)."""
    k, s = data.num_trajectories, likelihood.state_dim
    n = data.observations.shape[1] * data.observations.shape[2]
    nan = jnp.full((k, s), jnp.nan, data.x0.dtype)
    return StartProfile(x0=nan, starts=jnp.zeros((k, s), data.x0.dtype),
                        jacobian=jnp.zeros((k, n, s), data.x0.dtype),
                        age=jnp.zeros((), jnp.int32))


def profile_due(profile: StartProfile, data) -> jax.Array:
    """() bool: profiles (StartProfile, or a batch of them with a leading particle axis) that
    `refresh_start_profile` must refit: fitted on other data, or PROFILE_REFRESH evaluations
    old."""
    other = jnp.any(profile.x0 != data.x0)
    return other | jnp.any(profile.age >= PROFILE_REFRESH)


def refresh_start_profile(likelihood, params: Params, data,
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


def carried_residuals(likelihood, params: Params, data,
                      profile: StartProfile) -> tuple[jax.Array, StartProfile]:
    """Residuals projected by one Gauss-Newton step of a carried profile (module doc).

    Args:
      likelihood: settings (W = 1).
      params: physical parameters (one particle).
      data: the data `profile` was fitted on.
      profile: the carried profile.

    Returns:
      (K, N) projected residuals r_p, and `profile` with each start moved by its step
      (a non-finite move keeps the start) and its age raised by one.
    """
    residual = shooting_windows.window_residuals(likelihood, params, profile.starts,
                                                 data)                          # (K, N)
    jac = profile.jacobian                                                      # (K, N, S)
    delta = jax.vmap(_gauss_newton_step)(jac, residual)                         # (K, S)
    projected = residual + jnp.einsum('kni,ki->kn', jac, delta)
    moved = profile.starts + jax.lax.stop_gradient(delta)
    moved = jnp.where(jnp.isfinite(moved), moved, profile.starts)
    return projected, profile._replace(starts=moved, age=profile.age + 1)
