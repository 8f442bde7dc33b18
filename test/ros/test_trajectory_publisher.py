"""`trajectory_publisher` and `sim_robot` following a trajectory, as separate processes over
real DDS (loopback): the dry run refuses a trajectory that breaks a limit and publishes
nothing; a trajectory within the limits reaches a joint_trajectory_controller's topic with
its accelerations, and `sim_robot` (following that topic) moves along it."""


import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory
import yaml

from sysid_ros.io import excitation
from sysid_ros.ros import messages, trajectory_publisher

TOPIC = '/joint_trajectory_controller/joint_trajectory'
START_TIMEOUT = 90.0                            # [s] imports and compilation on a busy machine
AMPLITUDE = 0.4                                 # [rad] of the trajectory's first joint
DURATION = 2.0                                  # [s]


def _trajectory(path, speed: float = 1.0) -> str:
    """A rest-to-rest swing of the first joint, q = A (1 - cos(2 pi t / T)) / 2, played
    `speed` times faster."""
    t = np.linspace(0.0, DURATION, 201) / speed
    w = 2 * np.pi * speed / DURATION
    s = w * t
    q = np.stack([AMPLITUDE * (1 - np.cos(s)) / 2, np.zeros_like(t)], axis=1)
    qd = np.stack([AMPLITUDE * w * np.sin(s) / 2, np.zeros_like(t)], axis=1)
    qdd = np.stack([AMPLITUDE * w ** 2 * np.cos(s) / 2, np.zeros_like(t)], axis=1)
    path.write_text(yaml.safe_dump(excitation.trajectory_dict(('joint1', 'joint2'), t, q, qd,
                                                              qdd)))
    return str(path)


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('trajectory_publisher')
    config = folder / 'config.yaml'
    config.write_text(yaml.safe_dump({'/**': {'ros__parameters': {
        'model': {'builder': 'double_pendulum', 'joints': ['joint1', 'joint2'],
                  'actuator': 'viscous'},
        'parameters': {'link2': {'mass': {'min': 0.5, 'max': 2.0}}},
        'excitation': {'velocity': 1.0, 'effort': [40.0, 20.0]}}}}))
    return (str(config), _trajectory(folder / 'slow.yaml'),
            _trajectory(folder / 'fast.yaml', speed=3.0))


def test_dry_run_refuses_a_trajectory_beyond_a_limit(start_node, files):
    config, _, fast = files
    process = start_node('sysid_ros.ros.trajectory_publisher', '-p', f'config:={config}',
                         '-p', f'trajectory:={fast}', '-p', 'dry_run:=true')
    assert process.wait(START_TIMEOUT) == trajectory_publisher.REFUSED, process.output()
    output = process.output()
    assert 'joint1: velocity' in output and 'exceeds the limit 1.0' in output
    assert 'refused' in output and 'published to' not in output


def test_sim_robot_follows_the_published_trajectory(start_node, ros, files):
    config, slow, _ = files
    sim = start_node('sysid_ros.ros.sim_robot', '-p', f'config:={config}',
                     '-p', f'trajectory_topic:={TOPIC}', '-p', 'noise:=0.0')
    received = {'joints': [], 'trajectory': []}
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    ros.node.create_subscription(JointState, '/joint_states', received['joints'].append, qos)
    ros.node.create_subscription(JointTrajectory, TOPIC, received['trajectory'].append, qos)
    assert ros.spin_until(lambda: received['joints'] or sim.proc.poll() is not None,
                          START_TIMEOUT), sim.output()
    rest = messages.joint_state_to_arrays(received['joints'][-1]).position
    np.testing.assert_allclose(rest, 0.0, atol=1e-3)            # held at rest until told
    count = len(received['joints'])
    publisher = start_node('sysid_ros.ros.trajectory_publisher', '-p', f'config:={config}',
                           '-p', f'trajectory:={slow}', '-p', 'subscribers:=2')
    assert ros.spin_until(lambda: publisher.proc.poll() is not None, START_TIMEOUT)
    assert publisher.proc.returncode == 0, publisher.output()
    assert len(received['trajectory']) == 1
    sent = messages.trajectory_to_arrays(received['trajectory'][0])
    assert sent.q.shape == (201, 2) and sent.qdd is not None
    ros.spin_for(DURATION + 1.0)
    moved = np.array([messages.joint_state_to_arrays(m).position
                      for m in received['joints'][count:]])
    assert sim.proc.poll() is None, sim.output()
    # The swing's peak and its return to rest, with the tracking error of a nominal model.
    assert np.max(moved[:, 0]) == pytest.approx(AMPLITUDE, abs=0.05)
    np.testing.assert_allclose(moved[-1], 0.0, atol=0.02)
    assert 'following a trajectory of 201 points' in sim.output()
