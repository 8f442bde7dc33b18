"""The push gate (`ros.parameter_push.held_reason`), `ParameterPush` between two rclpy nodes
(the threshold `online.push_max_std` holds a wide posterior back, as do a moving estimate and a
mean on its bounds; a narrow one is taken by the controller, which is read first for the value
replaced), and `sysid fit`'s controller parameters file loaded by a real rclpy node with
`--params-file` (the live node's pushes over DDS are tested in test_estimator.py)."""

import math
import time

import numpy as np
import pytest
import rclpy
from rclpy.context import Context
import yaml

from sysid_ros import cli
from sysid_ros.io import results
from sysid_ros.ros.parameter_push import held_reason, ParameterPush

MAX_STD = np.array([0.075, 0.025])              # [kg, N m s/rad]


def test_the_gate_holds_back_paused_diverged_moving_wide_and_bounded_posteriors():
    narrow = np.array([0.01, 0.02])
    bounds = [(0.5, 2.0), (0.0, 1.0)]
    inside = np.array([1.2, 0.1])
    assert held_reason(narrow, MAX_STD, diverged=False, paused=False) is None
    assert held_reason(narrow, MAX_STD, False, False, True, inside, bounds) is None
    assert held_reason(narrow, MAX_STD, diverged=False, paused=True) == 'paused'
    assert held_reason(narrow, MAX_STD, diverged=True, paused=False) == 'diverged'
    assert held_reason(narrow, MAX_STD, False, False, steady=False) == 'unconverged'
    # Every pushed parameter must pass: one wide (or at the threshold, or NaN) holds it back.
    for std in ([0.01, 0.03], [0.075, 0.0], [math.nan, 0.0]):
        assert held_reason(np.array(std), MAX_STD, diverged=False, paused=False) == 'uncertain'
    # A mean outside its bounds, on one (within 1 % of the width) or NaN is never pushed.
    for mean in ([2.5, 0.1], [1.2, 0.005], [1.2, 0.996], [math.nan, 0.1]):
        assert held_reason(narrow, MAX_STD, False, False, True, np.array(mean),
                           bounds) == 'outside'


def test_a_posterior_wider_than_the_threshold_is_held_back_and_a_narrow_one_is_taken(ros):
    """`online.push_max_std` is a fraction of each pushed parameter's bounds width: at or
    above it nothing is sent (counted as held back, 'uncertain'), below it the controller
    takes the mean. Parameters that are not pushed do not count."""
    controller = rclpy.create_node('sysid_test_controller', context=ros.context)
    controller.declare_parameter('payload_mass', 0.0)
    ros.executor.add_node(controller)
    push = ParameterPush(ros.node, '/sysid_test_controller', {'link2.mass': 'payload_mass'},
                         ['link1.mass', 'link2.mass'],
                         {'link1.mass': (0.5, 2.0), 'link2.mass': (0.5, 2.0)},
                         max_std=0.01, rate=100.0)
    try:
        assert ros.spin_until(push.client.service_is_ready, 10.0)
        mean = np.array([1.0, 1.2])                         # [kg]
        threshold = 0.01 * 1.5                              # [kg], of the bounds width
        for std in (threshold, 2.0 * threshold):           # link1's std is not pushed
            assert not push.offer(mean, np.array([5.0, std]), diverged=False)
        _, message, values = push.status()
        assert (values['held.uncertain'], values['sent'], message) == \
            (2, 0, 'held back: uncertain')
        narrow = np.array([5.0, 0.9 * threshold])
        assert not push.offer(mean, narrow, diverged=False, steady=False)
        assert not push.offer(np.array([1.0, 2.0]), narrow, diverged=False)    # on its bound
        _, message, values = push.status()
        assert (values['held.unconverged'], values['held.outside'], values['sent']) == \
            (1, 1, 0)
        assert push.offer(mean, narrow, diverged=False)
        assert ros.spin_until(lambda: push.status()[2]['accepted'] == 1, 10.0)
        assert controller.get_parameter('payload_mass').value == 1.2
        assert push.last_replaced == {'payload_mass': 0.0}
        time.sleep(0.02)                                    # past the rate limit
        assert push.offer(mean + 0.1, narrow, diverged=False)
        assert ros.spin_until(lambda: push.status()[2]['accepted'] == 2, 10.0)
        assert push.last_replaced == {'payload_mass': 1.2}
        assert controller.get_parameter('payload_mass').value == pytest.approx(1.3)
    finally:
        push.destroy(ros.node)
        ros.executor.remove_node(controller)
        controller.destroy_node()


def test_fit_writes_the_push_mapping_as_a_params_file_a_controller_loads(tmp_path):
    config = tmp_path / 'dp.yaml'
    config.write_text(yaml.safe_dump({'/**': {'ros__parameters': {
        'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
                  'joints': ['joint1', 'joint2'], 'actuator': 'viscous'},
        'parameters': {'link2': {'mass': {'min': 0.1, 'max': 5.0, 'init': 0.7}},
                       'joint2': {'damping': {'min': 0.0, 'max': 1.0, 'init': 0.04}}},
        'data': {'rate': 200.0},
        'estimator': {'method': 'nea'},
        'online': {'push_node': 'arm_controller',
                   'push_parameters': {'link2': {'mass': 'payload.mass'},
                                       'joint2': {'damping': 'damping'}}},
    }}}))
    data, out = tmp_path / 'run.npz', tmp_path / 'fit'
    assert cli.main(['simulate', '--config', str(config), '--out', str(data),
                     '--duration', '3', '--noise', '0.001', '--seed', '1']) == 0
    assert cli.main(['fit', '--config', str(config), '--data', str(data),
                     '--out', str(out)]) == 0
    estimate = results.read_estimate(out)['parameters']

    context = Context()
    rclpy.init(context=context, args=['--ros-args', '--params-file',
                                      str(out / results.CONTROLLER_FILE)])
    try:
        controller = rclpy.create_node('arm_controller', context=context)
        controller.declare_parameter('payload.mass', 0.0)
        controller.declare_parameter('damping', 0.0)
        assert controller.get_parameter('payload.mass').value == estimate['link2.mass']['mean']
        assert controller.get_parameter('damping').value == estimate['joint2.damping']['mean']
        controller.destroy_node()
    finally:
        rclpy.shutdown(context=context)
