"""The live demo: a simulated robot (`sim_robot`) and the `estimator` identifying it.

    ros2 launch sysid_ros demo.launch.py
    ros2 launch sysid_ros demo.launch.py config:=/path/to/problem.yaml

Both nodes read the same problem file; `sim_robot` perturbs the nominal model into a hidden
ground truth that it publishes on `sim_robot/ground_truth` for scoring.
The estimator is a managed node, configured and then activated by this launch.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from sysid_ros.ros import lifecycle_launch

PACKAGE = 'sysid_ros'


def generate_launch_description():
    config = LaunchConfiguration('config')
    default_config = os.path.join(
        get_package_share_directory(PACKAGE), 'config', 'double_pendulum_live.yaml')
    estimator = LifecycleNode(
        package=PACKAGE, executable='estimator', name='estimator',
        namespace=LaunchConfiguration('namespace'), output='screen',
        parameters=[config, {'config': config, 'autostart': False}])
    return LaunchDescription([
        DeclareLaunchArgument(
            'config', default_value=default_config,
            description='Problem configuration shared by the simulated robot and the estimator.'),
        Node(
            package=PACKAGE, executable='sim_robot', name='sim_robot', output='screen',
            parameters=[{'config': config}]),
        DeclareLaunchArgument(
            'namespace', default_value='sysid',
            description='Namespace of the estimator and its topics.'),
        estimator,
        *lifecycle_launch.configure_then_activate(estimator),
    ])
