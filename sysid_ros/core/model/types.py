"""Model and parameter pytrees of the JAX core.

Static structure (`RobotModel`) and differentiable leaves (`Params`) are kept apart, as MJX
keeps `body_parentid` apart from `body_mass`: only `Params` are differentiated, vmapped over
particles and published.

Conventions (shared with Pinocchio, the reference):
  * Spatial vectors are ordered `[linear; angular]`; motions in body coordinates.
  * Body `i` is moved by joint `i`; its frame is the joint frame, placed in the parent body's
    frame by `Params.placement[i]` and then rotated/translated by the joint about/along
    `RobotModel.axis[i]`.
  * Inertial parameters of a body are Pinocchio's 10-vector about the body origin,
    `[m, m c_x, m c_y, m c_z, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]` [kg, kg m, kg m^2].
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

import jax
import jax.numpy as jnp

REVOLUTE = 'revolute'
PRISMATIC = 'prismatic'
JOINT_TYPES = (REVOLUTE, PRISMATIC)


def _static(**kwargs):
    return field(metadata={'static': True}, **kwargs)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RobotModel:
    """Static topology of a kinematic tree with one 1-DoF joint per body (fixed joints merged).

    Attributes:
      name: robot name.
      link_names: (nb,) name of each moving body (the URDF child link of its joint).
      joint_names: (nb,) name of each joint; the state vector follows this order.
      parents: (nb,) index of each body's parent body, -1 for the fixed world/base.
      joint_types: (nb,) 'revolute' or 'prismatic' (a URDF continuous joint is revolute).
      continuous: (nb,) True where the URDF joint is continuous (Pinocchio uses cos/sin for it).
      axis: (nb,) unit joint axis in the joint frame, as Python float triples.
      gravity: world gravity vector [m/s^2], in the base frame.
      q_min, q_max: (nb,) joint position limits [rad or m] (+-inf when unlimited).
      v_max, effort_max: (nb,) velocity [rad/s, m/s] and effort [N m, N] limits (inf when none).
    """

    name: str = _static()
    link_names: tuple[str, ...] = _static()
    joint_names: tuple[str, ...] = _static()
    parents: tuple[int, ...] = _static()
    joint_types: tuple[str, ...] = _static()
    continuous: tuple[bool, ...] = _static()
    axis: tuple[tuple[float, float, float], ...] = _static()
    gravity: tuple[float, float, float] = _static(default=(0.0, 0.0, -9.81))
    q_min: tuple[float, ...] = _static(default=())
    q_max: tuple[float, ...] = _static(default=())
    v_max: tuple[float, ...] = _static(default=())
    effort_max: tuple[float, ...] = _static(default=())

    @property
    def num_bodies(self) -> int:
        return len(self.parents)

    @property
    def nv(self) -> int:
        """Number of degrees of freedom (= number of bodies)."""
        return len(self.parents)

    def children(self, i: int) -> tuple[int, ...]:
        return tuple(k for k, p in enumerate(self.parents) if p == i)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Params:
    """Differentiable physical parameters of a `RobotModel` (batch axes, if any, first).

    Attributes:
      inertial: (nb, 10) Pinocchio inertial parameters of each body about its joint frame.
      placement: (nb, 6) joint frame in the parent body frame: [x, y, z] [m], then URDF
        roll, pitch, yaw [rad] (R = Rz(yaw) Ry(pitch) Rx(roll)).
      armature: (nb,) reflected rotor inertia added to the mass-matrix diagonal [kg m^2].
      damping: (nb,) viscous friction coefficient [N m s/rad or N s/m].
      coulomb: (nb,) Coulomb friction torque [N m or N].
      stribeck: (nb, 2) Stribeck excess static torque [N m] and Stribeck velocity [rad/s].
      offset: (nb,) constant torque that the joint's sensor or actuator adds to the
        commanded torque [N m or N] (signed): gain tau_cmd = rnea + friction + offset.
      gain: (nb,) torque the joint receives per unit of command or measured effort [-]
        (1: the effort is the torque; an effort read through gains known to a few percent
        identifies the rest).
      load_coulomb: (nb,) Coulomb friction torque per unit of the torque the joint transmits
        [-] (a harmonic drive's friction grows with its load; 0: none), see
        `dynamics.actuators`.
      network: weights of a neural actuator model (a pytree; empty tuple when unused).
    """

    inertial: jax.Array
    placement: jax.Array
    armature: jax.Array
    damping: jax.Array
    coulomb: jax.Array
    stribeck: jax.Array
    offset: jax.Array
    gain: jax.Array
    load_coulomb: jax.Array
    network: Any = ()

    @staticmethod
    def zeros_like_model(model: RobotModel, dtype=jnp.float64) -> 'Params':
        nb = model.num_bodies
        z = jnp.zeros((nb,), dtype)
        return Params(inertial=jnp.zeros((nb, 10), dtype), placement=jnp.zeros((nb, 6), dtype),
                      armature=z, damping=z, coulomb=z, stribeck=jnp.zeros((nb, 2), dtype),
                      offset=z, gain=jnp.ones((nb,), dtype), load_coulomb=z)
