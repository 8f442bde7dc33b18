"""Rigid-body dynamics of kinematic trees: RNEA, CRBA, ABA and the joint-torque regressor.

All functions take one state (no batch axes; batch with `jax.vmap`), work in body frames
(Lie-algebra form of the DiffNEA seeds, Featherstone's RBDA ch. 5-7) and are differentiable
with respect to state, torque and every leaf of `Params`. Bodies are visited in index order,
parents before children (guaranteed by `io.model_io`). Rigid-body terms only, plus rotor
armature on the mass-matrix diagonal; friction and actuator effects live in `actuators`.

RNEA and CRBA use 6D spatial algebra (`model.spatial`). The ABA, which every simulation
runs, is written for XLA:CPU under `vmap` (issue 18): canonical joint frames whose axis is z
(motion subspaces become selections), 3-vectors and 3x3 blocks (`model.blocks`) rather than
6x6 products, an optimisation barrier after each stage, and derivatives by identity through
RNEA (`aba`'s custom JVP). Measured against the 6x6 ABA with plain autodiff, same machine
(`bench/dynamics.py`): see the README's dynamics table.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics.kinematics import joint_transform, subspace_dot, subspace_times
from sysid_ros.core.model import blocks, spatial
from sysid_ros.core.model.types import PRISMATIC, Params, RobotModel


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


def _canonical_links(model: RobotModel, params: Params):
    """Per body, its link in canonical joint frames (`kinematics.canonical_rotations`):
    (E (3, 3) rotation and r (3,) origin [m] of the joint frame at q = 0 in the parent's
    canonical frame, mass [kg], first moment h (3,) [kg m], rotational inertia (3, 3) about
    the origin [kg m^2])."""
    rotations = kinematics.canonical_rotations(model)
    links = []
    for i, parent in enumerate(model.parents):
        C = rotations[i]
        C_parent = rotations[parent] if parent >= 0 else np.eye(3)
        placement, pi = params.placement[i], params.inertial[i]
        # E = C_parent^T R0 C and Ibar = C^T I C, with C's products done at trace time.
        R0_C = blocks.transpose(blocks.const_matmul(C.T, blocks.transpose(
            blocks.rpy_matrix(placement[3:]))))
        inertia = spatial.rotational_inertia(pi)
        inertia = blocks.const_matmul(C.T, blocks.transpose(blocks.const_matmul(C.T, inertia)))
        links.append((blocks.const_matmul(C_parent.T, R0_C),
                      blocks.const_matmul(C_parent.T, placement[:3]), pi[0],
                      blocks.const_matmul(C.T, pi[1:4]), inertia))
    return blocks.materialize(links)


def _canonical_pose(model: RobotModel, link, i: int, q_i):
    """(R, p) of body i's canonical frame in its parent's: E Rz(q_i), r for a revolute joint,
    E, r + q_i E e_z for a prismatic one."""
    E, r = link[0], link[1]
    if model.joint_types[i] == PRISMATIC:
        return E, r + E[:, 2] * q_i
    c, s = jnp.cos(q_i), jnp.sin(q_i)
    return jnp.stack([E[:, 0] * c + E[:, 1] * s, E[:, 1] * c - E[:, 0] * s, E[:, 2]], axis=1), r


def _along_axis(model: RobotModel, i: int, x):
    """S_i x as a (linear, angular) pair of 3-vectors: x on the z component of one of them."""
    zero = jnp.zeros_like(x)
    e = jnp.stack([zero, zero, x])
    return (e, jnp.zeros_like(e)) if model.joint_types[i] == PRISMATIC else (jnp.zeros_like(e), e)


def _to_child(R, p, motion):
    """Motion (linear, angular) in the parent frame -> the child frame (R, p) placed in it."""
    lin, ang = motion
    return blocks.rmatvec(R, lin - blocks.cross(p, ang)), blocks.rmatvec(R, ang)


def _to_parent(R, p, force):
    """Force (linear, angular) in the child frame (R, p) -> the parent frame."""
    lin = blocks.matvec(R, force[0])
    return lin, blocks.matvec(R, force[1]) + blocks.cross(p, lin)


def _articulated_body(model: RobotModel, params: Params, q, qd, tau):
    """ABA in canonical frames on 3-vectors and 3x3 blocks (RBDA Table 7.1).

    Returns qdd (nv,) and the factorisation `(poses, U, D)` of M(q) that `_mass_solve` reuses.
    Articulated inertias are kept as blocks [[A, B], [B^T, C]] (force = [A v + B w;
    B^T v + C w]); with canonical axes S_i^T picks one component, U_i = I^A_i S_i one column.
    """
    dtype = jnp.result_type(q, qd, tau, params.inertial)
    nb = model.num_bodies
    links = _canonical_links(model, params)
    poses = [_canonical_pose(model, links[i], i, q[i]) for i in range(nb)]
    prismatic = [t == PRISMATIC for t in model.joint_types]
    # Pass 1: velocities, velocity-product accelerations c_i and bias forces p_i.
    vel, bias_acc, inertia, bias = [], [], [], []
    for i, parent in enumerate(model.parents):
        s_qd = _along_axis(model, i, qd[i].astype(dtype))
        v, w = s_qd
        if parent >= 0:
            v_p, w_p = _to_child(*poses[i], vel[parent])
            v, w = v_p + v, w_p + w
        c = (blocks.cross(w, s_qd[0]) + blocks.cross(v, s_qd[1]), blocks.cross(w, s_qd[1]))
        _, _, mass, h, rot_inertia = links[i]
        momentum = (mass * v - blocks.cross(h, w), blocks.matvec(rot_inertia, w)
                    + blocks.cross(h, v))
        p = (blocks.cross(w, momentum[0]), blocks.cross(w, momentum[1])
             + blocks.cross(v, momentum[0]))
        v, w, c, p = blocks.materialize((v, w, c, p))
        vel.append((v, w))
        bias_acc.append(c)
        inertia.append((mass * jnp.eye(3, dtype=dtype), -blocks.skew(h), rot_inertia))
        bias.append(p)
    # Pass 2: articulated inertias and bias forces, leaves to root.
    U, D, u = [None] * nb, [None] * nb, [None] * nb
    for i in reversed(range(nb)):
        A, B, C = inertia[i]
        f, n = bias[i]
        if prismatic[i]:
            U[i] = (A[:, 2], B[2])
            D[i], u[i] = A[2, 2] + params.armature[i], tau[i] - f[2]
        else:
            U[i] = (B[:, 2], C[:, 2])
            D[i], u[i] = C[2, 2] + params.armature[i], tau[i] - n[2]
        parent = model.parents[i]
        if parent < 0:
            continue
        U_lin, U_ang = U[i]
        U_lin_d, U_ang_d = U_lin / D[i], U_ang / D[i]
        A = A - blocks.outer(U_lin, U_lin_d)
        B = B - blocks.outer(U_lin, U_ang_d)
        C = C - blocks.outer(U_ang, U_ang_d)
        c_lin, c_ang = bias_acc[i]
        f = f + blocks.matvec(A, c_lin) + blocks.matvec(B, c_ang) + U_lin_d * u[i]
        n = n + blocks.rmatvec(B, c_lin) + blocks.matvec(C, c_ang) + U_ang_d * u[i]
        A, B, C, f, n = blocks.materialize((A, B, C, f, n))
        # X_i^* I^a X_i: rotate every block into the parent's axes, then shift by p.
        R, p = poses[i]
        R_T = blocks.transpose(R)
        A, B, C = blocks.materialize(
            (blocks.matmul(A, R_T), blocks.matmul(B, R_T), blocks.matmul(C, R_T)))
        A, B, C = blocks.materialize(
            (blocks.matmul(R, A), blocks.matmul(R, B), blocks.matmul(R, C)))
        P = blocks.skew(p)
        B_shift = B - blocks.matmul(A, P)
        C = C + blocks.matmul(P, B_shift) + blocks.transpose(blocks.matmul(P, B))
        f, n = _to_parent(R, p, (f, n))
        B, C, f, n = blocks.materialize((B_shift, C, f, n))
        A_p, B_p, C_p = inertia[parent]
        inertia[parent] = (A_p + A, B_p + B, C_p + C)
        bias[parent] = (bias[parent][0] + f, bias[parent][1] + n)
    # Pass 3: accelerations, root to leaves.
    a0 = (-jnp.asarray(model.gravity, dtype), jnp.zeros(3, dtype))
    acc, qdd = [], []
    for i, parent in enumerate(model.parents):
        a_lin, a_ang = _to_child(*poses[i], acc[parent] if parent >= 0 else a0)
        a_lin, a_ang = a_lin + bias_acc[i][0], a_ang + bias_acc[i][1]
        qdd_i = (u[i] - jnp.sum(U[i][0] * a_lin, 0) - jnp.sum(U[i][1] * a_ang, 0)) / D[i]
        s_qdd = _along_axis(model, i, qdd_i)
        acc.append(blocks.materialize((a_lin + s_qdd[0], a_ang + s_qdd[1])))
        qdd.append(qdd_i)
    return jnp.stack(qdd), (poses, U, D)


def _mass_solve(model: RobotModel, factor, rhs):
    """M(q)^-1 rhs (nv,) from the factorisation of `_articulated_body`: its passes 2 and 3
    with no velocity and no gravity. Linear in `rhs` (JAX transposes it for reverse mode)."""
    poses, U, D = factor
    nb = model.num_bodies
    u, bias = [None] * nb, [None] * nb
    for i in reversed(range(nb)):
        axis = 0 if model.joint_types[i] == PRISMATIC else 1
        u[i] = rhs[i] if bias[i] is None else rhs[i] - bias[i][axis][2]
        parent = model.parents[i]
        if parent >= 0:
            # p^a_i = p^A_i + U_i u_i / D_i, carried to the parent.
            f = (U[i][0] * (u[i] / D[i]), U[i][1] * (u[i] / D[i]))
            if bias[i] is not None:
                f = (bias[i][0] + f[0], bias[i][1] + f[1])
            f = _to_parent(*poses[i], f)
            bias[parent] = f if bias[parent] is None else (bias[parent][0] + f[0],
                                                          bias[parent][1] + f[1])
    acc, out = [], []
    for i, parent in enumerate(model.parents):
        x_i = u[i] / D[i]
        if parent >= 0:
            a_lin, a_ang = _to_child(*poses[i], acc[parent])
            x_i = x_i - (jnp.sum(U[i][0] * a_lin, 0) + jnp.sum(U[i][1] * a_ang, 0)) / D[i]
            s_x = _along_axis(model, i, x_i)
            acc.append((a_lin + s_x[0], a_ang + s_x[1]))
        else:
            acc.append(_along_axis(model, i, x_i))
        out.append(x_i)
    return jnp.stack(out)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def aba(model: RobotModel, params: Params, q, qd, tau):
    """Forward dynamics qdd = M(q)^-1 (tau - C(q, qd) qd - g(q)), articulated-body algorithm.

    Featherstone RBDA Table 7.1 (seed 004, Algorithm 1) in canonical joint frames, on
    3-vectors and 3x3 blocks. Its derivatives come from the identity
    d qdd = M^-1 (d tau - d RNEA(q, qd, qdd)) [d q, d qd, d params] (Carpentier & Mansard 2018):
    forward and reverse mode differentiate RNEA only and reuse the ABA's factorisation of M.

    Args:
      q, qd: (nv,) joint positions and velocities.
      tau: (nv,) joint torques/forces applied by the actuators [N m, N].

    Returns:
      (nv,) joint accelerations [rad/s^2, m/s^2].
    """
    return _articulated_body(model, params, q, qd, tau)[0]


@aba.defjvp
def _aba_jvp(model, primals, tangents):
    params, q, qd, tau = primals
    d_params, d_q, d_qd, d_tau = tangents
    qdd, factor = _articulated_body(model, params, q, qd, tau)
    _, d_rnea = jax.jvp(lambda p, q_, qd_: rnea(model, p, q_, qd_, qdd), (params, q, qd),
                        (d_params, d_q, d_qd))
    return qdd, _mass_solve(model, factor, d_tau - d_rnea)


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
