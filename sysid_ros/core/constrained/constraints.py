"""Holonomic loop closure: an arm holding a flexible loop clamped at its far end.

The experiment of Caldwell et al. 2014, §IV-B.

The loop is a ring of `num_links` rigid rods joined by two-axis joints with torsional springs.
It is cut at the clamp into two branches that start at the arm's end effector H; the tip frame
N of each branch must coincide with the clamp frame: 3 position and 3 orientation constraints
per branch, 12 in all. Each two-axis joint is two revolute joints: first about the link-frame
y axis (the loop normal: in-plane bending, stiffness k1), then about the link-frame z axis
(out-of-plane bending, stiffness k2); the first of the two moves a massless body.

Frames: world z up. The arm is a serial chain of revolute joints; at q = 0 every frame is
aligned with the world and the loop hangs below H in the world y-z plane (normal x) as a
regular polygon with H at its top, which is the springs' rest shape. Link frames: x along the
link, y the loop normal, z = x cross y.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.dynamics import variational
from sysid_ros.core.model import builders
from sysid_ros.core.model import spatial
from sysid_ros.core.model.types import Params, REVOLUTE, RobotModel

AXES = {'x': (1.0, 0.0, 0.0), 'y': (0.0, 1.0, 0.0), 'z': (0.0, 0.0, 1.0)}


class FlexibleLoop(NamedTuple):
    """An arm + loop tree with the indices the loop experiment needs.

    Attributes:
      model, params: the tree (arm bodies first, then the two loop branches).
      arm: (na,) indices of the arm joints in q.
      bend_in: (n,) indices of the in-plane bending joints (stiffness k1).
      bend_out: (n,) indices of the out-of-plane bending joints (stiffness k2).
      end_effector: body index of H (the last arm body).
      ee_offset: (3,) position of H's grasp point in the last arm body frame [m].
      tips: (2,) body index of the last link of each branch.
      tip_offset: (3,) tip point N in a branch's last link frame [m].
      clamp_rotation: (2, 3, 3) clamp orientation of each branch's tip frame (world).
      clamp_position: (2, 3) clamp position of each branch's tip [m] (world).
    """

    model: RobotModel
    params: Params
    arm: tuple
    bend_in: tuple
    bend_out: tuple
    end_effector: int
    ee_offset: np.ndarray
    tips: tuple
    tip_offset: np.ndarray
    clamp_rotation: np.ndarray
    clamp_position: np.ndarray

    @property
    def nh(self) -> int:
        return 12


def _matrix_to_rpy(R):
    """URDF roll-pitch-yaw of R = Rz(yaw) Ry(pitch) Rx(roll) (numpy, away from pitch = +-pi/2)."""
    return np.array([np.arctan2(R[2, 1], R[2, 2]), np.arcsin(-np.clip(R[2, 0], -1.0, 1.0)),
                     np.arctan2(R[1, 0], R[0, 0])])


def _loop_branch_frames(num_links: int, radius: float, side: int):
    """Rest frames (R, p) of the links of one branch in the H frame, plus its tip point.

    Vertices of the regular polygon in the y-z plane, H at the top, centre at -radius z; the
    branch `side` = +1 goes towards +y, -1 towards -y; each branch has num_links / 2 links.
    """
    angles = 2.0 * np.pi * np.arange(num_links // 2 + 1) / num_links
    vertices = np.stack([np.zeros_like(angles), side * radius * np.sin(angles),
                         radius * (np.cos(angles) - 1.0)], axis=1)
    frames = []
    for j in range(num_links // 2):
        x = vertices[j + 1] - vertices[j]
        x = x / np.linalg.norm(x)
        y = np.array([1.0, 0.0, 0.0])
        frames.append((np.stack([x, y, np.cross(x, y)], axis=1), vertices[j]))
    return frames, vertices[-1]


def flexible_loop(num_links: int = 12, arm_lengths=(0.3, 0.3, 0.25, 0.25, 0.2, 0.15, 0.1),
                  arm_axes='zyxyxyx', arm_masses=(3.0, 2.5, 2.0, 1.5, 1.0, 0.6, 0.3),
                  loop_radius: float = 0.355, loop_mass: float = 0.132,
                  rod_radius: float = 0.01, dtype=jnp.float64) -> FlexibleLoop:
    """Build an arm (a serial revolute chain standing in for a 7-DOF arm) holding a loop.

    Args:
      num_links: number of loop links (even, >= 4); the loop adds 2 num_links joints.
      arm_lengths, arm_masses: (na,) arm link lengths [m] (the first along z, the rest along
        x at q = 0) and masses [kg]; arm_axes: na joint axes from 'xyz'.
      loop_radius, loop_mass: rest radius [m] and total mass [kg] of the loop (Caldwell et
        al. 2014, §IV-A: 0.355 m, 0.132 kg).

    Raises:
      ValueError: for an odd or too small num_links, or mismatched arm lengths/axes/masses.
    """
    if num_links < 4 or num_links % 2:
        raise ValueError(f'flexible_loop: num_links: expected an even number >= 4, '
                         f'got {num_links}')
    na = len(arm_lengths)
    if len(arm_axes) != na or len(arm_masses) != na:
        raise ValueError(f'flexible_loop: arm_lengths, arm_axes and arm_masses must have the '
                         f'same length, got {na}, {len(arm_axes)}, {len(arm_masses)}')
    names, parents, axes, placements, inertials = [], [], [], [], []

    def add(name, parent, axis, R, p, inertial):
        names.append(name)
        parents.append(parent)
        axes.append(AXES[axis])
        placements.append(np.concatenate([p, _matrix_to_rpy(R)]))
        inertials.append(inertial)
        return len(names) - 1

    eye = np.eye(3)
    offset, world = np.zeros(3), np.zeros(3)
    parent = -1
    for i in range(na):
        direction = np.array([0.0, 0.0, 1.0]) if i == 0 else np.array([1.0, 0.0, 0.0])
        parent = add(f'arm{i + 1}', parent, arm_axes[i], eye, offset,
                     builders.rod_inertial(arm_masses[i], arm_lengths[i], 0.04, direction))
        offset = arm_lengths[i] * direction
        world = world + offset
    end_effector, ee_offset = parent, offset
    link_length = 2.0 * loop_radius * np.sin(np.pi / num_links)
    rod = builders.rod_inertial(loop_mass / num_links, link_length, rod_radius, (1, 0, 0))
    bend_in, bend_out, tips, clamp_R, clamp_p = [], [], [], [], []
    for branch, side in enumerate((+1, -1)):
        frames, tip = _loop_branch_frames(num_links, loop_radius, side)
        prev_R, prev_p, parent = eye, np.zeros(3), end_effector
        for j, (R, p) in enumerate(frames):
            p = p + ee_offset
            R_rel, p_rel = prev_R.T @ R, prev_R.T @ (p - prev_p)
            hinge = add(f'loop{branch}_{j}_in', parent, 'y', R_rel, p_rel, np.zeros(10))
            parent = add(f'loop{branch}_{j}', hinge, 'z', eye, np.zeros(3), rod)
            bend_in.append(hinge)
            bend_out.append(parent)
            prev_R, prev_p = R, p
        tips.append(parent)
        clamp_R.append(prev_R)
        clamp_p.append(tip + world)
    nb = len(names)
    model = RobotModel(
        name=f'flexible_loop{num_links}', link_names=tuple(names),
        joint_names=tuple(f'{n}_joint' for n in names), parents=tuple(parents),
        joint_types=(REVOLUTE,) * nb, continuous=(False,) * nb, axis=tuple(axes),
        gravity=builders.GRAVITY, q_min=(-np.inf,) * nb, q_max=(np.inf,) * nb,
        v_max=(np.inf,) * nb, effort_max=(np.inf,) * nb)
    zeros = jnp.zeros((nb,), dtype)
    params = Params(inertial=jnp.asarray(np.stack(inertials), dtype),
                    placement=jnp.asarray(np.stack(placements), dtype), armature=zeros,
                    damping=zeros, coulomb=zeros, stribeck=jnp.zeros((nb, 2), dtype),
                    offset=zeros, gain=jnp.ones((nb,), dtype), load_coulomb=zeros)
    return FlexibleLoop(model, params, tuple(range(na)), tuple(bend_in), tuple(bend_out),
                        end_effector, ee_offset, tuple(tips),
                        np.array([link_length, 0.0, 0.0]), np.stack(clamp_R),
                        np.stack(clamp_p))


def orientation_error(R, R_target):
    """(3,) smooth orientation error vee(0.5 (Rt^T R - R^T Rt)); zero iff R = R_target near it."""
    E = 0.5 * (R_target.T @ R - R.T @ R_target)
    return jnp.stack([E[2, 1], E[0, 2], E[1, 0]])


def clamp_constraint(loop: FlexibleLoop, q):
    """Loop-closure constraints h(q) (12,): per branch, tip position minus clamp position [m]
    and the orientation error of the tip frame (both in world coordinates)."""
    R, p = kinematics.forward_kinematics(loop.model, loop.params, q)
    offset = jnp.asarray(loop.tip_offset, p.dtype)
    parts = []
    for branch, body in enumerate(loop.tips):
        tip = p[body] + R[body] @ offset
        parts.append(tip - jnp.asarray(loop.clamp_position[branch], p.dtype))
        clamp = jnp.asarray(loop.clamp_rotation[branch], p.dtype)
        parts.append(orientation_error(R[body], clamp))
    return jnp.concatenate(parts)


def loop_stiffness(loop: FlexibleLoop, rho):
    """(nv,) joint stiffness [N m/rad] from rho = [k1, k2]: k1 on the in-plane bending joints,
    k2 on the out-of-plane ones, zero on the arm."""
    nv = loop.model.nv
    in_mask = np.zeros(nv)
    in_mask[list(loop.bend_in)] = 1.0
    out_mask = np.zeros(nv)
    out_mask[list(loop.bend_out)] = 1.0
    return rho[0] * in_mask + rho[1] * out_mask


def _rotation(axis, angle):
    """Rodrigues rotation about a (3,) unit axis given as an array (traced-friendly)."""
    k = jnp.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]],
                   [-axis[1], axis[0], 0.0]], dtype=angle.dtype)
    return jnp.eye(3, dtype=angle.dtype) + jnp.sin(angle) * k + (1.0 - jnp.cos(angle)) * k @ k


def loop_kinematics(loop: FlexibleLoop, q):
    """World frames of the massive bodies, computed with scans along the arm and branches.

    Same kinematics as `kinematics.forward_kinematics(loop.model, ...)`, but the arm and the
    two (structurally identical) branches are `lax.scan`s over their joints and the branches
    are vmapped, so the traced program stays small for long loops.

    Args:
      q: (nv,) joint angles [rad] in the model's order (arm, branch 0, branch 1).

    Returns:
      arm: (R (na, 3, 3), p (na, 3)) arm body frames; links: (R (2, m, 3, 3), p (2, m, 3))
      loop link frames per branch (m = num_links / 2).
    """
    na = len(loop.arm)
    m = len(loop.bend_in) // 2
    dtype = q.dtype
    axes = jnp.asarray(np.asarray(loop.model.axis, dtype=float), dtype)
    rot, pos = jax.vmap(kinematics.placement_transform)(loop.params.placement)

    def arm_joint(carry, joint):
        R_parent, p_parent = carry
        R0, p0, axis, angle = joint
        R = R_parent @ R0 @ _rotation(axis, angle)
        p = p_parent + R_parent @ p0
        return (R, p), (R, p)

    start = (jnp.eye(3, dtype=dtype), jnp.zeros(3, dtype))
    (R_ee, p_ee), arm = jax.lax.scan(arm_joint, start,
                                     (rot[:na], pos[:na], axes[:na], q[:na]))
    # Hinge bodies carry the placements; each link rotates about y (hinge) then z (link).
    hinge = np.arange(na, loop.model.nv, 2).reshape(2, m)
    y_axis = jnp.asarray(AXES['y'], dtype)
    z_axis = jnp.asarray(AXES['z'], dtype)

    def link_joint(carry, joint):
        R_parent, p_parent = carry
        R0, p0, bend_in, bend_out = joint
        R = R_parent @ R0 @ _rotation(y_axis, bend_in) @ _rotation(z_axis, bend_out)
        p = p_parent + R_parent @ p0
        return (R, p), (R, p)

    def branch(R0, p0, angles):
        _, frames = jax.lax.scan(link_joint, (R_ee, p_ee), (R0, p0, angles[:, 0], angles[:, 1]))
        return frames

    angles = q[na:].reshape(2, m, 2)
    links = jax.vmap(branch)(rot[hinge], pos[hinge], angles)
    return arm, links


def _body_kinetic_energy(inertial, R, p, R_dot, p_dot):
    """0.5 [v; w]^T I [v; w] of one body from its world frame and its time derivative."""
    v = R.T @ p_dot
    w_hat = R.T @ R_dot
    twist = jnp.concatenate([v, jnp.stack([w_hat[2, 1], w_hat[0, 2], w_hat[1, 0]])])
    return 0.5 * twist @ spatial.inertia_apply(inertial, twist)


def loop_system(loop: FlexibleLoop, force=None) -> 'variational.MechanicalSystem':
    """The arm + loop as a constrained mechanical system with rho = [k1, k2] [N m/rad].

    L = KE - V_gravity - 0.5 k1 sum theta_i^2 - 0.5 k2 sum psi_i^2 with `loop_kinematics`
    (equal to `variational.model_system` on `loop.model`, but cheap to compile), the 12
    clamp constraints of `clamp_constraint` and the given generalized force
    (q, qd, u, rho) -> (nv,) (default: none).
    """
    na = len(loop.arm)
    inertial = loop.params.inertial
    arm_inertial = inertial[:na]
    link_inertial = inertial[np.asarray(loop.bend_out).reshape(2, -1)]
    gravity = jnp.asarray(loop.model.gravity, inertial.dtype)
    per_body = jax.vmap(_body_kinetic_energy)
    per_link = jax.vmap(per_body)

    def loop_gravity_potential(q):
        (R_arm, p_arm), (R_link, p_link) = loop_kinematics(loop, q)
        first_arm = arm_inertial[:, :1] * p_arm + jnp.einsum('bij,bj->bi', R_arm,
                                                             arm_inertial[:, 1:4])
        first_link = link_inertial[..., :1] * p_link + jnp.einsum('sbij,sbj->sbi', R_link,
                                                                  link_inertial[..., 1:4])
        return -(jnp.sum(first_arm @ gravity) + jnp.sum(first_link @ gravity))

    def lagrangian(q, qd, rho):
        kin = functools.partial(loop_kinematics, loop)
        ((R_arm, p_arm), (R_link, p_link)), ((dR_arm, dp_arm), (dR_link, dp_link)) = \
            jax.jvp(kin, (q,), (qd,))
        kinetic = (jnp.sum(per_body(arm_inertial, R_arm, p_arm, dR_arm, dp_arm))
                   + jnp.sum(per_link(link_inertial, R_link, p_link, dR_link, dp_link)))
        springs = 0.5 * jnp.sum(loop_stiffness(loop, rho) * q**2)
        return kinetic - loop_gravity_potential(q) - springs

    def constraint(q):
        _, (R_link, p_link) = loop_kinematics(loop, q)
        R_tip, p_tip = R_link[:, -1], p_link[:, -1]
        offset = jnp.asarray(loop.tip_offset, q.dtype)
        parts = []
        for branch in range(2):
            parts.append(p_tip[branch] + R_tip[branch] @ offset
                         - jnp.asarray(loop.clamp_position[branch], q.dtype))
            parts.append(orientation_error(R_tip[branch],
                                           jnp.asarray(loop.clamp_rotation[branch], q.dtype)))
        return jnp.concatenate(parts)

    def mass_matrix(q):
        return rigid_body.crba(loop.model, loop.params, q)

    def spring_matrix(q, rho):
        return jnp.diag(loop_stiffness(loop, rho))

    return variational.MechanicalSystem(lagrangian, force or variational.no_force, constraint,
                                        loop.model.nv, loop.nh, mass_matrix, spring_matrix)


def four_bar(lengths=(1.0, 0.8, 0.9), masses=(1.0, 0.8, 0.9), q_ref=(0.6, -1.2, -0.9),
             force=variational.no_force, dtype=jnp.float64):
    """Planar four-bar linkage: a 3-link chain (`builders.chain`, x-z plane) whose tip is
    pinned at its position for q_ref (2 constraints, 1 degree of freedom).

    The system's rho (3,) is the joint spring stiffness [N m/rad] (springs at rest at q = 0).

    Returns:
      (model, params, system, q_ref (3,)).
    """
    model, params = builders.chain(3, lengths, masses, dtype=dtype)
    tip_offset = jnp.array([0.0, 0.0, -lengths[-1]], dtype)

    def tip(q):
        R, p = kinematics.forward_kinematics(model, params, q)
        return (p[-1] + R[-1] @ tip_offset)[jnp.array([0, 2])]

    q_ref = jnp.asarray(q_ref, dtype)
    pivot = tip(q_ref)
    system = variational.model_system(model, params, lambda rho: rho, force,
                                      lambda q: tip(q) - pivot, 2)
    return model, params, system, q_ref


def soft_relu(g, sharpness: float = 50.0):
    """Softplus relaxation softplus(s g) / s of ReLU(g) (Lutter et al. 2021, §3.3): an inequality
    g <= 0 becomes the equality soft_relu(g) = 0 with a smooth gradient."""
    return jax.nn.softplus(sharpness * g) / sharpness


def along_path(fn, q, qd, qdd):
    """fn and its first two time derivatives along q(t) = q + t qd + t^2/2 qdd at t = 0.

    Exact, by nested jvps in the scalar t: for a configuration sample (q, qd, qdd) these are
    fn(q), d/dt fn(q(t)) and d^2/dt^2 fn(q(t)).

    Returns:
      (value, rate, second rate), each shaped like fn(q).
    """
    def value(t):
        return fn(q + t * qd + 0.5 * t**2 * qdd)

    def value_and_rate(t):
        return jax.jvp(value, (t,), (jnp.ones_like(t),))

    zero = jnp.zeros((), q.dtype)
    (f, f_dot), (_, f_ddot) = jax.jvp(value_and_rate, (zero,), (jnp.ones_like(zero),))
    return f, f_dot, f_ddot


def derivative_level_penalty(inequality, q, qd, qdd, sharpness: float = 50.0):
    """Penalty h^2 + hd^2 + hdd^2 of h = soft_relu(g(q)) along a trajectory sample.

    Enforces the relaxed inequality g(q) <= 0 "on the derivative level" (Lutter et al.
    2021, §3.3): h, its first and second time derivatives along (qd, qdd) must vanish
    (`along_path`).

    Args:
      inequality: q -> (nc,) constraint values g, feasible where <= 0.
      q, qd, qdd: (nq,) configuration, velocity and acceleration of one sample.

    Returns:
      () sum of squares over the constraints.
    """
    h, hd, hdd = along_path(lambda q: soft_relu(inequality(q), sharpness), q, qd, qdd)
    return jnp.sum(h**2 + hd**2 + hdd**2)


def string_tension_force(ball, ball_velocity, anchor, anchor_velocity, anchor_acceleration,
                         length, mass, gravity=builders.GRAVITY, sharpness: float = 50.0,
                         frequency: float = 0.0, slack_tolerance: float = 0.0):
    """Closed-form force (3,) [N] of an inextensible massless string on a ball (ball in a cup).

    By virtual work, the string force is along r = ball - anchor, f = lam r, with lam chosen
    so that the constraint C = (|r|^2 - length^2) / 2 follows C_ddot = -2 w C_dot - w^2 C
    while the string is taut (Baumgarte stabilisation at `frequency` w [rad/s]; w = 0 gives
    C_ddot = 0 and lets a drift in length persist):
    lam = m (-2 w C_dot - w^2 C - r . (g - a_anchor) - |r_dot|^2) / |r|^2. The string only
    pulls (lam <= 0) and only acts when taut (|r| >= length - slack_tolerance); both
    switches use the softplus relaxation of ReLU (`soft_relu`), so the force is smooth in
    every argument and parameter.

    Args:
      ball: (3,) ball position [m] (world).
      ball_velocity: (3,) ball velocity [m/s] (world).
      anchor: (3,) string attachment point on the end effector [m] (world).
      anchor_velocity: (3,) its velocity [m/s].
      anchor_acceleration: (3,) its acceleration [m/s^2].
      length: string length [m].
      mass: ball mass [kg].
      gravity: (3,) gravity [m/s^2] (world).
      sharpness: [1/m] slope of the taut switch (and [s^2/m] of the pull-only switch).
      frequency: Baumgarte frequency w [rad/s].
      slack_tolerance: [m] shift of the taut switch so that it is (almost) fully on at
        |r| = length.
    """
    r = ball - anchor
    r_dot = ball_velocity - anchor_velocity
    g = jnp.asarray(gravity, r.dtype)
    c, c_dot = 0.5 * (r @ r - length**2), r @ r_dot
    target = -2.0 * frequency * c_dot - frequency**2 * c
    lam = mass * (target - r @ (g - anchor_acceleration) - r_dot @ r_dot) / (r @ r)
    pull = -soft_relu(-lam, sharpness)
    taut = jax.nn.sigmoid(sharpness * (jnp.linalg.norm(r) - length + slack_tolerance))
    return taut * pull * r
