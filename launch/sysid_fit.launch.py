"""Identify parameters offline: run `sysid fit` on a recorded bag.

    ros2 launch sysid_ros sysid_fit.launch.py bag:=/path/to/bag out:=/tmp/sysid_out
    ros2 launch sysid_ros sysid_fit.launch.py config:=/path/to/problem.yaml bag:=...

The recording goes to `sysid fit --bag` (rosbag2 folder, sqlite3 or mcap, or a ROS 1 .bag),
which cuts it into trajectories as the configuration's `data` section says.
"""

import os

from ament_index_python.packages import get_package_prefix
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.actions import ExecuteProcess
from launch.substitutions import LaunchConfiguration

PACKAGE = 'sysid_ros'


def generate_launch_description():
    default_config = os.path.join(
        get_package_share_directory(PACKAGE), 'config', 'double_pendulum.yaml')
    # ament_python installs console scripts into <prefix>/lib/<package> (see setup.cfg).
    sysid_executable = os.path.join(get_package_prefix(PACKAGE), 'lib', PACKAGE, 'sysid')

    arguments = [
        DeclareLaunchArgument(
            'config', default_value=default_config,
            description='Problem configuration (YAML; also a ROS 2 parameters file).'),
        DeclareLaunchArgument(
            'bag',
            description='Recording to identify from: a rosbag2 directory or a ROS 1 bag file.'),
        DeclareLaunchArgument(
            'out', default_value='out',
            description='Directory for the posterior, plots and the updated URDF.'),
    ]
    fit = ExecuteProcess(
        name='sysid_fit',
        cmd=[
            sysid_executable, 'fit',
            '--config', LaunchConfiguration('config'),
            '--bag', LaunchConfiguration('bag'),
            '--out', LaunchConfiguration('out'),
        ],
        output='screen',
    )
    return LaunchDescription(arguments + [fit])
