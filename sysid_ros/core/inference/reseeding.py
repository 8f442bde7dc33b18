"""Restarting particles whose log density or gradient is not finite (a diverging
simulation) next to randomly chosen finite ones; every particle method uses it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ['reseed_nonfinite']


def _leading_rows(tree, rows_mask, num, replacement_fn):
    """Apply `replacement_fn(leaf)` to the rows of `rows_mask` in every leaf of leading size P."""
    def fix(leaf):
        if jnp.ndim(leaf) >= 1 and leaf.shape[0] == num:
            mask = rows_mask.reshape((num,) + (1,) * (leaf.ndim - 1))
            return jnp.where(mask, replacement_fn(leaf), leaf)
        return leaf
    return jax.tree_util.tree_map(fix, tree)


def reseed_nonfinite(key: jax.Array, x: jax.Array, bad: jax.Array, jitter, scale=None,
                     extra=None, jitter_mask=None):
    """Move the particles marked `bad` next to randomly chosen good ones.

    Each bad particle i gets the position of a good particle j (uniformly drawn) plus
    Gaussian noise of standard deviation `jitter` in normalised coordinates (times `scale`);
    the rows i of every array in `extra` (e.g. Lagrange multipliers) are copied from row j.
    If no particle is good, nothing moves.

    Args:
      key: PRNG key.
      x: (P, D) particles.
      bad: (P,) bool.
      jitter: () standard deviation of the jitter [normalised units].
      scale: (D,) normalising scale, or None for 1.
      extra: pytree of arrays with leading axis P, copied along, or None.
      jitter_mask: (D,) bool, coordinates that get jitter (None: all).

    Returns:
      (x, extra) with the bad rows replaced.
    """
    num = x.shape[0]
    key_donor, key_noise = jax.random.split(key)
    good = ~bad
    any_good = jnp.any(good)
    weights = jnp.where(any_good, good.astype(x.dtype), jnp.ones((num,), x.dtype))
    donor = jax.random.choice(key_donor, num, (num,), p=weights / jnp.sum(weights))
    noise = jitter * jax.random.normal(key_noise, x.shape, x.dtype)
    if scale is not None:
        noise = noise * scale
    if jitter_mask is not None:
        noise = jnp.where(jitter_mask, noise, 0.0)
    moved = bad & any_good
    x = jnp.where(moved[:, None], x[donor] + noise, x)
    if extra is not None:
        extra = _leading_rows(extra, moved, num, lambda leaf: leaf[donor])
    return x, extra
