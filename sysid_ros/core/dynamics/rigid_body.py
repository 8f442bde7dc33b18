"""Rigid-body dynamics of kinematic trees: RNEA, CRBA, ABA and the joint-torque regressor.

All functions take one state (no batch axes; batch with `jax.vmap`), work in body frames
(Featherstone, RBDA ch. 5-7, in the Lie-algebra form of Lutter et al. 2020) and are
differentiable with respect to state, torque and every leaf of `Params`. Bodies are visited
in index order, parents before children (`io.model_io` orders them). Rigid-body terms only,
plus rotor armature on the mass-matrix diagonal; friction and actuators live in `actuators`.

CRBA uses 6D spatial algebra (`model.spatial`), and so does RNEA except on scanned chains.
The ABA, which every simulation runs, and RNEA on chains work in canonical joint frames
whose axis is z (motion subspaces become selections), on 3-vectors and 3x3 blocks
(`model.blocks`) with an optimisation barrier after each stage, and the ABA's derivatives go
through RNEA (its custom JVP): a formulation that XLA:CPU runs fast under `vmap`. Each pass
is one per-body step swept over the tree; on a chain the sweep is a `lax.scan`, so compile
time does not grow with the number of bodies.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics.kinematics import joint_transform, subspace_dot, subspace_times
from sysid_ros.core.model import blocks, spatial
from sysid_ros.core.model.types import Params, PRISMATIC, RobotModel


def _link_transforms(model: RobotModel, params: Params, q):
    return [joint_transform(model, params, i, q[i]) for i in range(model.num_bodies)]


def rnea(model: RobotModel, params: Params, q, qd, qdd):
    """Inverse dynamics tau = M(q) qdd + C(q, qd) qd + g(q) (Featherstone RBDA Table 5.1).

    A `_scanned` chain runs it in canonical joint frames on 3-vectors, one `lax.scan` per
    direction; other trees run `_spatial_rnea`.

    Args:
      q, qd, qdd: (nv,) joint positions [rad, m], velocities and accelerations.

    Returns:
      (nv,) joint torques/forces [N m, N], armature included.
    """
    if not _scanned(model):
        return _spatial_rnea(model, params, q, qd, qdd)
    dtype = jnp.result_type(q, qd, qdd, params.inertial)
    E, r, mass, h, inertia = _canonical_links(model, params)
    zero = jnp.zeros(3, dtype)
    root = (zero, zero) + _base_acceleration(model, dtype)
    poses, forces = _root_to_leaves(model, _motion_force_step, root, (
        E, r, q.astype(dtype), qd.astype(dtype), qdd.astype(dtype), mass, h, inertia))
    tau = _leaves_to_root(model, _torque_step, (zero, zero), (poses, forces))
    return tau + params.armature * qdd


def _spatial_rnea(model: RobotModel, params: Params, q, qd, qdd):
    """RNEA on 6D spatial algebra, unrolled over the bodies (the trees that `_scanned`
    leaves unrolled, whose gradients run faster through it than through unrolled
    canonical-frame steps)."""
    dtype = jnp.result_type(q, params.inertial)
    xs = _link_transforms(model, params, q)
    a0 = jnp.concatenate(_base_acceleration(model, dtype))
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


def _base_acceleration(model: RobotModel, dtype):
    """Spatial acceleration (linear, angular) of the fixed base that stands in for gravity."""
    return -jnp.asarray(model.gravity, dtype), jnp.zeros(3, dtype)


def _scanned(model: RobotModel) -> bool:
    """True where the sweeps run as `lax.scan`s: an unbranched chain (body i's parent is i - 1)
    of three or more bodies with one joint type (shorter chains run faster unrolled)."""
    nb = model.num_bodies
    return (nb >= 3 and model.parents == tuple(range(-1, nb - 1))
            and len(set(model.joint_types)) == 1)


def _stack(trees):
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def _scan_step(step):
    """A sweep's step for `lax.scan`, rematerialised in reverse mode: the transposed scan keeps
    only each body's inputs instead of every intermediate."""
    return jax.checkpoint(step, prevent_cse=False)


def _root_to_leaves(model: RobotModel, step, root, xs):
    """Run `step(prismatic, parent_carry, x_i) -> (carry_i, out_i)` over the bodies, parents
    first; the base's carry is `root`, xs are per-body inputs on a leading (nb,) axis.

    A `_scanned` chain runs as one `lax.scan`, anything else as an unrolled loop. Returns
    the outputs stacked on a leading (nb,) axis."""
    if _scanned(model):
        step = _scan_step(functools.partial(step, model.joint_types[0] == PRISMATIC))
        return jax.lax.scan(step, root, xs)[1]
    carries, outs = [], []
    for i, parent in enumerate(model.parents):
        carry, out = step(model.joint_types[i] == PRISMATIC,
                          carries[parent] if parent >= 0 else root,
                          jax.tree.map(lambda x: x[i], xs))
        carries.append(carry)
        outs.append(out)
    return _stack(outs)


def _leaves_to_root(model: RobotModel, step, zero, xs):
    """Run `step(prismatic, from_children, x_i) -> (to_parent, out_i)` over the bodies,
    children first; from_children is the sum of the children's to_parent (`zero` at a leaf).
    As in `_root_to_leaves`, a `_scanned` chain runs as one reversed `lax.scan`."""
    if _scanned(model):
        step = _scan_step(functools.partial(step, model.joint_types[0] == PRISMATIC))
        return jax.lax.scan(step, zero, xs, reverse=True)[1]
    received, outs = [zero] * model.num_bodies, [None] * model.num_bodies
    for i in reversed(range(model.num_bodies)):
        to_parent, outs[i] = step(model.joint_types[i] == PRISMATIC, received[i],
                                  jax.tree.map(lambda x: x[i], xs))
        parent = model.parents[i]
        if parent >= 0:
            received[parent] = jax.tree.map(jnp.add, received[parent], to_parent)
    return _stack(outs)


def _canonical_links(model: RobotModel, params: Params):
    """Every body's link in canonical joint frames (`kinematics.canonical_rotations`), on a
    leading (nb,) axis: E (nb, 3, 3) rotation and r (nb, 3) origin [m] of the joint frame at
    q = 0 in the parent's canonical frame, mass (nb,) [kg], first moment h (nb, 3) [kg m],
    rotational inertia (nb, 3, 3) about the origin [kg m^2]."""
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
    return blocks.materialize(_stack(links))


def _canonical_pose(prismatic: bool, E, r, q_i):
    """(R, p) of a body's canonical frame in its parent's: E Rz(q_i), r for a revolute joint,
    E, r + q_i E e_z for a prismatic one."""
    if prismatic:
        return E, r + E[:, 2] * q_i
    c, s = jnp.cos(q_i), jnp.sin(q_i)
    return jnp.stack([E[:, 0] * c + E[:, 1] * s, E[:, 1] * c - E[:, 0] * s, E[:, 2]], axis=1), r


def _along_axis(prismatic: bool, x):
    """S x as a (linear, angular) pair of 3-vectors: x on the z component of one of them."""
    zero = jnp.zeros_like(x)
    e = jnp.stack([zero, zero, x])
    return (e, jnp.zeros_like(e)) if prismatic else (jnp.zeros_like(e), e)


def _to_child(R, p, motion):
    """Motion (linear, angular) in the parent frame -> the child frame (R, p) placed in it."""
    lin, ang = motion
    return blocks.rmatvec(R, lin - blocks.cross(p, ang)), blocks.rmatvec(R, ang)


def _to_parent(R, p, force):
    """Force (linear, angular) in the child frame (R, p) -> the parent frame."""
    lin = blocks.matvec(R, force[0])
    return lin, blocks.matvec(R, force[1]) + blocks.cross(p, lin)


def _inertia_times(mass, h, inertia, motion):
    """Spatial inertia (mass, first moment h, rotational inertia about the origin) times a
    motion (linear, angular): the force [m v - h x w; I w + h x v]."""
    v, w = motion
    return mass * v - blocks.cross(h, w), blocks.matvec(inertia, w) + blocks.cross(h, v)


def _velocity(prismatic: bool, pose, parent_velocity, qd_i):
    """A body's velocity (v, w) from its parent's and its joint rate, and the velocity-product
    acceleration c = v x S qd (RBDA eq. 7.31)."""
    s_qd = _along_axis(prismatic, qd_i)
    v, w = _to_child(*pose, parent_velocity)
    v, w = v + s_qd[0], w + s_qd[1]
    c = (blocks.cross(w, s_qd[0]) + blocks.cross(v, s_qd[1]), blocks.cross(w, s_qd[1]))
    return (v, w), c


def _bias_force(mass, h, inertia, velocity):
    """v x* (I v), the gyroscopic force of a body moving with `velocity` (v, w)."""
    v, w = velocity
    momentum = _inertia_times(mass, h, inertia, velocity)
    return (blocks.cross(w, momentum[0]),
            blocks.cross(w, momentum[1]) + blocks.cross(v, momentum[0]))


def _motion_force_step(prismatic, parent, x):
    """RNEA's forward step: velocity and acceleration from the parent's, then the net force
    I a + v x* I v of the body; carries (v, w, a_lin, a_ang), outputs (pose, force)."""
    E, r, q_i, qd_i, qdd_i, mass, h, inertia = x
    pose = _canonical_pose(prismatic, E, r, q_i)
    velocity, c = _velocity(prismatic, pose, parent[:2], qd_i)
    s_qdd = _along_axis(prismatic, qdd_i)
    a_lin, a_ang = _to_child(*pose, parent[2:])
    acc = (a_lin + s_qdd[0] + c[0], a_ang + s_qdd[1] + c[1])
    force = jax.tree.map(jnp.add, _inertia_times(mass, h, inertia, acc),
                         _bias_force(mass, h, inertia, velocity))
    return blocks.materialize((velocity + acc, (pose, force)))


def _torque_step(prismatic, from_children, x):
    """RNEA's backward step: the body's force plus its children's, projected on the joint
    axis (tau_i) and carried to the parent."""
    pose, force = x
    f = (force[0] + from_children[0], force[1] + from_children[1])
    return _to_parent(*pose, f), f[0 if prismatic else 1][2]


def _velocity_step(prismatic, parent_velocity, x):
    """ABA pass 1: pose, velocity, velocity-product acceleration c and bias force p."""
    E, r, q_i, qd_i, mass, h, inertia = x
    pose = _canonical_pose(prismatic, E, r, q_i)
    velocity, c = _velocity(prismatic, pose, parent_velocity, qd_i)
    return blocks.materialize((velocity, (pose, c, _bias_force(mass, h, inertia, velocity))))


def _articulated_step(prismatic, from_children, x):
    """ABA pass 2 (RBDA Table 7.1): the articulated inertia [[A, B], [B^T, C]] (force =
    [A v + B w; B^T v + C w]) and bias force (f, n) of a body, its own plus its children's;
    with a canonical axis S^T picks one component and U = I^A S one column. Outputs
    (U, D, u) and carries I^a, p^a to the parent: X^* I^a X, X^* p^a."""
    pose, c, bias, mass, h, inertia, armature_i, tau_i = x
    A_ch, B_ch, C_ch, f_ch, n_ch = from_children
    A = mass * jnp.eye(3, dtype=A_ch.dtype) + A_ch
    B, C = B_ch - blocks.skew(h), C_ch + inertia
    f, n = bias[0] + f_ch, bias[1] + n_ch
    if prismatic:
        U, D, u = (A[:, 2], B[2]), A[2, 2] + armature_i, tau_i - f[2]
    else:
        U, D, u = (B[:, 2], C[:, 2]), C[2, 2] + armature_i, tau_i - n[2]
    U_lin_d, U_ang_d = U[0] / D, U[1] / D
    A = A - blocks.outer(U[0], U_lin_d)
    B = B - blocks.outer(U[0], U_ang_d)
    C = C - blocks.outer(U[1], U_ang_d)
    f = f + blocks.matvec(A, c[0]) + blocks.matvec(B, c[1]) + U_lin_d * u
    n = n + blocks.rmatvec(B, c[0]) + blocks.matvec(C, c[1]) + U_ang_d * u
    A, B, C, f, n = blocks.materialize((A, B, C, f, n))
    # X^* I^a X: rotate every block into the parent's axes, then shift by p.
    R, p = pose
    R_T = blocks.transpose(R)
    A, B, C = blocks.materialize(
        (blocks.matmul(A, R_T), blocks.matmul(B, R_T), blocks.matmul(C, R_T)))
    A, B, C = blocks.materialize(
        (blocks.matmul(R, A), blocks.matmul(R, B), blocks.matmul(R, C)))
    P = blocks.skew(p)
    B_shift = B - blocks.matmul(A, P)
    C = C + blocks.matmul(P, B_shift) + blocks.transpose(blocks.matmul(P, B))
    f, n = _to_parent(R, p, (f, n))
    return blocks.materialize(((A, B_shift, C, f, n), (U, D, u)))


def _acceleration_step(prismatic, parent_acc, x):
    """ABA pass 3: qdd_i = (u - U^T a') / D with a' = X a_parent + c; carries a' + S qdd_i."""
    pose, c, U, D, u = x
    a_lin, a_ang = _to_child(*pose, parent_acc)
    a_lin, a_ang = a_lin + c[0], a_ang + c[1]
    qdd_i = (u - jnp.sum(U[0] * a_lin, 0) - jnp.sum(U[1] * a_ang, 0)) / D
    s_qdd = _along_axis(prismatic, qdd_i)
    return (a_lin + s_qdd[0], a_ang + s_qdd[1]), qdd_i


def _articulated_body(model: RobotModel, params: Params, q, qd, tau):
    """ABA in canonical frames on 3-vectors and 3x3 blocks (RBDA Table 7.1), three sweeps.

    Returns qdd (nv,) and the factorisation `(poses, U, D)` of M(q) (each on a leading (nb,)
    axis) that `_mass_solve` reuses.
    """
    dtype = jnp.result_type(q, qd, tau, params.inertial)
    E, r, mass, h, inertia = _canonical_links(model, params)
    zero, zero33 = jnp.zeros(3, dtype), jnp.zeros((3, 3), dtype)
    poses, c, bias = _root_to_leaves(model, _velocity_step, (zero, zero), (
        E, r, q.astype(dtype), qd.astype(dtype), mass, h, inertia))
    U, D, u = _leaves_to_root(model, _articulated_step, (zero33,) * 3 + (zero,) * 2, (
        poses, c, bias, mass, h, inertia, params.armature.astype(dtype), tau.astype(dtype)))
    qdd = _root_to_leaves(model, _acceleration_step, _base_acceleration(model, dtype),
                          (poses, c, U, D, u))
    return qdd, (poses, U, D)


def _solve_step(prismatic, from_children, x):
    """`_mass_solve`'s pass 2: u = rhs_i - S^T p^A, and p^A + U u / D carried to the parent."""
    pose, U, D, rhs_i = x
    f, n = from_children
    u = rhs_i - (f if prismatic else n)[2]
    return _to_parent(*pose, (f + U[0] * (u / D), n + U[1] * (u / D))), u


def _mass_solve(model: RobotModel, factor, rhs):
    """M(q)^-1 rhs (nv,) from the factorisation of `_articulated_body`: its passes 2 and 3
    with no velocity and no gravity. Linear in `rhs` (JAX transposes it for reverse mode)."""
    poses, U, D = factor
    zero = jnp.zeros(3, rhs.dtype)
    u = _leaves_to_root(model, _solve_step, (zero, zero), (poses, U, D, rhs))
    no_bias = (jnp.zeros_like(U[0]), jnp.zeros_like(U[1]))
    return _root_to_leaves(model, _acceleration_step, (zero, zero), (poses, no_bias, U, D, u))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def aba(model: RobotModel, params: Params, q, qd, tau):
    """Forward dynamics qdd = M(q)^-1 (tau - C(q, qd) qd - g(q)), articulated-body algorithm.

    Featherstone RBDA Table 7.1 (Lutter et al. 2020, Algorithm 1) in canonical joint frames, on
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
