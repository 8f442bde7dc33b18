"""`bag_player` as a separate process over real DDS (loopback): every message of a generated
bag arrives in order with its values, /clock carries the bag time, and a bad bag path is one
clear error."""

import os
import pathlib

import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from sysid_ros.io import bag_writer, bags
from sysid_ros.io.trajectory import Trajectory
from sysid_ros.ros import messages

START_TIMEOUT = 60.0                            # [s] imports on a busy machine
NUM = 150


@pytest.fixture(scope='module')
def bag(tmp_path_factory):
    t = 100.0 + np.arange(NUM) / 100.0
    q = np.stack([np.sin(t), np.cos(t)], axis=1)
    traj = Trajectory(t=t, q=q, qd=-q[:, ::-1], tau=0.1 * q, joint_names=('j1', 'j2'))
    path = tmp_path_factory.mktemp('player') / 'bag'
    bag_writer.write_trajectory_bag(path, [traj], storage='mcap')
    return path, traj


def test_plays_every_message_with_clock(start_node, ros, bag):
    path, traj = bag
    received, clocks = [], []
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    subs = [ros.node.create_subscription(JointState, '/joint_states', received.append, qos),
            ros.node.create_subscription(Clock, '/clock', clocks.append, qos)]
    try:
        # 2x real time: the 1.5 s bag plays in about 0.75 s once this node's subscription
        # has matched (a 3 s start delay alone lost the first message once in a loaded run).
        process = start_node('sysid_ros.ros.bag_player', '-p', f'bag:={path}',
                             '-p', 'rate:=2.0', '-p', 'start_delay:=3.0',
                             '-p', 'wait_for_subscribers:=1')
        assert ros.spin_until(lambda: len(received) >= NUM or process.proc.poll() is not None,
                              START_TIMEOUT), process.output()
        ros.spin_for(0.2)
    finally:
        for sub in subs:
            ros.node.destroy_subscription(sub)
    assert len(received) == NUM, process.output()
    arrays = [messages.joint_state_to_arrays(m) for m in received]
    np.testing.assert_allclose([a.t for a in arrays], traj.t, atol=1e-9)
    np.testing.assert_array_equal(np.array([a.position for a in arrays]), traj.q)
    np.testing.assert_array_equal(np.array([a.effort for a in arrays]), traj.tau)
    clock_t = np.array([messages.stamp_to_seconds(c.clock) for c in clocks])
    assert clock_t.min() >= traj.t[0] - 1e-9 and clock_t.max() == pytest.approx(traj.t[-1])
    assert np.all(np.diff(clock_t) >= 0.0)
    process.proc.wait(timeout=30)
    assert process.proc.returncode == 0, process.output()


def test_missing_bag_is_one_clear_error(start_node, tmp_path):
    process = start_node('sysid_ros.ros.bag_player', '-p', f'bag:={tmp_path / "none"}')
    process.proc.wait(timeout=START_TIMEOUT)
    assert process.proc.returncode == 1
    assert f'{tmp_path / "none"}: bag not found' in process.output()


def _start_recording(config_dir: pathlib.Path, out: pathlib.Path):
    """`sysid record --out OUT` of /joint_states (joints j1, j2) as a process, once it
    listens; returns (process, log path)."""
    import subprocess
    import sys
    import time

    import yaml

    repo = pathlib.Path(__file__).resolve().parents[2]
    # The DDS isolation that test/ros/conftest.py put into os.environ, and this source tree.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(repo), os.environ.get('PYTHONPATH')])))
    config = config_dir / 'record.yaml'
    config.write_text(yaml.safe_dump({'/**': {'ros__parameters': {
        'model': {'builder': 'double_pendulum', 'joints': ['j1', 'j2']},
        'parameters': {'link1': {'mass': {'min': 0.5, 'max': 2.0}}},
        'data': {'rate': 100.0}}}}))
    log = config_dir / f'{out.name}.log'
    with open(log, 'w') as f:
        recording = subprocess.Popen(
            [sys.executable, '-m', 'sysid_ros.cli', 'record', '--config', str(config),
             '--out', str(out)], env=env, cwd=repo, stdout=f, stderr=f)
    deadline = time.monotonic() + START_TIMEOUT
    while 'recording /joint_states' not in log.read_text():
        if recording.poll() is not None or time.monotonic() > deadline:
            recording.kill()
            pytest.fail(log.read_text())
        time.sleep(0.2)
    return recording, log


def _stop_recording(recording, log) -> str:
    """SIGINT, as Ctrl-C; returns the log once the bag is closed."""
    try:
        recording.send_signal(2)
        assert recording.wait(30) == 0, log.read_text()
    finally:
        if recording.poll() is None:
            recording.kill()
    return log.read_text()


def _recorded_qos(path) -> list:
    """The offered QoS profiles of /joint_states in a bag's metadata."""
    from rosbags.highlevel import AnyReader

    with AnyReader([pathlib.Path(path)]) as reader:
        return [profile for conn in reader.connections if conn.topic == '/joint_states'
                for profile in conn.ext.offered_qos_profiles]


def test_record_what_the_player_plays(start_node, tmp_path, bag):
    """`sysid record` (SIGINT ends it) keeps every played message and the QoS the player
    offered (reliable: the generated bag records none); the bag reads back."""
    import time

    from sysid_ros.io.config import DataConfig

    path, traj = bag
    out = tmp_path / 'recorded'
    recording, log = _start_recording(tmp_path, out)
    try:
        player = start_node('sysid_ros.ros.bag_player', '-p', f'bag:={path}', '-p', 'rate:=0.0',
                            '-p', 'wait_for_subscribers:=1', '-p', 'start_delay:=1.0')
        assert player.wait(START_TIMEOUT) == 0, player.output()
        time.sleep(1.0)
    finally:
        text = _stop_recording(recording, log)
    assert f'{out}: /joint_states {NUM}' in text
    read = bags.read_bag(out, ('j1', 'j2'), DataConfig(rate=100.0))
    assert len(read) == 1
    np.testing.assert_allclose(read[0].trajectory.t, traj.t, atol=1e-9)
    np.testing.assert_allclose(read[0].trajectory.q, traj.q, atol=1e-12)
    [offered] = _recorded_qos(out)
    assert (offered.reliability.name, offered.durability.name) == ('RELIABLE', 'VOLATILE')


def test_best_effort_is_recorded_and_replayed_as_best_effort(start_node, ros, tmp_path):
    """A sensor-data (best-effort) publisher is recorded, its QoS goes into the bag's
    metadata, and the player offers that QoS again. A reliable publisher is there first (as
    one of an ended process can stay in the graph for a while): the recorder's reliable
    subscription becomes best effort when the best-effort one appears."""
    out = tmp_path / 'best_effort'
    recording, log = _start_recording(tmp_path, out)
    reliable = ros.node.create_publisher(JointState, '/joint_states', 10)
    publisher = None
    try:
        assert ros.spin_until(lambda: reliable.get_subscription_count() >= 1, START_TIMEOUT)
        publisher = ros.node.create_publisher(JointState, '/joint_states',
                                              qos_profile_sensor_data)
        assert ros.spin_until(lambda: publisher.get_subscription_count() >= 1, START_TIMEOUT)
        for k in range(20):
            publisher.publish(messages.arrays_to_joint_state(10.0 + 0.01 * k, ['j1', 'j2'],
                                                             [0.0, 0.1], [0.0, 0.0]))
            ros.spin_for(0.01)
        ros.spin_for(0.5)
    finally:
        for each in (reliable, publisher):
            if each is not None:
                ros.node.destroy_publisher(each)
        text = _stop_recording(recording, log)
    assert f'{out}: /joint_states 20' in text
    assert 'a best-effort publisher appeared' in text
    offered = _recorded_qos(out)
    assert {p.reliability.name for p in offered} == {'RELIABLE', 'BEST_EFFORT'}
    assert {p.durability.name for p in offered} == {'VOLATILE'}

    player = start_node('sysid_ros.ros.bag_player', '-p', f'bag:={out}', '-p', 'rate:=1.0',
                        '-p', 'start_delay:=30.0')

    def players():
        return [info for info in ros.node.get_publishers_info_by_topic('/joint_states')
                if info.node_name == 'bag_player']

    assert ros.spin_until(players, START_TIMEOUT), player.output()
    assert players()[0].qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT
    player.kill()
