"""Joint transforms, motion subspaces and forward kinematics of a `RobotModel`.

The transform from body `i`'s parent to body `i` is `T_O(placement_i) T_q(q_i)` (DiffNEA,
Lutter et al. 2021, eq. 8): a fixed placement (translation + URDF RPY) followed by the joint
motion, a rotation about (revolute) or a translation along (prismatic) the joint axis.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import spatial
from sysid_ros.core.model.types import Params, PRISMATIC, RobotModel


def motion_subspace(model: RobotModel, i: int) -> np.ndarray:
    """(6,) constant motion subspace S_i of joint i in its own frame ([v; w] order)."""
    axis = np.asarray(model.axis[i], dtype=float)
    zero = np.zeros(3)
    if model.joint_types[i] == PRISMATIC:
        return np.concatenate([axis, zero])
    return np.concatenate([zero, axis])


def subspace_dot(model: RobotModel, i: int, f):
    """S_i^T f for a force/motion (6,) or (6, k), using only the non-zero entries of S_i."""
    s = motion_subspace(model, i)
    out = 0.0
    for k in np.flatnonzero(s):
        out = out + (f[k] if s[k] == 1.0 else s[k] * f[k])
    return out


def subspace_times(model: RobotModel, i: int, x, dtype):
    """S_i x for a scalar x -> (6,)."""
    return jnp.asarray(motion_subspace(model, i), dtype) * x


@functools.lru_cache(maxsize=None)
def canonical_rotations(model: RobotModel) -> tuple[np.ndarray, ...]:
    """Per body, the constant rotation C_i (3, 3) with C_i e_z = axis_i.

    Body i's canonical frame is its joint frame rotated by C_i, so that its joint turns about
    (or slides along) its own z axis and the motion subspace is a selection of one spatial
    component. For an axis along a coordinate axis C_i is a signed permutation (exact);
    otherwise its x axis is the unit vector orthogonal to the axis and to the coordinate axis
    least aligned with it.
    """
    rotations = []
    for axis in model.axis:
        z = np.asarray(axis, dtype=float)
        z = z / np.linalg.norm(z)
        k = int(np.argmax(np.abs(z)))
        if np.count_nonzero(z) == 1:
            # A cyclic permutation takes e_z to e_k; for -e_k flip z and x (det stays +1).
            columns = [np.eye(3)[(k + 1) % 3], np.eye(3)[(k + 2) % 3], np.eye(3)[k]]
            if z[k] < 0.0:
                columns = [-columns[0], columns[1], -columns[2]]
        else:
            x = np.cross(np.eye(3)[int(np.argmin(np.abs(z)))], z)
            x = x / np.linalg.norm(x)
            columns = [x, np.cross(z, x), z]
        rotations.append(np.stack(columns, axis=1))
    return tuple(rotations)


def placement_transform(placement):
    """(6,) [x, y, z, roll, pitch, yaw] -> (R, p) of the joint frame in the parent frame."""
    return spatial.rpy_to_matrix(placement[3:]), placement[:3]


def joint_transform(model: RobotModel, params: Params, i: int, q_i):
    """(R, p) of body i in its parent frame at joint position q_i [rad or m] (lambda_M_i)."""
    R0, p0 = placement_transform(params.placement[i])
    axis = np.asarray(model.axis[i], dtype=float)
    if model.joint_types[i] == PRISMATIC:
        return R0, p0 + R0 @ (jnp.asarray(axis, R0.dtype) * q_i)
    return R0 @ spatial.axis_angle_to_matrix(axis, q_i), p0


def forward_kinematics(model: RobotModel, params: Params, q):
    """World (base) placement of every body frame.

    Args:
      model: static tree.
      params: physical parameters (only `placement` is used).
      q: (nv,) joint positions [rad or m].

    Returns:
      R: (nb, 3, 3) body orientations in the base frame; p: (nb, 3) body origins [m].
    """
    rots, poss = [], []
    for i, parent in enumerate(model.parents):
        R, p = joint_transform(model, params, i, q[i])
        if parent >= 0:
            R, p = spatial.compose(rots[parent], poss[parent], R, p)
        rots.append(R)
        poss.append(p)
    return jnp.stack(rots), jnp.stack(poss)


def make_pose_fn(model, body: int):
    """Jitted `poses(params, q) -> (R (B, 3, 3), p (B, 3))` of `body` at (B, nv) positions."""
    def poses(params, q):
        rots, origins = jax.vmap(lambda qi: forward_kinematics(model, params, qi))(q)
        return rots[:, body], origins[:, body]

    return jax.jit(poses)
