"""Driver profiles (io.drivers): the joint-state topic a driver's profile reads, what its
efforts are, and `data.torque_gains` applied wherever measured efforts become torques."""

import numpy as np
import pytest

from sysid_ros.io import bag_writer, bags, drivers, online, pipeline
from sysid_ros.io.config import ConfigError, DataConfig, from_dict
from sysid_ros.io.trajectory import Trajectory
from sysid_ros.io.window_buffer import Window

PENDULUM = {'model': {'builder': 'double_pendulum'},
            'parameters': {'link2': {'mass': {'min': 0.05, 'max': 0.5}}}}


def test_each_profile_reads_its_full_rate_stream_unless_a_topic_is_given():
    for name, profile in drivers.DRIVERS.items():
        gains = [2.0] if profile.effort == drivers.CURRENT else []
        data = DataConfig.from_dict({'driver': name, 'torque_gains': gains})
        assert data.joint_states_topic == profile.joint_states_topic
    given = DataConfig.from_dict({'driver': 'franka', 'joint_states_topic': '/arm/states'})
    assert given.joint_states_topic == '/arm/states'
    assert DataConfig.from_dict({}).driver == 'generic'


@pytest.mark.parametrize('data, key, message', [
    ({'driver': 'franka', 'joint_states_topic': '/joint_states'}, 'data.joint_states_topic',
     'low-rate republish.*read /franka/joint_states'),
    ({'driver': 'ur'}, 'data.torque_gains', r'motor currents \[A\].*N m / A'),
    ({'driver': 'kuka'}, 'data.driver', 'generic'),
])
def test_a_profile_refuses_what_its_driver_does_not_mean(data, key, message):
    with pytest.raises(ConfigError, match=f'x.yaml: {key}: .*{message}'):
        DataConfig.from_dict(data, 'x.yaml')


def test_gains_of_another_length_than_the_joints_are_refused():
    config = from_dict({**PENDULUM, 'data': {'torque_gains': [1.0, 2.0, 3.0]}})
    with pytest.raises(ConfigError, match=r'data.torque_gains: expected 1 value or 2'):
        pipeline.build_problem(config)
    np.testing.assert_array_equal(drivers.torque_gains([3.0], 2), [3.0, 3.0])
    np.testing.assert_array_equal(drivers.torque_gains([], 2), [1.0, 1.0])


def _currents(num=60, rate=50.0):
    t = np.arange(num) / rate
    q = np.stack([np.sin(t), np.cos(t)], axis=1)
    qd = np.stack([np.cos(t), -np.sin(t)], axis=1)
    return Trajectory(t=t, q=q, qd=qd, tau=np.stack([0.1 + t, -0.2 * t], axis=1),
                      joint_names=('joint1', 'joint2'))


def test_recordings_and_live_windows_scale_currents_by_the_gains(tmp_path):
    gains = (12.5, 4.0)
    currents = _currents()
    path = tmp_path / 'bag'
    bag_writer.write_trajectory_bag(path, [currents])
    data = DataConfig.from_dict({'driver': 'ur', 'torque_gains': list(gains),
                                 'rate': 50.0})
    (segment,) = bags.read_bag(path, currents.joint_names, data)
    expected = currents.tau * np.asarray(gains)
    np.testing.assert_allclose(segment.trajectory.tau, expected[:len(segment.trajectory.t)],
                               rtol=1e-12)

    problem = pipeline.build_problem(from_dict({**PENDULUM, 'data': {
        'driver': 'ur', 'torque_gains': list(gains), 'rate': 50.0}}))
    window = Window(t=currents.t, q=currents.q, qd=currents.qd, tau=currents.tau)
    np.testing.assert_allclose(online.window_trajectory(problem, window).tau, expected,
                               rtol=1e-12)
