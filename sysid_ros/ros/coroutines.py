"""Waiting inside a coroutine callback (an async service or action callback) without blocking
the executor that runs it."""

from __future__ import annotations

from rclpy.callback_groups import CallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.task import Future

__all__ = ['sleep']

_STEADY = Clock(clock_type=ClockType.STEADY_TIME)


async def sleep(node: Node, seconds: float, callback_group: CallbackGroup) -> None:
    """Yield to the executor for `seconds` of steady (wall) time.

    Args:
      node: the node whose executor runs the coroutine.
      seconds: how long [s].
      callback_group: a reentrant group that the waiting callback's own group lets run beside
        it (the timer that ends the wait is in it).
    """
    done = Future()

    def wake():
        if not done.done():
            done.set_result(None)

    timer = node.create_timer(seconds, wake, callback_group=callback_group, clock=_STEADY)
    try:
        await done
    finally:
        node.destroy_timer(timer)
