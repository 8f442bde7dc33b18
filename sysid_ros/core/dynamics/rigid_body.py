"""Rigid-body dynamics of kinematic trees: RNEA, CRBA, ABA and the joint-torque regressor.

All functions take one state (no batch axes; batch with `jax.vmap`), work in body frames
(Lie-algebra form of the DiffNEA seeds, Featherstone's RBDA ch. 5-7) and are differentiable
with respect to state, torque and every leaf of `Params`. Bodies are visited in index order,
parents before children (guaranteed by `io.model_io`). Rigid-body terms only, plus rotor
armature on the mass-matrix diagonal; friction and actuator effects live in `actuators`.
"""

import dataclasses

import jax
import jax.numpy as jnp

from sysid_ros.core.model import spatial
from sysid_ros.core.dynamics.kinematics import joint_transform, subspace_dot, subspace_times
from sysid_ros.core.model.types import Params, RobotModel


def _base_acceleration(model: RobotModel, dtype):
    """Spatial acceleration of the fixed base that stands in for gravity: [-g; 0]."""
    return jnp.concatenate([-jnp.asarray(model.gravity, dtype), jnp.zeros(3, dtype)])


def _link_transforms(model: RobotModel, params: Params, q):
    return [joint_transform(model, params, i, q[i]) for i in range(model.num_bodies)]


def rnea(model: RobotModel, params: Params, q, qd, qdd):
    """Inverse dynamics tau = M(q) qdd + C(q, qd) qd + g(q) (Featherstone RBDA Table 5.1).

    Args:
      q, qd, qdd: (nv,) joint positions [rad, m], velocities and accelerations.

    Returns:
      (nv,) joint torques/forces [N m, N], armature included.
    """
    dtype = jnp.result_type(q, params.inertial)
    xs = _link_transforms(model, params, q)
    a0 = _base_acceleration(model, dtype)
    vel, acc, force = [], [], []
    # Forward pass: body velocities and accelerations, then the net force on each body.
    for i, parent in enumerate(model.parents):
        R, p = xs[i]
        v_parent = vel[parent] if parent >= 0 else jnp.zeros(6, dtype)
        a_parent = acc[parent] if parent >= 0 else a0
        s_qd = subspace_times(model, i, qd[i], dtype)
        v = spatial.motion_act_inv(R, p, v_parent) + s_qd
        a = (spatial.motion_act_inv(R, p, a_parent) + subspace_times(model, i, qdd[i], dtype)
             + spatial.motion_cross(v, s_qd))
        pi = params.inertial[i]
        force.append(spatial.inertia_apply(pi, a)
                     + spatial.force_cross(v, spatial.inertia_apply(pi, v)))
        vel.append(v)
        acc.append(a)
    # Backward pass: project onto the joint axis and pass the force to the parent.
    tau = [None] * model.num_bodies
    for i in reversed(range(model.num_bodies)):
        tau[i] = subspace_dot(model, i, force[i])
        parent = model.parents[i]
        if parent >= 0:
            force[parent] = force[parent] + spatial.force_act(*xs[i], force[i])
    return jnp.stack(tau) + params.armature * qdd


def bias_forces(model: RobotModel, params: Params, q, qd):
    """Coriolis, centrifugal and gravity torques C(q, qd) qd + g(q), (nv,)."""
    return rnea(model, params, q, qd, jnp.zeros_like(qd))


def crba(model: RobotModel, params: Params, q):
    """Joint-space mass matrix M(q) (nv, nv) by composite rigid bodies (RBDA Table 6.2)."""
    dtype = jnp.result_type(q, params.inertial)
    nb = model.num_bodies
    xs = _link_transforms(model, params, q)
    xinv = [spatial.motion_matrix_inv(R, p) for R, p in xs]
    composite = [spatial.inertia_matrix(params.inertial[i]) for i in range(nb)]
    for i in reversed(range(nb)):
        parent = model.parents[i]
        if parent >= 0:
            composite[parent] = composite[parent] + xinv[i].T @ composite[i] @ xinv[i]
    M = [[None] * nb for _ in range(nb)]
    for i in range(nb):
        # Force that a unit acceleration of joint i needs, carried up towards the root.
        f = composite[i] @ subspace_times(model, i, 1.0, dtype)
        j = i
        M[i][i] = subspace_dot(model, i, f) + params.armature[i]
        while model.parents[j] >= 0:
            f = xinv[j].T @ f
            j = model.parents[j]
            M[i][j] = M[j][i] = subspace_dot(model, j, f)
    zero = jnp.zeros((), dtype)
    return jnp.stack([jnp.stack([zero if m is None else m for m in row]) for row in M])


def aba(model: RobotModel, params: Params, q, qd, tau):
    """Forward dynamics qdd = M(q)^-1 (tau - C(q, qd) qd - g(q)), articulated-body algorithm.

    Featherstone RBDA Table 7.1; in the Lie-algebra form it is Algorithm 1 of seed 004.

    Args:
      q, qd: (nv,) joint positions and velocities.
      tau: (nv,) joint torques/forces applied by the actuators [N m, N].

    Returns:
      (nv,) joint accelerations [rad/s^2, m/s^2].
    """
    dtype = jnp.result_type(q, qd, tau, params.inertial)
    nb = model.num_bodies
    xs = _link_transforms(model, params, q)
    xinv = [spatial.motion_matrix_inv(R, p) for R, p in xs]
    # Pass 1: velocities, velocity-product accelerations c_i and bias forces p_i.
    vel, bias_acc, art_inertia, art_bias = [], [], [], []
    for i, parent in enumerate(model.parents):
        s_qd = subspace_times(model, i, qd[i], dtype)
        v_parent = vel[parent] if parent >= 0 else jnp.zeros(6, dtype)
        v = xinv[i] @ v_parent + s_qd
        inertia = spatial.inertia_matrix(params.inertial[i])
        vel.append(v)
        bias_acc.append(spatial.motion_cross(v, s_qd))
        art_inertia.append(inertia)
        art_bias.append(spatial.force_cross(v, inertia @ v))
    # Pass 2: articulated inertias and bias forces, leaves to root.
    U, D, u = [None] * nb, [None] * nb, [None] * nb
    for i in reversed(range(nb)):
        IA, pA = art_inertia[i], art_bias[i]
        U[i] = jnp.stack([subspace_dot(model, i, IA[:, k]) for k in range(6)])
        D[i] = subspace_dot(model, i, U[i]) + params.armature[i]
        u[i] = tau[i] - subspace_dot(model, i, pA)
        parent = model.parents[i]
        if parent >= 0:
            Ia = IA - jnp.outer(U[i], U[i]) / D[i]
            pa = pA + Ia @ bias_acc[i] + U[i] * (u[i] / D[i])
            art_inertia[parent] = art_inertia[parent] + xinv[i].T @ Ia @ xinv[i]
            art_bias[parent] = art_bias[parent] + xinv[i].T @ pa
    # Pass 3: accelerations, root to leaves.
    a0 = _base_acceleration(model, dtype)
    acc, qdd = [], []
    for i, parent in enumerate(model.parents):
        a = xinv[i] @ (acc[parent] if parent >= 0 else a0) + bias_acc[i]
        qdd_i = (u[i] - U[i] @ a) / D[i]
        acc.append(a + subspace_times(model, i, qdd_i, dtype))
        qdd.append(qdd_i)
    return jnp.stack(qdd)


def regressor(model: RobotModel, params: Params, q, qd, qdd):
    """Joint-torque regressor Y (nv, 10 nb) with rnea = Y @ inertial.ravel() (no armature).

    Columns follow Pinocchio's `computeJointTorqueRegressor`: body by body, each body's ten
    inertial parameters `[m, mc, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]`. RNEA is linear in them, so
    the Jacobian is exact.
    """
    def torque(inertial):
        rigid = dataclasses.replace(params, inertial=inertial,
                                    armature=jnp.zeros_like(params.armature))
        return rnea(model, rigid, q, qd, qdd)

    jac = jax.jacfwd(torque)(params.inertial)
    return jac.reshape(model.nv, -1)
