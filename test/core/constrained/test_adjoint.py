"""Discrete adjoint gradient of variational rollouts (core/adjoint.py), on a forced
four-bar with joint springs: A_k, B_k vs autodiff of the step, Lemma 1's gradient vs finite
differences and vs autodiff through the unrolled Newton solver, Armijo descent on known truth.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import adjoint
from sysid_ros.core.constrained import constraints
from sysid_ros.core.dynamics import variational

DT = 0.02
STEPS = 40
ITERATIONS = 12
RHO_TRUE = jnp.array([2.0, 1.0, 0.5])


def _force(q, qd, u, rho):
    """Torque u on joint 1 and light viscous damping on all joints [N m]."""
    return jnp.array([u, 0.0, 0.0]) - 0.05 * qd


MODEL, PARAMS, SYSTEM, Q_REF = constraints.four_bar(force=_force)
INPUTS = 3.0 * jnp.sin(jnp.arange(STEPS) * DT * 4.0)
X0 = variational.initial_state(SYSTEM, Q_REF, jnp.zeros(3), RHO_TRUE)


def _joint_cost(x, target, rho):
    """Squared error of the joint angles q_1 q_2 [rad^2] to a measured trajectory."""
    return jnp.sum((x[:2] - target) ** 2)


@jax.jit
def _simulate(rho):
    return variational.rollout(SYSTEM, X0, INPUTS, rho, DT, ITERATIONS)


TARGETS = _simulate(RHO_TRUE)[0][:, :2]


@jax.jit
def _cost(rho):
    states, _ = _simulate(rho)
    return adjoint.trajectory_cost(_joint_cost, _joint_cost, states, TARGETS, rho)


@jax.jit
def _adjoint_value_and_grad(rho):
    states, info = _simulate(rho)
    value = adjoint.trajectory_cost(_joint_cost, _joint_cost, states, TARGETS, rho)
    grad = adjoint.adjoint_gradient(SYSTEM, _joint_cost, _joint_cost, states, info, INPUTS,
                                    TARGETS, rho, DT)
    return value, grad


RHO_TEST = jnp.array([3.0, 0.6, 0.9])


@pytest.mark.slow
def test_linearization_matches_autodiff_of_step():
    x1, info = variational.step(SYSTEM, X0, INPUTS[0], RHO_TEST, DT, ITERATIONS)
    A, B = adjoint.linearize_step(SYSTEM, X0, x1, info.multiplier, INPUTS[0], RHO_TEST, DT)
    step = lambda x, rho: variational.step(SYSTEM, x, INPUTS[0], rho, DT, 40)[0]  # noqa
    A_ad, B_ad = jax.jacfwd(step, argnums=(0, 1))(X0, RHO_TEST)
    np.testing.assert_allclose(A, A_ad, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(B, B_ad, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_matrix_free_tangent_and_cotangent_are_A_and_B():
    """step_tangent = A dx + B drho and step_cotangent = (mu A, mu B), without forming them."""
    rng = np.random.default_rng(1)
    dx, drho, mu = rng.normal(size=X0.shape[0]), rng.normal(size=3), rng.normal(size=X0.shape[0])

    @jax.jit
    def linearizations(dx, drho, mu):
        x1, info = variational.step(SYSTEM, X0, INPUTS[0], RHO_TEST, DT, ITERATIONS)
        args = (SYSTEM, X0, x1, info.multiplier, INPUTS[0], RHO_TEST, DT)
        return (adjoint.linearize_step(*args), adjoint.step_tangent(*args, dx, drho),
                adjoint.step_cotangent(*args, mu))

    (A, B), tangent, (mu_A, mu_B) = linearizations(dx, drho, mu)
    np.testing.assert_allclose(tangent, A @ dx + B @ drho, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mu_A, mu @ A, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mu_B, mu @ B, rtol=1e-10, atol=1e-12)


def test_adjoint_gradient_matches_finite_differences():
    value, grad = _adjoint_value_and_grad(RHO_TEST)
    variational.check_rollout(_simulate(RHO_TEST)[1], tol=1e-10)
    assert float(value) > 0.0
    eps = 1e-6
    fd = np.array([(_cost(RHO_TEST + eps * e) - _cost(RHO_TEST - eps * e)) / (2 * eps)
                   for e in np.eye(3)])
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-9)


@pytest.mark.slow   # compiling reverse mode through the unrolled Newton solver: about 30 s
def test_adjoint_gradient_matches_reverse_mode_autodiff():
    """(Forward-mode autodiff is compared in the Gauss-Newton test below.)"""
    autodiff = jax.jit(jax.grad(_cost))(RHO_TEST)
    np.testing.assert_allclose(_adjoint_value_and_grad(RHO_TEST)[1], autodiff, rtol=1e-6,
                               atol=1e-10)


def test_armijo_descent_decreases_cost_within_bounds():
    """Every accepted Armijo step decreases the cost and stays in the box; the cost falls by
    four orders of magnitude (the three stiffnesses are poorly conditioned on 0.8 s of data,
    so steepest descent approaches the truth RHO_TRUE slowly along a valley)."""
    lower, upper = np.full(3, 0.01), np.full(3, 10.0)
    result = adjoint.projected_armijo_descent(
        _adjoint_value_and_grad, _cost, RHO_TEST, lower=lower, upper=upper,
        max_iterations=60, grad_tol=1e-10)
    costs = np.array([c for c, _ in result.history])
    assert np.all(np.diff(costs) < 0.0)
    assert all(np.all((lower <= r) & (r <= upper)) for _, r in result.history)
    assert result.cost < 1e-4 * float(_cost(RHO_TEST))


@jax.jit
def _gauss_newton_value_grad_matrix(rho):
    states, info = _simulate(rho)
    value = adjoint.trajectory_cost(_joint_cost, _joint_cost, states, TARGETS, rho)
    S = adjoint.forward_sensitivities(SYSTEM, states, info, INPUTS, rho, DT)
    grad, H = adjoint.gauss_newton_system(lambda x: x[:2], states, TARGETS, S)
    return value, grad, H, S


def test_forward_sensitivities_and_gauss_newton_recover_truth():
    """S_k = dx_k/drho (tangent-linear recursion) matches autodiff of the rollout, its
    gradient matches the adjoint's, and
    Gauss-Newton with the same Armijo search reaches the true stiffness where steepest
    descent crawls along the valley (test above)."""
    _, grad, _, S = _gauss_newton_value_grad_matrix(RHO_TEST)
    S_ad = jax.jit(jax.jacfwd(lambda rho: _simulate(rho)[0]))(RHO_TEST)
    np.testing.assert_allclose(S, S_ad, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(grad, _adjoint_value_and_grad(RHO_TEST)[1], rtol=1e-6)
    result = adjoint.projected_armijo_descent(
        lambda rho: _gauss_newton_value_grad_matrix(rho)[:3], _cost, RHO_TEST,
        lower=np.full(3, 0.01), upper=np.full(3, 10.0), max_iterations=20, grad_tol=1e-12,
        gauss_newton=True)
    assert result.iterations < 20
    np.testing.assert_allclose(result.rho, RHO_TRUE, rtol=1e-5)
