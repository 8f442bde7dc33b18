"""Actuator and joint-friction models: commanded torque u -> torque applied at the joints.

The rigid-body dynamics (`rigid_body.aba`) conserve energy; real joints lose it to friction and
real motors do not apply exactly the commanded torque. An actuator model
`tau = g(q, qd, u; params)` sits between the command and the dynamics. The seven models span
white box to black box, as in DiffNEA (Lutter et al. 2021, §3.4):

| name              | applied torque tau                                                | passive |
|-------------------|-------------------------------------------------------------------|---------|
| `ideal`           | v                                                                 | yes     |
| `viscous`         | v - d qd                                                          | yes     |
| `coulomb_viscous` | v - d qd - c sgn(qd)                                              | yes     |
| `stribeck`        | v - d qd - (c + fs exp(-(qd / vs)^2)) sgn(qd)                     | yes     |
| `nn_friction`     | v - d qd - softplus(a(q, qd)) qd - softplus(b(q, qd)) sgn(qd)     | yes     |
| `nn_residual`     | v - d qd + NN(q, qd, v)                                           | no      |
| `ff_nn`           | NN(q, qd, v)                                                      | no      |

with v = g u - o the net command, g = `params.gain` the torque per unit of command (1 unless
identified: an effort read through gains known to a few percent), o = `params.offset` the
constant torque that the joint's sensor or actuator adds to the command (signed; zero unless
identified, as FloBaRoID does),
d = `params.damping`, c = `params.coulomb`, [fs, vs] = `params.stribeck`, [a; b] a network
output and sgn the smooth sign `tanh(qd / eps)`. All products are elementwise, per joint.

Load-dependent friction (the five white- and grey-box models above `nn_residual`): a joint
also loses k |tau| sgn(qd) of the torque tau it transmits, k = `params.load_coulomb` (a
harmonic drive's friction grows with its load). With w the table's torque,
tau + k |tau| sgn(qd) = w, solved in closed form for 0 <= k < 1:
tau = w / (1 + k sgn(qd) sgn(w)) (`transmitted`); k = 0 leaves w. Inverse dynamics with an
additive model is therefore u = (tau + k |tau| sgn(qd) + friction + o) / g, tau =
rnea(q, qd, qdd) (`command_for`).

Passivity: with u = 0 and o = 0 a passive model's friction torque tau_f satisfies
qd . tau_f <= 0, so the mechanical energy E (whose rate is dE/dt = qd . tau) never increases.
For the white-box models this holds when d, c, fs >= 0 and 0 <= k < 1 (load-dependent
friction shrinks a driving torque and grows a braking one), which the virtual-parameter map is
to enforce; the `nn_friction` model guarantees it for any network weights (see `nn_friction`).
An offset o is the conservative torque -o of the potential o . q, so then E + o . q never
increases.

Every function takes one state (no batch axes; batch with `jax.vmap`) and is differentiable
with respect to q, qd, u and every leaf of `Params`. Network weights are read from
`params.network` (a tuple of `(W, b)` pairs, see `networks` and `init_network`).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import networks
from sysid_ros.core.model.types import Params, PRISMATIC, RobotModel

# Velocity scale of the smooth sign tanh(qd / eps) [rad/s or m/s]. Below about eps the Coulomb
# torque fades linearly to zero, so the ODE stays smooth (integrators keep their order, gradients
# exist) at the cost of a small slip at standstill. Near zero velocity Coulomb friction c acts
# like a viscous damper of gain c / eps: explicit integrators need dt well below
# eps * (joint inertia) / c to stay stable, so pass a larger eps for coarse time steps.
DEFAULT_EPS = 1e-2


def smooth_sign(qd, eps=DEFAULT_EPS):
    """The smooth, odd sign tanh(qd / eps), sign-exact (qd times it is >= 0 in floats)."""
    return jnp.tanh(qd / eps)


def transmitted(params: Params, qd, torque, eps=DEFAULT_EPS):
    """The torque (nv,) a joint transmits where, before its load-dependent friction, it would
    get `torque` (nv,) [N m, N]: tau with tau + load_coulomb |tau| tanh(qd / eps) = torque
    (module doc); exact, continuous, and `torque` itself where load_coulomb is 0."""
    slip = params.load_coulomb * smooth_sign(qd, eps) * jnp.sign(torque)
    return torque / (1.0 + slip)


def load_friction(params: Params, qd, torque, eps=DEFAULT_EPS):
    """(nv,) the load-dependent friction torque load_coulomb |tau| tanh(qd / eps) of joints
    transmitting `torque` = tau (nv,) [N m, N] (module doc)."""
    return params.load_coulomb * jnp.abs(torque) * smooth_sign(qd, eps)


def command_for(model: RobotModel, params: Params, q, qd, applied, actuator_fn):
    """The command u (nv,) under which the additive actuator `actuator_fn` applies the joint
    torques `applied` (nv,) [N m, N] at (q, qd):
    u = (applied + load friction - actuator(q, qd, 0) without it) / gain (module doc)."""
    passive = actuator_fn(model, without_load_friction(params), q, qd, jnp.zeros_like(q))
    return (applied + load_friction(params, qd, applied) - passive) / params.gain


def without_load_friction(params: Params) -> Params:
    """`params` with no load-dependent friction (load_coulomb 0)."""
    return dataclasses.replace(params, load_coulomb=jnp.zeros_like(params.load_coulomb))


def joint_features(model: RobotModel, q):
    """Network input features of the joint positions (nv,) -> (nf,).

    Revolute joints contribute [sin q_i, cos q_i] (so the features are 2 pi periodic and
    bounded), prismatic joints q_i [m]. The length `nf` is `num_joint_features(model)`.
    """
    parts = []
    for i, joint_type in enumerate(model.joint_types):
        if joint_type == PRISMATIC:
            parts.append(q[i:i + 1])
        else:
            parts.append(jnp.stack([jnp.sin(q[i]), jnp.cos(q[i])]))
    return jnp.concatenate(parts)


def num_joint_features(model: RobotModel) -> int:
    """Length of `joint_features(model, q)`."""
    return sum(1 if t == PRISMATIC else 2 for t in model.joint_types)


def _stribeck_bump(qd, vs):
    """exp(-(qd / vs)^2), and its limit 0 where vs == 0 (NaN-free value and gradient)."""
    valid = vs != 0
    vs_safe = jnp.where(valid, vs, 1.0)
    return jnp.where(valid, jnp.exp(-jnp.square(qd / vs_safe)), 0.0)


def ideal(model: RobotModel, params: Params, q, qd, u):
    """Ideal actuator: the joints receive the net command, tau = gain u - offset.

    Args:
      model: static tree.
      params: physical parameters (`gain` and `offset` only).
      q, qd: (nv,) joint positions [rad, m] and velocities [rad/s, m/s].
      u: (nv,) commanded joint torques/forces [N m, N].

    Returns:
      (nv,) torques/forces applied at the joints [N m, N].
    """
    del model, q
    return transmitted(params, qd, params.gain * u - params.offset)


def viscous(model: RobotModel, params: Params, q, qd, u):
    """Viscous friction, tau = gain u - offset - damping * qd (arguments as in `ideal`)."""
    del model, q
    return transmitted(params, qd, params.gain * u - params.offset - params.damping * qd)


def coulomb_viscous(model: RobotModel, params: Params, q, qd, u, *, eps=DEFAULT_EPS):
    """Coulomb and viscous friction, tau = gain u - offset - damping qd - coulomb tanh(qd / eps).

    Args:
      model: static tree.
      params: physical parameters.
      q: (nv,) joint positions [rad, m].
      qd: (nv,) joint velocities [rad/s, m/s].
      u: (nv,) commanded joint torques/forces [N m, N].
      eps: velocity scale of the smooth sign [rad/s or m/s], see `DEFAULT_EPS`.
    """
    del model, q
    return transmitted(params, qd, params.gain * u - params.offset - params.damping * qd
                       - params.coulomb * smooth_sign(qd, eps), eps)


def stribeck(model: RobotModel, params: Params, q, qd, u, *, eps=DEFAULT_EPS):
    """Stribeck friction: a static torque that falls to the Coulomb level as speed grows.

    tau = gain u - offset - damping qd - (coulomb + fs exp(-(qd / vs)^2)) tanh(qd / eps), with the
    excess static torque fs = stribeck[:, 0] [N m, N] and the Stribeck velocity
    vs = stribeck[:, 1] [rad/s, m/s]; a joint with vs = 0 has no Stribeck term.

    Args:
      model: static tree.
      params: physical parameters.
      q: (nv,) joint positions [rad, m].
      qd: (nv,) joint velocities [rad/s, m/s].
      u: (nv,) commanded joint torques/forces [N m, N].
      eps: velocity scale of the smooth sign [rad/s or m/s], see `DEFAULT_EPS`.
    """
    del model, q
    fs, vs = params.stribeck[:, 0], params.stribeck[:, 1]
    breakaway = params.coulomb + fs * _stribeck_bump(qd, vs)
    return transmitted(params, qd, params.gain * u - params.offset - params.damping * qd
                       - breakaway * smooth_sign(qd, eps), eps)


def nn_friction(model: RobotModel, params: Params, q, qd, u, *, eps=DEFAULT_EPS):
    """Viscous friction plus a state-dependent neural friction that can only dissipate energy.

    A network maps `(joint_features(q), qd)` to `[a; b]` (2 nv,), and

      tau_f = -softplus(a) * qd - softplus(b) * tanh(qd / eps),
      tau = gain u - offset - damping * qd + tau_f,

    a configuration- and speed-dependent viscous gain and Coulomb level. DiffNEA's
    NN-Friction (Lutter et al. 2021) learns a non-negative, state-dependent friction
    magnitude that opposes the motion; softplus (rather than an absolute value) and tanh
    keep this version smooth.

    Passivity is exact, for any weights and in floating point: softplus(.) >= 0,
    qd_i^2 >= 0 and qd_i tanh(qd_i / eps) >= 0 (tanh keeps the sign of its argument), so every
    joint's power qd_i tau_f_i is a product of factors of known sign and is <= 0; their sum
    qd . tau_f is <= 0 too.

    Args:
      model: static tree.
      params: physical parameters; `params.network` holds the weights made by
        `init_network(key, model, 'nn_friction')`.
      q: (nv,) joint positions [rad, m].
      qd: (nv,) joint velocities [rad/s, m/s].
      u: (nv,) commanded joint torques/forces [N m, N].
      eps: velocity scale of the smooth sign [rad/s or m/s], see `DEFAULT_EPS`.
    """
    nv = model.nv
    out = networks.mlp(params.network, jnp.concatenate([joint_features(model, q), qd]))
    gain, level = jax.nn.softplus(out[:nv]), jax.nn.softplus(out[nv:])
    friction = -gain * qd - level * smooth_sign(qd, eps)
    return transmitted(params, qd, params.gain * u - params.offset - params.damping * qd
                       + friction, eps)


def nn_residual(model: RobotModel, params: Params, q, qd, u):
    """Viscous friction plus an unconstrained network residual, tau = v - d qd + NN(q, qd, v)
    with v = gain u - offset.

    Not passive: the residual can inject energy. Arguments as in `ideal`; weights from
    `init_network(key, model, 'nn_residual')`.
    """
    net = params.gain * u - params.offset
    x = jnp.concatenate([joint_features(model, q), qd, net])
    return net - params.damping * qd + networks.mlp(params.network, x)


def ff_nn(model: RobotModel, params: Params, q, qd, u):
    """Black-box actuator, tau = NN(q, qd, gain u - offset) (not passive).

    Arguments as in `ideal`; weights from `init_network(key, model, 'ff_nn')`.
    """
    x = jnp.concatenate([joint_features(model, q), qd, params.gain * u - params.offset])
    return networks.mlp(params.network, x)


ACTUATORS = {
    'ideal': ideal,
    'viscous': viscous,
    'coulomb_viscous': coulomb_viscous,
    'stribeck': stribeck,
    'nn_friction': nn_friction,
    'nn_residual': nn_residual,
    'ff_nn': ff_nn,
}

# Models whose friction never adds energy (for non-negative d, c, fs; `nn_friction` always).
PASSIVE = frozenset({'ideal', 'viscous', 'coulomb_viscous', 'stribeck', 'nn_friction'})

# Models that read `params.network`.
NEURAL = frozenset({'nn_friction', 'nn_residual', 'ff_nn'})


def get_actuator(actuator):
    """Resolve an actuator given by name (a key of `ACTUATORS`) or as a callable.

    A callable must have the signature `fn(model, params, q, qd, u) -> tau`, e.g.
    `functools.partial(coulomb_viscous, eps=1e-3)`.

    Raises:
      ValueError: for an unknown name.
    """
    if callable(actuator):
        return actuator
    try:
        return ACTUATORS[actuator]
    except (KeyError, TypeError):
        raise ValueError(f'actuator: expected one of {sorted(ACTUATORS)} or a callable, '
                         f'got {actuator!r}') from None


def init_network(key, model: RobotModel, kind: str, hidden=(32, 32), out_scale=0.1,
                 init_friction=1e-2, dtype=jnp.float64):
    """Initial network weights for the actuator model `kind`, for `Params.network`.

    | kind          | input                          | output                       |
    |---------------|--------------------------------|------------------------------|
    | `nn_friction` | features(q), qd (nf + nv)      | [a; b] (2 nv), see nn_friction |
    | `nn_residual` | features(q), qd, u (nf + 2 nv) | residual torque (nv)         |
    | `ff_nn`       | features(q), qd, u (nf + 2 nv) | applied torque (nv)          |

    Args:
      key: PRNG key.
      model: static tree (fixes the input and output sizes).
      kind: a key of `ACTUATORS`; models without a network get the empty tuple.
      hidden: widths of the hidden layers.
      out_scale: factor on the output layer's random weights; small values start the network
        near its output bias (a near-constant friction, a near-zero residual).
      init_friction: `nn_friction` only: the initial viscous gain [N m s/rad] and Coulomb level
        [N m] at the output bias, softplus(bias) = init_friction.
      dtype: float dtype of the weights.

    Returns:
      Tuple of `(W, b)` pairs (empty for white-box models).

    Raises:
      ValueError: for an unknown kind.
    """
    if kind not in ACTUATORS:
        raise ValueError(f'init_network: kind: expected one of {sorted(ACTUATORS)}, got {kind!r}')
    nv, nf = model.nv, num_joint_features(model)
    if kind == 'nn_friction':
        sizes, bias = (nf + nv, *hidden, 2 * nv), _inverse_softplus(init_friction)
    elif kind in ('nn_residual', 'ff_nn'):
        sizes, bias = (nf + 2 * nv, *hidden, nv), 0.0
    else:
        return ()
    return networks.init_mlp(key, sizes, out_scale=out_scale, out_bias=bias, dtype=dtype)


def _inverse_softplus(y):
    """x with softplus(x) = y > 0, in NumPy (initial values only)."""
    y = np.asarray(y, dtype=float)
    return y + np.log(-np.expm1(-y))
