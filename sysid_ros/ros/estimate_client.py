"""Decode the `estimator` node's `~/estimate` messages for controllers written in Python.

    client = EstimateClient(node, callback=print)     # DEFAULT_TOPIC, as the launch files run it
    ...
    client.latest()   # {'link2.mass': (mean, std), ...} or None before the first estimate

The message layout (std_msgs/Float64MultiArray, see `ros.estimator`): data = [means (M),
stds (M)]; layout.dim[0].label = 'mean,std' (size 2), layout.dim[1].label = the parameter
names joined by ',' (size M).
"""

from __future__ import annotations

import threading
from typing import Callable

from rclpy.node import Node
from std_msgs.msg import Float64MultiArray

__all__ = ['DEFAULT_TOPIC', 'EstimateFormatError', 'decode_estimate', 'EstimateClient']

# The estimate topic of the estimator as the launch files and `sysid demo` start it (node
# `estimator` in namespace `sysid`).
DEFAULT_TOPIC = '/sysid/estimator/estimate'


class EstimateFormatError(ValueError):
    """A message that is not an estimator estimate."""


def decode_estimate(msg: Float64MultiArray) -> dict[str, tuple[float, float]]:
    """Float64MultiArray estimate -> {name: (mean, std)} [physical units].

    Raises:
      EstimateFormatError: another layout or a data length that does not match it.
    """
    dims = msg.layout.dim
    if len(dims) != 2 or dims[0].label != 'mean,std' or dims[0].size != 2:
        raise EstimateFormatError(f'expected layout dims (mean,std: 2, names: M), got '
                                  f'{[(d.label, d.size) for d in dims]}')
    names = dims[1].label.split(',') if dims[1].label else []
    data = list(msg.data)[msg.layout.data_offset:]
    if len(names) != dims[1].size or len(data) != 2 * len(names):
        raise EstimateFormatError(f'expected {len(names)} names and {2 * len(names)} values, '
                                  f'got size {dims[1].size} and {len(data)} values')
    m = len(names)
    return {name: (float(data[i]), float(data[m + i])) for i, name in enumerate(names)}


class EstimateClient:
    """Subscribes to an estimate topic and keeps the latest decoded estimate.

    Args:
      node: the node that owns the subscription (spun by the caller).
      topic: the estimator's estimate topic.
      callback: called with each decoded {name: (mean, std)} (in the executor's thread).
      qos: subscription depth.
    """

    def __init__(self, node: Node, topic: str = DEFAULT_TOPIC,
                 callback: Callable[[dict], None] | None = None, qos: int = 10):
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[float, float]] | None = None
        self._callback = callback
        self.received = 0
        self.malformed = 0
        self.subscription = node.create_subscription(Float64MultiArray, topic,
                                                     self._on_message, qos)

    def _on_message(self, msg: Float64MultiArray) -> None:
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
