"""Midpoint variational integrator with holonomic constraints (core/variational.py)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import constraints
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.dynamics import variational
from sysid_ros.core.model import builders

DT = 0.02
RHO = jnp.array([2.0, 1.0, 0.5])


@pytest.fixture(scope='module')
def four_bar():
    return constraints.four_bar()


def _tangent_velocity(system, q, speed):
    """A velocity (nq,) in the null space of the constraint Jacobian at q."""
    J = np.asarray(jax.jacfwd(system.constraint)(q))
    null = np.linalg.svd(J)[2][-1]
    return jnp.asarray(speed * null)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _vi_energies(system, q0, qd0, steps):
    x0 = variational.initial_state(system, q0, qd0, RHO)
    states, info = variational.rollout(system, x0, jnp.zeros((steps, 0)), RHO, DT, 8)
    h = jax.vmap(system.constraint)(states[:, :system.nq])
    return variational.midpoint_energies(system, states, RHO, DT), info.residual, h


@functools.partial(jax.jit, static_argnums=(0, 3))
def _rk4_energies(system, q0, qd0, steps):
    nq = system.nq

    def deriv(y):
        q, qd = y[:nq], y[nq:]
        return jnp.concatenate([qd, variational.constrained_acceleration(system, q, qd, None,
                                                                         RHO)])

    def body(y, _):
        k1 = deriv(y)
        k2 = deriv(y + 0.5 * DT * k1)
        k3 = deriv(y + 0.5 * DT * k2)
        k4 = deriv(y + DT * k3)
        y = y + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y, variational.energy(system, y[:nq], y[nq:], RHO)

    _, energies = jax.lax.scan(body, jnp.concatenate([q0, qd0]), None, length=steps)
    return energies


def test_kinetic_energy_matches_mass_matrix():
    model, params = builders.chain(3, (1.0, 0.7, 0.5), (1.0, 2.0, 0.5))
    params = dataclasses.replace(params, armature=jnp.array([0.1, 0.0, 0.2]))
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    q, qd = jax.random.normal(key1, (3,)), jax.random.normal(key2, (3,))
    M = rigid_body.crba(model, params, q)
    assert np.isclose(variational.kinetic_energy(model, params, q, qd), 0.5 * qd @ M @ qd,
                      rtol=1e-12)


def test_continuous_dynamics_match_aba_without_constraints():
    """The Lagrangian's Euler-Lagrange accelerations equal ABA's (springs as torques)."""
    model, params = builders.chain(2, damping=0.0)
    system = variational.model_system(model, params, lambda rho: rho)
    q, qd = jnp.array([0.3, -0.5]), jnp.array([0.7, 0.2])
    rho = jnp.array([3.0, 1.5])
    qdd = variational.constrained_acceleration(system, q, qd, None, rho)
    reference = rigid_body.aba(model, params, q, qd, -rho * q)
    np.testing.assert_allclose(qdd, reference, rtol=1e-10, atol=1e-10)


@pytest.mark.slow   # 10,000 steps of each integrator: ~100 s cold on 2 cores
def test_energy_bounded_vs_rk4_drift(four_bar):
    """10,000 steps of the unforced four-bar: VI energy error bounded, RK4's drifts."""
    _, _, system, q_ref = four_bar
    variational.check_initial_configuration(system, q_ref)
    qd0 = _tangent_velocity(system, q_ref, 2.0)
    steps = 10_000
    vi_energy, residual, h = _vi_energies(system, q_ref, qd0, steps)
    variational.check_rollout(variational.VariationalInfo(None, residual), tol=1e-7)
    assert float(jnp.abs(h).max()) < 1e-7  # the constraint holds at every step
    e0 = float(variational.energy(system, q_ref, qd0, RHO))
    vi_error = np.abs(np.asarray(vi_energy) - e0)
    rk4_energy = np.asarray(_rk4_energies(system, q_ref, qd0, steps))
    rk4_error = np.nan_to_num(np.abs(rk4_energy - e0), nan=np.inf)  # diverged counts as inf
    first, last = slice(0, steps // 10), slice(-steps // 10, None)
    # VI: the error oscillates with the same amplitude early and late (no secular growth).
    assert vi_error[last].max() < 2.0 * vi_error[first].max()
    # RK4 (constraints at the acceleration level): the error grows beyond the VI's bound
    # within the first tenth and keeps growing.
    assert rk4_error[first].max() > 5.0 * vi_error.max()
    assert rk4_error[last].max() > 5.0 * rk4_error[first].max()


def test_newton_non_convergence_names_step(four_bar):
    _, _, system, q_ref = four_bar
    qd0 = _tangent_velocity(system, q_ref, 30.0)
    x0 = variational.initial_state(system, q_ref, qd0, RHO)
    _, info = variational.rollout(system, x0, jnp.zeros((5, 0)), RHO, 0.2, 1)
    with pytest.raises(variational.VariationalError, match=r'variational step 0: .*residual'):
        variational.check_rollout(info)


def test_singular_constraints_rejected(four_bar):
    model, params, system, q_ref = four_bar
    doubled = system._replace(constraint=lambda q: jnp.tile(system.constraint(q), 2), nh=4)
    with pytest.raises(variational.VariationalError, match='singular'):
        variational.check_initial_configuration(doubled, q_ref)


def test_unclosable_configuration_rejected(four_bar):
    _, _, system, q_ref = four_bar
    with pytest.raises(variational.VariationalError, match='constraint .* residual'):
        variational.check_initial_configuration(system, q_ref + 0.1)
    # A pivot out of reach (farther than the total link length) cannot be closed.
    far = system._replace(constraint=lambda q: system.constraint(q) + jnp.array([5.0, 0.0]))
    with pytest.raises(variational.VariationalError, match='does not close'):
        variational.closed_configuration(far, q_ref)
    closed = variational.closed_configuration(system, q_ref + 0.05)
    assert float(jnp.abs(system.constraint(closed)).max()) < 1e-10


def test_variational_integrator_choice_matches_rk4():
    """`integrators.rollout(..., integrator='variational')` agrees with RK4 over 0.2 s."""
    from sysid_ros.core.dynamics import integrators

    model, params = builders.chain(2, damping=0.1)
    x0 = jnp.array([0.5, -0.3, 0.0, 0.4])
    controls = jnp.tile(jnp.array([0.2, -0.1]), (100, 1))
    vi_states = integrators.rollout(model, params, x0, controls, 0.002, 'variational')
    rk4_states = integrators.rollout(model, params, x0, controls, 0.002, 'rk4')
    np.testing.assert_allclose(vi_states, rk4_states, atol=1e-4)


@pytest.mark.slow   # about 30 s, compiling the exact-Newton fallback (bench/flexible_loop uses it)
def test_newton_with_a_tolerance_converges_where_the_chord_stalls(four_bar):
    """With `tol`, steps stop at the tolerance and a stalled chord goes on by exact Newton:
    the states of 60 chord iterations, where 6 fall short."""
    _, _, system, q_ref = four_bar
    x0 = variational.initial_state(system, q_ref, _tangent_velocity(system, q_ref, 8.0), RHO)
    inputs = jnp.zeros((10, 0))

    @jax.jit
    def rollouts():
        return (variational.rollout(system, x0, inputs, RHO, 0.05, 6, tol=1e-10),
                variational.rollout(system, x0, inputs, RHO, 0.05, 6),
                variational.rollout(system, x0, inputs, RHO, 0.05, 60))

    (states, info), (_, chord_info), (reference, _) = rollouts()
    assert float(chord_info.residual.max()) > 1e-6            # 6 chord iterations fall short
    variational.check_rollout(info, tol=1e-10)
    np.testing.assert_allclose(states, reference, atol=1e-8)
