"""Driver profiles: what a robot driver's ROS graph means to the estimator (`data.driver`).

A profile is data, read where the configuration is validated and where measured efforts
become joint torques; no node branches on the driver's name. It says

  * which joint-state stream to read: the driver's full-rate one, stamped at measurement,
    not a republish of it (`republished_topics`, which the configuration refuses);
  * what that stream's effort is: joint torque [N m], or motor current [A], which needs
    per-joint gains [N m / A] (`data.torque_gains`) before it is a joint torque;
  * where a payload goes: the frame the robot expects its centre of mass in, and the
    service that sets it;
  * which joint_trajectory_controller runs the arm (`ros.trajectory_publisher` prefers it
    where several FollowJointTrajectory actions are offered).

Profiles (the facts are the drivers' own documentation and launch files):

  * `generic`: `/joint_states`, efforts are joint torques; `joint_trajectory_controller`.
  * `franka` (franka_ros2): `/franka/joint_states` from the robot's 1 kHz state, effort =
    measured joint torque tau_J [N m]; franka_bringup's `/joint_states` is
    `joint_state_publisher` republishing at 30 Hz stamped on receipt. Payload: the
    flange frame (`<arm_id>_link8`), `franka_msgs/srv/SetLoad` on `/service_server/set_load`
    (mass [kg], centre of mass [m], inertia [kg m^2], column-major). `sysid fit` also writes
    franka_description's `inertials.yaml` (`description_files`). Trajectories:
    `panda_arm_controller`, the joint_trajectory_controller that franka_moveit_config's
    `moveit.launch.py` spawns.
  * `ur` (Universal_Robots_ROS2_Driver): `/joint_states` from the joint_state_broadcaster at
    the controller rate (500 Hz on e-series), effort = motor current [A]. The current to
    torque gain (torque constant x gear ratio) is not published by the driver: take it from
    Universal Robots' data for the arm, or calibrate it with a known load, and set
    `data.torque_gains`. Payload: the tool flange frame `tool0`, `ur_msgs/srv/SetPayload` on
    `/io_and_status_controller/set_payload` (mass [kg], centre of gravity [m]). `sysid fit`
    also writes ur_description's `physical_parameters.yaml` (`description_files`).
    Trajectories: `scaled_joint_trajectory_controller`, the one the driver's launch
    activates (a plain joint_trajectory_controller is loaded inactive beside it).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from sysid_ros.io.config_schema import one_or_each

__all__ = ['TORQUE', 'CURRENT', 'DriverProfile', 'DRIVERS', 'torque_gains', 'joint_torques']

TORQUE = 'torque'               # efforts are joint torques [N m] (forces [N])
CURRENT = 'current'             # efforts are motor currents [A]


@dataclasses.dataclass(frozen=True)
class DriverProfile:
    """What one driver publishes and expects.

    Attributes:
      name: the `data.driver` value.
      joint_states_topic: the full-rate sensor_msgs/JointState stream, stamped at
        measurement (the default of `data.joint_states_topic`).
      effort: TORQUE or CURRENT: what that stream's effort field holds.
      republished_topics: topics that carry the same joints at a lower rate, restamped;
        reading them interpolates between samples that were never measured.
      payload_frame: the frame a payload's centre of mass and inertia are given in, after
        `model.prefix`; a shell pattern matches the one frame of the model it fits.
      payload_service: the service that hands a payload to the robot ('' : none).
      payload_service_type: its type, `package/srv/Name` ('' : none).
      description_file: the description package's file that `sysid fit` writes the
        identified values into, a key of `description_files.WRITERS` ('': none).
      trajectory_controller: the controller whose `follow_joint_trajectory` action moves
        the arm.
    """

    name: str
    joint_states_topic: str
    effort: str
    republished_topics: tuple[str, ...] = ()
    payload_frame: str = ''
    payload_service: str = ''
    payload_service_type: str = ''
    description_file: str = ''
    trajectory_controller: str = 'joint_trajectory_controller'


DRIVERS: Mapping[str, DriverProfile] = {
    'generic': DriverProfile('generic', '/joint_states', TORQUE),
    'franka': DriverProfile(
        'franka', '/franka/joint_states', TORQUE, republished_topics=('/joint_states',),
        payload_frame='*_link8', payload_service='/service_server/set_load',
        payload_service_type='franka_msgs/srv/SetLoad', description_file='franka_inertials',
        trajectory_controller='panda_arm_controller'),
    'ur': DriverProfile(
        'ur', '/joint_states', CURRENT, payload_frame='tool0',
        payload_service='/io_and_status_controller/set_payload',
        payload_service_type='ur_msgs/srv/SetPayload',
        description_file='ur_physical_parameters',
        trajectory_controller='scaled_joint_trajectory_controller'),
}


def torque_gains(gains, count: int, path: str | None = None) -> np.ndarray:
    """(count,) gains [N m (or N) per unit of effort] from `data.torque_gains` (one value
    stands for every joint; empty: 1, the efforts are torques).

    Raises:
      ConfigError: a list that has neither 1 nor `count` values (naming the file `path`).
    """
    given = one_or_each(tuple(gains), count, path, 'data.torque_gains', 'one per joint')
    return np.ones(count) if given is None else given


def joint_torques(efforts: np.ndarray, data) -> np.ndarray:
    """(T, nv) joint torques [N m, N] from measured efforts (T, nv) in model joint order:
    each joint's effort times its `data.torque_gains` entry (`data`: a DataConfig)."""
    efforts = np.asarray(efforts, dtype=float)
    if not data.torque_gains:
        return efforts
    return efforts * torque_gains(data.torque_gains, efforts.shape[-1])
