"""Joint-space control through the model: the command of a planned motion (inverse dynamics
plus friction) and a computed-torque law that tracks a reference, closed-loop simulated.

Computed torque (Craig, "Introduction to Robotics", §10.6; Siciliano et al., "Robotics",
§8.5.2): with a model of the robot, the command

    u = rnea(q, qd, qdd_ref + kp (q_ref - q) + kd (qd_ref - qd)) - actuator(q, qd, 0)

makes every joint's tracking error e = q_ref - q obey e'' + kd e' + kp e = 0 when the model
is exact; kp = w^2 and kd = 2 z w place both poles at the natural frequency w [rad/s] with
damping ratio z. With a wrong model (an unknown payload, unknown friction) the error is
driven by the model error instead of vanishing, which is how a real controller behaves
while its robot is being identified.
"""

import jax
import jax.numpy as jnp

from sysid_ros.core.dynamics import actuators, integrators, rigid_body
from sysid_ros.core.model.types import Params, RobotModel

# Actuator models whose command is the applied torque plus a term of (q, qd) alone, so that the
# command of a motion is rnea - actuator(q, qd, 0); the network residuals depend on the
# command itself and have no closed-form inverse.
ADDITIVE_ACTUATORS = ('ideal', 'viscous', 'coulomb_viscous', 'stribeck', 'nn_friction')


def command_torque(model: RobotModel, params: Params, q, qd, qdd, actuator='viscous'):
    """Command that makes the joints move with (q, qd, qdd): inverse dynamics plus friction
    and offset over the gain, u = (rnea(q, qd, qdd) - actuator(q, qd, 0)) / gain.

    Args:
      model: static tree.
      params: physical parameters.
      q, qd, qdd: (nv,) joint positions [rad, m], velocities and accelerations.
      actuator: one of ADDITIVE_ACTUATORS (static).

    Returns:
      (nv,) commanded torques [N m, N].

    Raises:
      ValueError: for an actuator outside ADDITIVE_ACTUATORS.
    """
    if actuator not in ADDITIVE_ACTUATORS:
        raise ValueError(f'command_torque: expected an actuator of {ADDITIVE_ACTUATORS}, '
                         f'got {actuator!r}')
    return actuators.command_for(model, params, q, qd, rigid_body.rnea(model, params, q, qd, qdd),
                                 actuators.get_actuator(actuator))


def computed_torque(model: RobotModel, params: Params, q, qd, q_ref, qd_ref, qdd_ref,
                    frequency, damping_ratio=1.0, actuator='viscous'):
    """The computed-torque command (module doc) of the controller's model `params`.

    Args:
      q, qd: (nv,) measured state [rad, rad/s or m, m/s].
      q_ref, qd_ref, qdd_ref: (nv,) reference [rad, rad/s, rad/s^2 or m, m/s, m/s^2].
      frequency: natural frequency w of the error dynamics [rad/s].
      damping_ratio: z [-].
      actuator: one of ADDITIVE_ACTUATORS (static).

    Returns:
      (nv,) command [N m, N].
    """
    qdd = (qdd_ref + frequency ** 2 * (q_ref - q)
           + 2.0 * damping_ratio * frequency * (qd_ref - qd))
    return command_torque(model, params, q, qd, qdd, actuator)


def track(model: RobotModel, params: Params, control_params: Params, x0, q_ref, qd_ref,
          qdd_ref, dt, u_max, frequency, damping_ratio=1.0, integrator='rk4',
          actuator='viscous', substeps=1):
    """Simulate a robot (`params`) that follows a reference under the computed-torque law of
    a controller that knows `control_params`, each command held over one control period.

    Args:
      model: static tree.
      params: the robot's true parameters; control_params: the controller's model.
      x0: (2 nv,) initial state [q; qd].
      q_ref, qd_ref, qdd_ref: (T + 1, nv) reference at the T + 1 control instants.
      dt: control period [s].
      u_max: (nv,) command limit [N m, N]; commands are clipped to +-u_max.
      frequency, damping_ratio: gains of `computed_torque`.
      integrator, actuator, substeps: of the simulation (static), as in
        `integrators.rollout`.

    Returns:
      states (T + 1, 2 nv), x0 first, and commands (T + 1, nv): commands[k] is the law at
      states[k] and the reference k, held from instant k on (the last one starts the next
      period: a later call from states[T] with the reference from instant T on continues
      the same simulation).
    """
    nv = model.nv

    def law(x, ref):
        u = computed_torque(model, control_params, x[:nv], x[nv:], *ref, frequency,
                            damping_ratio, actuator)
        return jnp.clip(u, -u_max, u_max)

    def period(x, ref):
        u = law(x, ref)
        x = integrators.rollout(model, params, x, u[None], dt, integrator=integrator,
                                actuator=actuator, substeps=substeps)[-1]
        return x, (x, u)

    x0 = jnp.asarray(x0)
    refs = (jnp.asarray(q_ref), jnp.asarray(qd_ref), jnp.asarray(qdd_ref))
    last, (states, controls) = jax.lax.scan(period, x0, tuple(r[:-1] for r in refs))
    final = law(last, tuple(r[-1] for r in refs))
    return (jnp.concatenate([x0[None], states], axis=0),
            jnp.concatenate([controls, final[None]], axis=0))
