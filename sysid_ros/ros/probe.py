"""A node inside a program that is not a node (the live demo, benchmarks, tests).

`ProbeNode` owns its own rclpy context (no signal handlers: Ctrl-C stays with the program),
one node and a single-threaded executor that the program spins when it wants, e.g. while
waiting for a condition on what its subscriptions received.
"""

from __future__ import annotations

import time
from typing import Callable

import rclpy
import rclpy.executors
import rclpy.signals

__all__ = ['ProbeNode']

# Longest single wait of the executor while spinning [s].
SPIN_TICK = 0.02


class ProbeNode:
    """`node` in a private `context`, spun on demand by `executor`."""

    def __init__(self, name: str):
        self.context = rclpy.Context()
        rclpy.init(context=self.context,
                   signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def spin_until(self, predicate: Callable[[], object], timeout: float) -> bool:
        """Spin until `predicate()` is true or `timeout` seconds pass; returns predicate()."""
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=SPIN_TICK)
        return bool(predicate())

    def spin_for(self, duration: float) -> None:
        """Spin for `duration` seconds."""
        self.spin_until(lambda: False, duration)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
