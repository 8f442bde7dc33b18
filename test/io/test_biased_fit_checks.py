"""The equation error's checks for a biased fit: noise the filter passes from velocities into
accelerations (errors in variables, `estimator_data.acceleration_noise_*`, and the longer
filter an offline fit then takes), and torque residuals correlated in time (dynamics the model
lacks)."""

import dataclasses

import numpy as np

from sysid_ros.core.likelihoods import equation_error
from sysid_ros.io import estimator_data, pipeline
from sysid_ros.io.config import from_dict

CONFIG = {'model': {'builder': 'double_pendulum'},
          'parameters': {'link2': {'mass': {'min': 0.05, 'max': 2.0}}},
          'data': {'rate': 100.0}}


def test_the_share_is_the_slope_kernels_noise_over_the_spread():
    slope = equation_error.savitzky_golay_kernels(5, 0.01)[1]
    share = estimator_data.acceleration_noise_share([2e-3, 1e-3], 0.01, 5, [1.0, 0.5])
    expected = np.square(np.linalg.norm(slope) * np.array([2e-3, 1e-3])) / [1.0, 0.25]
    np.testing.assert_allclose(share, expected, rtol=1e-12)
    # A cubic's slope through 5 samples at 100 Hz: about 95 / s times the velocity noise.
    assert 90.0 < np.linalg.norm(slope) < 100.0


def test_a_large_share_names_the_joint_and_a_longer_filter():
    problem = pipeline.build_problem(from_dict(CONFIG))
    quiet = {'acceleration_noise_share': [0.001, 0.019], 'filter_taps': 5}
    assert estimator_data.acceleration_noise_warning(problem, quiet) == []
    noisy = {'acceleration_noise_share': [0.001, 0.08], 'filter_taps': 5}
    (line,) = estimator_data.acceleration_noise_warning(problem, noisy)
    assert 'joint2 8.0 % of their variance' in line and 'joint1' not in line
    window = float(line.split('estimator.filter_window: ')[1].split()[0])
    taps = int(round(window * 100.0))
    norms = [np.linalg.norm(equation_error.savitzky_golay_kernels(n, 0.01)[1])
             for n in (5, taps, taps - 2)]
    # The named filter brings the share to a tenth of the threshold; a shorter one does not.
    assert 0.08 * (norms[1] / norms[0]) ** 2 <= 0.1 * estimator_data.ACCELERATION_NOISE_SHARE
    assert 0.08 * (norms[2] / norms[0]) ** 2 > 0.1 * estimator_data.ACCELERATION_NOISE_SHARE
    assert estimator_data.acceleration_noise_warning(problem, {}) == []


def _payload_problem(**estimator):
    return pipeline.build_problem(from_dict({
        'model': {'builder': 'double_pendulum', 'integrator': 'rk4',
                  'payload': {'link': 'link2', 'mass': 0.5}},
        'parameters': {'payload': {'mass': {'min': 0.0, 'max': 3.0},
                                   'com': {'z': {'min': -0.3, 'max': 0.1}}},
                       'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
                       'joint2': {'damping': {'min': 0.0, 'max': 0.5}}},
        'data': {'rate': 100.0},
        'estimator': {'residual': 'equation_error', **estimator}}))


def test_noisy_velocities_get_a_longer_filter_and_the_payload_back():
    truth = np.array([1.2, -0.15, 0.1, 0.05])
    fine = _payload_problem()
    fine = pipeline.build_problem(dataclasses.replace(fine.config, model=dataclasses.replace(
        fine.config.model, dt=1e-3)))
    traj = pipeline.simulate(fine, fine.spec.to_params(truth, fine.base_params), duration=10.0,
                             noise=1e-4, seed=2, torque_scale=2.0)
    rng = np.random.default_rng(2)
    traj = dataclasses.replace(traj, qd=traj.qd + rng.normal(0.0, 0.03, traj.qd.shape))
    lines = []
    auto = pipeline.fit(_payload_problem(), [traj], log=lines.append)
    fixed = pipeline.fit(_payload_problem(filter_window=0.05), [traj])
    errors = [abs(r.estimate[0] - truth[0]) / truth[0] for r in (auto, fixed)]
    print(f'payload mass errors: longer filter {errors[0]:.3%}, 0.05 s {errors[1]:.3%}')
    assert any('fitting again with estimator.filter_window' in line for line in lines), lines
    assert not any('errors in variables' in w for w in auto.warnings), auto.warnings
    assert any('errors in variables' in w for w in fixed.warnings), fixed.warnings
    assert errors[0] < 0.5 * errors[1]


def test_residuals_correlated_in_time_name_the_joint_and_the_likely_causes():
    problem = pipeline.build_problem(from_dict(CONFIG))
    assert estimator_data.correlated_residuals_warning(
        problem, {'residual_correlation': [0.1, 0.45]}) == []
    (line,) = estimator_data.correlated_residuals_warning(
        problem, {'residual_correlation': [0.1, 0.7]})
    assert '(joint2 0.70;' in line and 'armature' in line and 'joint1' not in line
    assert estimator_data.correlated_residuals_warning(problem, {}) == []
