"""Every factor's GTSAM error and Jacobians against central finite differences of its error."""

import gtsam
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import mechanisms as mm
from sysid_ros.graph import identification as gi
from sysid_ros.graph.factors import (bind, custom_factor, encoder_residual, FactorLibrary,
                                     gyro_residual, key, position_residual, stacked_factor)

MECH, PARAMS, Q0 = mm.four_bar(crank_angle=0.4, damping=0.3)
LIB = FactorLibrary(MECH)
RNG = np.random.default_rng(3)
N, NZ = MECH.num_coords, MECH.num_independent


def _values():
    """A generic point off every manifold, so that no residual vanishes by construction."""
    dims = {'q': N, 'v': N, 'a': N, 'z': NZ, 'w': NZ, 'b': NZ, 'u': NZ, 'p': 2}
    values = gtsam.Values()
    for kind, dim in dims.items():
        for step in (0, 1):
            base = np.asarray(Q0) if kind == 'q' else np.zeros(dim)
            values.insert(key(kind, step), base + 0.3 * RNG.standard_normal(dim))
    values.update(key('p', 0), np.array([3.5, 0.4]))
    return values


VALUES = _values()


def _factors():
    q, v, a, z, w, b, u = (key(kind, 0) for kind in 'qvazwbu')
    q1, v1 = key('q', 1), key('v', 1)
    residual = bind(gi.parametric_dynamics_residual, MECH, ('rocker.mass', 'crank.damping'))
    return {
        'prior': LIB.prior(q, np.ones(N), 0.1),
        'equality': LIB.equality(q, q1, N, 2.0),
        'euler': LIB.euler(q, q1, v, N, 0.01, 1e-3),
        'trapezoidal': LIB.trapezoidal(q, q1, v, v1, N, 0.01, 1e-3),
        'position': LIB.position(q, 1e-3),
        'velocity': LIB.velocity(q, v, 1e-3),
        'dynamics_dependent': LIB.dynamics_dependent(q, v, a, PARAMS, [0.7], 1e-2),
        'inverse_dynamics_dependent': LIB.inverse_dynamics_dependent(q, v, a, u, PARAMS, 1e-2),
        'dynamics_independent': LIB.dynamics_independent(q, v, z, w, b, PARAMS, [0.7], 1e-2),
        'inverse_dynamics_independent':
            LIB.inverse_dynamics_independent(q, v, z, w, b, u, PARAMS, 1e-2),
        'link_position': LIB.link_position(q, z, 1e-3),
        'link_velocity': LIB.link_velocity(q, v, z, w, 1e-3),
        'link_acceleration': LIB.link_acceleration(q, v, a, z, w, b, 1e-3),
        'encoder': LIB.encoder(q, [0.5], 1e-3),
        'gyro': LIB.gyro(q, v, 1, [0.2], 1e-2),
        'gyro_two_bars': LIB.gyro(q, v, (0, 2), [0.2, -0.1], [1e-2, 2e-2]),
        'parametric_dynamics': custom_factor(residual, [q, v, a, key('p', 0)], [N] * 3 + [2], N,
                                             1e-2, (PARAMS, np.array([0.7]))),
        'stacked': stacked_factor(
            [q, v, a, key('p', 0)], [N] * 3 + [2],
            [(bind(position_residual, MECH), (0,), (), 3),
             (residual, (0, 1, 2, 3), (PARAMS, np.array([0.7])), N),
             (bind(encoder_residual, MECH), (0,), (np.array([0.5]),), 1),
             (bind(gyro_residual, MECH, (1,)), (0, 1), (np.array([0.2]),), 1)],
            [1e-3] * 3 + [1e-2] * N + [1e-3, 1e-2]),
    }


FACTORS = _factors()


@pytest.mark.parametrize('name', sorted(FACTORS))
def test_jacobians_match_finite_differences(name):
    factor = FACTORS[name]
    linear = factor.linearize(VALUES)
    jac_whitened, _ = linear.jacobian()  # whitened [A_1 ... A_k]
    err0 = factor.unwhitenedError(VALUES)
    sigmas = np.sqrt(np.diag(factor.noiseModel().covariance()))
    h = 1e-6
    columns = []
    for k in factor.keys():
        x = VALUES.atVector(k)
        for i in range(x.size):
            plus, minus = gtsam.Values(VALUES), gtsam.Values(VALUES)
            step = np.zeros(x.size)
            step[i] = h
            plus.update(k, x + step)
            minus.update(k, x - step)
            columns.append((factor.unwhitenedError(plus) - factor.unwhitenedError(minus))
                           / (2 * h))
    numeric = np.stack(columns, axis=1) / sigmas[:, None]
    assert np.all(np.isfinite(err0))
    assert np.abs(numeric).max() > 0
    np.testing.assert_allclose(jac_whitened, numeric, rtol=1e-5,
                               atol=1e-6 * np.abs(numeric).max())


def test_error_matches_residual_definitions():
    q = VALUES.atVector(key('q', 0))
    np.testing.assert_allclose(FACTORS['position'].unwhitenedError(VALUES),
                               np.asarray(mm.constraints(MECH, jnp.asarray(q))), rtol=1e-12)
    q1, v, v1 = (VALUES.atVector(key(*kv)) for kv in (('q', 1), ('v', 0), ('v', 1)))
    np.testing.assert_allclose(FACTORS['trapezoidal'].unwhitenedError(VALUES),
                               q1 - q - 0.005 * (v + v1), rtol=1e-12)


def test_factor_residual_vanishes_on_a_consistent_state():
    """Forward and inverse dynamics factors are zero at (q, q', q''(u), u)."""
    z = jnp.array([0.4])
    zd = jnp.array([1.1])
    qd = mm.velocity_transform(MECH, Q0, z) @ zd
    qdd = mm.forward_dynamics_dependent(MECH, PARAMS, Q0, qd, jnp.array([0.7]))
    zdd = mm.forward_dynamics_independent(MECH, PARAMS, Q0, qd, z, zd, jnp.array([0.7]))
    values = gtsam.Values()
    truth = [PARAMS.bar_masses[2], PARAMS.damping[0]]
    by_kind = {'q': Q0, 'v': qd, 'a': qdd, 'z': z, 'w': zd, 'b': zdd, 'u': [0.7], 'p': truth}
    for kind, value in by_kind.items():
        values.insert(key(kind, 0), np.asarray(value, dtype=float))
    for name in ('dynamics_dependent', 'inverse_dynamics_dependent', 'dynamics_independent',
                 'inverse_dynamics_independent', 'link_position', 'link_velocity',
                 'link_acceleration', 'position', 'velocity', 'parametric_dynamics'):
        assert np.abs(FACTORS[name].unwhitenedError(values)).max() < 1e-9, name


def test_prior_with_a_full_covariance():
    cov = np.array([[0.04, 0.01], [0.01, 0.09]])
    factor = LIB.prior(key('p', 0), [3.0, 0.6], cov)
    np.testing.assert_allclose(factor.noiseModel().covariance(), cov, rtol=1e-12)
    p = VALUES.atVector(key('p', 0))
    err = p - np.array([3.0, 0.6])
    np.testing.assert_allclose(factor.error(VALUES), 0.5 * err @ np.linalg.solve(cov, err),
                               rtol=1e-12)


def test_stacked_factor_concatenates_its_parts():
    parts = ('position', 'parametric_dynamics', 'encoder', 'gyro')
    np.testing.assert_allclose(FACTORS['stacked'].unwhitenedError(VALUES),
                               np.concatenate([FACTORS[name].unwhitenedError(VALUES)
                                               for name in parts]), rtol=1e-12)
