"""Forward dynamics through the native CPU kernels: Pinocchio's ABA as an XLA FFI custom call.

The CPU path of issue 18: `aba` computes the same qdd as `rigid_body.aba` (the pure-JAX ABA,
which stays the path for GPUs and for every other function) by calling the FFI targets of
`sysid_ros/native/dynamics_ffi.cc`, which run Pinocchio per particle over the batch on several
threads. It works under `jit` and `vmap` (every batch axis becomes the kernel's batch) and has
a custom VJP from the identity d qdd = M^-1 (d tau - d RNEA(q, qd, qdd)) (Carpentier & Mansard
2018), lambda = M^-1 g for a cotangent g: Pinocchio's `computeRNEADerivatives` (and M) for q,
qd and tau, its body regressors for the inertial parameters (lambda^T RNEA = sum over bodies of
w_j^T Phi_j pi_j, w_j the body velocities under joint rates lambda), -lambda_i qdd_i for the
armature, and for the joint placements (which Pinocchio has no derivative of) the pure-JAX
RNEA's VJP, run only when the placements are differentiated (symbolic zeros).

This module only names the targets; `sysid_ros.io.native.register()` (which loads the shared
library) must have run in the process first. float64 only (enable `jax_enable_x64`).
"""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.model.types import PRISMATIC, Params, RobotModel

ABA_TARGET = 'sysid_aba'
ABA_VJP_TARGET = 'sysid_aba_vjp'


def default_threads() -> int:
    """Threads that one kernel call splits its batch over: the CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


def _attributes(model: RobotModel) -> dict:
    """The tree as the kernels' call attributes (see dynamics_ffi.cc's `Tree`)."""
    return dict(parents=np.asarray(model.parents, np.int64),
                prismatic=np.asarray([t == PRISMATIC for t in model.joint_types], np.int64),
                axis=np.asarray(model.axis, np.float64).reshape(-1),
                gravity=np.asarray(model.gravity, np.float64),
                num_threads=np.int64(default_threads()))


def _frames(placement):
    """(nb, 6) placements [x, y, z, roll, pitch, yaw] -> (nb, 12) rows of R = Rz Ry Rx, then
    the translation: the rotations vectorise here, where the kernel would take scalar sines."""
    roll, pitch, yaw = placement[..., 3], placement[..., 4], placement[..., 5]
    cr, sr, cp, sp = jnp.cos(roll), jnp.sin(roll), jnp.cos(pitch), jnp.sin(pitch)
    cy, sy = jnp.cos(yaw), jnp.sin(yaw)
    return jnp.stack([cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr,
                      sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr,
                      -sp, cp * sr, cp * cr,
                      placement[..., 0], placement[..., 1], placement[..., 2]], axis=-1)


def _operands(params: Params, q, qd, tau):
    """The kernels' float64 operands: q, qd, tau, inertial, placement frames, armature."""
    if not jax.config.jax_enable_x64:
        raise ValueError('native.aba computes in float64: enable jax_enable_x64')
    q, qd, tau, inertial, placement, armature = (jnp.asarray(x, jnp.float64) for x in (
        q, qd, tau, params.inertial, params.placement, params.armature))
    return q, qd, tau, inertial, _frames(placement), armature


def _aba_call(model: RobotModel, operands):
    q = operands[0]
    call = jax.ffi.ffi_call(ABA_TARGET, jax.ShapeDtypeStruct(q.shape, q.dtype),
                            vmap_method='broadcast_all')
    return call(*operands, **_attributes(model))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def aba(model: RobotModel, params: Params, q, qd, tau):
    """Forward dynamics qdd = M(q)^-1 (tau - C(q, qd) qd - g(q)) by Pinocchio's ABA.

    Same contract as `rigid_body.aba` (armature included, friction not), on the CPU only.

    Args:
      q, qd: (nv,) joint positions and velocities.
      tau: (nv,) joint torques/forces applied by the actuators [N m, N].

    Returns:
      (nv,) joint accelerations [rad/s^2, m/s^2], float64.
    """
    return _aba_call(model, _operands(params, q, qd, tau))


def _aba_fwd(model, params, q, qd, tau):
    # symbolic_zeros: every leaf arrives as a CustomVJPPrimal (value, perturbed).
    values = jax.tree.map(lambda x: x.value, (params, q, qd, tau))
    operands = _operands(*values)
    qdd = _aba_call(model, operands)
    # None (an empty pytree) tells the backward pass that the placements are constant.
    placement = values[0].placement if params.placement.perturbed else None
    return qdd, (values, operands, qdd, placement)


def _aba_bwd(model, residuals, g):
    (params, q, qd, tau), operands, qdd, placement = residuals
    if isinstance(g, jax.custom_derivatives.SymbolicZero):
        g = jnp.zeros(qdd.shape, qdd.dtype)
    q_shape = jax.ShapeDtypeStruct(operands[0].shape, jnp.float64)
    call = jax.ffi.ffi_call(
        ABA_VJP_TARGET,
        (q_shape,) * 3 + (jax.ShapeDtypeStruct(operands[3].shape, jnp.float64),
                          jax.ShapeDtypeStruct(operands[5].shape, jnp.float64)),
        vmap_method='broadcast_all')
    q_op, qd_op, _, inertial_op, placement_op, armature_op = operands
    q_bar, qd_bar, tau_bar, inertial_bar, armature_bar = call(
        q_op, qd_op, qdd, inertial_op, placement_op, armature_op, jnp.asarray(g, jnp.float64),
        **_attributes(model))
    if placement is not None:
        # d qdd = -M^-1 d RNEA: the placements' cotangent is -RNEA's VJP of lambda = tau_bar.
        _, rnea_vjp = jax.vjp(lambda placement: rigid_body.rnea(
            model, dataclasses.replace(params, placement=placement), q, qd, qdd),
            placement)
        placement_bar = -rnea_vjp(tau_bar.astype(params.placement.dtype))[0]
    else:
        placement_bar = jnp.zeros_like(params.placement)
    params_bar = dataclasses.replace(
        jax.tree.map(jnp.zeros_like, params),
        inertial=inertial_bar.astype(params.inertial.dtype),
        placement=placement_bar,
        armature=armature_bar.astype(params.armature.dtype))
    return (params_bar, q_bar.astype(jnp.result_type(q)), qd_bar.astype(jnp.result_type(qd)),
            tau_bar.astype(jnp.result_type(tau)))


aba.defvjp(_aba_fwd, _aba_bwd, symbolic_zeros=True)
