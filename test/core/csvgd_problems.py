"""The seed's simulated double pendulum with unknown link lengths (seed 000 §1.2, fig. 1).

The seed identifies with the Tiny Differentiable Simulator, whose compound pendulum
(`init_compound_pendulum`) gives each link a sphere (radius 0.15 m) whose centre sits at the
link length from the joint; the next joint sits at the end of the link. The builders'
`double_pendulum` uses uniform rods instead, so this module builds the sphere-mass variant:
body i carries a 1 kg sphere at (0, 0, -l_i) in its joint frame, joint 2 sits at (0, 0, -l1).

Lengths through `ParameterSpec` names: l1 = -`link1.com.z`, l2 = -`link2.com.z` (bounds
0.5 .. 5 m, i.e. com.z in [-5, -0.5]; moving a COM keeps the mass and the inertia about the
COM, as a sphere needs). The spec cannot tie two entries, so `make_params_fn` also writes
link1.com.z into joint2's origin z (the estimators take such a `params_fn`).
"""

import dataclasses

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.model import builders
from sysid_ros.core.model import inertia
from sysid_ros.core.model import parameters

MODEL, _ROD_PARAMS = builders.double_pendulum()
SPHERE_RADIUS = 0.15            # [m], as TDS's compound pendulum
MASS = 1.0                      # [kg] per link
DT = 0.01                       # [s], seed: 300 steps = 3 s
X0 = np.array([np.pi / 2, 0.0, 0.0, 0.0])   # first link sideways, second along it, at rest
LENGTH_BOUNDS = (0.5, 5.0)
SPEC = parameters.make_parameter_spec(
    MODEL, {'link1.com.z': (-LENGTH_BOUNDS[1], -LENGTH_BOUNDS[0]),
            'link2.com.z': (-LENGTH_BOUNDS[1], -LENGTH_BOUNDS[0])})
INTEGRATOR = 'semi_implicit_euler'
ACTUATOR = 'ideal'


def sphere_params(l1: float, l2: float):
    """Params of the sphere-mass double pendulum with link lengths l1, l2 [m]."""
    inertia_c = 0.4 * MASS * SPHERE_RADIUS ** 2 * np.eye(3)
    inertial = [inertia.inertial_from_physical(jnp.asarray(MASS), jnp.array([0.0, 0.0, -length]),
                                               jnp.asarray(inertia_c)) for length in (l1, l2)]
    placement = _ROD_PARAMS.placement.at[1, 2].set(-l1)
    return dataclasses.replace(_ROD_PARAMS, inertial=jnp.stack(inertial), placement=placement)


BASE = sphere_params(1.0, 1.0)


def theta_from_lengths(lengths) -> np.ndarray:
    """(..., 2) link lengths [m] -> (..., 2) theta (com.z values)."""
    return -np.asarray(lengths, dtype=float)


def lengths_from_theta(theta) -> np.ndarray:
    """(..., 2) theta -> (..., 2) link lengths [m]."""
    return -np.asarray(theta, dtype=float)


def make_params_fn(poison_below: float | None = None):
    """theta -> Params with joint2's origin tied to link 1's length.

    Args:
      poison_below: if given, particles with l1 below this length [m] get NaN masses, a
        stand-in for a simulation that diverges (tests of the non-finite handling).
    """
    def params_fn(theta):
        params = SPEC.to_params(theta, BASE)
        params = dataclasses.replace(params, placement=params.placement.at[1, 2].set(theta[0]))
        if poison_below is not None:
            poisoned = -theta[0] < poison_below
            params = dataclasses.replace(
                params, inertial=jnp.where(poisoned, jnp.nan, params.inertial))
        return params
    return params_fn


def rollout(theta, num_steps: int):
    """(T + 1, 4) uncontrolled trajectory from X0 of theta (2,) (traceable: vmap over
    truths)."""
    return integrators.rollout(MODEL, make_params_fn()(theta), jnp.asarray(X0),
                               jnp.zeros((num_steps, 2)), DT, integrator=INTEGRATOR,
                               actuator=ACTUATOR)


def simulate(l1: float, l2: float, num_steps: int) -> np.ndarray:
    """(T + 1, 4) uncontrolled trajectory from X0 with link lengths l1, l2 [m]."""
    return np.asarray(rollout(jnp.asarray(theta_from_lengths([l1, l2])), num_steps))
