"""`parameters.<name>.std`: a prior toward the nominal model for what the data cannot tell
apart, joined with an earlier fit's posterior."""

import numpy as np
import pytest

from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.io import nominal_prior, pipeline
from sysid_ros.io.config import ConfigError, from_dict

# link1 swings about y: its torques see m c_z and I_yy + m c_z^2 only, so its mass, centre
# and inertia (three parameters, two combinations) trade along one direction.
LINK1 = {'mass': {'min': 0.2, 'max': 5.0}, 'com': {'z': {'min': -1.0, 'max': 0.0}},
         'inertia': {'iyy': {'min': 0.0, 'max': 2.0}}}


def _problem(mass_std=None):
    link1 = {**LINK1, 'mass': {**LINK1['mass'], **({'std': mass_std} if mass_std else {})}}
    return pipeline.build_problem(from_dict({
        'model': {'builder': 'double_pendulum'},
        'parameters': {'link1': link1, 'joint1': {'damping': {'min': 0.0, 'max': 1.0}}},
        'data': {'rate': 100.0},
        'estimator': {'residual': 'equation_error'}}))


def test_a_direction_the_data_cannot_see_stays_near_the_nominal_value():
    flat, held = _problem(), _problem(mass_std=0.1)
    truth = np.asarray(flat.spec.initial_theta(flat.base_params)) + [0, 0, 0, 0.1]
    traj = pipeline.simulate(flat, flat.spec.to_params(truth, flat.base_params), duration=8.0,
                             noise=1e-4, seed=1, torque_scale=2.0)
    start = truth * [1.6, 1.0, 1.0, 1.0]                          # a mass 60 % off
    loose = pipeline.fit(flat, [traj], theta0=start)
    near = pipeline.fit(held, [traj], theta0=start)
    print(f'flat: {np.round(loose.estimate, 4)} std {np.round(loose.std, 4)}; '
          f'std 0.1: {np.round(near.estimate, 4)} std {np.round(near.std, 4)}')
    # Without the prior the mass is undetermined: its std is the bounds' (4.8 kg wide), and
    # the identifiability report at the estimate names it. With the prior it sits at the
    # nominal 1 kg with the prior's std, and the torques fit as well.
    assert loose.std[0] > 0.3
    assert 'link1.mass' in loose.info['identifiability']['poorly_determined']
    assert abs(near.estimate[0] - 1.0) < 0.05 and 0.05 < near.std[0] < 0.11
    assert 'link1.mass' not in near.info['identifiability']['poorly_determined']
    assert abs(near.estimate[3] - truth[3]) < 3.0 * near.std[3]
    assert near.final_loss == pytest.approx(loose.final_loss, rel=0.05)


def test_the_configured_prior_fills_what_an_earlier_fit_leaves_flat():
    problem = _problem(mass_std=0.1)
    earlier = GaussianPrior(np.array([0.0, -0.4, 0.1, 0.3]),
                            np.diag([0.0, 4.0, 9.0, 16.0]))
    joined = nominal_prior.with_earlier(problem, earlier)
    np.testing.assert_allclose(joined.mean, [1.0, -0.4, 0.1, 0.3])
    np.testing.assert_allclose(joined.precision, np.diag([100.0, 4.0, 9.0, 16.0]))
    assert nominal_prior.with_earlier(_problem(), earlier) is earlier
    alone = nominal_prior.with_earlier(problem, None)
    np.testing.assert_allclose(alone.precision, np.diag([100.0, 0.0, 0.0, 0.0]))


def test_a_std_must_be_a_positive_number():
    bad = {**LINK1, 'mass': {**LINK1['mass'], 'std': 0.0}}
    with pytest.raises(ConfigError, match=r'parameters.link1.mass.std: expected a finite '
                                          r'number > 0'):
        from_dict({'model': {'builder': 'double_pendulum'}, 'parameters': {'link1': bad}})
