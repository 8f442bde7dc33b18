"""Forward dynamics with an actuator model, time steppers and the rollout simulator.

The state is `x = [q; qd]` (2 nv,) [rad or m, rad/s or m/s] and the continuous dynamics are

  xdot = [qd; aba(q, qd, g(q, qd, u))],

with `g` an actuator model of `actuators.ACTUATORS`. A step function has the signature
`step_fn(model, params, x, u, dt, actuator) -> x_next` and holds the command `u` (nv,)
constant over the step. `rollout` scans a step over a control sequence.

`actuator`, `integrator` and `substeps` are static (Python strings, callables and ints): mark
them static when jitting (`jax.jit(rollout, static_argnames=('integrator', 'actuator',
'substeps'))`). Everything else is an array or a pytree of arrays, so rollouts vmap over
parameter particles and initial states and differentiate with respect to both.
"""

import functools

import jax
import jax.numpy as jnp

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.dynamics import variational
from sysid_ros.core.model.types import Params, RobotModel


def forward_dynamics(model: RobotModel, params: Params, q, qd, u, actuator='viscous'):
    """Joint accelerations under a commanded torque, qdd = aba(q, qd, g(q, qd, u)).

    Args:
      model: static tree.
      params: physical parameters (friction and network weights included).
      q, qd: (nv,) joint positions [rad, m] and velocities [rad/s, m/s].
      u: (nv,) commanded joint torques/forces [N m, N].
      actuator: name in `actuators.ACTUATORS` or a callable with the same signature.

    Returns:
      (nv,) joint accelerations [rad/s^2, m/s^2].
    """
    tau = actuators.get_actuator(actuator)(model, params, q, qd, u)
    return rigid_body.aba(model, params, q, qd, tau)


def state_derivative(model: RobotModel, params: Params, x, u, actuator='viscous'):
    """Time derivative of the state, xdot = [qd; qdd] (2 nv,), for x = [q; qd] (2 nv,)."""
    nv = model.nv
    q, qd = x[:nv], x[nv:]
    return jnp.concatenate([qd, forward_dynamics(model, params, q, qd, u, actuator)])


def semi_implicit_euler(model: RobotModel, params: Params, x, u, dt, actuator='viscous'):
    """One semi-implicit (symplectic) Euler step (Heiden et al. 2022, eq. 4).

    qdd = aba(q_t, qd_t, tau_t);  qd_{t+1} = qd_t + dt qdd;  q_{t+1} = q_t + dt qd_{t+1}.

    First order, but symplectic for the ideal actuator: the energy error stays bounded
    instead of drifting.

    Args:
      model: static tree.
      params: physical parameters.
      x: (2 nv,) state [q; qd].
      u: (nv,) commanded torques [N m, N], held over the step.
      dt: time step [s] (scalar).
      actuator: name in `actuators.ACTUATORS` or a callable.

    Returns:
      (2 nv,) state after `dt`.
    """
    nv = model.nv
    q, qd = x[:nv], x[nv:]
    qd_next = qd + dt * forward_dynamics(model, params, q, qd, u, actuator)
    return jnp.concatenate([q + dt * qd_next, qd_next])


# Classical RK4 tableau: stage i evaluates xdot at x + RK4_SHIFT[i] dt k_{i-1} and adds
# RK4_WEIGHT[i] k_i to the step.
RK4_SHIFT = (0.0, 0.5, 0.5, 1.0)
RK4_WEIGHT = (1.0 / 6.0, 2.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0)


def rk4(model: RobotModel, params: Params, x, u, dt, actuator='viscous'):
    """One classical fourth-order Runge-Kutta step of xdot = [qd; qdd] (arguments as in
    `semi_implicit_euler`); four forward-dynamics evaluations.

    The four stages run as a `lax.scan` over the tableau, so the program holds one
    forward-dynamics evaluation instead of four and compiles several times faster.
    """
    f = functools.partial(state_derivative, model, params, u=u, actuator=actuator)
    tableau = jnp.asarray([RK4_SHIFT, RK4_WEIGHT], x.dtype).T * jnp.asarray([dt, 1.0], x.dtype)

    def stage(carry, coefficients):
        k, total = carry
        shift, weight = coefficients
        k = f(x + shift * k)
        return (k, total + weight * k), None

    zero = jnp.zeros_like(x)
    (_, total), _ = jax.lax.scan(stage, (zero, zero), tableau)
    return x + dt * total


INTEGRATORS = {
    'semi_implicit_euler': semi_implicit_euler,
    'rk4': rk4,
    'variational': variational.midpoint_step,
}


def get_integrator(integrator):
    """Resolve a step function given by name (a key of `INTEGRATORS`) or as a callable.

    Raises:
      ValueError: for an unknown name.
    """
    if callable(integrator):
        return integrator
    try:
        return INTEGRATORS[integrator]
    except (KeyError, TypeError):
        raise ValueError(f'integrator: expected one of {sorted(INTEGRATORS)} or a callable, '
                         f'got {integrator!r}') from None


def rollout(model: RobotModel, params: Params, x0, controls, dt,
            integrator='semi_implicit_euler', actuator='viscous', substeps=1):
    """Simulate from `x0` under a zero-order-hold control sequence.

    Each control sample `controls[t]` is held for `dt`, covered by `substeps` integration
    steps of length `dt / substeps`. The scan body is wrapped in `jax.checkpoint`: reverse-mode
    gradients store one state per control sample and recompute the step's internals, which
    keeps memory small and compilation quicker.

    Args:
      model: static tree.
      params: physical parameters (vmap over a leading particle axis for a batch).
      x0: (2 nv,) initial state [q; qd].
      controls: (T, nv) commanded joint torques/forces [N m, N].
      dt: control period [s] (scalar).
      integrator: name in `INTEGRATORS` or a step function (static).
      actuator: name in `actuators.ACTUATORS` or a callable (static).
      substeps: integration steps per control sample (static int >= 1).

    Returns:
      (T + 1, 2 nv) states, `x0` first.

    Raises:
      ValueError: for an unknown integrator or actuator, or substeps < 1.
    """
    get_integrator(integrator)
    actuators.get_actuator(actuator)
    if int(substeps) != substeps or substeps < 1:
        raise ValueError(f'rollout: substeps: expected int >= 1, got {substeps!r}')
    return _rollout(model, params, x0, controls, dt, integrator, actuator, int(substeps))


@functools.partial(jax.jit, static_argnames=('integrator', 'actuator', 'substeps'))
def _rollout(model, params, x0, controls, dt, integrator, actuator, substeps):
    """`rollout`, jitted on its own. Inside a larger program (a likelihood, traced under
    vmap, jvp and linearize several times per program, and in several programs) its jaxpr
    and their transformations of it are then traced once and taken from JAX's caches; XLA
    inlines the call, so the compiled program computes the same."""
    step_fn = get_integrator(integrator)
    dtype = jnp.result_type(x0, controls, params.inertial)
    x0 = jnp.asarray(x0, dtype)
    h = dt / substeps

    def advance(x, u):
        return step_fn(model, params, x, u, h, actuator).astype(dtype)

    @functools.partial(jax.checkpoint, prevent_cse=False)
    def body(x, u):
        if substeps == 1:
            x = advance(x, u)
        else:
            x = jax.lax.fori_loop(0, substeps, lambda _, x: advance(x, u), x)
        return x, x

    _, states = jax.lax.scan(body, x0, controls)
    return jnp.concatenate([x0[None], states], axis=0)


@functools.partial(jax.jit, static_argnames=('integrator', 'actuator', 'substeps'))
def rollout_batch(model: RobotModel, params: Params, x0, controls, dt, integrator, actuator,
                  substeps):
    """Jitted `rollout` of one parameter vector vmapped over initial states (B, 2 nv) and
    controls (B, H, nv): (B, H + 1, 2 nv) states."""
    def one(x, u):
        return rollout(model, params, x, u, dt, integrator=integrator, actuator=actuator,
                       substeps=substeps)
    return jax.vmap(one)(x0, controls)


def make_advance_fn(model, dt: float, steps: int, integrator: str, actuator: str):
    """Jitted `advance(params, x, controls) -> states`: integrate (B * steps, nv) held controls
    from x (2 nv,) with step dt [s]; return the (B, 2 nv) states every `steps` steps.

    The model and the static settings are closed over, so a call only passes arrays (each
    call costs the dispatch of one compiled program, not a retrace or a hash of the model).
    """
    def advance(params, x, controls):
        states = rollout(model, params, x, controls, dt, integrator=integrator,
                         actuator=actuator)
        return states[steps::steps]

    return jax.jit(advance)
