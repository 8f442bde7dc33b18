"""Run the `estimator` node beside a robot's existing drivers.

    ros2 launch sysid_ros sysid.launch.py config:=/path/to/problem.yaml
    ros2 launch sysid_ros sysid.launch.py namespace:=arm use_sim_time:=true

The configuration file is the problem description of the package (ARCHITECTURE.md); it is also
a ROS 2 parameters file, so it is passed to the node both as its parameters and as `config`.
Topic names come from the file and can be remapped as usual. The estimator is a managed node
(`autostart: false`): the launch asks it to configure (load and check the model, compile) and
then to activate; `ros2 lifecycle set /sysid/estimator deactivate` pauses it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.parameter_descriptions import ParameterValue

from sysid_ros.ros import lifecycle_launch

PACKAGE = 'sysid_ros'


def generate_launch_description():
    config = LaunchConfiguration('config')
    use_sim_time = ParameterValue(LaunchConfiguration('use_sim_time'), value_type=bool)
    default_config = os.path.join(
        get_package_share_directory(PACKAGE), 'config', 'double_pendulum_live.yaml')
    estimator = LifecycleNode(
        package=PACKAGE, executable='estimator', name='estimator',
        namespace=LaunchConfiguration('namespace'), output='screen',
        parameters=[config, {'config': config, 'autostart': False,
                             'use_sim_time': use_sim_time}])
    return LaunchDescription([
        DeclareLaunchArgument(
            'config', default_value=default_config,
            description='Problem configuration (YAML; also a ROS 2 parameters file).'),
        DeclareLaunchArgument(
            'namespace', default_value='sysid',
            description='Namespace of the estimator and its topics.'),
        DeclareLaunchArgument(
            'use_sim_time', default_value='false',
            description='Follow /clock (bag replay, simulators).'),
        estimator,
        *lifecycle_launch.configure_then_activate(estimator),
    ])
