"""Edits of a `Params` pytree that simulators and held-out harnesses make: a seeded
perturbation of the nominal parameters (a hidden truth) and a point mass rigidly attached to
a body (a payload). NumPy randomness on the host; the results are ordinary Params."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import inertia
from sysid_ros.core.model.types import Params

__all__ = ['perturb_params', 'add_point_mass']


def perturb_params(params: Params, seed: int, perturbation: float = 0.2,
                 true_damping: float = 0.1) -> Params:
    """A seeded hidden truth: each body's inertial 10-vector scaled by one factor uniform in
    [1 - p, 1 + p] (mass, first and second moments alike, so the COM stays and the inertia
    stays consistent), each damping scaled likewise plus `true_damping` x U(0.5, 1.5).

    Args:
      params: nominal parameters (nb bodies).
      seed: seed of the draws (the node uses its `seed` parameter).
      perturbation: relative half-width p of the scale factors, in [0, 1).
      true_damping: scale of the damping added to the nominal one [N m s/rad].

    Returns:
      Params with scaled inertials and perturbed damping.
    """
    rng = np.random.default_rng([int(seed), 7])
    nb = params.inertial.shape[0]
    scale = rng.uniform(1.0 - perturbation, 1.0 + perturbation, size=nb)
    factor = rng.uniform(1.0 - perturbation, 1.0 + perturbation, size=nb)
    extra = true_damping * rng.uniform(0.5, 1.5, size=nb)
    damping = np.asarray(params.damping) * factor + extra
    return dataclasses.replace(
        params,
        inertial=params.inertial * jnp.asarray(scale, params.inertial.dtype)[:, None],
        damping=jnp.asarray(damping, params.damping.dtype))


def add_point_mass(params: Params, body: int, mass: float, position) -> Params:
    """Params with a point mass `mass` [kg] rigidly attached to `body` at `position` (3,) [m]
    in the body frame (inertial vectors add; Featherstone RBDA eq. 2.63 for its inertia)."""
    point = inertia.inertial_from_physical(mass, jnp.asarray(position, float),
                                           jnp.zeros((3, 3)))
    return dataclasses.replace(
        params, inertial=params.inertial.at[body].add(point.astype(params.inertial.dtype)))
