"""Time steppers and rollouts: hand-computed steps, orders of accuracy, zero-order hold,
jit, vmap over particles and initial states, gradients against finite differences."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import integrators
from sysid_ros.core.model import builders

G = 9.81
LENGTH, MASS, DAMPING = 0.8, 2.0, 0.3
INERTIA = MASS * LENGTH**2 / 3.0  # thin rod about its end [kg m^2]

step = jax.jit(lambda fn, *args: integrators.INTEGRATORS[fn](*args), static_argnums=(0, 6))
rollout = jax.jit(integrators.rollout, static_argnames=('integrator', 'actuator', 'substeps'))


def pendulum_derivative(x, u):
    """Analytic xdot of the damped rod pendulum: I qdd = u - d qd - m g (l / 2) sin q."""
    q, qd = x
    return np.array([qd, (u - DAMPING * qd - MASS * G * 0.5 * LENGTH * np.sin(q)) / INERTIA])


@pytest.fixture(scope='module')
def pendulum():
    return builders.chain(1, lengths=LENGTH, masses=MASS, radius=0.0, damping=DAMPING)


@pytest.fixture(scope='module')
def double():
    """Double pendulum with armature, damping and an `nn_residual` network: the rollout tests
    below use that actuator, so gradients reach inertial, friction and network parameters."""
    model, params = builders.double_pendulum(damping=0.1)
    network = actuators.init_network(jax.random.PRNGKey(0), model, 'nn_residual',
                                     hidden=(16, 16))
    return model, dataclasses.replace(params, armature=jnp.array([0.01, 0.02]), network=network)


def test_registry_and_errors(double):
    model, params = double
    assert set(integrators.INTEGRATORS) == {'semi_implicit_euler', 'rk4', 'variational'}
    assert integrators.get_integrator('rk4') is integrators.rk4
    args = (model, params, jnp.zeros(4), jnp.zeros((3, 2)), 0.01)
    with pytest.raises(ValueError, match='integrator: expected one of'):
        integrators.rollout(*args, integrator='euler')
    with pytest.raises(ValueError, match='actuator: expected one of'):
        integrators.rollout(*args, actuator='magic')
    with pytest.raises(ValueError, match='substeps: expected int >= 1'):
        integrators.rollout(*args, substeps=0)


def test_semi_implicit_euler_hand_step(pendulum):
    """Seed 000 eq. 4 by hand: qd' = qd + dt qdd(q, qd, u), then q' = q + dt qd'."""
    model, params = pendulum
    x, u, dt = np.array([0.4, -1.1]), 0.7, 0.01
    qdd = (u - DAMPING * x[1] - MASS * G * 0.5 * LENGTH * np.sin(x[0])) / INERTIA
    qd_next = x[1] + dt * qdd
    expected = np.array([x[0] + dt * qd_next, qd_next])
    got = step('semi_implicit_euler', model, params, jnp.asarray(x), jnp.array([u]), dt,
               'viscous')
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def test_rk4_hand_step(pendulum):
    model, params = pendulum
    x, u, dt = np.array([0.4, -1.1]), 0.7, 0.01
    k1 = pendulum_derivative(x, u)
    k2 = pendulum_derivative(x + 0.5 * dt * k1, u)
    k3 = pendulum_derivative(x + 0.5 * dt * k2, u)
    k4 = pendulum_derivative(x + dt * k3, u)
    expected = x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    got = step('rk4', model, params, jnp.asarray(x), jnp.array([u]), dt, 'viscous')
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def test_local_error_orders(pendulum):
    """One step's error shrinks like dt^2 (semi-implicit Euler) and dt^5 (RK4)."""
    model, params = pendulum
    x, u = jnp.array([0.4, -1.1]), jnp.array([0.7])

    def exact(dt, n=64):
        y = x
        for _ in range(n):
            y = step('rk4', model, params, y, u, dt / n, 'viscous')
        return y

    for name, order in (('semi_implicit_euler', 2), ('rk4', 5)):
        errors = [float(jnp.linalg.norm(step(name, model, params, x, u, dt, 'viscous')
                                        - exact(dt))) for dt in (0.04, 0.02)]
        assert abs(np.log2(errors[0] / errors[1]) - order) < 0.3, (name, errors)


def test_rollout_is_a_scan_of_steps_with_zero_order_hold(pendulum):
    model, params = pendulum
    x0, dt = jnp.array([0.4, -1.1]), 0.02
    controls = jnp.asarray(np.random.default_rng(0).normal(size=(10, 1)))
    states = rollout(model, params, x0, controls, dt, integrator='rk4', substeps=4)
    assert states.shape == (11, 2)
    np.testing.assert_array_equal(states[0], x0)
    # Substeps: each control sample held over four steps of dt / 4.
    x, expected = x0, [x0]
    for u in controls:
        for _ in range(4):
            x = step('rk4', model, params, x, u, dt / 4, 'viscous')
        expected.append(x)
    np.testing.assert_allclose(states, np.stack(expected), rtol=1e-12, atol=1e-14)


def test_rollout_body_is_checkpointed(double):
    model, params = double
    jaxpr = jax.make_jaxpr(functools.partial(integrators.rollout, model))(
        params, jnp.zeros(4), jnp.zeros((3, 2)), 0.01)
    assert 'checkpoint' in str(jaxpr) or 'remat' in str(jaxpr)


def _particles(params, num=3):
    """`num` parameter particles: damping and link masses scaled differently per particle."""
    scale = jnp.linspace(0.8, 1.2, num)
    return dataclasses.replace(
        jax.tree.map(lambda leaf: jnp.stack([leaf] * num), params),
        damping=scale[:, None] * params.damping,
        inertial=scale[::-1, None, None] * params.inertial)


def test_rollout_jit_and_vmap_over_params_and_states(double):
    model, params = double
    particles = _particles(params)
    x0 = jnp.array([[0.5, -0.3, 0.0, 1.0], [1.0, 0.2, -0.5, 0.0], [-0.4, 0.9, 0.3, 0.3]])
    controls = jnp.asarray(np.random.default_rng(1).normal(size=(50, 2)))
    simulate = functools.partial(integrators.rollout, actuator='nn_residual')
    batched = jax.jit(jax.vmap(simulate, in_axes=(None, 0, 0, None, None)))(
        model, particles, x0, controls, 0.01)
    assert batched.shape == (3, 51, 4)
    for k in range(3):
        p = jax.tree.map(lambda leaf: leaf[k], particles)
        np.testing.assert_allclose(
            batched[k], rollout(model, p, x0[k], controls, 0.01, actuator='nn_residual'),
            rtol=1e-12, atol=1e-12)
    assert not np.allclose(batched[0, -1], batched[1, -1])


def test_rollout_gradient_matches_finite_differences(double):
    """Reverse-mode gradient of a trajectory loss w.r.t. damping, inertial parameters and
    network weights, through the checkpointed scan, against central differences (eps = 1e-6,
    float64): every damping entry, and random directions in the 20 inertial parameters and in
    the weights. The differences reuse the compiled `rollout`, so only the gradient is
    compiled here."""
    model, params = double
    x0 = jnp.array([0.5, -0.3, 0.0, 1.0])
    controls = jnp.asarray(np.random.default_rng(1).normal(size=(50, 2)))
    theta = (params.damping, params.inertial, params.network)

    def loss(theta):
        damping, inertial, network = theta
        p = dataclasses.replace(params, damping=damping, inertial=inertial, network=network)
        states = rollout(model, p, x0, controls, 0.01, actuator='nn_residual')
        return jnp.mean(jnp.sin(states[:, :2]) ** 2) + 0.1 * jnp.mean(states[:, 2:] ** 2)

    grads = jax.jit(jax.grad(loss))(theta)
    assert np.all(np.abs(grads[0]) > 1e-6)

    def central_difference(direction, eps=1e-6):
        plus, minus = (jax.tree.map(lambda a, d: a + s * eps * d, theta, direction)
                       for s in (1.0, -1.0))
        return (loss(plus) - loss(minus)) / (2 * eps)

    rng = np.random.default_rng(2)
    zeros = jax.tree.map(jnp.zeros_like, theta)
    directions = [(jnp.eye(2)[i], *zeros[1:]) for i in range(2)]
    directions.append((zeros[0], jnp.asarray(rng.normal(size=(2, 10))), zeros[2]))
    directions.append((*zeros[:2], jax.tree.map(
        lambda a: jnp.asarray(rng.normal(size=a.shape)), theta[2])))
    for direction in directions:
        analytic = sum(jnp.vdot(g, d) for g, d in zip(jax.tree.leaves(grads),
                                                      jax.tree.leaves(direction)))
        np.testing.assert_allclose(analytic, central_difference(direction), rtol=1e-6)
