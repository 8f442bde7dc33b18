r"""`trajectory_publisher`: sends a designed trajectory (`sysid excite`'s trajectory.yaml) to a
`joint_trajectory_controller`, after checking it against the robot's limits.

    ros2 run sysid_ros trajectory_publisher --ros-args -p config:=config/panda.yaml \
        -p trajectory:=excite/trajectory.yaml -p dry_run:=true

Before anything moves, every point is checked (`io.excitation.limit_violations`) against the
limits `sysid excite` designs with: the URDF's (or the configuration's `excitation` section's)
position range less `excitation.position_margin`, speed, acceleration and effort, the effort
through the configured model at its design point (friction included). A violation is logged,
one line per joint and limit, and nothing is published (exit status 1). With `dry_run` only
the check runs (exit 0 if it passes). Otherwise the node waits up to `wait_timeout` for
`subscribers` subscribers on `topic` (reliable, volatile: what a joint_trajectory_controller's
`~/joint_trajectory` subscription offers), publishes the trajectory once as a
trajectory_msgs/JointTrajectory stamped 0 (the controller starts it on arrival) with
positions, velocities and accelerations, and exits (status 3, nothing published, if fewer
subscribers came).

Parameters (`PARAMETERS`) are read once, at start; the topic is `TRAJECTORY`.
"""

from __future__ import annotations

import sys
import time

import jax
from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from trajectory_msgs.msg import JointTrajectory

from sysid_ros.io import excitation
from sysid_ros.io.errors import InputError
from sysid_ros.io.problem import build_problem
from sysid_ros.ros import messages
from sysid_ros.ros.interfaces import create, Endpoint, NodeParameter, PUBLISHER

__all__ = ['NODE_NAME', 'ENDPOINTS', 'PARAMETERS', 'TrajectoryPublisher', 'main', 'REFUSED',
           'NO_SUBSCRIBER']

NODE_NAME = 'trajectory_publisher'
REFUSED = 1                 # exit status: a limit is violated, nothing was published
NO_SUBSCRIBER = 3           # exit status: too few subscribers within wait_timeout

PARAMETERS = (
    NodeParameter('config', '', 'problem configuration YAML (robot, limits, actuator); '
                  'required'),
    NodeParameter('trajectory', '', 'JointTrajectory YAML to check and publish; required'),
    NodeParameter('prior', '', 'estimate.yaml whose means are the design point of the effort '
                  "check, as sysid excite --prior (empty: the configuration's)"),
    NodeParameter('topic', '/joint_trajectory_controller/joint_trajectory',
                  'trajectory_msgs/JointTrajectory topic of the controller'),
    NodeParameter('dry_run', False, 'check the limits only, publish nothing'),
    NodeParameter('subscribers', 1, 'subscribers to wait for before publishing (e.g. the '
                  'controller and a recorder)'),
    NodeParameter('wait_timeout', 10.0, 'longest wait for the subscribers [s]'),
)
TRAJECTORY = Endpoint(
    '{topic}', JointTrajectory, PUBLISHER,
    'the trajectory, once, stamped 0 (the controller starts it on arrival), with positions, '
    'velocities and accelerations; reliable, volatile, as a joint_trajectory_controller '
    'subscribes', QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE))
ENDPOINTS = (TRAJECTORY,)


class TrajectoryPublisher(Node):
    """Checks a trajectory file against the limits and publishes it once (module doc)."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        for name, default, description, _ in PARAMETERS:
            self.declare_parameter(name, default, ParameterDescriptor(
                description=description, read_only=True))
        value = {p.name: self.get_parameter(p.name).value for p in PARAMETERS}
        for name in ('config', 'trajectory'):
            if not value[name]:
                raise InputError(f'parameter {name}: expected a file (-p {name}:=PATH)')
        self._problem = build_problem(value['config'])
        self._trajectory = excitation.load_joint_trajectory(value['trajectory'])
        self._prior = value['prior'] or None
        self._topic = value['topic']
        self._dry_run = bool(value['dry_run'])
        self._subscribers = int(value['subscribers'])
        self._wait_timeout = float(value['wait_timeout'])
        self._source = value['trajectory']

    def run(self) -> int:
        """Check, then publish unless refused or dry; returns the exit status."""
        log = self.get_logger()
        violations = excitation.limit_violations(self._problem, self._trajectory, self._prior)
        traj = self._trajectory
        if violations:
            for line in violations:
                log.error(f'{self._source}: {line}')
            log.error(f'{self._source}: refused: {len(violations)} limit violation(s); '
                      'nothing published')
            return REFUSED
        log.info(f'{self._source}: {len(traj.t)} points, {traj.t[-1] - traj.t[0]:.2f} s, '
                 f'within every limit')
        if self._dry_run:
            log.info('dry run: nothing published')
            return 0
        publisher = create(self, TRAJECTORY, topic=self._topic)
        deadline = time.monotonic() + self._wait_timeout
        while publisher.get_subscription_count() < self._subscribers:
            if time.monotonic() > deadline:
                log.error(f'{publisher.get_subscription_count()} of {self._subscribers} '
                          f'subscriber(s) on {self._topic} after {self._wait_timeout:g} s; '
                          'nothing published')
                return NO_SUBSCRIBER
            rclpy.spin_once(self, timeout_sec=0.05)
        publisher.publish(messages.arrays_to_trajectory(traj.t - traj.t[0], traj.joint_names,
                                                        traj.q, traj.qd, traj.qdd))
        rclpy.spin_once(self, timeout_sec=0.5)            # let the message go out
        log.info(f'published to {self._topic}')
        return 0


def main(args=None) -> int:
    """Run the check (and the publication); exit status 0, REFUSED, NO_SUBSCRIBER or 2 for
    bad parameters or files."""
    jax.config.update('jax_enable_x64', True)
    code = 0
    try:
        with rclpy.init(args=args):
            node = TrajectoryPublisher()
            try:
                code = node.run()
            finally:
                node.destroy_node()
    except InputError as exc:
        print(f'trajectory_publisher: error: {exc}', file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == '__main__':
    sys.exit(main())
