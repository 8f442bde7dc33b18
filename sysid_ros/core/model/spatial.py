"""Spatial (6D) algebra on SE(3), in Pinocchio's conventions.

Spatial motions are `[v; w]` (linear, then angular) and spatial forces `[f; n]`, both (6,)
and expressed in a body frame. A rigid transform `aMb` is the pair `(R, p)`: `R` (3, 3)
rotates vectors of frame b into frame a and `p` (3,) is b's origin in a [m]. Its actions:

  * `motion_act_inv(R, p, m)`  = Ad_{aMb}^{-1} m (motion in a -> motion in b)
  * `force_act(R, p, f)`       = Ad_{aMb}^{-*} f (force in b -> force in a)

which are the Lie-algebra operators of DiffNEA (Lutter et al. 2020; Kim 2012; Featherstone,
RBDA §2).
"""

import jax.numpy as jnp


def skew(x):
    """(3,) -> (3, 3) matrix [x] with [x] y = x x y."""
    return jnp.array([[0.0, -x[2], x[1]], [x[2], 0.0, -x[0]], [-x[1], x[0], 0.0]])


def rot_x(angle):
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rot_y(angle):
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rot_z(angle):
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rpy_to_matrix(rpy):
    """URDF roll-pitch-yaw (3,) [rad] -> rotation (3, 3): R = Rz(yaw) Ry(pitch) Rx(roll)."""
    return rot_z(rpy[2]) @ rot_y(rpy[1]) @ rot_x(rpy[0])


def quaternion_to_matrix(quaternion):
    """Unit quaternions (..., 4) [x, y, z, w] (ROS's geometry_msgs/Quaternion order) ->
    rotations (..., 3, 3) (columns: the rotated frame's axes)."""
    x, y, z, w = (quaternion[..., i] for i in range(4))
    rows = [[1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - z * w), 2.0 * (x * z + y * w)],
            [2.0 * (x * y + z * w), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - x * w)],
            [2.0 * (x * z - y * w), 2.0 * (y * z + x * w), 1.0 - 2.0 * (x * x + y * y)]]
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def axis_angle_to_matrix(axis, angle):
    """Rotation by `angle` [rad] about the unit `axis` (3,) (Rodrigues)."""
    k = skew(jnp.asarray(axis, dtype=jnp.result_type(angle, float)))
    return jnp.eye(3) + jnp.sin(angle) * k + (1.0 - jnp.cos(angle)) * (k @ k)


def compose(R1, p1, R2, p2):
    """(aMb, bMc) -> aMc."""
    return R1 @ R2, p1 + R1 @ p2


def motion_act_inv(R, p, m):
    """Ad_{aMb}^{-1}: motion (6,) in frame a -> frame b."""
    return jnp.concatenate([R.T @ (m[:3] - jnp.cross(p, m[3:])), R.T @ m[3:]])


def force_act(R, p, f):
    """Ad_{aMb}^{-*}: force (6,) in frame b -> frame a."""
    lin = R @ f[:3]
    return jnp.concatenate([lin, R @ f[3:] + jnp.cross(p, lin)])


def motion_cross(m1, m2):
    """ad_{m1} m2 = m1 x m2 for motions (6,)."""
    v, w = m1[:3], m1[3:]
    return jnp.concatenate([jnp.cross(w, m2[:3]) + jnp.cross(v, m2[3:]),
                            jnp.cross(w, m2[3:])])


def force_cross(m, f):
    """-ad*_{m} f = m x* f: motion (6,) acting on force (6,)."""
    v, w = m[:3], m[3:]
    return jnp.concatenate([jnp.cross(w, f[:3]), jnp.cross(w, f[3:]) + jnp.cross(v, f[:3])])


def motion_matrix_inv(R, p):
    """(6, 6) matrix of Ad_{aMb}^{-1} (maps motions in a to motions in b)."""
    Rt = R.T
    top = jnp.concatenate([Rt, -Rt @ skew(p)], axis=1)
    bottom = jnp.concatenate([jnp.zeros((3, 3), Rt.dtype), Rt], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def rotational_inertia(pi):
    """(10,) Pinocchio inertial vector -> (3, 3) rotational inertia about the body origin."""
    ixx, ixy, iyy, ixz, iyz, izz = pi[4], pi[5], pi[6], pi[7], pi[8], pi[9]
    return jnp.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])


def inertia_matrix(pi):
    """(10,) inertial vector about the body origin -> (6, 6) spatial inertia ([v; w] order)."""
    m, h = pi[0], pi[1:4]
    H = skew(h)
    top = jnp.concatenate([m * jnp.eye(3), -H], axis=1)
    bottom = jnp.concatenate([H, rotational_inertia(pi)], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def inertia_apply(pi, m):
    """Spatial inertia (10,) times motion (6,) -> force (6,); linear in `pi`."""
    mass, h = pi[0], pi[1:4]
    v, w = m[:3], m[3:]
    return jnp.concatenate([mass * v - jnp.cross(h, w),
                            rotational_inertia(pi) @ w + jnp.cross(h, v)])
