"""Identify from a recorded bag played back in (simulated) time: `bag_player` + `estimator`.

    ros2 launch sysid_ros replay.launch.py bag:=/path/to/bag
    ros2 launch sysid_ros replay.launch.py bag:=/path/to/bag config:=/path/to/problem.yaml

`bag_player` publishes the bag's topics and /clock, and the estimator runs on sim time, so a
replay behaves like the live robot; a bag restarted (time jumping back) clears the window.
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
        parameters=[config, {'config': config, 'autostart': False, 'use_sim_time': True}])
    return LaunchDescription([
        DeclareLaunchArgument(
            'bag', description='rosbag2 folder (sqlite3 or mcap) to play.'),
        DeclareLaunchArgument(
            'config', default_value=default_config,
            description='Problem configuration (YAML; also a ROS 2 parameters file).'),
        DeclareLaunchArgument(
            'rate', default_value='1.0', description='Playback speed (1.0: real time).'),
        Node(
            package=PACKAGE, executable='bag_player', name='bag_player', output='screen',
            parameters=[{'bag': LaunchConfiguration('bag'),
                         'rate': LaunchConfiguration('rate')}]),
        DeclareLaunchArgument(
            'namespace', default_value='sysid',
            description='Namespace of the estimator and its topics.'),
        estimator,
        *lifecycle_launch.configure_then_activate(estimator),
    ])
