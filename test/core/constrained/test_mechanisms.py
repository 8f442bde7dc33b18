"""Planar mechanisms in natural coordinates: constraints, derivatives, EOM (eqs 6, 15), checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import mechanisms as mm

MECH, PARAMS, Q0 = mm.four_bar(crank_angle=0.4, damping=0.3)
Z = jnp.array([0.4])
ZD = jnp.array([1.3])
U = jnp.array([0.8])
QD = mm.velocity_transform(MECH, Q0, Z) @ ZD


def test_four_bar_geometry_matches_the_seed():
    mech, params, q0 = mm.four_bar()
    np.testing.assert_allclose(q0, [1.0, 0.0, 1.0, 2.0], atol=1e-12)
    np.testing.assert_allclose(params.bar_masses, [1.0, 2.0, 4.0])
    assert (mech.num_coords, mech.num_constraints, mech.num_independent) == (4, 3, 1)
    np.testing.assert_allclose(mm.constraints(MECH, Q0), 0.0, atol=1e-12)
    np.testing.assert_allclose(mm.bar_angles(MECH, Q0), Z, atol=1e-12)


def test_closed_form_derivatives_match_autodiff():
    q = Q0 + 0.1 * jnp.arange(1.0, 5.0)
    qd = jnp.array([0.3, -0.2, 0.5, 0.1])
    z, zd = jnp.array([0.2]), jnp.array([-0.7])
    phi = jax.jacfwd(lambda x: mm.constraints(MECH, x))
    np.testing.assert_allclose(mm.constraint_jacobian(MECH, q), phi(q), rtol=1e-12)
    second = jax.jvp(lambda x: jax.jvp(lambda y: mm.constraints(MECH, y), (x,), (qd,))[1],
                     (q,), (qd,))[1]
    np.testing.assert_allclose(mm.constraint_bias(MECH, q, qd), second, rtol=1e-12)
    g_q, g_z = mm.link_jacobians(MECH, q, z)
    np.testing.assert_allclose(g_q, jax.jacfwd(mm.link_constraints, 1)(MECH, q, z), rtol=1e-12)
    np.testing.assert_allclose(g_z, jax.jacfwd(mm.link_constraints, 2)(MECH, q, z), rtol=1e-12)

    def rate(x, y):
        return jax.jvp(lambda a, b: mm.link_constraints(MECH, a, b), (x, y), (qd, zd))[1]
    bias = jax.jvp(rate, (q, z), (qd, zd))[1]
    np.testing.assert_allclose(mm.link_bias(MECH, q, qd, z, zd), bias, rtol=1e-12, atol=1e-14)
    omega = jax.jvp(lambda x: mm.bar_angles(MECH, x), (q,), (qd,))[1]
    np.testing.assert_allclose(mm.bar_angular_velocities(MECH, q, qd)[0], omega[0], rtol=1e-12)


def test_mass_matrix_gives_rigid_bar_kinetic_energy():
    m = mm.mass_matrix(MECH, PARAMS)
    r = mm.point_positions(MECH, Q0)
    rd = mm.point_positions(MECH, QD) - mm.point_positions(MECH, jnp.zeros(4))
    energy = 0.0
    for k, (i, j) in enumerate(MECH.bar_points):
        mass, length = PARAMS.bar_masses[k], MECH.bar_lengths[k]
        v_com = 0.5 * (rd[i] + rd[j])
        d, dd = r[j] - r[i], rd[j] - rd[i]
        omega = (d[0] * dd[1] - d[1] * dd[0]) / length**2
        energy += 0.5 * mass * v_com @ v_com + 0.5 * mass * length**2 / 12 * omega**2
    np.testing.assert_allclose(0.5 * QD @ m @ QD, energy, rtol=1e-12)


def test_dependent_eom_matches_kkt_solve():
    """Eq 6 (block inverse) vs a direct solve of the augmented system (eq 5)."""
    m = np.asarray(mm.mass_matrix(MECH, PARAMS))
    a = np.asarray(mm.constraint_jacobian(MECH, Q0))
    c = -np.asarray(mm.constraint_bias(MECH, Q0, QD))
    q_force = np.asarray(mm.generalized_forces(MECH, PARAMS, Q0, QD, U))
    kkt = np.block([[m, a.T], [a, np.zeros((3, 3))]])
    expected = np.linalg.solve(kkt, np.concatenate([q_force, c]))[:4]
    np.testing.assert_allclose(mm.forward_dynamics_dependent(MECH, PARAMS, Q0, QD, U), expected,
                               rtol=1e-10)


def test_independent_eom_agrees_with_dependent_and_inverts():
    zdd = mm.forward_dynamics_independent(MECH, PARAMS, Q0, QD, Z, ZD, U)
    qdd = mm.forward_dynamics_dependent(MECH, PARAMS, Q0, QD, U)
    r = mm.velocity_transform(MECH, Q0, Z)
    s = mm.acceleration_bias(MECH, Q0, QD, Z, ZD)
    np.testing.assert_allclose(r @ zdd + s, qdd, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        mm.inverse_dynamics_independent(MECH, PARAMS, Q0, QD, Z, ZD, zdd), U, rtol=1e-10)
    # the friction torque opposes the crank rate: more damping, less acceleration
    more = mm.MechanismParams(PARAMS.bar_masses, PARAMS.damping + 1.0)
    assert mm.forward_dynamics_independent(MECH, more, Q0, QD, Z, ZD, U)[0] < zdd[0]


def test_jit_and_vmap():
    qs = jnp.stack([Q0, Q0])
    fd = jax.jit(jax.vmap(lambda q: mm.forward_dynamics_dependent(MECH, PARAMS, q, QD, U)))
    np.testing.assert_allclose(fd(qs)[1], mm.forward_dynamics_dependent(MECH, PARAMS, Q0, QD, U),
                               rtol=1e-12)
    grad = jax.grad(lambda p: mm.forward_dynamics_dependent(MECH, p, Q0, QD, U)[0])(PARAMS)
    assert np.all(np.isfinite(grad.bar_masses)) and np.all(np.isfinite(grad.damping))


@pytest.fixture(scope='module')
def free_fall():
    """100 steps of 10 ms from crank angle 0 at rest, RK4 in the crank angle (4 substeps)."""
    mech, params, q0 = mm.four_bar()
    q, qd, z, _ = jax.jit(lambda u: mm.simulate_independent_rk4(
        mech, params, q0, jnp.zeros(1), jnp.zeros(1), u, 0.01, substeps=4))(jnp.zeros((100, 1)))
    return mech, params, q0, q, qd, z


def test_rk4_reference_conserves_energy_without_friction(free_fall):
    mech, params, _, q, qd, z = free_fall
    m = mm.mass_matrix(mech, params)
    heights = jax.vmap(lambda x: mm.bar_maps(mech)[3].T @ x)(q)  # per-bar weight . position
    energy = 0.5 * jnp.einsum('ti,ij,tj->t', qd, m, qd) - heights @ params.bar_masses
    assert float(jnp.ptp(energy)) < 1e-6 * float(jnp.abs(energy).max())
    assert float(jnp.abs(jax.vmap(lambda x: mm.constraints(mech, x))(q)).max()) < 1e-10
    assert float(z[-1, 0]) < -0.5  # it falls


def test_dependent_reference_matches_independent_reference(free_fall):
    """Two references that share no coordinate: dependent RK4 + projection vs crank-angle RK4
    (both at 2.5 ms; they differ by their truncation errors only)."""
    mech, params, q0, q_ind, qd_ind, _ = free_fall
    q_dep, qd_dep = jax.jit(lambda u: mm.simulate_dependent_rk4(
        mech, params, q0, jnp.zeros(4), u, 0.01, substeps=4))(jnp.zeros((100, 1)))
    np.testing.assert_allclose(q_dep, q_ind, atol=1e-7)
    np.testing.assert_allclose(qd_dep, qd_ind, atol=1e-6)
    assert float(jnp.abs(jax.vmap(lambda q: mm.constraints(mech, q))(q_dep)).max()) < 1e-12


def _points(extra=()):
    return [('A', 0.0, 0.0, True), ('1', 0, 0, False), ('2', 0, 0, False),
            ('B', 4.0, 0.0, True), *extra]


BARS = [('crank', 'A', '1', 1.0), ('coupler', '1', '2', 2.0), ('rocker', '2', 'B', 1.0)]


@pytest.mark.parametrize('points,bars,match', [
    (_points([('C', 0, 0, False)]), BARS, "point 'C' is dangling"),
    (_points(), BARS + [('brace', 'A', 'X', 1.0)], "bar 'brace': unknown point 'X'"),
    (_points(), BARS + [('ground', 'A', 'B', 4.0)], "bar 'ground': both points"),
    (_points(), BARS[:2] + [('rocker', '2', 'B', -1.0)], "bar 'rocker': length must be > 0"),
    (_points(), BARS + [('crank', '1', 'B', 3.0)], "bar name 'crank' is used twice"),
])
def test_bad_descriptions_name_the_part(points, bars, match):
    with pytest.raises(mm.MechanismError, match=match):
        mm.make_mechanism(points, bars, angle_bars=('crank',))


def test_bad_states_name_the_constraint():
    mech = mm.make_mechanism(_points(), BARS, angle_bars=('crank',))
    # coupler and rocker in line (dead point): their rows lose rank
    with pytest.raises(mm.MechanismError, match="bar 'rocker'.*singular"):
        mm.check_configuration(mech, jnp.array([1.0, 0.0, 3.0, 0.0]), z=jnp.array([0.0]))
    with pytest.raises(mm.MechanismError, match="bar 'coupler' has length"):
        mm.check_configuration(MECH, Q0 + jnp.array([0.0, 0.0, 0.1, 0.0]))
    with pytest.raises(mm.MechanismError, match="bar 'crank' is at angle"):
        mm.check_configuration(MECH, Q0, z=Z + 0.2)
    with pytest.raises(mm.MechanismError, match='initial velocity off'):
        mm.check_configuration(MECH, Q0, qd=QD + 0.5)
    over = mm.make_mechanism(
        [('A', 0.0, 0.0, True), ('1', 0, 0, False), ('2', 0, 0, False), ('B', 4.0, 0.0, True)],
        [('crank', 'A', '1', 1.0), ('coupler', '1', '2', 2.0),
         ('rocker', '2', 'B', float(np.sqrt(13.0))), ('brace', 'A', '2', float(np.sqrt(5.0)))],
        angle_bars=('crank',))
    with pytest.raises(mm.MechanismError, match="angle of bar 'crank'.*redundant"):
        mm.check_configuration(over, jnp.array([1.0, 0.0, 1.0, 2.0]), z=jnp.array([0.0]))
    mm.check_configuration(MECH, Q0, z=Z, qd=QD)


def test_projection_lands_on_the_manifold_and_keeps_points_on_it():
    q, qd = mm.project_to_manifold(MECH, Q0 + jnp.array([0.01, -0.02, 0.015, 0.01]),
                                   QD + 0.1)
    np.testing.assert_allclose(mm.constraints(MECH, q), 0.0, atol=1e-12)
    np.testing.assert_allclose(mm.constraint_jacobian(MECH, q) @ qd, 0.0, atol=1e-12)
    same_q, same_qd = mm.project_to_manifold(MECH, Q0, QD)
    np.testing.assert_allclose(same_q, Q0, atol=1e-14)
    np.testing.assert_allclose(same_qd, QD, atol=1e-12)


def test_typical_torque_holds_gravity_plus_inertia():
    torque = mm.typical_torque(MECH, PARAMS, Q0)
    r = mm.velocity_transform(MECH, Q0, Z)
    hold = mm.inverse_dynamics_independent(MECH, PARAMS, Q0, jnp.zeros(4), Z, jnp.zeros(1),
                                           jnp.zeros(1))
    np.testing.assert_allclose(torque, jnp.abs(hold) + jnp.diag(r.T @ mm.mass_matrix(
        MECH, PARAMS) @ r), rtol=1e-12)
    assert float(torque[0]) > 0.0
