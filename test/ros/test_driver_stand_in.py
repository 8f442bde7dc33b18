"""`sim_robot` standing in for a robot's driver (`driver:=franka|ur`) over loopback DDS: the
profile's joint-state stream beside Franka's 30 Hz republish, the payload service on the
vendor's own interface, the trajectory controller's FollowJointTrajectory action, and a UR's
currents with hidden gains in the ground truth."""

import time

from builtin_interfaces.msg import Duration
from control_msgs.action import FollowJointTrajectory
from diagnostic_msgs.msg import DiagnosticArray
from franka_msgs.srv import SetLoad
import numpy as np
import pytest
from rclpy.action import ActionClient
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectoryPoint

from sysid_ros.ros import messages, qos

RATE = 500.0                                    # [Hz] of /franka/joint_states
START_TIMEOUT = 90.0                            # [s] imports and compilation on a busy machine
PANDA = tuple(f'panda_joint{i}' for i in range(1, 8))


@pytest.fixture(scope='module')
def franka(start_node, ros):
    process = start_node('sysid_ros.ros.sim_robot', '-p', 'config:=config/panda_live.yaml',
                         '-p', 'driver:=franka', '-p', f'publish_rate:={RATE}',
                         '-p', 'sim_rate:=1000.0')
    received = {'/franka/joint_states': [], '/joint_states': [], 'truth': []}
    node = ros.node
    for topic in ('/franka/joint_states', '/joint_states'):
        node.create_subscription(JointState, topic,
                                 lambda m, t=topic: received[t].append((time.monotonic(), m)),
                                 1000)
    node.create_subscription(DiagnosticArray, '/sim_robot/ground_truth',
                             lambda m: received['truth'].append(
                                 {kv.key: kv.value for kv in m.status[0].values}), qos.LATCHED)
    started = ros.spin_until(lambda: received['/franka/joint_states']
                             or process.proc.poll() is not None, START_TIMEOUT)
    assert started and process.proc.poll() is None, process.output()
    return process, received


def test_franka_streams_at_full_rate_beside_the_30_hz_republish(franka, ros):
    _, received = franka
    for messages_so_far in received.values():
        messages_so_far.clear()
    ros.spin_for(2.0)
    full = [m for _, m in received['/franka/joint_states']]
    stamps = np.array([messages.stamp_to_seconds(m.header.stamp) for m in full])
    assert np.median(np.diff(stamps)) == pytest.approx(1.0 / RATE, abs=1e-6)
    republished = received['/joint_states']
    assert 40 <= len(republished) <= 80                         # 30 Hz over 2 s
    assert tuple(full[-1].name) == PANDA


def test_franka_takes_a_load_through_set_load(franka, ros):
    _, received = franka
    response = ros.call(SetLoad, '/service_server/set_load',
                        SetLoad.Request(mass=1.25, center_of_mass=[0.01, 0.0, 0.05]))
    assert response.success
    assert ros.spin_until(lambda: received['truth']
                          and 'handed_payload_mass' in received['truth'][-1], 5.0)
    assert float(received['truth'][-1]['handed_payload_mass']) == 1.25


def test_franka_follows_a_trajectory_goal(franka, ros):
    _, received = franka
    client = ActionClient(ros.node, FollowJointTrajectory,
                          '/panda_arm_controller/follow_joint_trajectory')
    assert client.wait_for_server(timeout_sec=10.0)
    now = np.array(received['/franka/joint_states'][-1][1].position)
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = list(PANDA)
    target = now + 0.1
    for t, q in ((0.0, now), (1.0, target)):
        goal.trajectory.points.append(JointTrajectoryPoint(
            positions=q.tolist(), velocities=[0.0] * 7, accelerations=[0.0] * 7,
            time_from_start=Duration(sec=int(t), nanosec=int(t % 1 * 1e9))))
    handle_future = client.send_goal_async(goal)
    assert ros.spin_until(handle_future.done, 10.0) and handle_future.result().accepted
    result_future = handle_future.result().get_result_async()
    assert ros.spin_until(result_future.done, 10.0)
    assert result_future.result().result.error_code == FollowJointTrajectory.Result.SUCCESSFUL
    ros.spin_for(0.5)
    reached = np.array(received['/franka/joint_states'][-1][1].position)
    np.testing.assert_allclose(reached, target, atol=0.02)


def test_ur_publishes_currents_and_its_hidden_gains_are_the_truth(start_node, ros):
    true = [13.4, 12.7, 13.2, 9.5, 9.0, 9.4]            # the config gives 13.0 x3, 9.3 x3
    process = start_node('sysid_ros.ros.sim_robot', '-p', 'config:=config/ur5_live.yaml',
                         '-p', 'driver:=ur', '-p', 'publish_rate:=500.0',
                         '-p', 'sim_rate:=1000.0', '-p', f'effort_gains:={true}')
    truths = []                 # of the UR5 (the Franka's stand-in may still publish)
    ros.node.create_subscription(
        DiagnosticArray, '/sim_robot/ground_truth',
        lambda m: truths.extend({kv.key: kv.value for kv in s.values} for s in m.status
                                if s.hardware_id == 'ur5'), qos.LATCHED)
    assert ros.spin_until(lambda: truths or process.proc.poll() is not None, START_TIMEOUT), \
        process.output()
    given = [13.0] * 3 + [9.3] * 3
    joints = ('shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
              'wrist_2_joint', 'wrist_3_joint')
    for joint, g, t in zip(joints, given, true):
        assert float(truths[-1][f'{joint}.gain']) == pytest.approx(t / g, rel=1e-12)
