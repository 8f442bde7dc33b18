"""Message <-> array conversions: round trips, stamps (negative, nanosecond carry), joint order
by name, Float64MultiArray layout, PoseStamped, the estimator's outputs (InertiaStamped,
particles as PointCloud2, windows as JointTrajectory, the estimate as JointState)."""

import math

from builtin_interfaces.msg import Time
import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from sysid_ros.ros import messages
from sysid_ros.ros.estimate_client import decode_estimate, EstimateFormatError


def test_all_names_importable():
    for name in messages.__all__:
        assert hasattr(messages, name)


@pytest.mark.parametrize('t, sec, nanosec', [
    (0.0, 0, 0),
    (1.5, 1, 500_000_000),
    (1_795_279_931.25, 1_795_279_931, 250_000_000),
    (-0.25, -1, 750_000_000),
    (2.9999999999, 3, 0),                       # rounds up to the next second
])
def test_stamps(t, sec, nanosec):
    stamp = messages.seconds_to_stamp(t)
    assert (stamp.sec, stamp.nanosec) == (sec, nanosec)
    assert messages.stamp_to_seconds(stamp) == pytest.approx(t, abs=1e-9)


def test_stamp_seconds_nanosecond_resolution():
    stamp = Time(sec=12, nanosec=345_678_901)
    back = messages.seconds_to_stamp(messages.stamp_to_seconds(stamp))
    assert (back.sec, back.nanosec) == (12, 345_678_901)


@pytest.mark.parametrize('t', [math.nan, math.inf])
def test_non_finite_stamp_raises(t):
    with pytest.raises(ValueError, match='finite'):
        messages.seconds_to_stamp(t)


def test_joint_state_round_trip():
    names = ('joint2', 'finger', 'joint1')
    msg = messages.arrays_to_joint_state(3.25, names, [2.0, 9.0, 1.0], [0.2, 0.9, 0.1],
                                         [-2.0, 0.0, -1.0], frame_id='base')
    assert isinstance(msg, JointState)
    assert msg.header.frame_id == 'base'
    arrays = messages.joint_state_to_arrays(msg)
    assert arrays.t == 3.25 and arrays.names == names
    np.testing.assert_array_equal(arrays.position, [2.0, 9.0, 1.0])
    np.testing.assert_array_equal(arrays.velocity, [0.2, 0.9, 0.1])
    np.testing.assert_array_equal(arrays.effort, [-2.0, 0.0, -1.0])
    joints = ('joint1', 'joint2')
    np.testing.assert_array_equal(
        messages.reorder_by_name(arrays.names, arrays.position, joints), [1.0, 2.0])
    stacked = np.stack([arrays.position, arrays.velocity])
    np.testing.assert_array_equal(messages.reorder_by_name(names, stacked, joints),
                                  [[1.0, 2.0], [0.1, 0.2]])


def test_joint_state_readers_do_not_validate():
    msg = JointState(name=['a', 'b'], position=[1.0, math.nan])   # no velocity or effort
    arrays = messages.joint_state_to_arrays(msg)
    assert arrays.velocity.shape == arrays.effort.shape == (0,)
    assert math.isnan(arrays.position[1])


def test_reorder_by_name_errors_name_the_problem():
    with pytest.raises(ValueError, match="'joint3'"):
        messages.reorder_by_name(('joint1', 'joint2'), [1.0, 2.0], ('joint1', 'joint3'))
    with pytest.raises(ValueError, match='expected 2 values'):
        messages.reorder_by_name(('joint1', 'joint2'), [1.0], ('joint1',))


def test_torque_command_round_trip_and_data_offset():
    msg = messages.array_to_torque_command([0.5, -1.5])
    assert isinstance(msg, Float64MultiArray)
    assert msg.layout.dim[0].label == 'joints' and msg.layout.dim[0].size == 2
    np.testing.assert_array_equal(messages.torque_command_to_array(msg), [0.5, -1.5])
    plain = Float64MultiArray(data=[9.0, 1.0, 2.0])                # as ros2_control sends
    plain.layout.data_offset = 1
    np.testing.assert_array_equal(messages.torque_command_to_array(plain), [1.0, 2.0])


def test_pose_round_trip():
    quat = np.array([0.0, np.sin(0.2), 0.0, np.cos(0.2)])
    msg = messages.arrays_to_pose(7.5, [0.1, -0.2, 0.3], quat, frame_id='mocap')
    pose = messages.pose_to_arrays(msg)
    assert pose.t == 7.5 and pose.frame_id == 'mocap'
    np.testing.assert_array_equal(pose.position, [0.1, -0.2, 0.3])
    np.testing.assert_array_equal(pose.orientation, quat)
    with pytest.raises(ValueError, match='3 position and 4 quaternion'):
        messages.arrays_to_pose(0.0, [0.0, 0.0], quat)


def test_inertia_stamped_holds_mass_com_and_the_upper_triangle():
    inertia = np.array([[0.1, 0.01, 0.02], [0.01, 0.2, 0.03], [0.02, 0.03, 0.3]])
    msg = messages.arrays_to_inertia(12.5, 'link2', 1.25, [0.0, 0.1, -0.5], inertia)
    assert msg.header.frame_id == 'link2' and messages.stamp_to_seconds(msg.header.stamp) == 12.5
    i = msg.inertia
    assert (i.m, i.com.x, i.com.y, i.com.z) == (1.25, 0.0, 0.1, -0.5)
    assert (i.ixx, i.ixy, i.ixz, i.iyy, i.iyz, i.izz) == (0.1, 0.01, 0.02, 0.2, 0.03, 0.3)


def test_particles_round_trip_through_a_point_cloud_with_named_fields():
    particles = np.random.default_rng(0).normal(size=(16, 3))
    names = ['link1.mass', 'link2.com.x', 'joint1.damping']
    msg = messages.particles_to_cloud(3.0, names, particles)
    assert [f.name for f in msg.fields] == names and msg.width == 16 and msg.is_dense
    got_names, got = messages.cloud_to_particles(msg)
    assert list(got_names) == names
    np.testing.assert_array_equal(got, particles)


def test_a_window_round_trips_through_a_joint_trajectory():
    t = 1_795_279_931.0 + np.arange(5) * 0.01
    q = np.arange(10.0).reshape(5, 2)
    msg = messages.arrays_to_trajectory(t, ['joint1', 'joint2'], q, -q)
    assert messages.stamp_to_seconds(msg.header.stamp) == t[0]
    assert messages.stamp_to_seconds(msg.points[-1].time_from_start) == pytest.approx(0.04)
    back = messages.trajectory_to_arrays(msg)
    np.testing.assert_allclose(back.t, t, atol=1e-9)
    assert back.names == ('joint1', 'joint2')
    np.testing.assert_array_equal(back.q, q)
    np.testing.assert_array_equal(back.qd, -q)
    assert back.qdd is None
    with_accelerations = messages.arrays_to_trajectory(t, ['joint1', 'joint2'], q, -q, 2 * q)
    np.testing.assert_array_equal(messages.trajectory_to_arrays(with_accelerations).qdd, 2 * q)


def test_the_estimate_is_a_joint_state_of_means_and_stds():
    msg = messages.arrays_to_joint_state(2.0, ['link2.mass', 'joint1.damping'],
                                         position=[1.2, 0.3], velocity=[0.05, 0.01])
    assert decode_estimate(msg) == {'link2.mass': (1.2, 0.05), 'joint1.damping': (0.3, 0.01)}
    with pytest.raises(EstimateFormatError, match='a mean .position. and a std'):
        decode_estimate(messages.arrays_to_joint_state(2.0, ['link2.mass'], position=[1.2]))


def test_the_inertia_outputs_name_each_identified_link_and_the_payload():
    """What `~/inertia/<body>` publishes: a link's whole inertia, and a configured payload on
    its own (a point mass in its frame, its free attributes from theta, the rest nominal)."""
    from sysid_ros.io import config as config_io
    from sysid_ros.io import problem as problem_io

    cfg = config_io.from_dict({
        'model': {'builder': 'double_pendulum', 'joints': ['joint1', 'joint2'],
                  'payload': {'link': 'link2', 'mass': 0.3, 'com': [0.0, 0.0, -0.5]}},
        'parameters': {'link1': {'mass': {'min': 0.5, 'max': 2.0}},
                       'payload': {'mass': {'min': 0.0, 'max': 1.0},
                                   'com': {'x': {'min': -0.2, 'max': 0.2}}}}})
    problem = problem_io.build_problem(cfg)
    link1, payload = problem_io.identified_inertias(problem, np.array([1.1, 0.4, 0.05]))
    assert (link1.name, link1.frame, link1.mass) == ('link1', 'link1', pytest.approx(1.1))
    assert np.all(np.linalg.eigvalsh(link1.inertia) > 0.0)
    assert (payload.name, payload.frame, payload.mass) == ('payload', 'link2', 0.4)
    np.testing.assert_array_equal(payload.com, [0.05, 0.0, -0.5])
    np.testing.assert_array_equal(payload.inertia, np.zeros((3, 3)))
