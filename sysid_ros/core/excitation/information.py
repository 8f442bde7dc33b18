"""Fisher information of the free parameters along a planned motion (equation-error form).

For a motion q(t) whose velocities and accelerations are known exactly (a design), the
command that produces it is the inverse dynamics plus friction, u = rnea(q, qd, qdd; theta)
+ f(q, qd; theta) (`core.dynamics.control.command_torque`). Recorded data carry the commands
exactly and noisy joint states, and every estimator of this package fits the states the
model predicts (output error), so the information is taken where a wrong theta shows in the
data: the acceleration error it causes, M(q)^-1 (u - rnea - f), per sample. With velocities
measured at rate r with noise std s_qd, an acceleration is seen with noise std
s_a = sqrt(2) s_qd r (a difference of two samples over 1 / r), and each sample k contributes

    F_k = J_k^T M_k^-T diag(1 / s_a^2) M_k^-1 J_k,    J_k = d u / d theta  (nv, M),

the derivative of the residual at the true theta (the residual itself is zero there, so the
derivative of M^-1 does not enter). This is the equation-error Fisher information (torque
residuals, FIM = J^T J / s^2) expressed in the acceleration space that the output-error fit
sees: weighting torques by M^-1 gives a light wrist joint the weight that its large
accelerations have in the data, where raw torque residuals would weight the heavy base
joints. It needs only one inverse-dynamics Jacobian and one mass matrix per sample, which
keeps the design's gradients cheap; the output-error information of a simulated recording
(integrating the sensitivities through the dynamics) costs a rollout per evaluation.
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
      actuator: one of `control.ADDITIVE_ACTUATORS` (static).

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
