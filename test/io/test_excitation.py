"""`sysid excite` on a small double pendulum (io.excitation + cli): the files it writes, the
limit check of a trajectory file, a prior, and errors that name their key."""

import os

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.core.likelihoods import equation_error
from sysid_ros.io import config as config_io
from sysid_ros.io import excitation, pipeline
from sysid_ros.io.errors import InputError

CONFIG = {
    'model': {'builder': 'double_pendulum', 'joints': ['joint1', 'joint2'],
              'actuator': 'viscous'},
    'parameters': {'link1': {'mass': {'min': 0.5, 'max': 2.0}},
                   'link2': {'mass': {'min': 0.5, 'max': 2.0}},
                   'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
                   'joint2': {'damping': {'min': 0.0, 'max': 0.5}}},
    'data': {'rate': 50.0},
    'excitation': {'duration': 2.0, 'base_frequency': 0.5, 'harmonics': 3, 'design_rate': 10.0,
                   'iterations': 10, 'velocity': 5.0, 'acceleration': 30.0,
                   'effort': [30.0, 12.0]},
}


def _write(folder, config) -> str:
    path = os.path.join(folder, 'config.yaml')
    with open(path, 'w', encoding='utf-8') as f:
        yaml.safe_dump({'/**': {'ros__parameters': config}}, f)
    return path


@pytest.fixture(scope='module')
def excited(tmp_path_factory):
    """`sysid excite` run once: (config path, output folder, exit code)."""
    folder = str(tmp_path_factory.mktemp('excite'))
    config = _write(folder, CONFIG)
    out = os.path.join(folder, 'out')
    code = cli.main(['excite', '--config', config, '--out', out])
    return config, out, code


def test_cli_writes_trajectory_csv_summary_and_plot(excited):
    config, out, code = excited
    assert code == 0
    assert sorted(os.listdir(out)) == ['excitation.png', 'excitation.yaml', 'trajectory.csv',
                                       'trajectory.yaml']
    with open(os.path.join(out, 'excitation.yaml'), encoding='utf-8') as f:
        summary = yaml.safe_load(f)
    assert summary['passed'] is True
    assert summary['log_det'] > summary['start_log_det']
    assert set(summary['parameters']) == {'link1.mass', 'link2.mass', 'joint1.damping',
                                          'joint2.damping'}
    for entry in summary['parameters'].values():
        assert 0.0 < entry['predicted_std'] < entry['prior_std']
    assert summary['condition_number'] >= 1.0
    trajectory = excitation.load_joint_trajectory(os.path.join(out, 'trajectory.yaml'))
    assert trajectory.joint_names == ('joint1', 'joint2')
    assert trajectory.t[0] == 0.0 and trajectory.t[-1] == pytest.approx(2.0)
    np.testing.assert_allclose(trajectory.qd[[0, -1]], 0.0, atol=1e-12)
    np.testing.assert_allclose(trajectory.qdd[[0, -1]], 0.0, atol=1e-10)
    table = np.loadtxt(os.path.join(out, 'trajectory.csv'), delimiter=',', skiprows=1)
    assert table.shape == (101, 1 + 4 * 2)              # t, q, qd, tau, qdd per joint
    problem = pipeline.build_problem(config)
    assert excitation.limit_violations(problem, trajectory) == []


def test_limit_violations_name_the_joint_and_the_limit(excited):
    config, out, _ = excited
    trajectory = excitation.load_joint_trajectory(os.path.join(out, 'trajectory.yaml'))
    fast = excitation.JointTrajectoryData(trajectory.joint_names, trajectory.t / 3.0,
                                          trajectory.q, 3.0 * trajectory.qd,
                                          9.0 * trajectory.qdd)
    lines = excitation.limit_violations(pipeline.build_problem(config), fast)
    assert any(line.startswith('joint') and 'velocity' in line for line in lines)


def test_positions_count_from_the_given_time():
    """A move that starts outside the position margin (an arm at rest near a limit) is not
    refused for it where positions count from its end; it is where they count from 0."""
    problem = pipeline.build_problem(config_io.load_yaml(os.path.join(
        os.path.dirname(__file__), '..', '..', 'config', 'panda_live.yaml')))
    limits = excitation.excitation_limits(problem)
    middle = 0.5 * (np.asarray(limits.q_min) + np.asarray(limits.q_max))
    q = np.tile(middle, (3, 1))
    q[0, 5] = limits.q_min[5] - 0.05               # joint 6 below its margin at the start
    zero = np.zeros_like(q)
    moved = excitation.JointTrajectoryData(problem.model.joint_names, np.array([0.0, 1.0, 2.0]),
                                           q, zero, zero)
    assert any(line.startswith('panda_joint6: position')
               for line in excitation.limit_violations(problem, moved))
    assert excitation.limit_violations(problem, moved, positions_from=0.5) == []


def test_prior_from_an_estimate_targets_what_is_uncertain(excited, tmp_path):
    config, out, _ = excited
    with open(os.path.join(out, 'excitation.yaml'), encoding='utf-8') as f:
        before = yaml.safe_load(f)['parameters']
    estimate = tmp_path / 'estimate.yaml'
    estimate.write_text(yaml.safe_dump({'parameters': {
        'link1.mass': {'mean': 1.2, 'std': 1e-4}, 'joint1.damping': {'mean': 0.2,
                                                                     'std': 1e-5}}}))
    problem = pipeline.build_problem(config)
    dp = excitation.design_problem(problem, prior=str(estimate))
    k = problem.spec.index('link1.mass')
    assert dp.theta[k] == 1.2
    assert dp.prior_precision[k] == pytest.approx((1.5 / 1e-4) ** 2)
    assert dp.prior_precision[problem.spec.index('link2.mass')] == 12.0
    assert before['link1.mass']['prior_std'] > 1e-4


def test_a_joint_without_a_velocity_limit_is_a_config_error(tmp_path):
    config = dict(CONFIG, excitation={'effort': 10.0})
    problem = pipeline.build_problem(_write(str(tmp_path), config))
    with pytest.raises(config_io.ConfigError, match='excitation.velocity: expected a finite'):
        excitation.design_problem(problem)
    config = dict(CONFIG, excitation={'effort': [1.0, 2.0, 3.0], 'velocity': 1.0})
    problem = pipeline.build_problem(_write(str(tmp_path), config))
    with pytest.raises(config_io.ConfigError, match='excitation.effort: expected 1 value or 2'):
        excitation.design_problem(problem)
    with pytest.raises(config_io.ConfigError, match='excitation.harmonics'):
        config_io.from_dict(dict(CONFIG, excitation={'harmonics': 0}))
    with pytest.raises(InputError, match='joint_names'):
        excitation.load_joint_trajectory(tmp_path / 'config.yaml')


def test_an_equation_error_configuration_designs_with_its_filtered_noise(tmp_path):
    """estimator.residual: equation_error: the design takes the filter's noise (the slope
    kernel of L taps turns the velocity noise into the qdd noise), one kept sample per L
    recorded, and the configured torque std (else None: estimated)."""
    config = dict(CONFIG, data={'rate': 50.0, 'noise_std': [1e-4, 1e-4, 1e-3, 1e-3]},
                  estimator={'residual': 'equation_error', 'filter_window': 0.1})
    problem = pipeline.build_problem(_write(str(tmp_path), config))
    dp = excitation.design_problem(problem)
    taps = 5
    _, slope = equation_error.savitzky_golay_kernels(taps, 1.0 / 50.0)
    assert dp.residual == 'equation_error' and dp.torque_std is None
    np.testing.assert_allclose(dp.state_var[2], 1e-6 * np.sum(slope ** 2), rtol=1e-12)
    np.testing.assert_allclose(dp.torque_var, 0.0)
    assert dp.weight == pytest.approx(50.0 * 2.0 / (len(dp.t_design) - 1) / taps)
    config['data'] = dict(config['data'], torque_noise_std=[0.1, 0.2])
    dp = excitation.design_problem(pipeline.build_problem(_write(str(tmp_path), config)))
    np.testing.assert_allclose(dp.torque_std, [0.1, 0.2])
    assert np.all(dp.torque_var > 0.0) and np.all(dp.torque_var < [0.01, 0.04])


def test_the_effort_limits_hold_over_two_prior_stds_within_the_bounds(tmp_path):
    problem = pipeline.build_problem(_write(str(tmp_path), CONFIG))
    dp = excitation.design_problem(problem)
    width = np.asarray(problem.spec.upper - problem.spec.lower)
    farther = np.maximum(problem.spec.upper - dp.theta, dp.theta - problem.spec.lower)
    expected = np.minimum(farther, excitation.EFFORT_PRIOR_STDS * width / np.sqrt(12.0))
    np.testing.assert_allclose(dp.effort_radius, expected)
