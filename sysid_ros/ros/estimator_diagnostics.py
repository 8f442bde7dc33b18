"""The estimator node's `/diagnostics` (diagnostic_msgs/DiagnosticArray), from what it counts.

Statuses are named '<node name>: <task>' with the model's name as hardware_id, as
diagnostic_updater names them: one per input topic, one for the window buffer, one for the
estimator and, with a push target, one for the push (`ros.estimator.DIAGNOSTICS`).
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from sysid_ros.io.config import OnlineConfig
from sysid_ros.io.online import OnlineSession, WindowResult
from sysid_ros.io.window_buffer import BufferStats
from sysid_ros.ros.parameter_push import ParameterPush

__all__ = ['EstimatorDiagnostics']


class EstimatorDiagnostics:
    """Counts input messages and keeps the last window's result; builds the statuses.

    Args:
      node_name: the node's name.
      hardware_id: the model's name.
      topics: the input topics, the joint states first (its rate is the buffer's input rate).
      online: `silent_warn`, `silent_stale` [s of wall time] and `hop` [s] are read.
    """

    def __init__(self, node_name: str, hardware_id: str, topics: Sequence[str],
                 online: OnlineConfig):
        self._node_name = node_name
        self._hardware_id = hardware_id
        self._topics = list(topics)
        self._online = online
        self._last_seen: dict[str, float | None] = dict.fromkeys(self._topics)
        self._counts = dict.fromkeys(self._topics, 0)
        self._lock = threading.Lock()
        self._checks: dict[str, tuple[str, ...]] = {}
        self._last: WindowResult | None = None
        self._lag = float('nan')

    def seen(self, topic: str) -> None:
        """Count a message received on `topic` now."""
        self._last_seen[topic] = time.monotonic()
        self._counts[topic] += 1

    def checked(self, topic: str, warnings: Sequence[str]) -> None:
        """The failed input checks of `topic` (`io.input_checks`): its status is WARN with
        them while it is receiving."""
        with self._lock:
            self._checks[topic] = tuple(warnings)

    def published(self, result: WindowResult, lag: float) -> None:
        """Remember the last published window and its lag from window end to publish [s]."""
        with self._lock:
            self._last, self._lag = result, lag

    def array(self, stats: BufferStats, session: OnlineSession, active: bool,
              push: ParameterPush | None, stamp: Time) -> DiagnosticArray:
        """Every status, stamped `stamp`."""
        statuses = [self._input_status(topic, stats.input_rate if i == 0 else None)
                    for i, topic in enumerate(self._topics)]
        statuses.append(self._buffer_status(stats))
        statuses.append(self._estimator_status(session, active))
        if push is not None:
            warn, message, values = push.status()
            statuses.append(self._status(
                'push', DiagnosticStatus.WARN if warn else DiagnosticStatus.OK, message, values))
        msg = DiagnosticArray(status=statuses)
        msg.header.stamp = stamp
        return msg

    def _status(self, name: str, level: int, message: str, values: dict) -> DiagnosticStatus:
        return DiagnosticStatus(level=level, name=f'{self._node_name}: {name}',
                                message=message, hardware_id=self._hardware_id,
                                values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])

    def _input_status(self, topic: str, rate: float | None) -> DiagnosticStatus:
        seen = self._last_seen[topic]
        silent = float('inf') if seen is None else time.monotonic() - seen
        if silent >= self._online.silent_stale:
            level, message = DiagnosticStatus.STALE, f'silent for {silent:.1f} s'
        elif silent >= self._online.silent_warn:
            level, message = DiagnosticStatus.WARN, f'silent for {silent:.1f} s'
        else:
            level, message = DiagnosticStatus.OK, 'receiving'
        with self._lock:
            checks = self._checks.get(topic, ())
        if checks and level == DiagnosticStatus.OK:
            level, message = DiagnosticStatus.WARN, '; '.join(checks)
        values = {'received': self._counts[topic], 'silent_s': f'{silent:.3f}',
                  'checks_failed': len(checks)}
        if rate is not None:
            values['rate_hz'] = f'{rate:.2f}'
        return self._status(f'input {topic}', level, message, values)

    def _buffer_status(self, stats: BufferStats) -> DiagnosticStatus:
        rejected = sum(stats.rejected.values())
        values = {'fill': f'{stats.fill:.3f}', 'rejected': rejected,
                  **{f'rejected.{k}': v for k, v in stats.rejected.items()},
                  'ignored_joint_names': stats.ignored_joint_names,
                  'time_jumps': stats.time_jumps,
                  'windows_emitted': stats.windows_emitted,
                  **{f'windows_dropped.{k}': v for k, v in stats.windows_dropped.items()}}
        return self._status(
            'window buffer', DiagnosticStatus.WARN if rejected else DiagnosticStatus.OK,
            f'{rejected} messages rejected' if rejected else 'ok', values)

    def _estimator_status(self, session: OnlineSession, active: bool) -> DiagnosticStatus:
        with self._lock:
            last, lag = self._last, self._lag
        values = {'windows': session.windows, 'divergences': session.divergences,
                  'active': active}
        level, message = DiagnosticStatus.OK, 'waiting for data'
        if last is not None:
            values.update(iteration_time_s=f'{last.iteration_time:.4f}', lag_s=f'{lag:.4f}',
                          ess=f'{last.ess:.3f}', loss=f'{last.loss:.6g}',
                          noise_scale=f'{last.noise_scale:.4g}',
                          prior_inflation=f'{last.prior_inflation:.4g}',
                          window_end=f'{last.t_end:.6f}')
            message = 'running'
            if last.diverged:
                level, message = DiagnosticStatus.WARN, 'last window diverged; posterior reset'
            elif last.iteration_time > self._online.hop:
                level, message = DiagnosticStatus.WARN, 'inference slower than the hop'
        if not active:
            level, message = DiagnosticStatus.OK, 'inactive'
        return self._status('estimator', level, message, values)
