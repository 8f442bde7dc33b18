"""The estimator's push of estimates into a controller's parameters (`online.push_*`).

A window's posterior mean is pushed only if it passes the gate (`held_reason`):
  * pushing is not paused (the estimator's `~/pause_push` service);
  * the window did not diverge (its posterior went back to the last good one);
  * every pushed parameter's posterior standard deviation is below `online.push_max_std`
    times the width of its configured bounds (a first, wide posterior is not pushed);
and then at most `online.push_rate` times a second, once the controller's service is up.
All of `online.push_parameters` go in one rcl_interfaces/srv/SetParametersAtomically
request to `<online.push_node>/set_parameters_atomically`, so the controller takes every
value or none. Each response is checked: a push is counted as sent, then accepted or rejected
(with the controller's reason); what the gate held back is counted by reason.
"""

from __future__ import annotations

import threading
import time
from typing import Mapping, Sequence

import numpy as np
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParametersAtomically
from rclpy.node import Node

from sysid_ros.io import results
from sysid_ros.ros.interfaces import CLIENT, create, Endpoint

__all__ = ['SET_PARAMETERS', 'HELD_REASONS', 'held_reason', 'ParameterPush']

SET_PARAMETERS = Endpoint(
    '{push_node}/set_parameters_atomically', SetParametersAtomically, CLIENT,
    'with online.push_node: the means of online.push_parameters (estimate name -> parameter '
    'name) in one request, at most online.push_rate times a second, from windows that pass '
    'the gate')

# Why a window's estimate was not pushed: paused by the service, diverged window, a pushed
# parameter's std at or above its threshold, the controller's service not (yet) up.
HELD_REASONS = ('paused', 'diverged', 'uncertain', 'unavailable')


def held_reason(std: np.ndarray, max_std: np.ndarray, diverged: bool,
                paused: bool) -> str | None:
    """Why the gate holds a push back (one of HELD_REASONS but 'unavailable'), or None.

    Args:
      std: (K,) posterior standard deviations of the pushed parameters [physical].
      max_std: (K,) their thresholds [physical]; a NaN std never passes.
      diverged: the window diverged.
      paused: pushing is paused.
    """
    if paused:
        return 'paused'
    if diverged:
        return 'diverged'
    if not np.all(np.asarray(std) < max_std):
        return 'uncertain'
    return None


class ParameterPush:
    """Gated, checked, atomic pushes of estimates to one controller node (module doc).

    Args:
      node: the node that owns the service client.
      target: the controller node (`online.push_node`).
      mapping: estimate name -> controller parameter name (`online.push_parameters`).
      names: (M,) the estimate's parameter names.
      bounds: {estimate name: (lower, upper)} [physical].
      max_std: threshold as a fraction of each bounds width (`online.push_max_std`) [-].
      rate: most pushes per second (`online.push_rate`) [Hz].

    Attributes:
      client: the SetParametersAtomically client, created on `node`.
    """

    def __init__(self, node: Node, target: str, mapping: Mapping[str, str],
                 names: Sequence[str], bounds: Mapping[str, tuple[float, float]],
                 max_std: float, rate: float):
        self.target = target
        self.client = create(node, SET_PARAMETERS, push_node=target)
        self._mapping = dict(mapping)
        self._names = list(names)
        self._index = [self._names.index(source) for source in self._mapping]
        self._max_std = np.array([max_std * (bounds[s][1] - bounds[s][0])
                                  for s in self._mapping])
        self._period = 1.0 / rate
        self._last_sent = -np.inf
        self._lock = threading.Lock()
        self._paused = False
        self._sent = self._accepted = self._rejected = 0
        self._held = dict.fromkeys(HELD_REASONS, 0)
        self._last_held: str | None = None
        self._last_rejection = ''
        self._last_response_rejected = False

    def pause(self, paused: bool) -> None:
        """Pause (True) or resume (False) pushing."""
        with self._lock:
            self._paused = paused

    def offer(self, mean: np.ndarray, std: np.ndarray, diverged: bool) -> bool:
        """Push a window's posterior (mean, std: (M,) [physical]) if the gate lets it through
        and the rate allows; returns whether a request was sent."""
        with self._lock:
            reason = held_reason(np.asarray(std)[self._index], self._max_std, diverged,
                                 self._paused)
            if reason is None and time.monotonic() - self._last_sent < self._period:
                return False
            if reason is None and not self.client.service_is_ready():
                reason = 'unavailable'
            self._last_held = reason
            if reason is not None:
                self._held[reason] += 1
                return False
            self._sent += 1
            self._last_sent = time.monotonic()
        values = results.pushed_values(self._names, mean, self._mapping)
        request = SetParametersAtomically.Request(parameters=[
            Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                      double_value=value))
            for name, value in values.items()])
        self.client.call_async(request).add_done_callback(self._on_response)
        return True

    def _on_response(self, future) -> None:
        """Count the controller's answer (an exception counts as a rejection)."""
        exception = future.exception()
        result = None if exception is not None else future.result().result
        with self._lock:
            self._last_response_rejected = result is None or not result.successful
            if self._last_response_rejected:
                self._rejected += 1
                self._last_rejection = repr(exception) if result is None else result.reason
            else:
                self._accepted += 1

    def status(self) -> tuple[bool, str, dict]:
        """(warn, message, values) for the diagnostics: warn when the last response was a
        rejection."""
        with self._lock:
            values = {'target': self.target, 'paused': self._paused, 'sent': self._sent,
                      'accepted': self._accepted, 'rejected': self._rejected,
                      'pending': self._sent - self._accepted - self._rejected,
                      **{f'held.{k}': v for k, v in self._held.items()},
                      'last_rejection': self._last_rejection}
            warn = self._last_response_rejected
            if warn:
                message = f'last push rejected: {self._last_rejection}'
            elif self._paused:
                message = 'paused'
            elif self._last_held is not None:
                message = f'held back: {self._last_held}'
            elif self._accepted:
                message = 'last push accepted'
            else:
                message = 'no push yet'
        return warn, message, values
