"""Read the `estimator` node's `~/estimate` in a controller written in Python.

    client = EstimateClient(node, callback=print)     # DEFAULT_TOPIC, as the launch files run it
    ...
    client.latest()   # {'link2.mass': (mean, std), ...} or None before the first estimate

The estimate is a sensor_msgs/JointState (see `ros.estimator`): `name` = the parameter names,
`position` = the posterior means, `velocity` = the standard deviations. It is latched, and
so is this subscription: a client that starts late receives the latest estimate at once.
"""

from __future__ import annotations

import threading
from typing import Callable

from rclpy.node import Node
from sensor_msgs.msg import JointState

from sysid_ros.ros import qos

__all__ = ['DEFAULT_TOPIC', 'EstimateFormatError', 'decode_estimate', 'EstimateClient']

# The estimate topic of the estimator as the launch files and `sysid demo` start it (node
# `estimator` in namespace `sysid`).
DEFAULT_TOPIC = '/sysid/estimator/estimate'


class EstimateFormatError(ValueError):
    """A message that is not an estimator estimate."""


def decode_estimate(msg: JointState) -> dict[str, tuple[float, float]]:
    """JointState estimate -> {name: (mean, std)} [physical units].

    Raises:
      EstimateFormatError: positions or velocities that are not one per name.
    """
    names = list(msg.name)
    if len(msg.position) != len(names) or len(msg.velocity) != len(names):
        raise EstimateFormatError(f'expected a mean (position) and a std (velocity) per name, '
                                  f'got {len(names)} names, {len(msg.position)} positions and '
                                  f'{len(msg.velocity)} velocities')
    return {name: (float(mean), float(std))
            for name, mean, std in zip(names, msg.position, msg.velocity)}


class EstimateClient:
    """Subscribes to an estimate topic and keeps the latest decoded estimate.

    Args:
      node: the node that owns the subscription (spun by the caller).
      topic: the estimator's estimate topic.
      callback: called with each decoded {name: (mean, std)} (in the executor's thread).
    """

    def __init__(self, node: Node, topic: str = DEFAULT_TOPIC,
                 callback: Callable[[dict], None] | None = None):
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[float, float]] | None = None
        self._callback = callback
        self.received = 0
        self.malformed = 0
        self.subscription = node.create_subscription(JointState, topic, self._on_message,
                                                     qos.LATCHED)

    def _on_message(self, msg: JointState) -> None:
        try:
            estimate = decode_estimate(msg)
        except EstimateFormatError:
            self.malformed += 1
            return
        with self._lock:
            self._latest = estimate
            self.received += 1
        if self._callback is not None:
            self._callback(estimate)

    def latest(self) -> dict[str, tuple[float, float]] | None:
        """The latest {name: (mean, std)}, or None before the first estimate."""
        with self._lock:
            return None if self._latest is None else dict(self._latest)
