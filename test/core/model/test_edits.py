"""Edits of Params: a rigid payload composes with its body as Pinocchio composes inertias;
the seeded truth perturbs Coulomb friction without changing the other draws of a seed."""

import jax
import numpy as np
import pytest

from sysid_ros.core.model import builders, edits, inertia

jax.config.update('jax_enable_x64', True)  # also set by test/conftest.py


def _payload(rng):
    """A random rigid payload: mass [kg], COM (3,) [m], inertia about the COM (3, 3)."""
    root = rng.normal(size=(3, 3)) * 0.1
    return 0.7, rng.normal(size=3) * 0.1, root @ root.T + 1e-3 * np.eye(3)


def test_rigid_body_composes_as_pinocchio():
    pin = pytest.importorskip('pinocchio')
    _, params = builders.double_pendulum()
    mass, com, inertia_c = _payload(np.random.default_rng(0))
    loaded = edits.add_rigid_body(params, 1, mass, com, inertia_c)
    link = pin.Inertia.FromDynamicParameters(np.asarray(params.inertial[1]))
    expected = (link + pin.Inertia(mass, com, inertia_c)).toDynamicParameters()
    np.testing.assert_allclose(loaded.inertial[1], expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(loaded.inertial[0], params.inertial[0])
    assert np.all(np.asarray(inertia.is_physically_consistent(loaded.inertial)))


def test_rigid_body_by_hand_and_point_mass():
    _, params = builders.double_pendulum()
    # 2 kg at (0, 0, 0.5) with the inertia of a cube: diag(0.01) about its COM.
    loaded = edits.add_rigid_body(params, 0, 2.0, [0.0, 0.0, 0.5], 0.01 * np.eye(3))
    delta = np.asarray(loaded.inertial[0] - params.inertial[0])
    # [m, m c, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]: Ixx = Iyy = 0.01 + 2 * 0.25, Izz = 0.01.
    np.testing.assert_allclose(delta, [2.0, 0.0, 0.0, 1.0, 0.51, 0.0, 0.51, 0.0, 0.0, 0.01],
                               atol=1e-15)
    point = edits.add_point_mass(params, 0, 2.0, [0.0, 0.0, 0.5])
    no_inertia = edits.add_rigid_body(params, 0, 2.0, [0.0, 0.0, 0.5], np.zeros((3, 3)))
    np.testing.assert_array_equal(point.inertial, no_inertia.inertial)


def test_coulomb_truth_keeps_the_other_draws():
    _, nominal = builders.double_pendulum()
    plain = edits.perturb_params(nominal, seed=5)
    rough = edits.perturb_params(nominal, seed=5, true_coulomb=0.4)
    np.testing.assert_array_equal(plain.inertial, rough.inertial)
    np.testing.assert_array_equal(plain.damping, rough.damping)
    # Nominal Coulomb 0: the truth draws 0.4 * U(0.5, 1.5).
    np.testing.assert_array_equal(plain.coulomb, 0.0)
    assert np.all((np.asarray(rough.coulomb) >= 0.2) & (np.asarray(rough.coulomb) <= 0.6))
