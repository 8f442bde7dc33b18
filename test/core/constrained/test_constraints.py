"""Loop closure, the scanned loop Lagrangian and the non-holonomic penalties
(core/constraints.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import constraints
from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics import variational


@pytest.fixture(scope='module')
def loop6():
    return constraints.flexible_loop(6, arm_lengths=(0.3, 0.4), arm_axes='zy',
                                     arm_masses=(2.0, 1.0))


def test_loop_closes_at_rest_with_independent_constraints(loop6):
    system = constraints.loop_system(loop6)
    q0 = jnp.zeros(loop6.model.nv)
    assert loop6.model.nv == 2 + 2 * 6
    variational.check_initial_configuration(system, q0)  # rank 12 and h(0) = 0
    np.testing.assert_allclose(system.constraint(q0), 0.0, atol=1e-14)


def test_scanned_loop_matches_tree_model(loop6):
    """loop_kinematics / loop_system agree with the generic tree (FK and model_system)."""
    nv = loop6.model.nv
    key1, key2 = jax.random.split(jax.random.PRNGKey(3))
    q, qd = 0.3 * jax.random.normal(key1, (nv,)), jax.random.normal(key2, (nv,))
    R, p = kinematics.forward_kinematics(loop6.model, loop6.params, q)
    (R_arm, p_arm), (R_link, p_link) = constraints.loop_kinematics(loop6, q)
    links = np.asarray(loop6.bend_out).reshape(2, -1)
    np.testing.assert_allclose(p_arm, p[:2], atol=1e-13)
    np.testing.assert_allclose(R_link, R[links], atol=1e-13)
    np.testing.assert_allclose(p_link, p[links], atol=1e-13)
    rho = jnp.array([4.0, 1.0])
    scanned = constraints.loop_system(loop6)
    tree = variational.model_system(
        loop6.model, loop6.params, functools.partial(constraints.loop_stiffness, loop6),
        constraint=functools.partial(constraints.clamp_constraint, loop6), nh=12)
    np.testing.assert_allclose(scanned.lagrangian(q, qd, rho), tree.lagrangian(q, qd, rho),
                               rtol=1e-12)
    np.testing.assert_allclose(scanned.constraint(q), tree.constraint(q), atol=1e-13)


def test_bad_loop_sizes_rejected():
    with pytest.raises(ValueError, match='num_links: expected an even number'):
        constraints.flexible_loop(5)


def test_derivative_level_penalty_matches_finite_differences():
    """h, hd, hdd of the relaxed inequality agree with differences along q(t)."""
    def inequality(q):
        return jnp.array([q[0] ** 2 + q[1] - 0.5, jnp.sin(q[1]) - 0.2])

    q, qd, qdd = jnp.array([0.6, 0.3]), jnp.array([0.4, -0.7]), jnp.array([1.5, 0.2])
    path = lambda t: constraints.soft_relu(inequality(q + t * qd + 0.5 * t**2 * qdd))  # noqa
    eps = 1e-4
    h = path(0.0)
    hd = (path(eps) - path(-eps)) / (2 * eps)
    hdd = (path(eps) - 2 * h + path(-eps)) / eps**2
    expected = jnp.sum(h**2 + hd**2 + hdd**2)
    np.testing.assert_allclose(constraints.derivative_level_penalty(inequality, q, qd, qdd),
                               expected, rtol=1e-5)
    # Deep inside the feasible set the penalty vanishes.
    assert constraints.derivative_level_penalty(inequality, -q, 0 * qd, 0 * qdd) < 1e-6


def test_string_force_keeps_taut_string_length():
    """With the closed-form tension, a ball swinging on a taut string keeps |r| = length
    (C_ddot = 0), checked by integrating the ball under gravity + tension."""
    length, mass = 0.4, 0.05
    anchor = jnp.zeros(3)

    def accel(x, v):
        f = constraints.string_tension_force(x, v, anchor, jnp.zeros(3), jnp.zeros(3),
                                             length, mass, sharpness=1e4)
        return jnp.array([0.0, 0.0, -9.81]) + f / mass

    def rk4(y, _):
        dt = 1e-3
        f = lambda y: jnp.concatenate([y[3:], accel(y[:3], y[3:])])  # noqa: E731
        k1 = f(y)
        k2 = f(y + 0.5 * dt * k1)
        k3 = f(y + 0.5 * dt * k2)
        k4 = f(y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y, jnp.linalg.norm(y[:3])

    y0 = jnp.array([length, 0.0, 0.0, 0.0, 0.0, 0.0])  # horizontal, at rest, taut
    _, radius = jax.lax.scan(rk4, y0, None, length=500)
    # The force holds C_ddot = 0 (no position feedback), so |r| drifts slowly; free fall
    # would drop the ball 1.2 m in these 0.5 s.
    assert float(jnp.abs(radius - length).max()) < 0.02 * length
    # Slack string: no force.
    slack = constraints.string_tension_force(jnp.array([0.1, 0.0, 0.0]), jnp.zeros(3), anchor,
                                             jnp.zeros(3), jnp.zeros(3), length, mass)
    np.testing.assert_allclose(slack, 0.0, atol=1e-8)


def test_string_force_baumgarte_target():
    """With a Baumgarte frequency w, the taut string's force makes the constraint
    C = (|r|^2 - L^2) / 2 follow C_ddot = -2 w C_dot - w^2 C (moving anchor)."""
    length, mass, w = 0.4, 0.05, 20.0
    ball, ball_velocity = jnp.array([0.1, -0.05, -0.39]), jnp.array([0.3, 0.2, -0.1])
    anchor, anchor_velocity = jnp.array([0.0, 0.0, 0.0]), jnp.array([0.1, 0.0, 0.2])
    anchor_acceleration = jnp.array([1.0, -2.0, 0.5])
    f = constraints.string_tension_force(ball, ball_velocity, anchor, anchor_velocity,
                                         anchor_acceleration, length, mass,
                                         sharpness=1e5, frequency=w)
    r, r_dot = ball - anchor, ball_velocity - anchor_velocity
    ball_acceleration = jnp.array([0.0, 0.0, -9.81]) + f / mass
    c, c_dot = 0.5 * (r @ r - length**2), r @ r_dot
    c_ddot = r_dot @ r_dot + r @ (ball_acceleration - anchor_acceleration)
    assert float(c) > 0.0  # taut (slightly stretched), and the string pulls
    np.testing.assert_allclose(c_ddot, -2 * w * c_dot - w**2 * c, rtol=1e-8, atol=1e-10)
