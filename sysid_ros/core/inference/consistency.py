"""Physically consistent parameter vectors: clip into the bounds, project DiffNEA inertia
blocks onto the consistent set, and bisect towards a consistent anchor (NEA's projection and
DiffNEA's posterior)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import parameters
from sysid_ros.core.model.types import Params

__all__ = ['block_mask', 'within_bounds', 'project_consistent', 'consistent_anchor']


def block_mask(spec: parameters.ParameterSpec) -> np.ndarray:
    """(M,) bool: entries that belong to a DiffNEA inertia block of the spec."""
    links = set(spec.diffnea_links)
    return np.asarray([b in links and a in parameters.INERTIA_ATTRIBUTES
                       for b, a in zip(spec.bodies, spec.attributes)], dtype=bool)


def _clip_and_project_blocks(spec, theta):
    """Clip into the bounds (except DiffNEA block entries) and project the blocks onto the
    consistent set through the virtual parameters."""
    block = block_mask(spec)
    theta = jnp.where(block, theta, jnp.clip(theta, spec.lower.astype(theta.dtype),
                                             spec.upper.astype(theta.dtype)))
    if block.any():
        round_trip = spec.from_unconstrained(spec.to_unconstrained(theta))
        theta = jnp.where(block, round_trip, theta)
    return theta


def within_bounds(spec, theta):
    """() bool: every entry within its bounds, DiffNEA block entries excepted."""
    inside = (theta >= spec.lower) & (theta <= spec.upper)
    return jnp.all(inside | block_mask(spec), axis=-1)


def project_consistent(spec: parameters.ParameterSpec, base: Params, theta: jax.Array,
                       anchor: jax.Array, num_bisection: int = 50) -> jax.Array:
    """Map a parameter vector into the bounds and onto physically consistent values.

    1. Clip every entry into its bounds (entries of fully free inertia blocks excepted: their
       bounds only serve initialisation, see `ParameterSpec`).
    2. Project each fully free inertia block onto the consistent set: through DiffNEA's
       virtual parameters, negative principal second moments are set to zero
       (`inertia.virtual_from_inertia`); the inertia about the joint axis is kept where the
       other moments can absorb the change.
    3. If still inconsistent (e.g. a single free inertia entry outside the triangle
       inequalities of the fixed ones), return the last consistent point of the segment from
       `anchor` to the result of 2, found by bisection on the convex consistent set.

    Args:
      spec: the parameter spec.
      base: Params supplying the parameters not in the spec.
      theta: (M,) physical values.
      anchor: (M,) a consistent point within the bounds (e.g. the initial guess); if it is not
        consistent, neither may be the result.
      num_bisection: bisection steps (the distance to the boundary halves each step).

    Returns:
      (M,) projected values.
    """
    theta = _clip_and_project_blocks(spec, jnp.asarray(theta))
    anchor = jnp.asarray(anchor, theta.dtype)
    ok = spec.is_consistent(theta, base)

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        good = spec.is_consistent(anchor + mid * (theta - anchor), base)
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid)

    zero = jnp.zeros((), theta.dtype)
    lo, _ = jax.lax.fori_loop(0, num_bisection, bisect, (zero, zero + 1.0))
    return jnp.where(ok, theta, anchor + lo * (theta - anchor))


def consistent_anchor(spec: parameters.ParameterSpec, base: Params, theta: jax.Array
                      ) -> jax.Array:
    """A consistent point within the bounds to project towards (`project_consistent`).

    `theta` clipped into the bounds with its inertia blocks projected, if that is consistent;
    otherwise the nominal values `spec.from_params(base)` treated alike (e.g. when an initial
    guess moves one inertia entry of a thin rod outside the triangle inequalities).
    """
    theta = _clip_and_project_blocks(spec, jnp.asarray(theta))
    nominal = _clip_and_project_blocks(spec, spec.from_params(base).astype(theta.dtype))
    return jnp.where(spec.is_consistent(theta, base), theta, nominal)
