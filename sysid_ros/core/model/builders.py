"""Builders for the canonical systems of the papers: n-link chains, double pendulum,
cartpole, Furuta pendulum. Each returns `(RobotModel, Params)` with uniform-rod links.

Frames: base z up, gravity -z. Planar pendulums swing in the x-z plane about y; at q = 0 the
links hang straight down (-z).
"""

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model.types import Params, PRISMATIC, REVOLUTE, RobotModel

GRAVITY = (0.0, 0.0, -9.81)


def rod_inertial(mass: float, length: float, radius: float, direction) -> np.ndarray:
    """(10,) inertial vector of a uniform solid cylinder from the body origin along `direction`.

    Args:
      mass: [kg].
      length: [m].
      radius: [m].
      direction: (3,) unit vector in the body frame.
    """
    d = np.asarray(direction, dtype=float)
    com = 0.5 * length * d
    axial = 0.5 * mass * radius**2
    transverse = mass * (3.0 * radius**2 + length**2) / 12.0
    inertia_c = transverse * np.eye(3) + (axial - transverse) * np.outer(d, d)
    inertia_o = inertia_c + mass * (com @ com * np.eye(3) - np.outer(com, com))
    return np.array([mass, *(mass * com), inertia_o[0, 0], inertia_o[0, 1], inertia_o[1, 1],
                     inertia_o[0, 2], inertia_o[1, 2], inertia_o[2, 2]])


def _assemble(name, parents, types, axes, placements, inertials, damping, dtype,
              link_prefix='link', joint_prefix='joint'):
    nb = len(parents)
    model = RobotModel(
        name=name,
        link_names=tuple(f'{link_prefix}{i + 1}' for i in range(nb)),
        joint_names=tuple(f'{joint_prefix}{i + 1}' for i in range(nb)),
        parents=tuple(parents),
        joint_types=tuple(types),
        continuous=(False,) * nb,
        axis=tuple(tuple(float(a) for a in ax) for ax in axes),
        gravity=GRAVITY,
        q_min=(-np.inf,) * nb, q_max=(np.inf,) * nb,
        v_max=(np.inf,) * nb, effort_max=(np.inf,) * nb,
    )
    params = Params(
        inertial=jnp.asarray(np.stack(inertials), dtype),
        placement=jnp.asarray(np.asarray(placements, dtype=float), dtype),
        armature=jnp.zeros((nb,), dtype),
        damping=jnp.asarray(np.broadcast_to(np.asarray(damping, dtype=float), (nb,)), dtype),
        coulomb=jnp.zeros((nb,), dtype),
        stribeck=jnp.zeros((nb, 2), dtype),
        offset=jnp.zeros((nb,), dtype),
        gain=jnp.ones((nb,), dtype),
        load_coulomb=jnp.zeros((nb,), dtype),
    )
    return model, params


def chain(num_links: int, lengths=1.0, masses=1.0, radius=0.02, damping=0.0,
          axis=(0.0, 1.0, 0.0), name=None, dtype=jnp.float64):
    """Serial chain of `num_links` revolute joints about `axis`, links hanging along -z.

    Args:
      num_links: number of links and joints.
      lengths: scalar or (num_links,) link lengths [m].
      masses: scalar or (num_links,) link masses [kg].
      radius: rod radius [m].
      damping: scalar or (num_links,) viscous damping [N m s/rad].
      axis: (3,) joint axis of every joint in its joint frame.
      name: model name (default `chain<num_links>`).
      dtype: float dtype of the parameters.
    """
    lengths = np.broadcast_to(np.asarray(lengths, dtype=float), (num_links,))
    masses = np.broadcast_to(np.asarray(masses, dtype=float), (num_links,))
    down = np.array([0.0, 0.0, -1.0])
    placements = [np.zeros(6)] + [np.concatenate([lengths[i] * down, np.zeros(3)])
                                  for i in range(num_links - 1)]
    inertials = [rod_inertial(masses[i], lengths[i], radius, down) for i in range(num_links)]
    return _assemble(name or f'chain{num_links}', list(range(-1, num_links - 1)),
                     [REVOLUTE] * num_links, [axis] * num_links, placements, inertials,
                     damping, dtype)


def double_pendulum(l1=1.0, l2=1.0, m1=1.0, m2=1.0, radius=0.02, damping=0.0,
                    dtype=jnp.float64):
    """Planar double pendulum (two rods) swinging in the x-z plane."""
    return chain(2, (l1, l2), (m1, m2), radius, damping, name='double_pendulum', dtype=dtype)


def cartpole(cart_mass=1.0, pole_mass=0.1, pole_length=0.5, radius=0.02, damping=0.0,
             dtype=jnp.float64):
    """Cart on a rail along x (prismatic joint1) carrying a pole hinged about y (joint2)."""
    cart = np.array([cart_mass, 0, 0, 0, *(np.array([1, 0, 1, 0, 0, 1]) * 0.01 * cart_mass)])
    pole = rod_inertial(pole_mass, pole_length, radius, (0.0, 0.0, 1.0))
    return _assemble('cartpole', [-1, 0], [PRISMATIC, REVOLUTE],
                     [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0)], np.zeros((2, 6)), [cart, pole],
                     damping, dtype)


def furuta_pendulum(arm_mass=0.1, arm_length=0.1, pendulum_mass=0.02, pendulum_length=0.13,
                    radius=0.005, damping=0.0, dtype=jnp.float64):
    """Furuta pendulum: a horizontal arm about the vertical z (joint1) and a pendulum at its
    tip rotating about the arm's axis x (joint2), hanging down at q2 = 0."""
    arm = rod_inertial(arm_mass, arm_length, radius, (1.0, 0.0, 0.0))
    pendulum = rod_inertial(pendulum_mass, pendulum_length, radius, (0.0, 0.0, -1.0))
    placements = [np.zeros(6), np.array([arm_length, 0, 0, 0, 0, 0])]
    return _assemble('furuta_pendulum', [-1, 0], [REVOLUTE, REVOLUTE],
                     [(0.0, 0.0, 1.0), (1.0, 0.0, 0.0)], placements, [arm, pendulum],
                     damping, dtype)


BUILDERS = {
    'chain': chain,
    'double_pendulum': double_pendulum,
    'cartpole': cartpole,
    'furuta_pendulum': furuta_pendulum,
}
