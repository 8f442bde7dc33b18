"""The particle methods' optimisers: Adam with an annealed step size, and any optax
optimiser run in the starting particles' whitened coordinates."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ['DECAY_SHARE', 'STEP_DECAY', 'DEGENERATE_SPREAD', 'annealed_adam', 'WhitenedState',
           'start_factor', 'whitened']

# `annealed_adam`: the share of the iterations over which Adam's step
# decays, and its last step size as a share of the first.
DECAY_SHARE = 0.5
STEP_DECAY = 1e-3
# The relative variance below which a direction of the start counts as unspread
# (`start_factor`).
DEGENERATE_SPREAD = 1e-10


class WhitenedState(NamedTuple):
    """`whitened`'s state: `factor` (1, D, D) the Cholesky factor L (a leading axis of one,
    so that code which copies the rows of per-particle leaves, e.g. a re-seed, leaves it
    alone), `inner` the wrapped optimiser's state."""

    factor: jax.Array
    inner: Any


def start_factor(x, num_params: int) -> jax.Array:
    """(D, D) lower Cholesky factor L of the covariance of the first `num_params` columns
    of particles x (P, D) (their variances alone when P <= num_params), the identity on the
    other columns. A direction the particles do not spread in (an eigenvalue below
    DEGENERATE_SPREAD of the largest, e.g. one the start fit could not determine) gets the
    largest variance, and particles with no spread at all the identity: neither is frozen."""
    num, dim = x.shape
    z = x[:, :num_params]
    if num > num_params:
        cov = jnp.atleast_2d(jnp.cov(z, rowvar=False))
    else:
        cov = jnp.diag(jnp.var(z, axis=0))
    w, v = jnp.linalg.eigh(cov)
    top = jnp.max(w)
    w = jnp.where(top > 0.0, jnp.where(w > DEGENERATE_SPREAD * top, w, top), 1.0)
    factor = jnp.linalg.cholesky((v * w) @ v.T)
    return jnp.eye(dim, dtype=x.dtype).at[:num_params, :num_params].set(factor)


def whitened(inner: optax.GradientTransformation, num_params: int
             ) -> optax.GradientTransformation:
    """`inner` run in the coordinates y of x = L y, L = `start_factor` of the particles it
    is initialised with: its step sizes count in the starting ensemble's stds along its
    principal axes instead of in z units, so that the particles of a narrow, correlated
    posterior (an informative recording: stds of 1e-4 in z, correlations of -0.99 between a
    mass and its COM) move by a share of their own spread. A new `init` (a live window's
    `rebase`) measures L again."""
    def init(x):
        return WhitenedState(factor=start_factor(x, num_params)[None], inner=inner.init(x))

    def update(updates, state, params=None):
        factor = state.factor[0]
        steps, inner_state = inner.update(updates @ factor, state.inner, params)
        return steps @ factor.T, WhitenedState(factor=state.factor, inner=inner_state)

    return optax.GradientTransformation(init, update)


def annealed_adam(learning_rate: float, iterations: int) -> optax.GradientTransformation:
    """Adam at `learning_rate` for the first (1 - DECAY_SHARE) of `iterations`, then
    decaying by a cosine to STEP_DECAY times it over the rest (then staying there): the
    constant phase carries particles from a distant start, the decay lets them settle at the
    fixed point of their flow (a constant step never settles: Adam's steps stay near the
    learning rate however small the direction gets). A state made by `init` starts again (a
    live window's `rebase`)."""
    total = max(iterations, 1)
    constant = int(round((1.0 - DECAY_SHARE) * total))
    return optax.adam(optax.join_schedules(
        [optax.constant_schedule(learning_rate),
         optax.cosine_decay_schedule(learning_rate, max(total - constant, 1),
                                     alpha=STEP_DECAY)], [constant]))
