"""ROS 2 test set-up: loopback-only DDS, a domain per test session, rclpy helpers, and nodes
started as separate processes that are always stopped.

Every ROS 2 participant of these tests (this process and the nodes it starts) binds to
127.0.0.1 only (`config/fastdds_localhost.xml`, `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`) and
uses a domain derived from this process id, so parallel test runs (xdist workers, other
checkouts) do not see each other. These are set at import, before any rclpy context exists.
"""

import os
import pathlib

import pytest

from sysid_ros.ros import node_process

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ['FASTDDS_DEFAULT_PROFILES_FILE'] = str(REPO_ROOT / 'config' / 'fastdds_localhost.xml')
os.environ['ROS_DOMAIN_ID'] = str(100 + os.getpid() % 100)

try:
    from sysid_ros.ros.probe import ProbeNode
except ImportError:                             # no ROS 2 here: skip this folder
    collect_ignore_glob = ['test_*.py']
    ProbeNode = object


def ros_env(**extra) -> dict:
    """Environment for a node subprocess: the DDS isolation above, the source tree first on
    the path, unbuffered output."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', **extra)
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                      os.environ.get('PYTHONPATH')]))
    return env


class NodeProcess(node_process.NodeProcess):
    """A node started with `python -m MODULE --ros-args ...` in the test environment above;
    output goes to a log file."""

    def __init__(self, module: str, ros_args, log_path: pathlib.Path):
        super().__init__(module, ros_args, log_path, env=ros_env(), cwd=REPO_ROOT)


@pytest.fixture(scope='module')
def start_node(tmp_path_factory):
    """A function `(module, *ros_args) -> NodeProcess` that starts a node process; every
    process is killed at the end of the module, whatever happened."""
    started = []

    def start(module, *ros_args):
        log = tmp_path_factory.mktemp('node') / f'{module.rsplit(".", 1)[-1]}.log'
        process = NodeProcess(module, list(ros_args), log)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


class RosHelper(ProbeNode):
    """The test process's node (`ProbeNode`, its own context), with a service call helper."""

    def __init__(self):
        super().__init__('sysid_test_probe')

    def call(self, srv_type, name: str, request, timeout: float = 10.0):
        """Call a service; returns the response (fails the test on a timeout)."""
        client = self.node.create_client(srv_type, name)
        try:
            assert client.wait_for_service(timeout_sec=timeout), f'no service {name}'
            future = client.call_async(request)
            assert self.spin_until(future.done, timeout), f'{name}: no response'
            return future.result()
        finally:
            self.node.destroy_client(client)


@pytest.fixture(scope='module')
def ros():
    """A `RosHelper` for the module: node, executor, spin and call helpers."""
    helper = RosHelper()
    yield helper
    helper.close()
