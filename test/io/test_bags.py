"""Rosbag writer and reader (`sysid_ros.io.bags`) on small generated bags, both storages."""

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.typesys import get_typestore, Stores
import yaml

from sysid_ros.io import bag_writer, bags
from sysid_ros.io.trajectory import Trajectory

NAMES = ('shoulder', 'elbow', 'wrist')
STORAGES = ('sqlite3', 'mcap')


def _trajectory(rng, num=200, rate=100.0, t0=0.0, names=NAMES):
    t = t0 + np.arange(num) / rate
    phase = rng.uniform(0, 2 * np.pi, len(names))
    q = np.sin(2.0 * t[:, None] + phase)
    qd = 2.0 * np.cos(2.0 * t[:, None] + phase)
    tau = rng.normal(size=(num, len(names)))
    return Trajectory(t=t, q=q, qd=qd, tau=tau, joint_names=tuple(names))


def _messages(path):
    """Every message of the bag deserialised by rosbags: [(topic, bag ns, message)]."""
    with AnyReader([path]) as reader:
        return [(c.topic, ns, reader.deserialize(raw, c.msgtype))
                for c, ns, raw in reader.messages()]


@pytest.mark.parametrize('storage', STORAGES)
def test_writer_round_trip_through_rosbags(tmp_path, storage):
    rng = np.random.default_rng(0)
    trajs = [_trajectory(rng), _trajectory(rng, num=150)]      # both start at t = 0
    t_pose = np.arange(0.0, 1.9, 0.05)
    quat = rng.normal(size=(len(t_pose), 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    position = rng.normal(size=(len(t_pose), 3))
    path = tmp_path / 'run'
    bag_writer.write_trajectory_bag(
        path, [trajs[0]], storage=storage, custom_data={'converted_from': 'test data v1'},
        poses={'/mocap/box/pose': (t_pose, position, quat)})
    info = yaml.safe_load((path / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    assert info['storage_identifier'] == storage
    assert sorted(p.name for p in path.iterdir()) == sorted(
        ['metadata.yaml', 'run.mcap' if storage == 'mcap' else 'run.db3'])
    assert info['custom_data'] == {'converted_from': 'test data v1'}
    msgs = _messages(path)
    stamps = [ns for _, ns, _ in msgs]
    assert stamps == sorted(stamps)                             # time order across topics
    states = [m for topic, _, m in msgs if topic == '/joint_states']
    poses = [m for topic, _, m in msgs if topic == '/mocap/box/pose']
    assert len(states) == trajs[0].num_samples and len(poses) == len(t_pose)
    assert all(tuple(m.name) == NAMES for m in states)
    np.testing.assert_array_equal(np.array([m.position for m in states]), trajs[0].q)
    np.testing.assert_array_equal(np.array([m.velocity for m in states]), trajs[0].qd)
    np.testing.assert_array_equal(np.array([m.effort for m in states]), trajs[0].tau)
    header_t = np.array([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in states])
    np.testing.assert_allclose(header_t, trajs[0].t, atol=1e-9)
    np.testing.assert_array_equal(
        np.array([[m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z,
                   m.pose.orientation.w] for m in poses]), quat)
    np.testing.assert_array_equal(
        np.array([[m.pose.position.x, m.pose.position.y, m.pose.position.z] for m in poses]),
        position)

    # Two trajectories on overlapping clocks: the second is moved behind the first + the gap.
    path2 = tmp_path / 'two'
    bag_writer.write_trajectory_bag(path2, trajs, storage=storage)
    t = np.array([ns for _, ns, _ in _messages(path2)]) * 1e-9
    assert len(t) == 350
    np.testing.assert_allclose(t[:200], trajs[0].t, atol=1e-9)
    assert t[200] - t[199] == pytest.approx(bag_writer.TRAJECTORY_GAP, abs=1e-9)
    np.testing.assert_allclose(np.diff(t[200:]), 0.01, atol=1e-9)


def test_joint_state_encoder_matches_rosbags_serialiser():
    store = get_typestore(Stores.LATEST)
    types = store.types
    rng = np.random.default_rng(1)
    for names in (['a'], ['j1', 'joint22'], [f'panda_joint{i}' for i in range(1, 8)]):
        values = rng.normal(size=(3, len(names)))
        for t_ns in (0, 3_000_000_005, 1_732_000_000_123_456_789):
            msg = types['sensor_msgs/msg/JointState'](
                header=types['std_msgs/msg/Header'](stamp=bag_writer._stamp(types, t_ns),
                                                    frame_id=''),
                name=names, position=values[0], velocity=values[1], effort=values[2])
            expected = bytes(store.serialize_cdr(msg, 'sensor_msgs/msg/JointState'))
            assert bag_writer._JointStateEncoder(names).encode(t_ns, *values.tolist()) == expected


def test_writer_refuses_existing_path_and_bad_input(tmp_path):
    rng = np.random.default_rng(2)
    traj = _trajectory(rng)
    (tmp_path / 'taken').mkdir()
    with pytest.raises(FileExistsError, match='taken'):
        bag_writer.write_trajectory_bag(tmp_path / 'taken', [traj])
    with pytest.raises(ValueError, match='storage'):
        bag_writer.write_trajectory_bag(tmp_path / 'x', [traj], storage='rosbag1')
    with pytest.raises(ValueError, match=r'trajectories\[0\]'):
        bag_writer.write_trajectory_bag(tmp_path / 'x', [Trajectory(
            t=traj.t, q=traj.q, qd=traj.qd, tau=traj.tau, joint_names=('a', 'a', 'b'))])
    with pytest.raises(ValueError, match='overlap'):
        bag_writer.write_trajectory_bag(tmp_path / 'x', [traj, traj], poses={
            '/p': (traj.t, np.zeros((200, 3)), np.tile([0.0, 0.0, 0.0, 1.0], (200, 1)))})
    assert sorted(p.name for p in tmp_path.iterdir()) == ['taken']   # nothing left behind


# ----------------------------------------------------------------------------------------------
# Reader
# ----------------------------------------------------------------------------------------------

def _data(**kw):
    from sysid_ros.io.config import DataConfig
    return DataConfig(**{'rate': 50.0, **kw})


def _resampled(traj, t, shift=0.0):
    """Reference: `traj` (stamps moved by `shift`) linearly interpolated at `t`."""
    return {key: np.stack([np.interp(t, traj.t + shift, getattr(traj, key)[:, j])
                           for j in range(traj.nv)], axis=1) for key in ('q', 'qd', 'tau')}


@pytest.mark.parametrize('storage', STORAGES)
def test_reader_cuts_at_gaps_matches_joints_by_name_and_resamples(tmp_path, storage):
    rng = np.random.default_rng(3)
    names = ('wrist', 'gripper', 'shoulder', 'elbow')       # other order, one extra joint
    trajs = [_trajectory(rng, num=300, names=names),
             _trajectory(rng, num=240, names=names, t0=5.0)]
    t_pose = np.arange(0.0, 7.4, 0.004)
    angle = 0.5 * t_pose
    quat = np.stack([0 * angle, 0 * angle, np.sin(angle / 2), np.cos(angle / 2)], axis=1)
    quat[1::2] *= -1.0                                          # same rotations, other sign
    position = np.stack([t_pose, 2 * t_pose, 0 * t_pose], axis=1)
    path = tmp_path / 'bag'
    bag_writer.write_trajectory_bag(path, trajs, storage=storage,
                                    poses={'/mocap/box': (t_pose, position, quat)})
    segments = bags.read_bag(path, NAMES, _data(mocap_topics=('/mocap/box',)))
    assert len(segments) == 2
    for seg, traj in zip(segments, trajs):
        out, offset = seg.trajectory, traj.t[0]
        assert out.joint_names == NAMES
        np.testing.assert_allclose(np.diff(out.t), 1 / 50.0, atol=1e-9)
        assert out.t[0] == pytest.approx(offset, abs=1e-9)      # on the grid k / rate
        assert out.t[-1] == pytest.approx(offset + traj.duration, abs=0.02)
        ref = _resampled(traj, out.t)
        order = [names.index(j) for j in NAMES]
        for key in ('q', 'qd', 'tau'):
            np.testing.assert_allclose(getattr(out, key), ref[key][:, order], atol=1e-9)
        t = out.t
        np.testing.assert_allclose(out.mocap_position[:, 0],
                                   np.stack([t, 2 * t, 0 * t], axis=1), atol=1e-9)
        # Signs made continuous before interpolating: still the rotation about z by t / 2.
        expected = np.stack([0 * t, 0 * t, np.sin(t / 4), np.cos(t / 4)], axis=1)
        np.testing.assert_allclose(np.abs(np.sum(out.mocap_orientation[:, 0] * expected, -1)),
                                   1.0, atol=1e-6)


def test_reader_segments_holdout_and_torque_topic(tmp_path):
    """Configured time ranges, a Float64MultiArray torque topic and the held-out share."""
    from rosbags.rosbag2 import Writer

    rng = np.random.default_rng(4)
    traj = _trajectory(rng, num=400, rate=100.0)
    store = get_typestore(Stores.LATEST)
    path = tmp_path / 'bag'
    bag_writer.write_trajectory_bag(path, [traj])
    # A second bag: the same joint states plus commands on their own topic, other values.
    path2 = tmp_path / 'bag2'
    with Writer(path2, version=Writer.VERSION_LATEST) as writer:
        states = writer.add_connection('/joint_states', 'sensor_msgs/msg/JointState',
                                       typestore=store)
        commands = writer.add_connection('/cmd', 'std_msgs/msg/Float64MultiArray',
                                         typestore=store)
        with AnyReader([path]) as reader:
            for conn, ns, raw in reader.messages():
                writer.write(states, ns, raw)
                k = int(round(ns * 1e-9 * 100))
                msg = store.types['std_msgs/msg/Float64MultiArray'](
                    layout=store.types['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0),
                    data=np.full(3, float(k)))
                writer.write(commands, ns + 1, store.serialize_cdr(
                    msg, 'std_msgs/msg/Float64MultiArray'))
    data = _data(rate=100.0, segments=(0.5, 1.5, 2.0, 3.95))
    segments = bags.read_bag(path2, NAMES, data)
    assert [round(s.trajectory.t[0], 6) for s in segments] == [0.5, 2.0]
    assert [s.trajectory.t[-1] for s in segments] == pytest.approx([1.49, 3.94])
    effort = bags.read_bag(path, NAMES, data)
    np.testing.assert_allclose(effort[0].trajectory.q, segments[0].trajectory.q)
    # The commands are k at stamp k / 100 + 1 ns: tau(t) = 100 t up to the 1 ns shift.
    np.testing.assert_allclose(bags.read_bag(path2, NAMES, _data(
        rate=100.0, torque_source='/cmd', segments=(0.5, 1.5)))[0].trajectory.tau,
        100.0 * segments[0].trajectory.t[:, None].repeat(3, 1), atol=1e-6)
    fit, held = bags.split_holdout(segments, 0.3)
    assert (len(fit), len(held)) == (1, 1) and held[0] is segments[1]
    assert bags.split_holdout(segments[:1], 0.5) == (segments[:1], [])
    assert bags.split_holdout(list(range(10)), 0.2) == (list(range(8)), [8, 9])


@pytest.fixture(scope='module')
def good_bag(tmp_path_factory):
    root = tmp_path_factory.mktemp('bags')
    bag_writer.write_trajectory_bag(root / 'good', [_trajectory(np.random.default_rng(5))],
                                    storage='mcap')
    return root / 'good'


@pytest.mark.parametrize('case, message', [
    ('missing', 'bag not found'),
    ('corrupted', 'cannot'),
    ('topic', "topic /other not in the bag; it has ['/joint_states']"),
    ('type', 'topic /joint_states: expected messages of type geometry_msgs/msg/PoseStamped'),
    ('joint', "no joint 'knee'"),
    ('range', 'no trajectory in the time ranges'),
    ('nan', "non-finite position (nan) of joint 'elbow'"),
])
def test_reader_bad_input_names_bag_topic_or_joint(tmp_path, good_bag, case, message):
    import shutil

    from sysid_ros.io.trajectory import DataError

    path, names, data = good_bag, NAMES, _data()
    if case == 'missing':
        path = tmp_path / 'nothing'
    elif case == 'corrupted':
        path = tmp_path / 'corrupted'
        shutil.copytree(good_bag, path)
        mcap = next(path.glob('*.mcap'))
        mcap.write_bytes(mcap.read_bytes()[:len(mcap.read_bytes()) // 2])
    elif case == 'topic':
        data = _data(joint_states_topic='/other')
    elif case == 'type':
        data = _data(mocap_topics=('/joint_states',), joint_states_topic='/joint_states')
    elif case == 'joint':
        names = ('shoulder', 'knee')
    elif case == 'range':
        data = _data(segments=(100.0, 200.0))
    elif case == 'nan':
        traj = _trajectory(np.random.default_rng(6))
        traj.q[50, 1] = np.nan
        path = tmp_path / 'nan'
        bag_writer.write_trajectory_bag(path, [traj])
    with pytest.raises(DataError) as info:
        bags.read_bag(path, names, data)
    assert str(path) in str(info.value) and message in str(info.value)


def test_reader_reads_ros1_bags(tmp_path):
    """A ROS 1 bag (rosbags' rosbag1 writer, Noetic types) gives the same trajectory as the
    rosbag2 of the same messages."""
    from rosbags.rosbag1 import Writer

    rng = np.random.default_rng(7)
    traj = _trajectory(rng, num=120)
    bag_writer.write_trajectory_bag(tmp_path / 'ros2', [traj])
    noetic, latest = get_typestore(Stores.ROS1_NOETIC), get_typestore(Stores.LATEST)
    with Writer(tmp_path / 'run.bag') as writer, AnyReader([tmp_path / 'ros2']) as reader:
        conn = writer.add_connection('/joint_states', 'sensor_msgs/msg/JointState',
                                     typestore=noetic)
        for c, ns, raw in reader.messages():
            msg = latest.deserialize_cdr(raw, c.msgtype)
            ros1 = noetic.types['sensor_msgs/msg/JointState'](
                header=noetic.types['std_msgs/msg/Header'](
                    seq=0, stamp=noetic.types['builtin_interfaces/msg/Time'](
                        sec=msg.header.stamp.sec, nanosec=msg.header.stamp.nanosec),
                    frame_id=''),
                name=msg.name, position=msg.position, velocity=msg.velocity, effort=msg.effort)
            writer.write(conn, ns, noetic.serialize_ros1(ros1, 'sensor_msgs/msg/JointState'))
    one = bags.read_bag(tmp_path / 'run.bag', NAMES, _data())
    two = bags.read_bag(tmp_path / 'ros2', NAMES, _data())
    assert len(one) == len(two) == 1
    for key in ('t', 'q', 'qd', 'tau'):
        np.testing.assert_array_equal(getattr(one[0].trajectory, key),
                                      getattr(two[0].trajectory, key))


def test_reader_drops_repeated_and_late_stamps_across_chunks(tmp_path, monkeypatch):
    rng = np.random.default_rng(8)
    traj = _trajectory(rng, num=200)
    bag_writer.write_trajectory_bag(tmp_path / 'clean', [traj])
    with AnyReader([tmp_path / 'clean']) as reader:
        recorded = [(c, ns, bytes(raw)) for c, ns, raw in reader.messages()]
    # Message 120 again after message 149, first of a chunk (a late duplicate); 60 after 169.
    order = list(range(150)) + [120] + list(range(150, 170)) + [60] + list(range(170, 200))
    with bag_writer.new_bag(tmp_path / 'messy') as writer:
        conn = writer.add_connection('/joint_states', 'sensor_msgs/msg/JointState',
                                     typestore=get_typestore(Stores.LATEST))
        for i, k in enumerate(order):
            writer.write(conn, recorded[0][1] + i, recorded[k][2])
    monkeypatch.setattr(bags, 'CHUNK', 50)                     # cuts fall between them
    clean = bags.read_bag(tmp_path / 'clean', NAMES, _data())
    with pytest.warns(UserWarning, match='dropped 2 messages'):
        messy = bags.read_bag(tmp_path / 'messy', NAMES, _data())
    assert len(messy) == 1
    for key in ('t', 'q', 'qd', 'tau'):
        np.testing.assert_array_equal(getattr(messy[0].trajectory, key),
                                      getattr(clean[0].trajectory, key))


def test_a_topic_that_also_carries_another_type_is_read_without_it(tmp_path, good_bag):
    """A bag from the field with a second publisher of another type on the joint-state topic:
    the JointState messages are read as if alone, the others left out with a warning."""
    from rosbags.rosbag2 import Writer

    store = get_typestore(Stores.LATEST)
    mixed = tmp_path / 'mixed'
    pose = store.types[bags.POSE_STAMPED](
        header=store.types['std_msgs/msg/Header'](
            stamp=store.types['builtin_interfaces/msg/Time'](sec=0, nanosec=5), frame_id=''),
        pose=store.types['geometry_msgs/msg/Pose'](
            position=store.types['geometry_msgs/msg/Point'](x=1.0, y=2.0, z=3.0),
            orientation=store.types['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0,
                                                                    w=1.0)))
    with Writer(mixed, version=Writer.VERSION_LATEST) as writer:
        states = writer.add_connection('/joint_states', bags.JOINT_STATE, typestore=store)
        poses = writer.add_connection('/joint_states', bags.POSE_STAMPED, typestore=store)
        with AnyReader([good_bag]) as reader:
            for k, (_, ns, raw) in enumerate(reader.messages()):
                writer.write(states, ns, raw)
                if k % 7 == 0:
                    writer.write(poses, ns + 1, store.serialize_cdr(pose, bags.POSE_STAMPED))
    with pytest.warns(UserWarning, match=r'/joint_states \(geometry_msgs/msg/PoseStamped\)'):
        got = bags.read_bag(mixed, NAMES, _data())
    alone = bags.read_bag(good_bag, NAMES, _data())
    np.testing.assert_array_equal(got[0].trajectory.q, alone[0].trajectory.q)
    np.testing.assert_array_equal(got[0].trajectory.tau, alone[0].trajectory.tau)
