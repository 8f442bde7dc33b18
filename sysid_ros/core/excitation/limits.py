"""Joint limits of a motion: their normalised use, the optimiser's smooth penalty and the
hard check.

Every limit is turned into a use ratio that is at most 1 inside the limit: position
|q - mid| / half-range (the range already shrunk by its margin), velocity |qd| / qd_max,
acceleration |qdd| / qdd_max and command |u| / u_max. An infinite limit has a use of 0.
"""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Limits:
    """Limits of each joint (batch-free).

    Attributes:
      q_min, q_max: (nv,) position range the motion must stay in, margins applied [rad, m]
        (-inf / inf: unlimited).
      qd_max: (nv,) speed limit [rad/s, m/s] (inf: none).
      qdd_max: (nv,) acceleration limit [rad/s^2, m/s^2] (inf: none).
      u_max: (nv,) command limit [N m, N] (inf: none).
    """

    q_min: jax.Array
    q_max: jax.Array
    qd_max: jax.Array
    qdd_max: jax.Array
    u_max: jax.Array


class Usage(NamedTuple):
    """Use of each limit along a motion, (T, nv) each [-]; at most 1 within the limits."""

    position: jax.Array
    velocity: jax.Array
    acceleration: jax.Array
    effort: jax.Array


def _ratio(value, limit):
    """|value| / limit, 0 where the limit is infinite."""
    finite = jnp.isfinite(limit)
    return jnp.where(finite, jnp.abs(value) / jnp.where(finite, limit, 1.0), 0.0)


def usage(limits: Limits, q, qd, qdd, u) -> Usage:
    """Normalised use of every limit by the motion (T, nv) each and its commands u (T, nv)."""
    bounded = jnp.isfinite(limits.q_min) & jnp.isfinite(limits.q_max)
    mid = jnp.where(bounded, 0.5 * (limits.q_min + limits.q_max), 0.0)
    half = jnp.where(bounded, 0.5 * (limits.q_max - limits.q_min), jnp.inf)
    return Usage(position=_ratio(q - mid, half), velocity=_ratio(qd, limits.qd_max),
                 acceleration=_ratio(qdd, limits.qdd_max), effort=_ratio(u, limits.u_max))


def penalty(use: Usage, target=1.0):
    """Smooth penalty sum over samples and joints of max(0, use - target)^2 (continuously
    differentiable, zero inside `target`)."""
    return sum(jnp.sum(jnp.square(jnp.maximum(r - target, 0.0))) for r in use)


def peak(use: Usage) -> Usage:
    """Largest use of each limit over the motion, (nv,) each."""
    return Usage(*(jnp.max(r, axis=0) for r in use))
