"""Actuator and friction models: closed forms, exact passivity, energy along rollouts, gradients.

Compiling on CPU dominates the run time, so the rollouts of all models share one compiled
program: the actuator of that program is a one-hot mixture `sum_k w_k tau_k` of the named
models, which reproduces each model bit for bit for a one-hot `w` (0 * finite = 0 and
x + 0 = x exactly; `test_one_hot_mixture_is_exact` checks it), and is vmapped over the models.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import integrators
from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.model import builders

NAMES = tuple(sorted(actuators.ACTUATORS))
PASSIVE = tuple(sorted(actuators.PASSIVE))
DT = 2e-3        # RK4 step [s]
NUM_STEPS = 500  # 1 s of free motion: every joint velocity changes sign at least once


def mechanical_energy(model, params, x):
    """Kinetic 0.5 qd^T M(q) qd (armature included) plus gravity potential -sum_i m_i g.c_i."""
    q, qd = x[:model.nv], x[model.nv:]
    kinetic = 0.5 * qd @ rigid_body.crba(model, params, q) @ qd
    R, p = kinematics.forward_kinematics(model, params, q)
    mass, first_moment = params.inertial[:, 0], params.inertial[:, 1:4]
    # m_i c_i in the world frame = m_i p_i + R_i (m_i c_i in the body frame).
    world_moment = mass[:, None] * p + jnp.einsum('bij,bj->bi', R, first_moment)
    potential = -jnp.sum(world_moment @ jnp.asarray(model.gravity))
    return kinetic + potential


@pytest.fixture(scope='module')
def system():
    """Double pendulum with armature and positive random friction for every passive model."""
    model, params = builders.double_pendulum()
    rng = np.random.default_rng(0)
    params = dataclasses.replace(
        params,
        armature=jnp.asarray(rng.uniform(0.005, 0.02, 2)),
        damping=jnp.asarray(rng.uniform(0.05, 0.3, 2)),
        coulomb=jnp.asarray(rng.uniform(0.05, 0.3, 2)),
        stribeck=jnp.asarray(np.stack([rng.uniform(0.05, 0.3, 2), rng.uniform(0.1, 0.5, 2)], 1)),
        # Random (not small) weights, so the friction really depends on the state.
        network=actuators.init_network(jax.random.PRNGKey(0), model, 'nn_friction',
                                       hidden=(16, 16), out_scale=1.0, init_friction=0.1))
    x0 = jnp.array([2.0, -1.2, 1.0, 0.0])  # [q; qd]: high up, joint 2 at rest
    return model, params, x0


def _params_for(model, params, name):
    """`params` with the network that the model `name` reads."""
    if name in ('nn_residual', 'ff_nn'):
        network = actuators.init_network(jax.random.PRNGKey(1), model, name, hidden=(16, 16))
        return dataclasses.replace(params, network=network)
    return params


def _mixture(weights, names):
    """Actuator sum_k weights[k] * ACTUATORS[names[k]] (exactly one model for one-hot weights)."""
    def actuator(model, params, q, qd, u):
        taus = jnp.stack([actuators.ACTUATORS[n](model, params, q, qd, u) for n in names])
        return weights @ taus
    return actuator


@pytest.fixture(scope='module')
def passive_rollouts(system):
    """Unforced RK4 rollouts of each passive model: states (len(PASSIVE), NUM_STEPS + 1, 4)
    and mechanical energies (len(PASSIVE), NUM_STEPS + 1) [J]."""
    model, params, x0 = system

    @jax.jit
    def simulate(weights):
        states = integrators.rollout(model, params, x0, jnp.zeros((NUM_STEPS, 2)), DT,
                                     integrator='rk4', actuator=_mixture(weights, PASSIVE))
        return states, jax.vmap(functools.partial(mechanical_energy, model, params))(states)

    states, energies = jax.vmap(simulate)(jnp.eye(len(PASSIVE)))
    return np.asarray(states), np.asarray(energies)


def test_exports():
    assert set(actuators.PASSIVE) < set(actuators.ACTUATORS) == set(NAMES)
    assert set(actuators.NEURAL) == {'nn_friction', 'nn_residual', 'ff_nn'}
    assert actuators.get_actuator('stribeck') is actuators.stribeck
    with pytest.raises(ValueError, match='actuator: expected one of'):
        actuators.get_actuator('coulomb')
    with pytest.raises(ValueError, match='kind: expected one of'):
        actuators.init_network(jax.random.PRNGKey(0), builders.double_pendulum()[0], 'mlp')


def test_closed_forms(system):
    model, params, _ = system
    q, qd, u = jnp.array([0.3, -0.2]), jnp.array([0.004, -0.7]), jnp.array([0.5, -0.1])
    d, c = np.asarray(params.damping), np.asarray(params.coulomb)
    fs, vs = np.asarray(params.stribeck).T
    sgn = np.tanh(np.asarray(qd) / actuators.DEFAULT_EPS)
    expected = {
        'ideal': u,
        'viscous': u - d * qd,
        'coulomb_viscous': u - d * qd - c * sgn,
        'stribeck': u - d * qd - (c + fs * np.exp(-(np.asarray(qd) / vs) ** 2)) * sgn,
    }
    for name, tau in expected.items():
        np.testing.assert_allclose(actuators.ACTUATORS[name](model, params, q, qd, u), tau,
                                   rtol=1e-14, err_msg=name)
    # Degenerate cases: no Stribeck term is Coulomb + viscous; vs = 0 means no Stribeck term.
    for stribeck in (jnp.zeros((2, 2)), params.stribeck.at[:, 1].set(0.0)):
        plain = dataclasses.replace(params, stribeck=stribeck)
        np.testing.assert_allclose(actuators.stribeck(model, plain, q, qd, u),
                                   expected['coulomb_viscous'], rtol=1e-14)
    # Joint features: [sin, cos] per revolute joint, the raw position for a prismatic one.
    np.testing.assert_allclose(actuators.joint_features(model, q),
                               [np.sin(0.3), np.cos(0.3), np.sin(-0.2), np.cos(-0.2)])
    cartpole = builders.cartpole()[0]
    np.testing.assert_allclose(actuators.joint_features(cartpole, q), [0.3, np.sin(-0.2),
                                                                       np.cos(-0.2)])
    assert actuators.num_joint_features(cartpole) == 3


@pytest.mark.parametrize('name', NAMES)
def test_offset_acts_like_a_torque_of_minus_offset(system, name):
    """Every model sees the command less the joint offsets: forward dynamics with offsets o
    and command u equal those without offsets and command u - o, bit for bit."""
    model, params, x0 = system
    params = _params_for(model, params, name)
    offset = jnp.array([0.8, -0.35])
    q, qd, u = x0[:2], x0[2:], jnp.array([0.3, -0.6])
    accel = jax.jit(functools.partial(integrators.forward_dynamics, model, actuator=name))
    np.testing.assert_array_equal(accel(dataclasses.replace(params, offset=offset), q, qd, u),
                                  accel(params, q, qd, u - offset))


def test_inverse_dynamics_with_offset_inverts_forward_dynamics(system):
    """u = rnea(q, qd, qdd) + friction(qd) + offset, written out by hand, drives the forward
    dynamics of the Stribeck model (with those offsets) to exactly qdd."""
    model, params, x0 = system
    offset = jnp.array([0.8, -0.35])
    params = dataclasses.replace(params, offset=offset)
    q, qd, qdd = x0[:2], x0[2:], jnp.array([1.5, -2.0])
    fs, vs = params.stribeck[:, 0], params.stribeck[:, 1]
    friction = (params.damping * qd + (params.coulomb + fs * jnp.exp(-(qd / vs) ** 2))
                * actuators.smooth_sign(qd))
    u = rigid_body.rnea(model, params, q, qd, qdd) + friction + offset
    np.testing.assert_allclose(
        integrators.forward_dynamics(model, params, q, qd, u, actuator='stribeck'), qdd,
        rtol=1e-12)


@pytest.mark.parametrize('name', PASSIVE)
def test_gain_scales_the_command_and_command_for_inverts_it(system, name):
    """Every additive model applies gain * u: forward dynamics with gains g and command u equal
    those with gain 1 and command g u; `command_for` is the command under which the model
    applies a given torque, and drives the forward dynamics to the qdd it came from."""
    model, params, x0 = system
    params = _params_for(model, params, name)
    gain = jnp.array([1.04, 0.97])
    scaled = dataclasses.replace(params, gain=gain, offset=jnp.array([0.8, -0.35]))
    q, qd, qdd = x0[:2], x0[2:], jnp.array([1.5, -2.0])
    accel = jax.jit(functools.partial(integrators.forward_dynamics, model, actuator=name))
    u = jnp.array([0.3, -0.6])
    np.testing.assert_allclose(accel(scaled, q, qd, u),
                               accel(dataclasses.replace(scaled, gain=jnp.ones(2)), q, qd,
                                     gain * u), rtol=1e-13)
    command = actuators.command_for(model, scaled, q, qd, rigid_body.rnea(model, scaled, q, qd,
                                                                          qdd),
                                    actuators.get_actuator(name))
    np.testing.assert_allclose(accel(scaled, q, qd, command), qdd, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('name', PASSIVE)
def test_load_friction_takes_its_share_of_the_transmitted_torque(system, name):
    """With load-dependent friction k the joint transmits tau with tau + k |tau| sgn(qd) = w,
    w the torque without it; the friction still only dissipates, and `command_for` inverts
    the forward dynamics."""
    model, params, x0 = system
    params = _params_for(model, params, name)
    loaded = dataclasses.replace(params, load_coulomb=jnp.array([0.08, 0.3]))
    rng = np.random.default_rng(5)
    q = jnp.asarray(rng.uniform(-np.pi, np.pi, (512, 2)))
    qd = jnp.asarray(rng.normal(size=(512, 2)) * 10.0 ** rng.uniform(-4, 1, (512, 1)))
    u = jnp.asarray(rng.normal(scale=3.0, size=(512, 2)))
    fn = jax.jit(jax.vmap(actuators.ACTUATORS[name], in_axes=(None, None, 0, 0, 0)))
    w, tau = fn(model, params, q, qd, u), fn(model, loaded, q, qd, u)
    np.testing.assert_allclose(tau + loaded.load_coulomb * np.abs(tau)
                               * actuators.smooth_sign(qd), w, rtol=1e-12, atol=1e-12)
    passive = fn(model, loaded, q, qd, jnp.zeros_like(u))
    assert float(jnp.max(jnp.sum(qd * passive, axis=1))) <= 0.0
    qd0, qdd = x0[2:] + jnp.array([0.0, 0.4]), jnp.array([1.5, -2.0])
    command = actuators.command_for(model, loaded, x0[:2], qd0,
                                    rigid_body.rnea(model, loaded, x0[:2], qd0, qdd),
                                    actuators.get_actuator(name))
    accel = integrators.forward_dynamics(model, loaded, x0[:2], qd0, command, actuator=name)
    np.testing.assert_allclose(accel, qdd, rtol=1e-10, atol=1e-10)
    grads = jax.grad(lambda p: jnp.sum(fn(model, p, q, qd, u)))(loaded)
    assert np.all(np.isfinite(grads.load_coulomb)) and np.all(grads.load_coulomb != 0.0)


def test_stribeck_gradients_finite_at_zero_stribeck_velocity(system):
    model, params, _ = system
    zero = dataclasses.replace(params, stribeck=jnp.zeros((2, 2)))

    def total(p, qd):
        return jnp.sum(actuators.stribeck(model, p, jnp.zeros(2), qd, jnp.zeros(2)))

    grad = jax.jit(jax.grad(total, argnums=(0, 1)))
    for qd in (jnp.zeros(2), jnp.array([0.3, -1.0])):
        grads = grad(zero, qd)
        assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize('name', PASSIVE)
def test_friction_power_is_never_positive(system, name):
    """qd . tau(q, qd, u=0) <= 0 exactly, at random states including tiny and huge speeds."""
    model, params, _ = system
    rng = np.random.default_rng(2)
    q = rng.uniform(-np.pi, np.pi, (4096, 2))
    qd = rng.normal(size=(4096, 2)) * 10.0 ** rng.uniform(-8, 2, (4096, 1))
    fn = jax.jit(jax.vmap(actuators.ACTUATORS[name], in_axes=(None, None, 0, 0, None)))
    tau = np.asarray(fn(model, params, jnp.asarray(q), jnp.asarray(qd), jnp.zeros(2)))
    power = np.sum(qd * tau, axis=1)
    assert power.max() <= 0.0
    if name != 'ideal':
        assert power.min() < -1.0  # the friction does act


def test_nn_friction_is_passive_for_any_weights(system):
    """Large random weights and biases of both signs: the power stays <= 0, joint by joint."""
    model, params, _ = system
    rng = np.random.default_rng(3)
    q = jnp.asarray(rng.uniform(-np.pi, np.pi, (2048, 2)))
    qd = jnp.asarray(rng.normal(size=(2048, 2)) * 3.0)
    friction = jax.jit(jax.vmap(actuators.nn_friction, in_axes=(None, None, 0, 0, None)))
    for seed in range(4):
        network = actuators.init_network(jax.random.PRNGKey(seed), model, 'nn_friction',
                                         hidden=(16, 16), out_scale=30.0, init_friction=5.0)
        wild = dataclasses.replace(params, network=network, damping=jnp.zeros(2))
        tau = friction(model, wild, q, qd, jnp.zeros(2))
        assert np.max(np.asarray(qd * tau)) <= 0.0


def test_energy_rate_equals_actuator_power(system):
    """dE/dt along the dynamics equals qd . tau: checks the energy function used below."""
    model, params, x0 = system

    @jax.jit
    def rates(u):
        xdot = integrators.state_derivative(model, params, x0, u, actuator='ideal')
        _, e_dot = jax.jvp(functools.partial(mechanical_energy, model, params), (x0,), (xdot,))
        return e_dot

    u = jnp.array([0.7, -0.4])
    np.testing.assert_allclose(rates(u), x0[2:] @ u, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rates(jnp.zeros(2)), 0.0, atol=1e-12)


def test_ideal_conserves_energy(passive_rollouts):
    """Frictionless, RK4 at dt = 2 ms keeps the energy to 1e-6 J over 1 s (the swing itself
    trades about 20 J between kinetic and potential energy)."""
    _, energies = passive_rollouts
    energy = energies[PASSIVE.index('ideal')]
    assert np.max(np.abs(energy - energy[0])) < 1e-6


@pytest.mark.parametrize('name', [n for n in PASSIVE if n != 'ideal'])
def test_passive_energy_never_increases(passive_rollouts, name):
    """Unforced, a passive model loses energy, and no step gains more than the integrator's
    own error, also while a joint velocity passes through zero (where friction vanishes).

    The tolerance is the largest energy change per step of the frictionless (ideal) rollout
    from the same state at the same dt (about 5e-9 J): that change is pure RK4 truncation
    error, the level below which a single step cannot resolve energy. A model injecting
    energy at a power P would gain P dt per step, far above it for any P that matters.
    """
    states, energies = passive_rollouts
    ideal, energy = energies[PASSIVE.index('ideal')], energies[PASSIVE.index(name)]
    integrator_error = np.max(np.abs(np.diff(ideal)))
    assert 0.0 < integrator_error < 1e-7
    assert np.max(np.diff(energy)) <= integrator_error
    assert np.max(energy - energy[0]) <= integrator_error
    assert energy[-1] < energy[0] - 1.0  # friction removed at least 1 J
    velocity_signs = np.sign(states[PASSIVE.index(name), 1:, 2:])
    assert np.all(np.any(velocity_signs[1:] != velocity_signs[:-1], axis=0))


def test_one_hot_mixture_is_exact(system):
    model, params, x0 = system
    q, qd, u = x0[:2], x0[2:], jnp.array([0.3, -0.6])
    weights = jnp.eye(len(PASSIVE))
    for k, name in enumerate(PASSIVE):
        mixed = _mixture(weights[k], PASSIVE)(model, params, q, qd, u)
        np.testing.assert_array_equal(mixed, actuators.ACTUATORS[name](model, params, q, qd, u))


def check_vjp(fn, args, num_directions=4, eps=1e-6, rtol=1e-6, atol=1e-9, seed=0):
    """Reverse-mode derivatives of `fn` against central differences along random directions.

    `jax.test_util.check_grads` does the same for one direction, but op by op; here the
    vector-Jacobian product and the differences for all directions are one compiled program.
    Checks w . J(args) v = (w . fn(args + eps v) - w . fn(args - eps v)) / (2 eps).
    """
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree.flatten(args)
    out = jax.eval_shape(fn, *args)
    v = [treedef.unflatten([jnp.asarray(rng.normal(size=np.shape(x))) for x in leaves])
         for _ in range(num_directions)]
    v = jax.tree.map(lambda *x: jnp.stack(x), *v)
    w = jnp.asarray(rng.normal(size=(num_directions, *out.shape)))

    @jax.jit
    @functools.partial(jax.vmap, in_axes=(None, 0, 0))
    def derivatives(args, v, w):
        _, vjp_fn = jax.vjp(fn, *args)
        analytic = sum(jnp.vdot(g, d) for g, d in zip(jax.tree.leaves(vjp_fn(w)),
                                                      jax.tree.leaves(v)))
        plus, minus = (jax.tree.map(lambda a, d: a + s * eps * d, args, v) for s in (1, -1))
        return analytic, jnp.vdot(w, fn(*plus) - fn(*minus)) / (2 * eps)

    analytic, numeric = derivatives(args, v, w)
    np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol)


@pytest.mark.parametrize('name', NAMES)
def test_jit_vmap_grad(system, name):
    """Every model (the black-box ones included) under jit, vmapped over parameter particles
    and states, with derivatives with respect to all of (params, q, qd, u) checked against
    finite differences. Gradients of whole rollouts through a network are checked in
    test_integrators."""
    model, params, x0 = system
    params = _params_for(model, params, name)
    tau_fn = functools.partial(actuators.ACTUATORS[name], model)
    q, qd, u = x0[:2], x0[2:], jnp.array([0.3, -0.6])
    tau = jax.jit(tau_fn)(params, q, qd, u)
    assert tau.shape == (2,)
    particles = jax.jit(lambda p: jax.tree.map(lambda x: jnp.stack([x, 1.1 * x, 0.9 * x]), p))(
        params)
    batched = jax.jit(jax.vmap(tau_fn, in_axes=(0, 0, None, None)))(
        particles, jnp.stack([q, -q, 2 * q]), qd, u)
    np.testing.assert_allclose(batched[0], tau, rtol=1e-14)
    # eps = 1e-6 keeps the steep smooth sign (qd[1] = 0 here) in its linear range.
    check_vjp(tau_fn, (params, q, qd, u))
