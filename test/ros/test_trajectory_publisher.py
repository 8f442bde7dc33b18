"""`trajectory_publisher` against a stand-in joint_trajectory_controller (an rclpy
ActionServer of the real control_msgs/action/FollowJointTrajectory in this process, which
publishes the joint states), the node a separate process, over real DDS (loopback): a goal
that succeeds, is rejected, aborted, timed out or interrupted; the dry run sends nothing;
the driver profile's controller is picked among two; the move starts at the current state;
a trajectory beyond a limit is refused before anything is sent."""

import signal

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from stand_in_controller import StandInController
import yaml

from sysid_ros.io import excitation
from sysid_ros.ros import messages, trajectory_action, trajectory_publisher

START_TIMEOUT = 90.0                            # [s] imports and compilation on a busy machine
AMPLITUDE = 0.4                                 # [rad] of the trajectory's first joint
DURATION = 2.0                                  # [s]
CURRENT = (0.05, -0.1)                          # [rad] the stand-in's joint positions
JTC = 'joint_trajectory_controller'
SCALED = 'scaled_joint_trajectory_controller'


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


def _config(path, model=None, **data) -> str:
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': {
        'model': model or {'builder': 'double_pendulum', 'joints': ['joint1', 'joint2'],
                           'actuator': 'viscous'},
        'parameters': {'link2': {'mass': {'min': 0.5, 'max': 2.0}}},
        'data': data,
        'excitation': {'velocity': 1.0, 'acceleration': 10.0, 'effort': [40.0, 20.0],
                       'position_margin': 0.0}}}}))
    return str(path)


def _urdf(path) -> str:
    """Two links on revolute joints; joint2's range [-0.05, 0.05] excludes CURRENT."""
    link = ('<link name="{}"><inertial><mass value="1.0"/><inertia ixx="0.01" ixy="0" '
            'ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>')
    joint = ('<joint name="{}" type="revolute"><parent link="{}"/><child link="{}"/>'
             '<axis xyz="0 1 0"/><limit lower="{}" upper="{}" effort="40" velocity="1"/>'
             '</joint>')
    path.write_text('<robot name="narrow">' + ''.join(link.format(n) for n in (
        'base', 'link1', 'link2')) + joint.format('joint1', 'base', 'link1', -1, 1)
        + joint.format('joint2', 'link1', 'link2', -0.05, 0.05) + '</robot>')
    return str(path)


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('trajectory_publisher')
    return {'generic': _config(folder / 'generic.yaml'),
            'ur': _config(folder / 'ur.yaml', driver='ur', torque_gains=[1.0]),
            'narrow': _config(folder / 'narrow.yaml', model={
                'urdf': _urdf(folder / 'narrow.urdf'), 'actuator': 'viscous'}),
            'slow': _trajectory(folder / 'slow.yaml'),
            'fast': _trajectory(folder / 'fast.yaml', speed=3.0)}


@pytest.fixture
def robot(ros):
    """Joint states at CURRENT on /joint_states and a function `(controller, mode) ->
    StandInController`; all destroyed after the test."""
    publisher = ros.node.create_publisher(JointState, '/joint_states', 10)
    timer = ros.node.create_timer(0.02, lambda: publisher.publish(
        messages.arrays_to_joint_state(0.0, ('joint2', 'joint1'), CURRENT[::-1])))
    servers = []

    def serve(controller: str = JTC, mode: str = 'succeed') -> StandInController:
        servers.append(StandInController(ros.node, controller, mode))
        return servers[-1]

    yield serve
    for server in servers:
        server.destroy()
    ros.node.destroy_timer(timer)
    ros.node.destroy_publisher(publisher)


def _run(start_node, ros, config, trajectory, *args):
    """Run the node to its end while the stand-ins serve; returns (status, output)."""
    process = start_node('sysid_ros.ros.trajectory_publisher', '-p', f'config:={config}',
                         '-p', f'trajectory:={trajectory}', *args)
    assert ros.spin_until(lambda: process.proc.poll() is not None, START_TIMEOUT), \
        process.output()
    return process.proc.returncode, process.output()


def _sent(goal):
    return messages.trajectory_to_arrays(goal.trajectory)


def test_success_sends_the_move_from_the_current_state_then_the_trajectory(
        start_node, ros, files, robot):
    controller = robot()
    status, output = _run(start_node, ros, files['generic'], files['slow'],
                          '-p', 'path_tolerance:=0.05')
    assert status == 0, output
    assert len(controller.goals) == 1 and 'goal succeeded' in output
    goal = controller.goals[0]
    sent = _sent(goal)
    assert sent.names == ('joint1', 'joint2') and sent.qdd is not None
    assert [(t.name, t.position) for t in goal.path_tolerance] == [
        ('joint1', 0.05), ('joint2', 0.05)]
    assert goal.goal_tolerance == []
    # The quintic starts at rest at the stand-in's state and ends at the first point.
    period = DURATION / 200
    np.testing.assert_allclose(sent.q[0], CURRENT, atol=1e-12)
    np.testing.assert_allclose(sent.qd[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(np.diff(sent.t), period, rtol=1e-6)
    move = sent.t[-1] - DURATION
    assert move >= trajectory_action.MIN_MOVE_DURATION
    tail = sent.t >= move - 1e-9
    np.testing.assert_allclose(sent.q[tail][0], 0.0, atol=1e-12)
    assert np.sum(tail) == 201
    assert np.max(np.abs(sent.qd[~tail]), axis=0) == pytest.approx(
        np.abs(CURRENT) * 15 / 8 / move, rel=1e-2)
    assert 'largest position error' in output


def test_dry_run_logs_what_would_be_sent_and_sends_nothing(start_node, ros, files, robot):
    controller = robot()
    status, output = _run(start_node, ros, files['generic'], files['slow'],
                          '-p', 'dry_run:=true')
    assert status == 0, output
    assert controller.goals == [] and 'dry run: nothing sent' in output
    assert f'/{JTC}/follow_joint_trajectory: ' in output
    assert 'move from [0.05, -0.1] to [0.0, 0.0]' in output


def test_the_driver_profiles_controller_is_picked_among_two(start_node, ros, files, robot):
    plain, scaled = robot(JTC), robot(SCALED)
    status, output = _run(start_node, ros, files['ur'], files['slow'])
    assert status == 0, output
    assert len(scaled.goals) == 1 and plain.goals == []


def test_two_controllers_without_the_profiles_are_refused(start_node, ros, files, robot):
    first, second = robot('left_arm_controller'), robot('right_arm_controller')
    status, output = _run(start_node, ros, files['ur'], files['slow'])
    assert status == trajectory_publisher.NO_CONTROLLER, output
    assert '/left_arm_controller/follow_joint_trajectory' in output
    assert '/right_arm_controller/follow_joint_trajectory' in output
    assert first.goals == [] and second.goals == []


def test_rejected_goal(start_node, ros, files, robot):
    robot(mode='reject')
    status, output = _run(start_node, ros, files['generic'], files['slow'])
    assert status == trajectory_publisher.REJECTED, output
    assert 'goal rejected' in output


def test_aborted_goal_reports_the_controllers_error(start_node, ros, files, robot):
    robot(mode='abort')
    status, output = _run(start_node, ros, files['generic'], files['slow'])
    assert status == trajectory_publisher.ABORTED, output
    assert 'goal aborted: error_code -4 (PATH_TOLERANCE_VIOLATED)' in output
    assert 'joint1 path error 0.2 beyond 0.05' in output


def test_no_result_in_time_cancels_the_goal(start_node, ros, files, robot):
    controller = robot(mode='hold')
    status, output = _run(start_node, ros, files['generic'], files['slow'],
                          '-p', 'result_margin:=0.5')
    assert status == trajectory_publisher.TIMED_OUT, output
    assert len(controller.cancelled) == 1 and 'goal cancelled' in output


def test_ctrl_c_cancels_the_goal(start_node, ros, files, robot):
    controller = robot(mode='hold')
    process = start_node('sysid_ros.ros.trajectory_publisher',
                         '-p', f'config:={files["generic"]}',
                         '-p', f'trajectory:={files["slow"]}')
    assert ros.spin_until(lambda: controller.goals or process.proc.poll() is not None,
                          START_TIMEOUT), process.output()
    ros.spin_for(1.0)                                   # the acceptance reaches the node
    process.proc.send_signal(signal.SIGINT)
    assert ros.spin_until(lambda: process.proc.poll() is not None, 15.0)
    assert process.proc.returncode == trajectory_publisher.INTERRUPTED, process.output()
    assert len(controller.cancelled) == 1


def test_a_trajectory_beyond_a_limit_is_refused_before_sending(start_node, ros, files, robot):
    controller = robot()
    status, output = _run(start_node, ros, files['generic'], files['fast'])
    assert status == trajectory_publisher.REFUSED, output
    assert 'joint1: velocity' in output and 'exceeds the limit 1.0' in output
    assert 'refused; nothing sent' in output and controller.goals == []


def test_a_start_state_outside_the_position_limits_is_refused(start_node, ros, files, robot):
    controller = robot()
    status, output = _run(start_node, ros, files['narrow'], files['slow'])
    assert status == trajectory_publisher.REFUSED, output
    assert 'current state: joint2 at -0.1 is outside its position limits [-0.05, 0.05]' \
        in output
    assert controller.goals == []


@pytest.mark.usefixtures('robot')                   # joint states, no controller
def test_no_controller_on_the_graph(start_node, ros, files):
    status, output = _run(start_node, ros, files['generic'], files['slow'],
                          '-p', 'wait_timeout:=3.0')
    assert status == trajectory_publisher.NO_CONTROLLER, output
    assert 'no control_msgs/action/FollowJointTrajectory action on the graph' in output


def test_pick_action_prefers_the_profiles_controller_in_any_namespace():
    scaled = '/ur/scaled_joint_trajectory_controller/follow_joint_trajectory'
    found = ['/ur/joint_trajectory_controller/follow_joint_trajectory', scaled]
    assert trajectory_action.pick_action(found, SCALED) == scaled
    assert trajectory_action.pick_action(found[:1], SCALED) == found[0]
    with pytest.raises(trajectory_action.ControllerChoiceError, match='none of'):
        trajectory_action.pick_action(found, 'panda_arm_controller')
    assert trajectory_action.action_name('/ur/arm/') == '/ur/arm/follow_joint_trajectory'


def test_move_duration_keeps_half_the_speed_and_acceleration_limits():
    # Peak speed 15/8 d / T and acceleration 10/sqrt(3) d / T^2 at half the limits.
    assert trajectory_action.move_duration([0.0], [2.0], [1.0], [np.inf]) == pytest.approx(7.5)
    assert trajectory_action.move_duration([0.0], [2.0], [10.0], [1.0]) == pytest.approx(
        np.sqrt(40 / np.sqrt(3)))
    assert trajectory_action.move_duration([0.0], [0.0], [1.0], [1.0]) == 1.0


def test_error_code_names():
    assert trajectory_action.error_code_name(-4) == 'PATH_TOLERANCE_VIOLATED'
    assert trajectory_action.error_code_name(7) == 'UNKNOWN'
