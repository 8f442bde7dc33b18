"""Inertial parameters of a rigid body: physical, Pinocchio 10-vector and DiffNEA virtual forms.

Three descriptions of one body's mass distribution are used across the package:

  * physical: `mass` [kg], `com` (3,) centre of mass in the body frame [m] and `inertia_c`
    (3, 3) rotational inertia about the COM in the body axes [kg m^2] (the URDF `<inertial>`
    convention);
  * inertial: Pinocchio's (10,) vector about the body origin,
    `[m, m c_x, m c_y, m c_z, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]` [kg, kg m, kg m^2], linear in
    the dynamics (the regressor's order);
  * virtual (DiffNEA; Lutter et al. 2021, sec. 3.2.2; Sutanto et al. 2020): (10,)
    unconstrained numbers `[mass_raw, com (3), sqrt_l (3), rpy (3)]` that map to a physically
    consistent body for every value.

All functions are pure JAX, accept leading batch axes (`...`), and can be jitted, vmapped and
differentiated. The eigendecomposition in `virtual_from_physical` has no useful gradient where
principal moments coincide; it is meant for initialisation, not inside a loss.
"""

import jax
import jax.numpy as jnp

from sysid_ros.core.model.spatial import rpy_to_matrix as _rpy_to_matrix_single

__all__ = [
    'rpy_to_matrix',
    'matrix_to_rpy',
    'inertia_matrix_from_entries',
    'inertia_entries',
    'inertial_from_physical',
    'physical_from_inertial',
    'inertia_from_virtual',
    'virtual_from_inertia',
    'physical_from_virtual',
    'is_inertia_consistent',
    'virtual_from_physical',
    'softplus_inverse',
    'principal_moments',
    'is_physically_consistent',
]


# ------------------------------------------------------------------------------------------
# Rotations
# ------------------------------------------------------------------------------------------

def rpy_to_matrix(rpy):
    """URDF roll-pitch-yaw (..., 3) [rad] -> rotation (..., 3, 3), R = Rz(yaw) Ry(pitch) Rx(roll).

    A batched front end to `spatial.rpy_to_matrix`.
    """
    return jnp.vectorize(_rpy_to_matrix_single, signature='(3)->(3,3)')(jnp.asarray(rpy))


def matrix_to_rpy(rot):
    """Rotation (..., 3, 3) -> URDF roll-pitch-yaw (..., 3) [rad], the inverse of `rpy_to_matrix`.

    With R = Rz(y) Ry(p) Rx(r): yaw = atan2(R10, R00) (as R00 = cos y cos p, R10 = sin y cos p);
    then M = Rz(y)^T R = Ry(p) Rx(r) gives roll = atan2(-M12, M11) and
    pitch = atan2(-M20, M00), all well conditioned, pitch in [-pi/2, pi/2]. At gimbal lock
    (cos p = 0) any yaw is absorbed into roll, so R is still reproduced.

    Args:
      rot: (..., 3, 3) rotation matrices.

    Returns:
      (..., 3) angles `[roll, pitch, yaw]` [rad].
    """
    rot = jnp.asarray(rot)
    yaw = jnp.arctan2(rot[..., 1, 0], rot[..., 0, 0])
    cy, sy = jnp.cos(yaw), jnp.sin(yaw)
    m00 = cy * rot[..., 0, 0] + sy * rot[..., 1, 0]
    m11 = cy * rot[..., 1, 1] - sy * rot[..., 0, 1]
    m12 = cy * rot[..., 1, 2] - sy * rot[..., 0, 2]
    roll = jnp.arctan2(-m12, m11)
    pitch = jnp.arctan2(-rot[..., 2, 0], m00)
    return jnp.stack([roll, pitch, yaw], axis=-1)


# ------------------------------------------------------------------------------------------
# Physical <-> Pinocchio inertial vector
# ------------------------------------------------------------------------------------------

def inertia_matrix_from_entries(ixx, ixy, ixz, iyy, iyz, izz):
    """Six entries (...,) -> symmetric (..., 3, 3) matrix."""
    row0 = jnp.stack([ixx, ixy, ixz], axis=-1)
    row1 = jnp.stack([ixy, iyy, iyz], axis=-1)
    row2 = jnp.stack([ixz, iyz, izz], axis=-1)
    return jnp.stack([row0, row1, row2], axis=-2)


def inertia_entries(inertia_c):
    """(..., 3, 3) matrix -> (..., 6) entries ixx, ixy, ixz, iyy, iyz, izz; inverse of
    `inertia_matrix_from_entries` on symmetric matrices."""
    inertia_c = jnp.asarray(inertia_c)
    return jnp.stack([inertia_c[..., i, j]
                      for i, j in ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))], axis=-1)


def _sym(a):
    return 0.5 * (a + jnp.swapaxes(a, -1, -2))


def _steiner(mass, com):
    """Parallel-axis term m (|c|^2 1 - c c^T): (...,), (..., 3) -> (..., 3, 3)."""
    cc = jnp.sum(com * com, axis=-1)
    eye = jnp.eye(3, dtype=com.dtype)
    outer = com[..., :, None] * com[..., None, :]
    return mass[..., None, None] * (cc[..., None, None] * eye - outer)


def inertial_from_physical(mass, com, inertia_c):
    """Physical parameters -> Pinocchio inertial vector about the body origin.

    Parallel-axis theorem (Featherstone, RBDA eq. 2.63): I_o = I_c + m (|c|^2 1 - c c^T).

    Args:
      mass: (...,) mass [kg].
      com: (..., 3) centre of mass in the body frame [m].
      inertia_c: (..., 3, 3) rotational inertia about the COM, body axes [kg m^2]; its
        symmetric part is used.

    Returns:
      (..., 10) `[m, m c_x, m c_y, m c_z, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]` about the origin.
    """
    mass, com, inertia_c = jnp.asarray(mass), jnp.asarray(com), jnp.asarray(inertia_c)
    dtype = jnp.result_type(mass, com, inertia_c, float)
    batch = jnp.broadcast_shapes(mass.shape, com.shape[:-1], inertia_c.shape[:-2])
    mass = jnp.broadcast_to(mass.astype(dtype), batch)
    com = jnp.broadcast_to(com.astype(dtype), batch + (3,))
    inertia_o = _sym(inertia_c.astype(dtype)) + _steiner(mass, com)
    mc = mass[..., None] * com
    return jnp.stack([mass, mc[..., 0], mc[..., 1], mc[..., 2],
                      inertia_o[..., 0, 0], inertia_o[..., 0, 1], inertia_o[..., 1, 1],
                      inertia_o[..., 0, 2], inertia_o[..., 1, 2], inertia_o[..., 2, 2]], axis=-1)


def physical_from_inertial(pi):
    """Pinocchio inertial vector -> physical parameters; inverse of `inertial_from_physical`.

    A massless body (m = 0) gets com = 0 and inertia_c = I_o, with finite gradients.

    Args:
      pi: (..., 10) inertial vector about the body origin.

    Returns:
      `(mass (...,), com (..., 3), inertia_c (..., 3, 3))`.
    """
    pi = jnp.asarray(pi)
    mass = pi[..., 0]
    nonzero = mass != 0.0
    safe_mass = jnp.where(nonzero, mass, 1.0)           # double-where: no NaN in gradients
    com = jnp.where(nonzero[..., None], pi[..., 1:4] / safe_mass[..., None], 0.0)
    inertia_o = inertia_matrix_from_entries(pi[..., 4], pi[..., 5], pi[..., 7],
                                            pi[..., 6], pi[..., 8], pi[..., 9])
    return mass, com, inertia_o - _steiner(mass, com)


# ------------------------------------------------------------------------------------------
# DiffNEA virtual parameters
# ------------------------------------------------------------------------------------------

def softplus_inverse(y):
    """Inverse of softplus, log(exp(y) - 1), for y > 0 (NaN for y <= 0), stable for large y."""
    y = jnp.asarray(y)
    return y + jnp.log(-jnp.expm1(-y))


def inertia_from_virtual(sqrt_l, rpy):
    """Map virtual inertia (DiffNEA) to the rotational inertia about the COM, consistent always.

    With L_i = sqrt_l_i^2 the second moments of mass along the principal axes, the principal
    moments J_p = diag(L2 + L3, L1 + L3, L1 + L2) are non-negative and satisfy the triangle
    inequalities; I_c = R J_p R^T with R = rpy_to_matrix(rpy) the principal axes.

    Args:
      sqrt_l: (..., 3) unconstrained square roots of the principal second moments [sqrt(kg) m].
      rpy: (..., 3) unconstrained roll-pitch-yaw of the principal axes [rad].

    Returns:
      (..., 3, 3) inertia about the COM in the body axes [kg m^2].
    """
    second = jnp.asarray(sqrt_l) ** 2                   # L_i >= 0
    j_p = jnp.sum(second, axis=-1, keepdims=True) - second   # (L2+L3, L1+L3, L1+L2)
    rot = rpy_to_matrix(rpy)
    return jnp.einsum('...ij,...j,...kj->...ik', rot, j_p, rot)


def principal_moments(inertia_c):
    """(..., 3, 3) inertia -> (..., 3) principal moments (ascending eigenvalues)."""
    return jnp.linalg.eigvalsh(_sym(jnp.asarray(inertia_c)))


def virtual_from_inertia(inertia_c):
    """Map the rotational inertia about the COM to DiffNEA's `(sqrt_l, rpy)`.

    A right inverse of `inertia_from_virtual` on consistent inertias.

    I_c = V diag(J) V^T (eigendecomposition, V made a rotation by flipping one column if
    det V = -1); L = tr(J)/2 - J, clipped at 0, so an inconsistent I_c (a triangle inequality
    or positivity violated) is projected onto the consistent set.

    Args:
      inertia_c: (..., 3, 3) symmetric inertia about the COM [kg m^2].

    Returns:
      `(sqrt_l (..., 3), rpy (..., 3))`.
    """
    moments, axes = jnp.linalg.eigh(_sym(jnp.asarray(inertia_c)))
    flip = jnp.where(jnp.linalg.det(axes) < 0.0, -1.0, 1.0)
    axes = axes.at[..., :, 2].multiply(flip[..., None])
    second = 0.5 * jnp.sum(moments, axis=-1, keepdims=True) - moments   # L = tr(J)/2 - J
    return jnp.sqrt(jnp.clip(second, 0.0)), matrix_to_rpy(axes)


def physical_from_virtual(virtual):
    """Map virtual parameters (DiffNEA) to physical ones, consistent for every input.

    The mass is `softplus(mass_raw)` (smooth, positive, ~linear for large masses; DiffNEA
    squares a root instead, whose gradient vanishes at zero).

    Args:
      virtual: (..., 10) `[mass_raw, com (3) [m], sqrt_l (3), rpy (3) [rad]]`.

    Returns:
      `(mass (...,), com (..., 3), inertia_c (..., 3, 3))`.
    """
    virtual = jnp.asarray(virtual)
    mass = jax.nn.softplus(virtual[..., 0])
    return mass, virtual[..., 1:4], inertia_from_virtual(virtual[..., 4:7], virtual[..., 7:10])


def virtual_from_physical(mass, com, inertia_c):
    """Map physical parameters to DiffNEA virtual parameters.

    The inverse of `physical_from_virtual` for a consistent body (mass > 0; otherwise the
    mass entry is NaN).

    Args:
      mass: (...,) [kg]; com: (..., 3) [m]; inertia_c: (..., 3, 3) [kg m^2].

    Returns:
      (..., 10) `[mass_raw, com, sqrt_l, rpy]`.
    """
    mass, com = jnp.asarray(mass), jnp.asarray(com)
    sqrt_l, rpy = virtual_from_inertia(inertia_c)
    batch = sqrt_l.shape[:-1]
    mass_raw = jnp.broadcast_to(softplus_inverse(mass), batch)[..., None]
    com = jnp.broadcast_to(com, batch + (3,))
    return jnp.concatenate([mass_raw.astype(sqrt_l.dtype), com.astype(sqrt_l.dtype),
                            sqrt_l, rpy], axis=-1)


# ------------------------------------------------------------------------------------------
# Consistency
# ------------------------------------------------------------------------------------------

def is_inertia_consistent(inertia_c, atol=1e-10, rtol=1e-6):
    """Check that rotational inertias about the centre of mass are those of real bodies.

    The principal moments J of I_c are positive up to the tolerance, J_i >= -tol, and satisfy
    the triangle inequalities J_i <= J_j + J_k + tol, where tol = atol + rtol tr(I_c)
    (Traversaro 2016). Zero (a point mass) and a thin rod pass.

    Args:
      inertia_c: (..., 3, 3) inertia about the COM [kg m^2].
      atol: absolute tolerance [kg m^2].
      rtol: tolerance relative to tr(I_c).

    Returns:
      (...,) bool, False where an entry is not finite.
    """
    inertia_c = jnp.asarray(inertia_c)
    finite = jnp.all(jnp.isfinite(inertia_c), axis=(-2, -1))
    moments = principal_moments(jnp.where(finite[..., None, None], inertia_c, 0.0))
    total = jnp.sum(moments, axis=-1)
    tol = atol + rtol * jnp.abs(total)
    positive = moments[..., 0] >= -tol
    triangle = jnp.all(total[..., None] - 2.0 * moments >= -tol[..., None], axis=-1)
    return finite & positive & triangle


def is_physically_consistent(pi, atol=1e-10, rtol=1e-6):
    """Check that inertial vectors describe real bodies (Traversaro 2016; Wensing 2017).

    Checks, per body: all entries finite; m > 0; the inertia about the COM passes
    `is_inertia_consistent`. A point mass (I_c = 0) or a thin rod is accepted; pass a negative
    `atol` to demand a margin.

    Args:
      pi: (..., 10) Pinocchio inertial vectors about the body origin.
      atol: absolute tolerance [kg m^2].
      rtol: tolerance relative to tr(I_c).

    Returns:
      (...,) bool.
    """
    pi = jnp.asarray(pi)
    mass, _, inertia_c = physical_from_inertial(pi)
    finite = jnp.all(jnp.isfinite(pi), axis=-1)
    return (finite & (mass > 0.0)
            & is_inertia_consistent(inertia_c, atol=atol, rtol=rtol))
