"""Input checks of the live estimator (`io.input_checks`): a republish below the resampling
rate, and efforts that are not joint torques (currents, a sign flipped), without a false
alarm on joint torques of a model whose nominal values are off."""

import dataclasses

import numpy as np
import pytest

from sysid_ros.io import config as config_io
from sysid_ros.io import input_checks, pipeline

CONFIG = {'model': {'builder': 'double_pendulum', 'integrator': 'rk4', 'dt': 1e-3},
          'parameters': {'link2': {'mass': {'min': 0.2, 'max': 3.0}},
                         'joint1': {'damping': {'min': 0.0, 'max': 0.5}}},
          'data': {'rate': 100.0}}


def test_a_republish_below_the_rate_is_named():
    line = input_checks.rate_warning(30.0, 200.0, '/joint_states')
    assert line.startswith('/joint_states arrives at 30.0 Hz, below data.rate 200 Hz')
    assert input_checks.rate_warning(195.0, 200.0, '/joint_states') is None
    assert input_checks.rate_warning(0.0, 200.0, '/joint_states') is None     # none yet


@pytest.fixture(scope='module')
def recording():
    """(problem, 2 s of the double pendulum whose link 2 is twice its nominal mass)."""
    problem = pipeline.build_problem(config_io.from_dict(CONFIG))
    truth = np.array([2.0, 0.1])
    traj = pipeline.simulate(problem, problem.spec.to_params(truth, problem.base_params),
                             duration=2.0, noise=1e-4, seed=5, torque_scale=3.0)
    return problem, pipeline.prepare_trajectories(problem, [traj])[0]


def test_joint_torques_pass_though_the_nominal_model_is_off(recording):
    problem, traj = recording
    scales = input_checks.effort_scales(problem, traj)
    assert np.all(np.abs(scales[np.isfinite(scales)] - 1.0) < 1.0)
    assert input_checks.effort_warning(problem, traj, '/joint_states') is None


@pytest.mark.parametrize('factor', [1.0 / 12.0, -1.0])     # currents in A; a flipped sign
def test_efforts_that_are_not_joint_torques_are_named(recording, factor):
    problem, traj = recording
    line = input_checks.effort_warning(problem, dataclasses.replace(traj, tau=factor * traj.tau),
                                       '/joint_states (effort)')
    assert line is not None and 'not joint torques' in line
    median = float(line.split(' are ')[1].split(' times')[0])
    assert median == pytest.approx(factor, rel=0.5)


def test_positions_that_repeat_while_the_robot_moves_are_named():
    t = np.arange(200) / 1000.0
    measured = np.stack([np.sin(t), np.cos(3 * t)], axis=1)
    assert input_checks.repeat_warning(measured, '/joint_states') is None
    assert input_checks.repeat_warning(np.ones((50, 2)), '/joint_states') is None  # standing
    # A 1 kHz republish of a 250 Hz source: each reading sent four times.
    held = measured[(np.arange(200) // 4) * 4]
    line = input_checks.repeat_warning(held, '/joint_states')
    assert line.startswith('/joint_states: 75 % of consecutive messages repeat'), line
