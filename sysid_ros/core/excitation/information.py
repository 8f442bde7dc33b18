"""Fisher information of the free parameters along a planned motion, in the form of the
configured likelihood: acceleration space for the output error (`fisher_information`), torque
space with the noise the causal filter leaves for the equation error
(`equation_error_information`).

Output error (`fisher_information`). For a motion q(t) whose velocities and accelerations are
known exactly (a design), the command that produces it is the inverse dynamics plus friction,
u = rnea(q, qd, qdd; theta) + f(q, qd; theta) (`dynamics.control.command_torque`). Recorded
data carry the commands exactly and noisy joint states, and the output-error fit compares
the states the model predicts, so the information is taken where a wrong theta shows in the
data: the acceleration error it causes, M(q)^-1 (u - rnea - f), per sample. With velocities
measured at rate r with noise std s_qd, an acceleration is seen with noise std
s_a = sqrt(2) s_qd r (a difference of two samples over 1 / r), and each sample k contributes

    F_k = J_k^T M_k^-T diag(1 / s_a^2) M_k^-1 J_k,    J_k = d u / d theta  (nv, M),

the derivative of the residual at the true theta (the residual itself is zero there, so the
derivative of M^-1 does not enter). This is the equation-error information (torque
residuals, J^T J / s^2) expressed in the acceleration space that the output-error fit sees:
weighting torques by M^-1 gives a light wrist joint the weight that its large accelerations
have in the data. It needs one inverse-dynamics Jacobian and one mass matrix per sample,
which keeps the design's gradients cheap; it approximates the information of the
output-error fit and may rank motions differently from it.
"""

import jax
import jax.numpy as jnp

from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.dynamics.control import command_torque
from sysid_ros.core.model.parameters import ParameterSpec
from sysid_ros.core.model.types import Params, RobotModel


def fisher_information(model: RobotModel, spec: ParameterSpec, base: Params, theta, q, qd,
                       qdd, accel_std, weight=1.0, actuator='viscous'):
    """Fisher information of `theta` from the motion (q, qd, qdd) (module doc).

    Args:
      model: static tree.
      spec: the free parameters.
      base: Params holding every value not in `spec`.
      theta: (M,) physical values at which the information is taken.
      q, qd, qdd: (T, nv) the motion [rad, rad/s, rad/s^2 or m, m/s, m/s^2].
      accel_std: (nv,) or scalar noise std of an observed acceleration [rad/s^2, m/s^2].
      weight: recorded samples that each row of the motion stands for (scalar) [-].
      actuator: one of `dynamics.control.ADDITIVE_ACTUATORS` (static).

    Returns:
      (M, M) information [1 / physical units^2].
    """
    def residual_jacobian(qk, qdk, qddk):
        def torque(th):
            return command_torque(model, spec.to_params(th, base), qk, qdk, qddk, actuator)
        jac = jax.jacfwd(torque)(theta)                                          # (nv, M)
        mass = rigid_body.crba(model, spec.to_params(theta, base), qk)
        return jnp.linalg.solve(mass, jac) / jnp.reshape(accel_std, (-1, 1))

    a = jax.vmap(residual_jacobian)(q, qd, qdd)                                  # (T, nv, M)
    return weight * jnp.einsum('tjm,tjn->mn', a, a)


def equation_error_information(model: RobotModel, spec: ParameterSpec, base: Params, theta, q,
                               qd, qdd, state_var, torque_var, noise_std=None, weight=1.0,
                               actuator='viscous'):
    """Inverse of the covariance of the equation-error fit of `theta` from the motion
    (`likelihoods.equation_error`: residuals r = tau - u(q, qd, qdd; theta) of filtered
    samples, joint j weighted by 1 / sigma_j^2).

    The filtered samples carry noise: the filter's outputs of white sensor noise, of
    variances `state_var` (3, nv) on q, qd and qdd (independent: the value kernel of the
    Savitzky-Golay filter is even, the slope kernel odd), enter the regressors, and
    `torque_var` (nv,) of filtered torque noise enters tau. To first order sample k's residual
    has the covariance

        R_k = diag(torque_var) + A_k diag(state_var) A_k^T,   A_k = du/d(q, qd, qdd) (nv, 3 nv),

    (the mass matrix times the qdd noise dominates it; at a velocity reversal the slope of
    the smooth Coulomb sign adds to it). With the weights W = diag(1 / sigma^2), sigma =
    `noise_std` (configured) or, when None, the root mean square of the residuals over the
    motion, sigma_j^2 = mean_k (R_k)_jj (what `equation_error.fit_noise_std` estimates), the
    weighted least-squares estimate has the sandwich covariance F^-1 G F^-1 with

        F = sum_k J_k^T W J_k,   G = sum_k J_k^T W R_k W J_k,   J_k = du/dtheta (nv, M),

    which lm's cluster-robust covariance estimates from the residuals; this returns its
    inverse F G^-1 F (= F when R_k = W^-1 at every sample).

    Args:
      model: static tree.
      spec: the free parameters.
      base: Params holding every value not in `spec`.
      theta: (M,) physical values at which the information is taken.
      q, qd, qdd: (T, nv) the motion at the kept samples [rad, rad/s, rad/s^2 or m, ...].
      state_var: (3, nv) noise variance of the filtered q, qd and qdd.
      torque_var: (nv,) noise variance of the filtered torques [N^2 m^2, N^2].
      noise_std: (nv,) the fit's configured residual std [N m, N], or None (estimated).
      weight: kept samples that each row of the motion stands for (scalar) [-].
      actuator: one of `dynamics.control.ADDITIVE_ACTUATORS` (static).

    Returns:
      (M, M) information [1 / physical units^2].
    """
    def jacobians(qk, qdk, qddk):
        def torque(th, state):
            return command_torque(model, spec.to_params(th, base), *state, actuator)
        state = (qk, qdk, qddk)
        jac_theta = jax.jacfwd(torque, argnums=0)(theta, state)                 # (nv, M)
        jac_state = jax.jacfwd(torque, argnums=1)(theta, state)                 # 3 x (nv, nv)
        a = jnp.concatenate(jac_state, axis=1)                                   # (nv, 3 nv)
        cov = jnp.diag(torque_var) + (a * jnp.reshape(state_var, (-1,))) @ a.T
        return jac_theta, cov

    jac, cov = jax.vmap(jacobians)(q, qd, qdd)                 # (T, nv, M), (T, nv, nv)
    if noise_std is None:
        sigma2 = jnp.mean(jnp.diagonal(cov, axis1=1, axis2=2), axis=0)           # (nv,)
    else:
        sigma2 = jnp.square(jnp.broadcast_to(noise_std, (model.nv,)))
    weighted = jac / sigma2[:, None]                                             # W J_k
    info = weight * jnp.einsum('tjm,tjn->mn', jac, weighted)                     # F
    meat = weight * jnp.einsum('tjm,tjk,tkn->mn', weighted, cov, weighted)       # G
    sandwich = info @ jnp.linalg.solve(meat, info)
    return 0.5 * (sandwich + sandwich.T)
