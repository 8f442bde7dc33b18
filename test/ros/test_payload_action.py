"""identify_payload and restore_payload over loopback DDS, against stand-in robots serving the
real franka_msgs/srv/SetLoad and ur_msgs/srv/SetPayload (built from the vendors' definitions,
interfaces/upstream/) and a stand-in trajectory controller (control_msgs FollowJointTrajectory)
for the goal's excite. The posterior windows are fed to the action as the estimator's worker
feeds them."""

import dataclasses
import threading
import time

from franka_msgs.srv import SetLoad
import numpy as np
import pytest
import rclpy
from rclpy.action import ActionClient
from rclpy.executors import MultiThreadedExecutor
from stand_in_controller import StandInController
from std_srvs.srv import Trigger
from sysid_ros_interfaces.action import IdentifyPayload
from ur_msgs.srv import SetPayload
import yaml

from sysid_ros.core.model.parameters import Payload
from sysid_ros.io import drivers, excitation, model_io, pipeline
from sysid_ros.io.config import from_dict
from sysid_ros.io.payload_handoff import frame_offset, HeldPayload
from sysid_ros.ros.payload_action import handed_payload, payload_request, PayloadAction

NAMES = ('payload.mass', 'payload.com.x', 'payload.com.y', 'payload.com.z')
NOMINAL = Payload(body=0).nominal             # a point mass of no mass at the link's origin
BOUNDS = {'payload.mass': (0.0, 5.0), **{f'payload.com.{c}': (-0.3, 0.3) for c in 'xyz'}}
SETTINGS = {'payload_max_mass_std': 0.05, 'payload_max_com_std': 0.01, 'steady_windows': 3,
            'payload_timeout': 3.0, 'payload_service_timeout': 2.0,
            'payload_before': [0.5, 0.0, 0.0, 0.05]}
TRUTH = np.array([1.3, 0.01, -0.02, 0.15])      # in panda_link7
JOINTS = tuple(f'panda_joint{i}' for i in range(1, 8))
REST = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8])   # [rad] inside every limit


class StandInFranka:
    """franka_bringup's SetLoad server: records each request and the time.monotonic() of its
    arrival, answers `success`."""

    def __init__(self, node, success=True):
        self.requests, self.times, self.success = [], [], success
        node.create_service(SetLoad, '/service_server/set_load', self._serve)

    def _serve(self, request, response):
        self.requests.append(request)
        self.times.append(time.monotonic())
        response.success = self.success
        response.error = '' if self.success else 'robot in reflex mode'
        return response


@pytest.fixture(scope='module')
def flange_offset():
    panda = model_io.load_pinocchio(model_io.example_robot_urdf('panda')[0])
    return frame_offset(panda, 'panda_link7', 'panda_link8')


@pytest.fixture
def graph():
    """(estimator-side node, robot-side node), spun by two threads."""
    rclpy.init()
    node, robot = rclpy.create_node('estimator'), rclpy.create_node('franka')
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    executor.add_node(robot)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    yield node, robot
    executor.shutdown()
    node.destroy_node()
    robot.destroy_node()
    rclpy.shutdown()
    thread.join(timeout=2.0)


@pytest.fixture
def excite_action(graph, flange_offset, excitation_file):
    """A function `(excite: bool) -> PayloadAction` on the estimator node (`_action`, with
    the excitation file where `excite`); each call replaces (destroys) the one made before,
    and the last is destroyed after the test (its trajectory action client would stay on
    the graph)."""
    made = []

    def make(excite=True):
        if made:
            made.pop().destroy()
        made.append(_action(graph[0], flange_offset,
                            excite=excitation_file if excite else None))
        return made[-1]

    yield make
    if made:
        made.pop().destroy()


@pytest.fixture
def controller(graph):
    """A function `(mode, lead) -> StandInController` of the driver profile's trajectory
    controller on the robot node; each call replaces the one served before (a controller
    restarted in another mode). The last is destroyed after the test: a node's destruction
    leaves its action servers on the graph, where another test module of this process would
    find them."""
    served = []

    def serve(mode='succeed', lead=0.5):
        if served:
            served.pop().destroy()
        served.append(StandInController(
            graph[1], drivers.DRIVERS['franka'].trajectory_controller, mode=mode, lead=lead))
        return served[-1]

    yield serve
    if served:
        served.pop().destroy()


@pytest.fixture(scope='module')
def excitation_file(tmp_path_factory):
    """(the Panda's problem, a trajectory file): joint 1 swings 0.1 rad and back in 1 s from
    a point 0.05 rad from REST (the move comes first), at rest at both ends."""
    problem = pipeline.build_problem(from_dict({
        'model': {'urdf': 'example-robot-data:panda', 'joints': list(JOINTS),
                  'payload': {'link': 'panda_link7', 'mass': 0.0}},
        'parameters': {'payload': {'mass': {'min': 0.0, 'max': 5.0}}},
        'data': {'driver': 'franka'}}))
    t = np.linspace(0.0, 1.0, 101)
    w = 2 * np.pi
    q = np.tile(REST + [0.05, 0, 0, 0, 0, 0, 0], (len(t), 1))
    qd, qdd = np.zeros_like(q), np.zeros_like(q)
    q[:, 0] += 0.05 * (1 - np.cos(w * t))
    qd[:, 0], qdd[:, 0] = 0.05 * w * np.sin(w * t), 0.05 * w ** 2 * np.cos(w * t)
    path = tmp_path_factory.mktemp('excite') / 'trajectory.yaml'
    path.write_text(yaml.safe_dump(excitation.trajectory_dict(JOINTS, t, q, qd, qdd)))
    return problem, str(path)


def _action(node, offset, service='/service_server/set_load', excite=None):
    """The action of a Franka profile; with `excite` ((problem, trajectory file)), its goals
    may run that trajectory from REST."""
    profile = dataclasses.replace(drivers.DRIVERS['franka'], payload_frame='panda_link8',
                                  payload_service=service)
    if excite is None:
        return PayloadAction(node, profile, NAMES, BOUNDS, 'panda_link7', NOMINAL, offset,
                             SETTINGS)
    problem, path = excite
    settings = dict(SETTINGS, payload_excitation=path, payload_controller='')
    return PayloadAction(node, profile, NAMES, BOUNDS, 'panda_link7', NOMINAL, offset,
                         settings, problem, lambda: REST)


def _feed(action, std, windows=8, period=0.1):
    """Windows of a posterior around TRUTH with (4,) `std`, from a worker thread."""
    def run():
        rng = np.random.default_rng(0)
        for index in range(windows):
            mean = TRUTH + 0.1 * std * rng.standard_normal(4)
            action.offer(index, mean, std, steady=index >= 2)
            time.sleep(period)
    threading.Thread(target=run, daemon=True).start()


def _wait(future, timeout=10.0):
    end = time.monotonic() + timeout
    while not future.done():
        assert time.monotonic() < end, 'timed out'
        time.sleep(0.02)
    return future.result()


def _run_goal(node, apply=True, timeout=0.0, load_change=IdentifyPayload.Goal.UNKNOWN,
              excite=False):
    client = ActionClient(node, IdentifyPayload, '/estimator/identify_payload')
    assert client.wait_for_server(timeout_sec=5.0)
    feedback = []
    handle = _wait(client.send_goal_async(IdentifyPayload.Goal(apply=apply, timeout=timeout,
                                                               load_change=load_change,
                                                               excite=excite),
                                          feedback_callback=feedback.append))
    assert handle.accepted
    return _wait(handle.get_result_async(), timeout=30.0).result, feedback


def test_identifies_applies_and_restores_the_payload(graph, flange_offset):
    node, robot = graph
    franka = StandInFranka(robot)
    action = _action(node, flange_offset)
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]))
    result, feedback = _run_goal(node)
    assert result.success and result.applied, result.message
    assert feedback and feedback[-1].feedback.stage == 'estimate'
    (request,) = franka.requests
    # In the flange frame, 0.107 m further along link 7's z axis.
    assert request.mass == pytest.approx(TRUTH[0], abs=0.01)
    np.testing.assert_allclose(request.center_of_mass, TRUTH[1:] - [0, 0, 0.107], atol=0.002)
    np.testing.assert_allclose(request.load_inertia, np.zeros(9))
    assert result.mass == pytest.approx(request.mass)
    restore = node.create_client(Trigger, '/estimator/restore_payload')
    assert restore.wait_for_service(timeout_sec=5.0)
    response = _wait(restore.call_async(Trigger.Request()))
    assert response.success, response.message
    assert franka.requests[-1].mass == 0.5
    np.testing.assert_allclose(franka.requests[-1].center_of_mass, [0.0, 0.0, 0.05])


def test_estimate_only_sends_nothing(graph, flange_offset):
    node, robot = graph
    franka = StandInFranka(robot)
    action = _action(node, flange_offset)
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]))
    result, _ = _run_goal(node, apply=False)
    assert result.success and not result.applied
    assert franka.requests == []


def test_an_uncertain_estimate_is_not_applied(graph, flange_offset):
    node, robot = graph
    franka = StandInFranka(robot)
    action = _action(node, flange_offset)
    _feed(action, np.array([0.2, 0.002, 0.002, 0.003]), windows=20)
    result, _ = _run_goal(node, timeout=1.0)
    assert not result.success and not result.applied
    assert 'mass std 0.2 kg is above 0.05 kg' in result.message
    assert franka.requests == []


def test_a_load_change_of_the_wrong_sign_is_not_applied(graph, flange_offset):
    node, robot = graph
    franka = StandInFranka(robot)
    action = _action(node, flange_offset)
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]), windows=20)
    result, _ = _run_goal(node, timeout=1.0, load_change=IdentifyPayload.Goal.PUT_DOWN)
    assert not result.success and not result.applied
    assert "not below the current load's 0.5 kg" in result.message
    assert franka.requests == []
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]))
    result, _ = _run_goal(node, load_change=IdentifyPayload.Goal.PICKED_UP)
    assert result.applied and len(franka.requests) == 1


def test_excite_runs_the_trajectory_first_and_applies_after_it(graph, excite_action,
                                                               controller):
    node, robot = graph
    franka = StandInFranka(robot)
    stand_in = controller()
    action = excite_action()
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]), windows=60)
    result, feedback = _run_goal(node, excite=True)
    assert result.applied, result.message
    assert feedback[0].feedback.stage == 'excite'
    goal, = stand_in.goals
    first = goal.trajectory.points[0]
    np.testing.assert_allclose(first.positions, REST)     # the move starts where it rests
    assert len(franka.requests) == 1 and franka.times[0] > stand_in.succeeded_at


def test_excite_that_fails_or_is_not_configured_applies_nothing(graph, excite_action,
                                                                controller):
    node, robot = graph
    franka = StandInFranka(robot)
    excite_action(excite=False)
    result, _ = _run_goal(node, excite=True)
    assert not result.success
    assert result.message == 'excite: no payload_excitation trajectory is configured'
    controller(mode='abort', lead=0.2)
    action = excite_action()
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]), windows=60)
    result, _ = _run_goal(node, excite=True)
    assert not result.applied
    assert result.message.startswith('excite: goal aborted: error_code')
    assert 'PATH_TOLERANCE_VIOLATED' in result.message and 'nothing applied' in result.message
    controller(mode='reject')
    excite_action()
    result, _ = _run_goal(node, excite=True)
    assert not result.success and 'goal rejected' in result.message
    assert franka.requests == []


def test_a_missing_service_or_a_refusal_applies_nothing(graph, flange_offset):
    node, robot = graph
    action = _action(node, flange_offset, service='/no_robot/set_load')
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]))
    result, _ = _run_goal(node)
    assert not result.applied and 'is not available' in result.message
    action.destroy()
    StandInFranka(robot, success=False)
    action = _action(node, flange_offset)
    _feed(action, np.array([0.01, 0.002, 0.002, 0.003]))
    result, _ = _run_goal(node)
    assert not result.applied and 'refused the payload: robot in reflex mode' in result.message


def test_requests_of_both_robots():
    payload = HeldPayload('tool0', 1.5, 0.0, np.array([0.01, 0.02, 0.03]), np.zeros(3),
                          np.array([[1.0, 0.1, 0.2], [0.1, 2.0, 0.3], [0.2, 0.3, 3.0]]))
    load = payload_request(SetLoad, payload)
    assert load.mass == 1.5
    np.testing.assert_array_equal(load.load_inertia, [1, 0.1, 0.2, 0.1, 2, 0.3, 0.2, 0.3, 3])
    ur = payload_request(SetPayload, payload)
    assert ur.mass == 1.5
    assert (ur.center_of_gravity.x, ur.center_of_gravity.y, ur.center_of_gravity.z) == \
        pytest.approx((0.01, 0.02, 0.03))
    for request in (load, ur):                          # what the stand-ins read back
        mass, com = handed_payload(request)
        assert mass == 1.5
        np.testing.assert_allclose(com, payload.com, rtol=1e-6)
    with pytest.raises(TypeError, match='no payload layout'):
        payload_request(Trigger, payload)
    with pytest.raises(TypeError, match='no payload layout'):
        handed_payload(Trigger.Request())
