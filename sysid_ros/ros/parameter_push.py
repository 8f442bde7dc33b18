"""The estimator's push of estimates into a controller's parameters (`online.push_*`).

A window's posterior mean is pushed only if it passes the gate (`held_reason`):
  * pushing is not paused (the estimator's `~/pause_push` service);
  * the window did not diverge (its posterior went back to the last good one);
  * the estimate is steady: its means over the estimator's `steady_windows` windows all lie
    within one std of the latest (`payload_handoff.SteadyMean`; a moving estimate is not
    pushed);
  * every pushed parameter's posterior standard deviation is below `online.push_max_std`
    times the width of its configured bounds (a first, wide posterior is not pushed);
  * every pushed mean lies inside its configured bounds, not within 1 % of their width from
    one (`payload_handoff.on_or_outside_bounds`: a fit stopped by a bound);
and then at most `online.push_rate` times a second, once the controller's services are up.
Pushes go only to `online.push_node`, only to the parameters `online.push_parameters` names.
Each push first reads the controller's current values (`<push_node>/get_parameters`), then
sends all of `online.push_parameters` in one rcl_interfaces/srv/SetParametersAtomically
request to `<push_node>/set_parameters_atomically`, so the controller takes every value or
none; the log line of each push names the values it replaced. Each response is checked: a
push is counted as sent, then accepted or rejected (with the controller's reason); what the
gate held back is counted by reason.
"""

from __future__ import annotations

import threading
import time
from typing import Mapping, Sequence

import numpy as np
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParametersAtomically
from rclpy.node import Node

from sysid_ros.io import results
from sysid_ros.io.payload_handoff import on_or_outside_bounds
from sysid_ros.ros.interfaces import CLIENT, create, Endpoint

__all__ = ['SET_PARAMETERS', 'GET_PARAMETERS', 'HELD_REASONS', 'held_reason',
           'ParameterPush']

SET_PARAMETERS = Endpoint(
    '{push_node}/set_parameters_atomically', SetParametersAtomically, CLIENT,
    'with online.push_node: the means of online.push_parameters (estimate name -> parameter '
    'name) in one request, at most online.push_rate times a second, from windows that pass '
    'the gate')
GET_PARAMETERS = Endpoint(
    '{push_node}/get_parameters', GetParameters, CLIENT,
    "with online.push_node: the controller's values of online.push_parameters before each "
    'push, logged as the values it replaced')

# Why a window's estimate was not pushed: paused by the service, diverged window, an estimate
# still moving, a pushed parameter's std at or above its threshold, a pushed mean on or outside
# its bounds, the controller's services not (yet) up.
HELD_REASONS = ('paused', 'diverged', 'unconverged', 'uncertain', 'outside', 'unavailable')


def held_reason(std: np.ndarray, max_std: np.ndarray, diverged: bool, paused: bool,
                steady: bool = True, mean: np.ndarray | None = None,
                bounds: Sequence[tuple[float, float]] = ()) -> str | None:
    """Why the gate holds a push back (one of HELD_REASONS but 'unavailable'), or None.

    Args:
      std: (K,) posterior standard deviations of the pushed parameters [physical].
      max_std: (K,) their thresholds [physical]; a NaN std never passes.
      diverged: the window diverged.
      paused: pushing is paused.
      steady: the estimate stopped moving (`payload_handoff.SteadyMean`).
      mean: (K,) the pushed means [physical], checked against `bounds`.
      bounds: (K,) (lower, upper) of the pushed parameters [physical].
    """
    if paused:
        return 'paused'
    if diverged:
        return 'diverged'
    if not steady:
        return 'unconverged'
    if not np.all(np.asarray(std) < max_std):
        return 'uncertain'
    if mean is not None and on_or_outside_bounds(
            {k: float(m) for k, m in enumerate(mean)}, dict(enumerate(bounds))):
        return 'outside'
    return None


class ParameterPush:
    """Gated, checked, atomic pushes of estimates to one controller node (module doc).

    Args:
      node: the node that owns the service clients and whose logger names each push.
      target: the controller node (`online.push_node`).
      mapping: estimate name -> controller parameter name (`online.push_parameters`).
      names: (M,) the estimate's parameter names.
      bounds: {estimate name: (lower, upper)} [physical].
      max_std: threshold as a fraction of each bounds width (`online.push_max_std`) [-].
      rate: most pushes per second (`online.push_rate`) [Hz].

    Attributes:
      client: the SetParametersAtomically client, created on `node`.
      reader: the GetParameters client, created on `node`.
    """

    def __init__(self, node: Node, target: str, mapping: Mapping[str, str],
                 names: Sequence[str], bounds: Mapping[str, tuple[float, float]],
                 max_std: float, rate: float):
        self.target = target
        self.client = create(node, SET_PARAMETERS, push_node=target)
        self.reader = create(node, GET_PARAMETERS, push_node=target)
        self._logger = node.get_logger()
        self._mapping = dict(mapping)
        self._names = list(names)
        self._index = [self._names.index(source) for source in self._mapping]
        self._bounds = [tuple(bounds[s]) for s in self._mapping]
        self._max_std = np.array([max_std * (upper - lower) for lower, upper in self._bounds])
        self._period = 1.0 / rate
        self._last_sent = -np.inf
        self._lock = threading.Lock()
        self._paused = False
        self._sent = self._accepted = self._rejected = 0
        self._held = dict.fromkeys(HELD_REASONS, 0)
        self._last_held: str | None = None
        self._last_rejection = ''
        self._last_response_rejected = False
        self.last_replaced: dict[str, float | None] = {}

    def pause(self, paused: bool) -> None:
        """Pause (True) or resume (False) pushing."""
        with self._lock:
            self._paused = paused

    def offer(self, mean: np.ndarray, std: np.ndarray, diverged: bool,
              steady: bool = True) -> bool:
        """Push a window's posterior (mean, std: (M,) [physical]; whether it diverged, whether
        it is steady) if the gate lets it through and the rate allows; returns whether a push
        was started."""
        with self._lock:
            reason = held_reason(np.asarray(std)[self._index], self._max_std, diverged,
                                 self._paused, steady, np.asarray(mean)[self._index],
                                 self._bounds)
            if reason is None and time.monotonic() - self._last_sent < self._period:
                return False
            if reason is None and not (self.client.service_is_ready()
                                       and self.reader.service_is_ready()):
                reason = 'unavailable'
            self._last_held = reason
            if reason is not None:
                self._held[reason] += 1
                return False
            self._sent += 1
            self._last_sent = time.monotonic()
        values = results.pushed_values(self._names, mean, self._mapping)
        read = self.reader.call_async(GetParameters.Request(names=list(values)))
        read.add_done_callback(lambda future: self._send(values, future))
        return True

    def _send(self, values: dict[str, float], read) -> None:
        """Log the push with the controller's values it replaces (`read`'s answer; unknown
        where it failed) and send it."""
        replaced = dict.fromkeys(values)
        if read.exception() is None:
            for name, value in zip(values, read.result().values):
                if value.type == ParameterType.PARAMETER_DOUBLE:
                    replaced[name] = value.double_value
        with self._lock:
            self.last_replaced = replaced
        self._logger.info(f'pushing to {self.target}: ' + ', '.join(
            f'{name} = {value:.6g} (replacing '
            f'{"unknown" if replaced[name] is None else format(replaced[name], ".6g")})'
            for name, value in values.items()))
        request = SetParametersAtomically.Request(parameters=[
            Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                      double_value=value))
            for name, value in values.items()])
        self.client.call_async(request).add_done_callback(self._on_response)

    def destroy(self, node: Node) -> None:
        """Release both clients of `node`."""
        node.destroy_client(self.client)
        node.destroy_client(self.reader)

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
