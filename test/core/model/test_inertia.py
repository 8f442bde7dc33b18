"""Inertial parameters: parallel axis, DiffNEA virtual parameters, consistency, rotations."""

import os
import sysconfig

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from sysid_ros.core.model import inertia

jax.config.update('jax_enable_x64', True)  # also set by test/conftest.py

# Jitted once here: eager JAX compiles every primitive separately, which is slower.
inertial_from_physical = jax.jit(inertia.inertial_from_physical)
physical_from_inertial = jax.jit(inertia.physical_from_inertial)
physical_from_virtual = jax.jit(inertia.physical_from_virtual)
virtual_from_physical = jax.jit(inertia.virtual_from_physical)
is_physically_consistent = jax.jit(inertia.is_physically_consistent,
                                   static_argnames=('atol', 'rtol'))


def _random_rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def _random_body(rng):
    """A consistent body: mass, com, inertia about the COM from positive second moments."""
    mass = rng.uniform(0.1, 5.0)
    com = rng.uniform(-0.3, 0.3, 3)
    moments = rng.uniform(0.01, 1.0, 3)                       # L_i > 0
    rot = _random_rotation(rng)
    j_p = moments.sum() - moments
    return mass, com, rot @ np.diag(j_p) @ rot.T


def _rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def _ry(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def test_all_names_import():
    for name in inertia.__all__:
        assert hasattr(inertia, name), name


def test_rpy_to_matrix_is_urdf_convention_and_batched():
    rng = np.random.default_rng(0)
    rpy = rng.uniform(-np.pi, np.pi, (5, 3))
    expected = np.stack([_rz(y) @ _ry(p) @ _rx(r) for r, p, y in rpy])
    np.testing.assert_allclose(inertia.rpy_to_matrix(rpy), expected, atol=1e-14)
    np.testing.assert_allclose(inertia.rpy_to_matrix(rpy[0]), expected[0], atol=1e-14)


def test_matrix_to_rpy_inverts_rpy_to_matrix():
    rng = np.random.default_rng(1)
    rpy = rng.uniform(-np.pi, np.pi, (200, 3))
    rpy[:, 1] = rng.uniform(-np.pi / 2 + 1e-3, np.pi / 2 - 1e-3, 200)
    back = jax.jit(inertia.matrix_to_rpy)(inertia.rpy_to_matrix(rpy))
    np.testing.assert_allclose(back, rpy, atol=1e-12)


@pytest.mark.parametrize('pitch', [np.pi / 2, -np.pi / 2, np.pi / 2 - 1e-10])
def test_matrix_to_rpy_at_gimbal_lock_reproduces_the_rotation(pitch):
    rot = inertia.rpy_to_matrix(jnp.array([0.4, pitch, -1.1]))
    rpy = inertia.matrix_to_rpy(rot)
    assert np.all(np.isfinite(rpy))
    np.testing.assert_allclose(inertia.rpy_to_matrix(rpy), rot, atol=1e-12)


def test_matrix_to_rpy_matches_pinocchio():
    pin = pytest.importorskip('pinocchio')
    rng = np.random.default_rng(2)
    for _ in range(20):
        rot = _random_rotation(rng)
        np.testing.assert_allclose(inertia.matrix_to_rpy(rot), pin.rpy.matrixToRpy(rot),
                                   atol=1e-12)


def test_inertial_from_physical_parallel_axis_analytic():
    # Point mass m at c = (0, 0, l): Ixx = Iyy = m l^2 about the origin, Izz = 0.
    pi = inertial_from_physical(2.0, jnp.array([0.0, 0.0, 0.5]), jnp.zeros((3, 3)))
    np.testing.assert_allclose(pi, [2.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.5, 0.0, 0.0, 0.0])
    # Off-diagonal: -m cx cy.
    pi = inertial_from_physical(1.0, jnp.array([1.0, 2.0, 0.0]), jnp.zeros((3, 3)))
    assert pi[5] == pytest.approx(-2.0)                       # Ixy


def test_inertial_from_physical_matches_pinocchio():
    pin = pytest.importorskip('pinocchio')
    rng = np.random.default_rng(3)
    for _ in range(10):
        mass, com, inertia_c = _random_body(rng)
        expected = pin.Inertia(mass, com, inertia_c).toDynamicParameters()
        np.testing.assert_allclose(inertial_from_physical(mass, com, inertia_c),
                                   expected, rtol=1e-12, atol=1e-14)


def test_physical_inertial_round_trip_jit_vmap():
    rng = np.random.default_rng(4)
    bodies = [_random_body(rng) for _ in range(8)]
    mass = np.array([b[0] for b in bodies])
    com = np.stack([b[1] for b in bodies])
    inertia_c = np.stack([b[2] for b in bodies])
    pi = inertial_from_physical(mass, com, inertia_c)
    assert pi.shape == (8, 10)
    np.testing.assert_allclose(jax.vmap(inertial_from_physical)(mass, com, inertia_c),
                               pi, atol=1e-14)
    m2, c2, i2 = jax.jit(jax.vmap(physical_from_inertial))(pi)
    np.testing.assert_allclose(m2, mass, atol=1e-14)
    np.testing.assert_allclose(c2, com, atol=1e-14)
    np.testing.assert_allclose(i2, inertia_c, atol=1e-13)


def test_massless_body_is_finite_with_finite_gradients():
    pi = jnp.array([0.0, 0.0, 0.0, 0.0, 1e-3, 0.0, 1e-3, 0.0, 0.0, 1e-3])
    mass, com, inertia_c = physical_from_inertial(pi)
    assert mass == 0.0 and np.all(com == 0.0)
    np.testing.assert_allclose(inertia_c, 1e-3 * np.eye(3))
    grad = jax.grad(lambda p: jnp.sum(physical_from_inertial(p)[2]))(pi)
    assert np.all(np.isfinite(grad))


def test_inertial_gradients():
    rng = np.random.default_rng(5)
    mass, com, inertia_c = _random_body(rng)
    check_grads(inertial_from_physical, (mass, jnp.asarray(com), jnp.asarray(inertia_c)),
                order=1, modes=('rev',))
    pi = inertial_from_physical(mass, com, inertia_c)
    check_grads(jax.jit(lambda p: inertia.physical_from_inertial(p)[2]), (pi,), order=1,
                modes=('rev',))
    virtual = virtual_from_physical(mass, com, inertia_c)
    from_virtual = jax.jit(
        lambda v: inertia.inertial_from_physical(*inertia.physical_from_virtual(v)))
    check_grads(from_virtual, (virtual,), order=1, modes=('rev',))


def test_virtual_round_trip():
    rng = np.random.default_rng(6)
    for _ in range(20):
        mass, com, inertia_c = _random_body(rng)
        virtual = virtual_from_physical(mass, com, inertia_c)
        assert virtual.shape == (10,)
        m2, c2, i2 = physical_from_virtual(virtual)
        assert float(m2) == pytest.approx(mass, rel=1e-12)
        np.testing.assert_allclose(c2, com, atol=1e-15)
        np.testing.assert_allclose(i2, inertia_c, atol=1e-13)


def test_virtual_round_trip_with_repeated_principal_moments():
    # A sphere (all moments equal) and a cylinder (two equal): any principal axes will do.
    for inertia_c in (0.2 * np.eye(3), np.diag([0.1, 0.1, 0.05])):
        virtual = virtual_from_physical(1.0, np.zeros(3), inertia_c)
        np.testing.assert_allclose(physical_from_virtual(virtual)[2], inertia_c,
                                   atol=1e-14)


def test_virtual_from_physical_is_batched():
    rng = np.random.default_rng(7)
    bodies = [_random_body(rng) for _ in range(4)]
    args = [np.stack([b[k] for b in bodies]) for k in range(3)]
    virtual = virtual_from_physical(*args)
    assert virtual.shape == (4, 10)
    np.testing.assert_allclose(jax.vmap(virtual_from_physical)(*args), virtual)
    np.testing.assert_allclose(physical_from_virtual(virtual)[2], args[2], atol=1e-13)


def test_every_virtual_sample_is_consistent():
    virtual = jax.random.normal(jax.random.PRNGKey(0), (2000, 10)) * 3.0
    pi = jax.jit(lambda v: inertial_from_physical(*physical_from_virtual(v)))(
        virtual)
    assert bool(jnp.all(is_physically_consistent(pi)))


def test_virtual_inertia_projects_an_inconsistent_inertia():
    bad = np.diag([1.0, 0.1, 0.1])                      # 1 > 0.1 + 0.1: no real body
    sqrt_l, rpy = inertia.virtual_from_inertia(bad)
    projected = inertia.inertia_from_virtual(sqrt_l, rpy)
    pi = inertial_from_physical(1.0, np.zeros(3), projected)
    assert bool(is_physically_consistent(pi))


def test_is_physically_consistent_rejects_each_violation():
    good = inertial_from_physical(1.0, jnp.array([0.1, 0.0, 0.2]),
                                  jnp.diag(jnp.array([0.3, 0.2, 0.15])))
    negative_mass = inertial_from_physical(-1.0, jnp.zeros(3), jnp.eye(3))
    zero_mass = inertial_from_physical(0.0, jnp.zeros(3), jnp.eye(3))
    triangle = inertial_from_physical(1.0, jnp.zeros(3), jnp.diag(jnp.array(
        [1.0, 0.1, 0.1])))
    not_psd = inertial_from_physical(1.0, jnp.zeros(3), jnp.diag(jnp.array(
        [-0.1, 0.2, 0.2])))
    nan = good.at[4].set(jnp.nan)
    pis = jnp.stack([good, negative_mass, zero_mass, triangle, not_psd, nan])
    np.testing.assert_array_equal(is_physically_consistent(pis),
                                  [True, False, False, False, False, False])
    # A point mass and a thin rod lie on the boundary and are accepted.
    point = inertial_from_physical(1.0, jnp.array([0.0, 0.0, 1.0]), jnp.zeros((3, 3)))
    rod = inertial_from_physical(1.0, jnp.zeros(3), jnp.diag(jnp.array([0.1, 0.1, 0])))
    assert bool(jnp.all(is_physically_consistent(jnp.stack([point, rod]))))
    assert not bool(is_physically_consistent(rod, atol=-1e-6))


def test_panda_inertials_are_consistent():
    pin = pytest.importorskip('pinocchio')
    urdf = os.path.join(sysconfig.get_paths()['purelib'], 'cmeel.prefix', 'share',
                        'example-robot-data', 'robots', 'panda_description', 'urdf',
                        'panda.urdf')
    if not os.path.isfile(urdf):
        pytest.skip('example-robot-data is not installed')
    model = pin.buildModelFromUrdf(urdf)
    pi = np.stack([model.inertias[i].toDynamicParameters() for i in range(1, model.njoints)])
    assert bool(jnp.all(is_physically_consistent(pi)))
    virtual = virtual_from_physical(*physical_from_inertial(pi))
    np.testing.assert_allclose(
        inertial_from_physical(*physical_from_virtual(virtual)), pi,
        atol=1e-12)
