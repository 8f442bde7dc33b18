"""Time-aligned sliding windows of live sensor streams (ROS-free, thread-safe).

A `WindowBuffer` takes samples as they arrive (from ROS callbacks, a bag reader or a test) and
cuts them into fixed-shape windows for the likelihood:

  * joint states: positions, velocities and efforts with the joint names of the message,
    matched by name to the model's joints (any order; extra joints are ignored and counted);
  * optional torque commands (`torque_source='command'`), in model order or by name;
  * optional motion-capture poses of named bodies: position (3,) [m] and unit quaternion (4,)
    in ROS order `[x, y, z, w]`.

Every sample is keyed by its header stamp [s]. Windows lie on the global grid `k / rate`
(k integer), hold `num_samples = round(window_length * rate)` samples and start `hop_samples
= round(hop * rate)` grid steps apart. Each stream is resampled onto the grid by linear
interpolation (quaternions: normalised linear interpolation along the shorter arc), so a
window is only ready once every required stream has a sample at or after its last grid time.

Bad input never raises: a sample with a non-finite value, arrays of the wrong length,
duplicate, missing (or, with `strict_joint_names`, unknown) joint names, a repeated stamp or a
stamp older than the stream's last one is dropped and counted under its reason in
`stats().rejected`. A stamp more than `jump_threshold` seconds older than the stream's last one
is taken as a jump back in time (a bag replayed from its start, a simulation reset): the
buffer is cleared, the jump counted, and the sample starts the new data. A stamp more than
`jump_threshold` seconds newer is held back until the stream's next sample: if that one
follows it (within `jump_threshold`), the stream moved on (a driver back after a restart, the
clock stepping forward; counted as a jump, both kept); if it follows the old stamps, the held
sample was an outlier and is dropped (`rejected['future_stamp']`). A window with a gap
of more than `max_gap` between two samples of a stream is skipped (counted in
`stats().windows_dropped['gap']`), as are windows that fall out of the `max_buffer` seconds
kept in memory ('overflow') and, with `pop_window(latest=True)`, the stale windows passed over
to return the newest one ('lag').

The buffer holds its own lock: callbacks may add samples while a worker thread waits for and
pops windows (`wait_ready`, `pop_window`).
"""

from __future__ import annotations

import collections
import math
import threading
from typing import NamedTuple, Sequence

import numpy as np

__all__ = [
    'REJECT_REASONS',
    'TORQUE_SOURCES',
    'Window',
    'BufferStats',
    'WindowBuffer',
    'interpolate',
]

TORQUE_SOURCES = ('effort', 'command')
REJECT_REASONS = ('nonfinite', 'wrong_length', 'missing_joint', 'unknown_joint',
                  'duplicate_joint', 'duplicate_stamp', 'out_of_order', 'future_stamp',
                  'unknown_body', 'unused_stream')
STREAMS = ('joint_states', 'torque_commands', 'mocap')
DROP_REASONS = ('gap', 'lag', 'overflow')
# Stamps of the last accepted joint states kept to estimate the input rate.
_RATE_HISTORY = 100
# Slack on grid comparisons [grid steps]; stamps are floats.
_GRID_EPS = 1e-6


class Window(NamedTuple):
    """One resampled window (a pytree of NumPy arrays).

    Attributes:
      t: (T,) sample times [s] on the grid k / rate, in the clock of the header stamps.
      q: (T, nv) joint positions [rad, m], model joint order.
      qd: (T, nv) joint velocities [rad/s, m/s].
      tau: (T, nv) joint torques/forces [N m, N] (efforts or commands, see `torque_source`).
      mocap_position: (T, K, 3) positions of the K tracked bodies [m]; None without bodies.
      mocap_orientation: (T, K, 4) unit quaternions [x, y, z, w]; None without bodies.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    mocap_position: np.ndarray | None = None
    mocap_orientation: np.ndarray | None = None


class BufferStats(NamedTuple):
    """Counters and gauges for diagnostics (a snapshot; plain Python values).

    Attributes:
      received: samples offered per stream ('joint_states', 'torque_commands', 'mocap').
      accepted: samples stored per stream.
      rejected: dropped samples per reason (`REJECT_REASONS`).
      ignored_joint_names: accepted joint states that carried names the model lacks.
      time_jumps: jumps back in time that cleared the buffer.
      windows_emitted: windows returned by `pop_window`.
      windows_dropped: windows skipped per reason ('gap', 'lag', 'overflow').
      input_rate: joint-state rate over the last accepted stamps [Hz, stamp time]; 0 if unknown.
      fill: fraction of the next window that every required stream already covers [0, 1].
      latest_stamp: newest accepted joint-state stamp [s]; nan before the first.
    """

    received: dict
    accepted: dict
    rejected: dict
    ignored_joint_names: int
    time_jumps: int
    windows_emitted: int
    windows_dropped: dict
    input_rate: float
    fill: float
    latest_stamp: float


class _Stream:
    """Growable (t, values) arrays with a moving start; stamps strictly increasing."""

    def __init__(self, width: int, capacity: int = 256):
        self._t = np.empty(capacity)
        self._v = np.empty((capacity, width))
        self._start = 0
        self._stop = 0
        # A sample stamped more than the jump threshold after the last one, held until the
        # next sample tells whether the stream moved on (t, value) or it was an outlier.
        self.ahead: tuple[float, np.ndarray] | None = None

    def __len__(self) -> int:
        return self._stop - self._start

    @property
    def first_t(self) -> float:
        return float(self._t[self._start])

    @property
    def last_t(self) -> float:
        return float(self._t[self._stop - 1])

    @property
    def last_value(self) -> np.ndarray:
        return self._v[self._stop - 1]

    def clear(self) -> None:
        self._start = self._stop = 0
        self.ahead = None

    def append(self, t: float, value: np.ndarray) -> None:
        if self._stop == len(self._t):
            n = len(self)
            if 2 * n > len(self._t):            # more than half full: grow
                t_new = np.empty(2 * len(self._t))
                v_new = np.empty((2 * len(self._t), self._v.shape[1]))
            else:                                # else compact in place
                t_new, v_new = self._t, self._v
            t_new[:n] = self._t[self._start:self._stop]
            v_new[:n] = self._v[self._start:self._stop]
            self._t, self._v, self._start, self._stop = t_new, v_new, 0, n
        self._t[self._stop] = t
        self._v[self._stop] = value
        self._stop += 1

    def drop_before(self, t: float) -> None:
        """Forget samples older than `t`, keeping the last one before it (to interpolate)."""
        i = int(np.searchsorted(self._t[self._start:self._stop], t, side='right')) - 1
        if i > 0:
            self._start += i

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self._t[self._start:self._stop], self._v[self._start:self._stop]


def interpolate(t: np.ndarray, v: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Linear interpolation of rows `v` (N, d) at stamps `t` (N,) onto `grid` (T,); held
    constant outside `t` (also used by `io.bags` to resample recordings)."""
    i = np.clip(np.searchsorted(t, grid, side='right') - 1, 0, len(t) - 2)
    w = np.clip((grid - t[i]) / (t[i + 1] - t[i]), 0.0, 1.0)[:, None]
    return v[i] * (1.0 - w) + v[i + 1] * w


def _as_vector(values) -> np.ndarray | None:
    """1-D float64 array, or None if `values` cannot be read as one."""
    try:
        out = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        return None
    return out if out.ndim == 1 else None


class WindowBuffer:
    """Sliding windows of joint states, torque commands and poses on a common time grid.

    Args:
      joint_names: (nv,) the model's joint names; windows follow this order.
      rate: resampling rate [Hz].
      window_length: window duration [s]; windows hold round(window_length * rate) samples.
      hop: time between the starts of consecutive windows [s] (rounded to the grid).
      torque_source: 'effort' (JointState efforts) or 'command' (`add_torque_command`).
      mocap_bodies: names of the bodies whose poses `add_pose` takes (empty: no mocap).
      max_gap: largest time between two samples of a stream inside a window [s]; default
        max(0.1, 5 / rate).
      jump_threshold: a stamp this much older than a stream's last one clears the buffer [s].
      max_buffer: seconds of data kept; older windows are dropped; default
        2 * window_length + hop + 1.
      strict_joint_names: reject joint states that name joints the model lacks (default:
        ignore those joints and count the message in `ignored_joint_names`).

    Raises:
      ValueError: bad configuration (never for bad samples).
    """

    def __init__(self, joint_names: Sequence[str], rate: float, window_length: float,
                 hop: float, torque_source: str = 'effort', mocap_bodies: Sequence[str] = (),
                 max_gap: float | None = None, jump_threshold: float = 1.0,
                 max_buffer: float | None = None, strict_joint_names: bool = False):
        joint_names = tuple(str(n) for n in joint_names)
        if not joint_names or len(set(joint_names)) != len(joint_names):
            raise ValueError(f'joint_names: expected unique names, got {list(joint_names)}')
        if not rate > 0.0 or not math.isfinite(rate):
            raise ValueError(f'rate: expected a number > 0 [Hz], got {rate!r}')
        num_samples = int(round(window_length * rate))
        if num_samples < 2:
            raise ValueError(f'window_length: expected at least 2 samples at {rate:g} Hz, got '
                             f'{window_length!r} s')
        hop_samples = int(round(hop * rate))
        if hop_samples < 1:
            raise ValueError(f'hop: expected at least one sample (1 / rate = {1 / rate:g} s), '
                             f'got {hop!r} s')
        if torque_source not in TORQUE_SOURCES:
            raise ValueError(f'torque_source: expected one of {TORQUE_SOURCES}, got '
                             f'{torque_source!r}')
        mocap_bodies = tuple(str(b) for b in mocap_bodies)
        if len(set(mocap_bodies)) != len(mocap_bodies):
            raise ValueError(f'mocap_bodies: expected unique names, got {list(mocap_bodies)}')
        max_gap = max(0.1, 5.0 / rate) if max_gap is None else float(max_gap)
        if not max_gap > 0.0:
            raise ValueError(f'max_gap: expected a number > 0 [s], got {max_gap!r}')
        if not jump_threshold > 0.0:
            raise ValueError(f'jump_threshold: expected a number > 0 [s], got {jump_threshold!r}')
        window_span = (num_samples - 1) / rate
        max_buffer = (2.0 * window_length + hop + 1.0 if max_buffer is None
                      else float(max_buffer))
        if not max_buffer > window_span:
            raise ValueError(f'max_buffer: expected more than the window ({window_span:g} s), '
                             f'got {max_buffer!r}')

        self.joint_names = joint_names
        self.nv = len(joint_names)
        self.rate = float(rate)
        self.num_samples = num_samples
        self.hop_samples = hop_samples
        self.torque_source = torque_source
        self.mocap_bodies = mocap_bodies
        self.max_gap = max_gap
        self.jump_threshold = float(jump_threshold)
        self.max_buffer = max_buffer
        self.strict_joint_names = bool(strict_joint_names)

        self._index = {name: i for i, name in enumerate(joint_names)}
        self._cond = threading.Condition(threading.Lock())
        # Joint states store [q, qd, tau] (or [q, qd] when torques come from commands).
        width = 3 * self.nv if torque_source == 'effort' else 2 * self.nv
        self._joints = _Stream(width)
        self._commands = _Stream(self.nv) if torque_source == 'command' else None
        self._poses = {body: _Stream(7) for body in mocap_bodies}
        self._required = [self._joints] + ([self._commands] if self._commands is not None else [])
        self._required += [self._poses[b] for b in mocap_bodies]
        self._next: int | None = None           # grid index of the next window's first sample
        self._perm_cache: dict[tuple, tuple] = {}
        self._rate_stamps: collections.deque = collections.deque(maxlen=_RATE_HISTORY)
        self._received = dict.fromkeys(STREAMS, 0)
        self._accepted = dict.fromkeys(STREAMS, 0)
        self._rejected = dict.fromkeys(REJECT_REASONS, 0)
        self._dropped = dict.fromkeys(DROP_REASONS, 0)
        self._ignored_names = 0
        self._time_jumps = 0
        self._emitted = 0

    # ------------------------------------------------------------------------------------------
    # Input
    # ------------------------------------------------------------------------------------------

    def add_joint_state(self, t: float, names: Sequence[str], position, velocity,
                        effort=()) -> bool:
        """Offer one joint-state sample; returns whether it was stored.

        Args:
          t: header stamp [s].
          names: (n,) joint names of the message, any order; must include every model joint.
          position: (n,) positions in the order of `names` [rad, m].
          velocity: (n,) velocities in the order of `names` [rad/s, m/s].
          effort: (n,) [N m, N]; required with torque_source 'effort', else ignored.
        """
        with self._cond:
            self._received['joint_states'] += 1
            names = tuple(names)
            match = self._match(names)
            if isinstance(match, str):
                return self._reject(match)
            perm, has_unknown = match
            if has_unknown and self.strict_joint_names:
                return self._reject('unknown_joint')
            fields = [position, velocity] + ([effort] if self.torque_source == 'effort' else [])
            arrays = [_as_vector(f) for f in fields]
            if any(a is None or len(a) != len(names) for a in arrays):
                return self._reject('wrong_length')
            value = np.concatenate([a[perm] for a in arrays])
            if not self._finite_stamp(t) or not np.all(np.isfinite(value)):
                return self._reject('nonfinite')
            if not self._store(self._joints, float(t), value, 'joint_states'):
                return False
            if has_unknown:
                self._ignored_names += 1
            self._rate_stamps.append(float(t))
            return True

    def add_torque_command(self, t: float, values, names: Sequence[str] | None = None) -> bool:
        """Offer one torque command sample; returns whether it was stored.

        Args:
          t: stamp [s] (a header stamp, or the receive time for headerless messages).
          values: (nv,) commands in model joint order, or (n,) in the order of `names`.
          names: joint names of `values` (e.g. from a JointState command topic), or None.
        """
        with self._cond:
            self._received['torque_commands'] += 1
            if self._commands is None:
                return self._reject('unused_stream')
            value = _as_vector(values)
            if names is None:
                if value is None or len(value) != self.nv:
                    return self._reject('wrong_length')
            else:
                names = tuple(names)
                match = self._match(names)
                if isinstance(match, str):
                    return self._reject(match)
                if match[1] and self.strict_joint_names:
                    return self._reject('unknown_joint')
                if value is None or len(value) != len(names):
                    return self._reject('wrong_length')
                value = value[match[0]]
            if not self._finite_stamp(t) or not np.all(np.isfinite(value)):
                return self._reject('nonfinite')
            return self._store(self._commands, float(t), value, 'torque_commands')

    def add_pose(self, body: str, t: float, position, orientation) -> bool:
        """Offer one motion-capture pose; returns whether it was stored.

        Args:
          body: one of `mocap_bodies`.
          t: header stamp [s].
          position: (3,) [m].
          orientation: (4,) quaternion [x, y, z, w] (normalised here; zero is rejected).
        """
        with self._cond:
            self._received['mocap'] += 1
            stream = self._poses.get(body)
            if stream is None:
                return self._reject('unknown_body')
            p, quat = _as_vector(position), _as_vector(orientation)
            if p is None or quat is None or len(p) != 3 or len(quat) != 4:
                return self._reject('wrong_length')
            norm = float(np.linalg.norm(quat)) if np.all(np.isfinite(quat)) else 0.0
            if not self._finite_stamp(t) or not np.all(np.isfinite(p)) or norm < 1e-9:
                return self._reject('nonfinite')
            quat = quat / norm
            if len(stream) and np.dot(stream.last_value[3:], quat) < 0.0:
                quat = -quat                    # same rotation, along the shorter arc
            return self._store(stream, float(t), np.concatenate([p, quat]), 'mocap')

    def clear(self) -> None:
        """Forget all samples and the window schedule (counters are kept)."""
        with self._cond:
            self._clear()

    # ------------------------------------------------------------------------------------------
    # Output
    # ------------------------------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether `pop_window` would return a window now."""
        with self._cond:
            return self._advance()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until a window is ready or `timeout` [s] passes; returns `ready()`."""
        with self._cond:
            return self._cond.wait_for(self._advance, timeout)

    def pop_window(self, latest: bool = False) -> Window | None:
        """The next ready window (None if none is ready), and advance by one hop.

        Args:
          latest: skip to the newest ready window (the skipped ones count as 'lag'), as a live
            estimator that fell behind wants; default: the oldest, so that none is lost.
        """
        with self._cond:
            if not self._advance():
                return None
            if latest:
                end = min(s.last_t for s in self._required) * self.rate
                behind = int(math.floor((end - (self._next + self.num_samples - 1) + _GRID_EPS)
                                        / self.hop_samples))
                if behind > 0:
                    self._next += behind * self.hop_samples
                    self._dropped['lag'] += behind
                    if not self._advance():     # the newest one had a gap
                        return None
            grid_index = self._next + np.arange(self.num_samples)
            grid = grid_index / self.rate
            t, v = self._joints.view()
            joints = interpolate(t, v, grid)
            nv = self.nv
            q, qd = joints[:, :nv], joints[:, nv:2 * nv]
            if self._commands is None:
                tau = joints[:, 2 * nv:]
            else:
                tau = interpolate(*self._commands.view(), grid)
            mocap_p = mocap_quat = None
            if self.mocap_bodies:
                poses = np.stack([interpolate(*self._poses[b].view(), grid)
                                  for b in self.mocap_bodies], axis=1)
                mocap_p = poses[..., :3]
                quat = poses[..., 3:]
                mocap_quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
            self._next += self.hop_samples
            self._emitted += 1
            self._prune()
            return Window(t=grid, q=q, qd=qd, tau=tau, mocap_position=mocap_p,
                          mocap_orientation=mocap_quat)

    def joint_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the joint-state samples held now, as received: stamps (N,) [s] and
        positions (N, nv) in model joint order (input checks)."""
        with self._cond:
            t, v = self._joints.view()
            return t.copy(), v[:, :self.nv].copy()

    def stats(self) -> BufferStats:
        """A snapshot of the counters for diagnostics."""
        with self._cond:
            stamps = self._rate_stamps
            span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
            rate = (len(stamps) - 1) / span if span > 0.0 else 0.0
            return BufferStats(
                received=dict(self._received), accepted=dict(self._accepted),
                rejected=dict(self._rejected), ignored_joint_names=self._ignored_names,
                time_jumps=self._time_jumps, windows_emitted=self._emitted,
                windows_dropped=dict(self._dropped), input_rate=rate, fill=self._fill(),
                latest_stamp=self._joints.last_t if len(self._joints) else math.nan)

    # ------------------------------------------------------------------------------------------
    # Internals (the lock is held)
    # ------------------------------------------------------------------------------------------

    def _reject(self, reason: str) -> bool:
        self._rejected[reason] += 1
        return False

    def _match(self, names: tuple) -> tuple | str:
        """(permutation into `names`, any unknown names) or the reason to reject."""
        cached = self._perm_cache.get(names)
        if cached is not None:
            return cached
        if len(set(names)) != len(names):
            return 'duplicate_joint'
        where = {name: i for i, name in enumerate(names)}
        if any(j not in where for j in self.joint_names):
            return 'missing_joint'
        result = (np.array([where[j] for j in self.joint_names]),
                  any(n not in self._index for n in names))
        if len(self._perm_cache) < 64:          # a topic uses one or two name orders
            self._perm_cache[names] = result
        return result

    @staticmethod
    def _finite_stamp(t) -> bool:
        try:
            return math.isfinite(t)
        except TypeError:
            return False

    def _store(self, stream: _Stream, t: float, value: np.ndarray, name: str) -> bool:
        """Append after the stamp checks (duplicate, out of order, jump back, jump ahead)."""
        if len(stream):
            last = stream.last_t
            if t == last:
                return self._reject('duplicate_stamp')
            if t < last:
                if last - t <= self.jump_threshold:
                    return self._reject('out_of_order')
                self._time_jumps += 1
                self._clear()
            elif t - last > self.jump_threshold:
                ahead = stream.ahead
                if ahead is None or not ahead[0] < t <= ahead[0] + self.jump_threshold:
                    if ahead is not None:
                        self._rejected['future_stamp'] += 1
                    stream.ahead = (t, value)
                    return False
                # The sample held back was the stream moving on (a restarted driver, the
                # clock stepping forward): both are kept; windows across the step have a gap.
                self._time_jumps += 1
                stream.ahead = None
                stream.append(*ahead)
                self._accepted[name] += 1
            elif stream.ahead is not None:
                stream.ahead = None             # an outlier: the stream went on as before
                self._rejected['future_stamp'] += 1
        stream.append(t, value)
        self._accepted[name] += 1
        self._prune()
        self._cond.notify_all()
        return True

    def _clear(self) -> None:
        self._joints.clear()
        if self._commands is not None:
            self._commands.clear()
        for stream in self._poses.values():
            stream.clear()
        self._next = None
        self._rate_stamps.clear()

    def _prune(self) -> None:
        """Drop windows older than `max_buffer` and samples that no window needs any more."""
        latest = max((s.last_t for s in self._required if len(s)), default=None)
        if latest is None:
            return
        horizon = latest - self.max_buffer
        keep_from = horizon
        self._schedule()
        if self._next is not None:
            first = math.ceil(horizon * self.rate - _GRID_EPS)
            if self._next < first:
                skip = -(-(first - self._next) // self.hop_samples)
                self._next += skip * self.hop_samples
                self._dropped['overflow'] += skip
            keep_from = self._next / self.rate
        for stream in self._required:
            if len(stream):
                stream.drop_before(keep_from)

    def _advance(self) -> bool:
        """Schedule the next window and check that it is complete; skip windows with gaps."""
        while True:
            if not self._schedule():
                return False
            t0 = self._next / self.rate
            t1 = (self._next + self.num_samples - 1) / self.rate
            if any(s.last_t < t1 - _GRID_EPS / self.rate for s in self._required):
                return False
            gap_end = None
            for stream in self._required:
                t, _ = stream.view()
                i0 = max(int(np.searchsorted(t, t0, side='right')) - 1, 0)
                i1 = int(np.searchsorted(t, t1, side='left'))
                steps = np.diff(t[i0:i1 + 1])
                if len(steps) and steps.max() > self.max_gap:
                    after = float(t[i0 + 1 + int(np.argmax(steps > self.max_gap))])
                    gap_end = after if gap_end is None else max(gap_end, after)
            if gap_end is None:
                return True
            # Skip every window that reaches back before the end of the gap (one count each).
            target = math.ceil(gap_end * self.rate - _GRID_EPS)
            skip = max(1, -(-(target - self._next) // self.hop_samples))
            self._next += skip * self.hop_samples
            self._dropped['gap'] += skip
            self._prune()

    def _schedule(self) -> bool:
        """Place the next window once every required stream has data; False until then."""
        if any(len(s) == 0 for s in self._required):
            return False
        first = max(s.first_t for s in self._required)
        start = math.ceil(first * self.rate - _GRID_EPS)
        if self._next is None or self._next < start:
            self._next = start                  # the first window, or a stream began late
        return True

    def _fill(self) -> float:
        if any(len(s) == 0 for s in self._required):
            return 0.0
        start = (self._next / self.rate if self._next is not None
                 else max(s.first_t for s in self._required))
        covered = min(s.last_t for s in self._required) - start
        span = (self.num_samples - 1) / self.rate
        return float(min(max(covered / span, 0.0), 1.0))
