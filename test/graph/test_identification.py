"""Online identification of a link mass and a joint friction in the fixed-lag smoother, on
simulated four-bar data with known truth (noisy crank encoder and coupler gyroscope)."""

import numpy as np
import pytest

from sysid_ros.core.constrained import mechanisms as mm
from sysid_ros.graph import identification as gi

TRUTH = {'mass': 4.0, 'damping': 0.5}
DT = 0.005
STEPS = 240


def _torque(t):
    """Excitation [N m] that swings the crank through about half a turn."""
    return (4.0 * np.sin(2 * np.pi * 0.5 * t) + 2.0 * np.sin(2 * np.pi * 1.3 * t))[:, None]


@pytest.fixture(scope='module')
def result():
    mech, params, q0 = mm.four_bar(damping=TRUTH['damping'],
                                   masses=(1.0, 2.0, TRUTH['mass']))
    u, q, _, encoder, gyro = gi.simulate_sensors(mech, params, q0, _torque, DT, STEPS,
                                                 encoder_sigma=1e-3, gyro_bar=1,
                                                 gyro_sigma=1e-2)
    nominal = mm.MechanismParams(params.bar_masses.at[2].set(3.0), params.damping * 0.0)
    res = gi.identify_online(mech, nominal, ('rocker.mass', 'crank.damping'),
                             p_prior=np.array([3.0, 0.2]), p_sigma=np.array([2.0, 1.0]),
                             q0=q0, v0=np.zeros(4), u=u, encoder=encoder, dt=DT, window=6,
                             encoder_sigma=1e-3, gyro=gyro, gyro_bar=1, gyro_sigma=1e-2,
                             covariance_every=60)
    return res, q


def test_estimate_converges_and_two_sigma_band_covers_truth(result):
    res, _ = result
    truth = np.array([TRUTH['mass'], TRUTH['damping']])
    assert res.names == ('rocker.mass', 'crank.damping')
    reported = ~np.isnan(res.std[:, 0])
    assert reported.sum() == STEPS // 60 + 1
    final_mean, final_std = res.mean[-1], res.std[-1]
    # far more certain than the prior (2 kg, 1 N m s/rad) ...
    assert np.all(final_std < np.array([0.05, 0.02]))
    # ... with the truth inside the 2-sigma band, and close in absolute terms
    assert np.all(np.abs(final_mean - truth) < 2 * final_std), (final_mean, final_std)
    assert np.all(np.abs(final_mean - truth) < np.array([0.08, 0.03]))
    # the marginal standard deviation shrinks as data arrive
    std = res.std[reported]
    assert np.all(std[-1] < std[0])


def test_states_track_the_truth(result):
    res, q = result
    assert np.sqrt(np.mean((res.q - q) ** 2)) < 2e-3


def test_unknown_parameter_name_is_rejected():
    mech, params, q0 = mm.four_bar()
    with pytest.raises(mm.MechanismError, match="parameter 'rocker.length'"):
        gi.identify_online(mech, params, ('rocker.length',), np.ones(1), np.ones(1), q0,
                           np.zeros(4), np.zeros((2, 1)), np.zeros((3, 1)), DT, 3, 1e-3)
    with pytest.raises(mm.MechanismError, match='encoder: expected 3 samples'):
        gi.identify_online(mech, params, ('rocker.mass',), np.ones(1), np.ones(1), q0,
                           np.zeros(4), np.zeros((2, 1)), np.zeros((5, 1)), DT, 3, 1e-3)


def test_assemble_follows_the_branch_to_a_measured_angle():
    mech, params, q0 = mm.four_bar()

    def transmission(q):                   # sign of coupler x rocker: which assembly branch
        d = np.asarray(mm.bar_vectors(mech, q))
        return np.sign(d[1, 0] * d[2, 1] - d[1, 1] * d[2, 0])
    q, v = gi.assemble(mech, q0, [-2.5], [1.2])
    np.testing.assert_allclose(mm.constraints(mech, q), 0.0, atol=1e-12)
    np.testing.assert_allclose(mm.bar_angles(mech, q), [-2.5], atol=1e-12)
    np.testing.assert_allclose(mm.constraint_jacobian(mech, q) @ v, 0.0, atol=1e-12)
    np.testing.assert_allclose(mm.bar_angular_velocities(mech, q, v)[0], 1.2, rtol=1e-12)
    assert transmission(q) == transmission(q0)


def test_get_parameters_inverts_set_parameters():
    mech, params, _ = mm.four_bar(damping=0.3)
    names = ('rocker.mass', 'crank.damping', 'crank.mass')
    np.testing.assert_allclose(gi.get_parameters(mech, names, params), [4.0, 0.3, 1.0])
    changed = gi.set_parameters(mech, names, params, np.array([5.0, 0.1, 2.0]))
    np.testing.assert_allclose(gi.get_parameters(mech, names, changed), [5.0, 0.1, 2.0])
