"""The push gate (`ros.parameter_push.held_reason`), and `sysid fit`'s controller parameters
file loaded by a real rclpy node with `--params-file` (the live pushes over DDS are tested in
test_estimator.py)."""

import math

import numpy as np
import rclpy
from rclpy.context import Context
import yaml

from sysid_ros import cli
from sysid_ros.io import results
from sysid_ros.ros.parameter_push import held_reason

MAX_STD = np.array([0.075, 0.025])              # [kg, N m s/rad]


def test_the_gate_holds_back_paused_diverged_and_wide_posteriors():
    narrow = np.array([0.01, 0.02])
    assert held_reason(narrow, MAX_STD, diverged=False, paused=False) is None
    assert held_reason(narrow, MAX_STD, diverged=False, paused=True) == 'paused'
    assert held_reason(narrow, MAX_STD, diverged=True, paused=False) == 'diverged'
    # Every pushed parameter must pass: one wide (or at the threshold, or NaN) holds it back.
    for std in ([0.01, 0.03], [0.075, 0.0], [math.nan, 0.0]):
        assert held_reason(np.array(std), MAX_STD, diverged=False, paused=False) == 'uncertain'


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
