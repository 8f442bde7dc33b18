"""Log densities over a `ParameterSpec`'s unconstrained coordinates z.

Particles and chains move in z (`spec.to_unconstrained` / `from_unconstrained`, a bijection
onto the open bounds box), so none can leave its bounds. Adding log |det d theta / d z| makes
samples in z, mapped to theta, follow the posterior in physical space: a uniform prior in
theta is then a proper logistic density in z, where without the Jacobian it would be flat and
particles could drift to z = +-inf in directions the data does not determine.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import parameters

__all__ = ['log_abs_det_jacobian', 'unconstrained_log_density']


def log_abs_det_jacobian(spec: parameters.ParameterSpec, z: jax.Array) -> jax.Array:
    """log |det d theta / d z| of `spec.from_unconstrained` at z (M,).

    Elementwise maps: [lo, hi]: log(hi - lo) + log sigmoid(z) + log sigmoid(-z);
    [lo, inf): log sigmoid(z); (-inf, hi]: log sigmoid(-z); unbounded: 0. When the spec has
    DiffNEA inertia blocks the full Jacobian (block diagonal, M x M) goes through `slogdet`.

    Returns:
      () log-determinant.
    """
    z = jnp.asarray(z)
    if spec.diffnea_links:
        jac = jax.jacfwd(spec.from_unconstrained)(z)
        return jnp.linalg.slogdet(jac)[1]
    lower = np.isfinite(np.asarray(spec.lower_bounds, dtype=float))
    upper = np.isfinite(np.asarray(spec.upper_bounds, dtype=float))
    width = np.where(lower & upper, np.asarray(spec.upper_bounds, dtype=float)
                     - np.asarray(spec.lower_bounds, dtype=float), 1.0)
    log_lo = jax.nn.log_sigmoid(z)
    log_hi = jax.nn.log_sigmoid(-z)
    terms = jnp.where(lower & upper, np.log(width) + log_lo + log_hi,
                      jnp.where(lower, log_lo, jnp.where(upper, log_hi, 0.0)))
    return jnp.sum(terms)


def unconstrained_log_density(spec: parameters.ParameterSpec, log_density_fn: Callable,
                              jacobian: bool = True) -> Callable:
    """Turn a log density over physical theta into one over the spec's unconstrained z.

    Args:
      spec: the parameter spec (bounds and bijection).
      log_density_fn: `log_density_fn(theta, *args) -> ()`, e.g. a log-likelihood (a uniform
        prior within the bounds is implied; add a log prior inside it for another one).
      jacobian: add log |det d theta / d z| (True: the particles sample the posterior in
        physical space; False: the density is taken as given in z).

    Returns:
      `fn(z, *args) -> ()`.
    """
    def fn(z, *args):
        value = log_density_fn(spec.from_unconstrained(z), *args)
        if jacobian:
            value = value + log_abs_det_jacobian(spec, z)
        return value
    return fn
