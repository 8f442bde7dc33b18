"""Edits of a `Params` pytree that simulators and held-out harnesses make: a seeded
perturbation of the nominal parameters (a hidden truth) and a rigid body (or a point mass)
attached to a body (a payload). NumPy randomness on the host; the results are ordinary
Params."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import inertia
from sysid_ros.core.model.types import Params

__all__ = ['perturb_params', 'add_rigid_body', 'add_point_mass']


def perturb_params(params: Params, seed: int, perturbation: float = 0.2,
                   true_damping: float = 0.1, true_coulomb: float = 0.0) -> Params:
    """A seeded hidden truth: each body's inertial 10-vector scaled by one factor uniform in
    [1 - p, 1 + p] (mass, first and second moments alike, so the COM stays and the inertia
    stays consistent), each damping scaled likewise plus `true_damping` x U(0.5, 1.5), each
    Coulomb torque likewise plus `true_coulomb` x U(0.5, 1.5) (drawn after the others, so
    the inertial and damping draws of a seed do not depend on it).

    Args:
      params: nominal parameters (nb bodies).
      seed: seed of the draws (the node uses its `seed` parameter).
      perturbation: relative half-width p of the scale factors, in [0, 1).
      true_damping: scale of the damping added to the nominal one [N m s/rad].
      true_coulomb: scale of the Coulomb torque added to the nominal one [N m].

    Returns:
      Params with scaled inertials and perturbed damping and Coulomb friction.
    """
    rng = np.random.default_rng([int(seed), 7])
    nb = params.inertial.shape[0]
    scale = rng.uniform(1.0 - perturbation, 1.0 + perturbation, size=nb)
    factor = rng.uniform(1.0 - perturbation, 1.0 + perturbation, size=nb)
    extra = true_damping * rng.uniform(0.5, 1.5, size=nb)
    damping = np.asarray(params.damping) * factor + extra
    coulomb = (np.asarray(params.coulomb) * rng.uniform(1.0 - perturbation, 1.0 + perturbation,
                                                        size=nb)
               + true_coulomb * rng.uniform(0.5, 1.5, size=nb))
    return dataclasses.replace(
        params,
        inertial=params.inertial * jnp.asarray(scale, params.inertial.dtype)[:, None],
        damping=jnp.asarray(damping, params.damping.dtype),
        coulomb=jnp.asarray(coulomb, params.coulomb.dtype))


def add_rigid_body(params: Params, body: int, mass: float, com, inertia_c) -> Params:
    """Params with a rigid body rigidly attached to `body` (a payload).

    The inertial 10-vectors of the two bodies about the body origin add (Featherstone RBDA
    eq. 2.63 moves the payload's inertia from its centre of mass to the origin).

    Args:
      params: Params (unbatched).
      body: index of the body that holds it.
      mass: its mass [kg].
      com: (3,) its centre of mass in the body frame [m].
      inertia_c: (3, 3) its rotational inertia about its centre of mass, in axes parallel to
        the body frame [kg m^2].

    Returns:
      Params whose `body` row of `inertial` includes the payload.
    """
    added = inertia.inertial_from_physical(mass, jnp.asarray(com, float),
                                           jnp.asarray(inertia_c, float))
    return dataclasses.replace(
        params, inertial=params.inertial.at[body].add(added.astype(params.inertial.dtype)))


def add_point_mass(params: Params, body: int, mass: float, position) -> Params:
    """Params with a point mass `mass` [kg] rigidly attached to `body` at `position` (3,) [m]
    in the body frame: `add_rigid_body` with no inertia about its own centre."""
    return add_rigid_body(params, body, mass, position, jnp.zeros((3, 3)))
