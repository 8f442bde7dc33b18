"""Rosbags read without ROS: recordings cut into trajectories on the grid k / `data.rate`.

`read_bag` streams rosbag2 (sqlite3, mcap) and ROS 1 bags through `rosbags`, decoding only
the configured topics, and resamples them with the live `WindowBuffer`'s interpolation
(`window_buffer.interpolate`), `CHUNK` messages at a time: memory grows with the resampled
output, not with the bag. Joint states in little-endian CDR (every rosbag2) are decoded by a
precompiled `struct` layout per distinct name list (checked against rosbags' serialiser by
the tests); others go through rosbags. The recording is cut into trajectories at pauses
longer than `data.gap`, within `data.segments` if given; `split_holdout` keeps the last
`data.holdout` share of them for evaluation. Writing: `io.bag_writer`.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import struct
from typing import NamedTuple, Sequence
import warnings

import numpy as np

from sysid_ros.io import drivers
from sysid_ros.io.config_sections import TORQUE_FROM_JOINT_STATES
from sysid_ros.io.trajectory import continuous_quaternions, DataError, hold_torques, Trajectory
from sysid_ros.io.window_buffer import interpolate

__all__ = [
    'NS_PER_S',
    'JOINT_STATE',
    'POSE_STAMPED',
    'CHUNK',
    'BagSegment',
    'read_bag',
    'split_holdout',
]

NS_PER_S = 1_000_000_000
JOINT_STATE = 'sensor_msgs/msg/JointState'
POSE_STAMPED = 'geometry_msgs/msg/PoseStamped'
# Messages encoded, or decoded before they are resampled, at a time (bounds the memory).
CHUNK = 20_000
_FLOAT_ARRAY = 'std_msgs/msg/Float64MultiArray'
_GRID_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class BagSegment:
    """One trajectory cut from a bag, resampled onto the grid k / data.rate.

    Attributes:
      trajectory: t (T,) header-stamp time [s], q, qd, tau (T, nv) in the model's joint order;
        with `data.mocap_topics`, their poses (`Trajectory.mocap_position` (T, K, 3) [m],
        `mocap_orientation` (T, K, 4) unit quaternions [x, y, z, w]) in the topics' order.
    """

    trajectory: Trajectory


class _JointStateLayout(NamedTuple):
    """Byte layout of little-endian CDR JointState messages that share names and lengths."""

    length: int
    prefix: bytes                   # frame_id and names, bytes 12:values_at
    values_at: int
    values: struct.Struct           # from byte 4: sec, nanosec, prefix (skipped), counts, doubles
    names: tuple[str, ...]
    counts: tuple[int, int, int]    # lengths of position, velocity, effort


def _joint_state_layout(raw: bytes) -> _JointStateLayout | None:
    """Parse the names and array lengths of one CDR JointState; None if not little-endian CDR."""
    if len(raw) < 16 or raw[1] != 1:
        return None

    def u32(pos):                   # `pos`: offset in the CDR body (after 4 header bytes)
        return struct.unpack_from('<I', raw, 4 + pos)[0]

    pos = 8 + 4 + u32(8)            # stamp, then frame_id
    pos += -pos % 4
    names = []
    num_names, pos = u32(pos), pos + 4
    for _ in range(num_names):
        pos += -pos % 4
        size = u32(pos)
        names.append(raw[4 + pos + 4:4 + pos + 3 + size].decode())
        pos += 4 + size
    values_at = 4 + pos
    fmt, counts = f'<iI{values_at - 12}x', []
    for _ in range(3):
        pad = -pos % 4
        count = u32(pos + pad)
        fmt += f'{pad}xI'
        pos += pad + 4
        if count:
            pad = -pos % 8
            fmt += f'{pad}x{count}d'
            pos += pad + 8 * count
        counts.append(count)
    if 4 + pos != len(raw):
        raise struct.error(f'expected {4 + pos} bytes, got {len(raw)}')
    return _JointStateLayout(len(raw), bytes(raw[12:values_at]), values_at, struct.Struct(fmt),
                             tuple(names), tuple(counts))


class _Aligner:
    """Resamples streams of stamped rows onto the grid k / rate as they arrive, keeping only
    the samples that later grid points still need (the live `WindowBuffer`'s grid and
    `interpolate`, applied to a whole recording)."""

    def __init__(self, rate: float, streams: Sequence[str]):
        self.rate = rate
        self._pending = {s: [] for s in streams}
        self._out = {s: [] for s in streams}
        self._grid: list[np.ndarray] = []
        self._next: int | None = None

    def add(self, stream: str, t: np.ndarray, values: np.ndarray) -> None:
        if len(t):
            self._pending[stream].append((t, values))

    def flush(self) -> None:
        """Emit the grid points that every stream covers; forget samples no longer needed."""
        views = {}
        for stream, parts in self._pending.items():
            if not parts:
                return
            t = np.concatenate([p[0] for p in parts])
            v = np.concatenate([p[1] for p in parts])
            self._pending[stream] = [(t, v)]
            views[stream] = (t, v)
        if any(len(t) < 2 for t, _ in views.values()):
            return
        if self._next is None:
            self._next = math.ceil(max(t[0] for t, _ in views.values()) * self.rate - _GRID_EPS)
        last = math.floor(min(t[-1] for t, _ in views.values()) * self.rate + _GRID_EPS)
        if last < self._next:
            return
        grid = np.arange(self._next, last + 1) / self.rate
        self._grid.append(grid)
        for stream, (t, v) in views.items():
            self._out[stream].append(interpolate(t, v, grid))
            keep = max(int(np.searchsorted(t, (last + 1) / self.rate, side='right')) - 1, 0)
            self._pending[stream] = [(t[keep:], v[keep:])]
        self._next = last + 1

    def result(self) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """(grid (T,), {stream: (T, d)}), or None if nothing was emitted."""
        self.flush()
        if not self._grid:
            return None
        return (np.concatenate(self._grid),
                {s: np.concatenate(parts) for s, parts in self._out.items()})

    def missing(self) -> list[str]:
        """Streams without any sample."""
        return [s for s, parts in self._pending.items() if not parts]


class _BagReader:
    """One pass over the configured topics of an open bag (see `read_bag`)."""

    def __init__(self, reader, path: str, joint_names: Sequence[str], data):
        self.reader, self.path, self.data = reader, path, data
        self.joint_names = tuple(joint_names)
        self.effort = data.torque_source == TORQUE_FROM_JOINT_STATES
        self.rate = float(data.rate)
        self.conns = {}                         # connection id -> stream name
        self.streams = ['joints'] + ([] if self.effort else ['torque']) + list(
            data.mocap_topics)
        wanted = {data.joint_states_topic: ('joints', (JOINT_STATE,))}
        if not self.effort:
            wanted[data.torque_source] = ('torque', (_FLOAT_ARRAY, JOINT_STATE))
        for topic in data.mocap_topics:
            wanted[topic] = (topic, (POSE_STAMPED,))
        self.topic_of = {'joints': data.joint_states_topic, 'torque': data.torque_source}
        topics: dict[str, set[str]] = {}
        for conn in reader.connections:
            topics.setdefault(conn.topic, set()).add(conn.msgtype)
        self.ignored: list[str] = []           # topics with connections of other types
        for topic, (stream, types) in wanted.items():
            if topic not in topics:
                raise DataError(f'{path}: topic {topic} not in the bag; it has '
                                f'{sorted(topics) or "no topics"}')
            if not topics[topic] & set(types):
                raise DataError(f'{path}: topic {topic}: expected messages of type '
                                f'{" or ".join(types)}, got {" and ".join(sorted(topics[topic]))}')
            other = sorted(topics[topic] - set(types))
            if other:
                self.ignored.append(f'{topic} ({", ".join(other)})')
            self.topic_of[stream] = topic
            for conn in reader.connections:
                if conn.topic == topic and conn.msgtype in types:
                    self.conns[conn.id] = (stream, conn)
        self.layout: _JointStateLayout | None = None
        self.columns: dict[tuple, np.ndarray] = {}
        self.dropped = 0
        self.messages = 0

    # -- decoding --------------------------------------------------------------------------

    def _error(self, stream: str, t: float, message: str) -> DataError:
        return DataError(f'{self.path}: topic {self.topic_of[stream]}: message stamped '
                         f'{t:.9f} s: {message}')

    def _order(self, stream: str, t: float, names: Sequence[str]) -> np.ndarray:
        """Index of each model joint in `names` (cached per name list)."""
        key = tuple(names)
        order = self.columns.get(key)
        if order is None:
            missing = [j for j in self.joint_names if j not in key]
            if missing:
                raise self._error(stream, t, f'no joint {missing[0]!r}; the message names '
                                  f'{list(key)}')
            if len(set(key)) != len(key):
                raise self._error(stream, t, f'duplicate joint names in {list(key)}')
            order = self.columns[key] = np.array([key.index(j) for j in self.joint_names])
        return order

    def _joint_rows(self, layout: _JointStateLayout, rows: list) -> tuple[np.ndarray, np.ndarray]:
        """Unpacked rows of one layout -> stamps (N,) [s], values (N, 2 nv or 3 nv)."""
        table = np.array(rows, dtype=float)
        t = table[:, 0] + 1e-9 * table[:, 1]
        n = len(layout.names)
        need = 3 if self.effort else 2
        for field, count in zip(('position', 'velocity', 'effort')[:need], layout.counts):
            if count != n:
                raise self._error('joints', float(t[0]), f'{field} has {count} values for '
                                  f'{n} joint names' + (' (torque_source joint_states.effort '
                                                        'needs efforts)' if field == 'effort'
                                                        else ''))
        order = self._order('joints', float(t[0]), layout.names)
        # Columns: sec, nanosec, count, position..., count, velocity..., count, effort...
        cols = np.concatenate([3 + k * (n + 1) + order for k in range(need)])
        return t, table[:, cols]

    def _joint_message(self, raw) -> tuple[float, np.ndarray]:
        """Slow path: rosbags deserialisation (ROS 1 bags, big-endian CDR)."""
        msg = self.reader.deserialize(raw, JOINT_STATE)
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        order = self._order('joints', t, msg.name)
        fields = [msg.position, msg.velocity] + ([msg.effort] if self.effort else [])
        for name, field in zip(('position', 'velocity', 'effort'), fields):
            if len(field) != len(msg.name):
                raise self._error('joints', t, f'{name} has {len(field)} values for '
                                  f'{len(msg.name)} joint names')
        return t, np.concatenate([np.asarray(f, float)[order] for f in fields])

    def _other_message(self, stream: str, conn, bag_ns: int, raw) -> tuple[float, np.ndarray]:
        msg = self.reader.deserialize(raw, conn.msgtype)
        if conn.msgtype == POSE_STAMPED:
            p, o = msg.pose.position, msg.pose.orientation
            t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            return t, np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w])
        if conn.msgtype == JOINT_STATE:
            t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            effort = np.asarray(msg.effort, float)
            if len(effort) != len(msg.name):
                raise self._error(stream, t, f'effort has {len(effort)} values for '
                                  f'{len(msg.name)} joint names')
            return t, effort[self._order(stream, t, msg.name)]
        # Float64MultiArray has no header: its bag (receive) time stands in for the stamp.
        t = bag_ns * 1e-9
        values = np.asarray(msg.data, float)
        if len(values) != len(self.joint_names):
            raise self._error(stream, t, f'expected {len(self.joint_names)} torques (joints '
                              f'{list(self.joint_names)}), got {len(values)}')
        return t, values

    # -- the pass ----------------------------------------------------------------------------

    def segments(self, start_ns: int | None, stop_ns: int | None) -> list[BagSegment]:
        """Read messages in [start_ns, stop_ns) bag time; cut at gaps; resample."""
        self.found: list[BagSegment] = []
        self.aligner = _Aligner(self.rate, self.streams)
        self.last_joint_t: float | None = None
        self.previous_quat: dict[str, np.ndarray] = {}
        self.latest: dict[str, float] = {}     # newest stamp per stream [s]
        fast: list = []                          # unpacked rows of `self.layout`
        slow: list = []                          # (t, values) of other messages, per stream
        others = {s: [] for s in self.streams}
        conns = [conn for _, conn in self.conns.values()]
        # One rosbag2 (or one ROS 1 file): its own reader, without AnyReader's merge layer.
        source = (self.reader.readers[0] if len(self.reader.readers) == 1 else self.reader)
        for conn, ns, raw in source.messages(connections=conns, start=start_ns, stop=stop_ns):
            self.messages += 1
            stream = self.conns[conn.id][0]
            if stream != 'joints':
                others[stream].append(self._other_message(stream, conn, ns, raw))
                continue
            layout = self.layout
            if (layout is not None and len(raw) == layout.length
                    and raw[12:layout.values_at] == layout.prefix):
                fast.append(layout.values.unpack_from(raw, 4))
            else:
                self._close_fast(fast, others)
                fast = []
                new = self._layout(raw) if self.reader.is2 else None
                if new is None:
                    slow.append(self._joint_message(raw))
                    if len(slow) >= CHUNK:
                        self._close_slow(slow, others)
                        slow = []
                else:
                    self.layout = new
                    fast.append(new.values.unpack_from(raw, 4))
            if len(fast) >= CHUNK:
                self._close_fast(fast, others)
                fast = []
        self._close_fast(fast, others)
        self._close_slow(slow, others)
        self._feed(np.empty(0), np.empty((0, 0)), others)
        self._finish()
        return self.found

    def _layout(self, raw) -> _JointStateLayout | None:
        try:
            return _joint_state_layout(raw)
        except (struct.error, UnicodeDecodeError) as exc:
            raise DataError(f'{self.path}: topic {self.topic_of["joints"]}: cannot decode a '
                            f'sensor_msgs/JointState message ({exc})') from None

    def _close_fast(self, rows: list, others: dict) -> None:
        if rows:
            self._feed(*self._joint_rows(self.layout, rows), others)

    def _close_slow(self, items: list, others: dict) -> None:
        if items:
            self._feed(np.array([t for t, _ in items]), np.stack([v for _, v in items]),
                       others)

    def _feed(self, t: np.ndarray, values: np.ndarray, others: dict) -> None:
        """Add joint states (and the other streams' messages so far) to the aligner, starting
        a new trajectory at every pause longer than `data.gap`."""
        if len(t):
            bad = ~np.isfinite(values)
            if bad.any():
                row, col = np.argwhere(bad)[0]
                field = ('position', 'velocity', 'effort')[col // len(self.joint_names)]
                joint = self.joint_names[col % len(self.joint_names)]
                raise self._error('joints', float(t[row]), f'non-finite {field} '
                                  f'({values[row, col]}) of joint {joint!r}')
            t, values = self._increasing('joints', t, values)
        other = {}
        for stream, items in others.items():
            if items:
                ts = np.array([x for x, _ in items])
                vs = np.stack([v for _, v in items])
                if not np.all(np.isfinite(vs)):
                    raise self._error(stream, float(ts[np.argmax(~np.isfinite(vs).all(1))]),
                                      'non-finite value')
                if stream in self.data.mocap_topics:
                    vs[:, 3:] = continuous_quaternions(vs[:, 3:], self.previous_quat.get(stream))
                    self.previous_quat[stream] = vs[-1, 3:]
                other[stream] = self._increasing(stream, ts, vs)
                items.clear()
        if self.last_joint_t is None:
            starts = np.flatnonzero(np.diff(t) > self.data.gap) + 1
        else:
            starts = np.flatnonzero(np.diff(t, prepend=self.last_joint_t) > self.data.gap)
        bounds = [float(x) for x in t[starts]]   # each starts a new trajectory
        start = 0
        for cut_t in bounds + [math.inf]:
            stop = int(np.searchsorted(t, cut_t, side='left'))
            self.aligner.add('joints', t[start:stop], values[start:stop])
            for stream, (ts, vs) in other.items():
                pick = ts < cut_t
                self.aligner.add(stream, ts[pick], vs[pick])
                other[stream] = (ts[~pick], vs[~pick])
            if math.isfinite(cut_t):
                self._finish()
                self.aligner = _Aligner(self.rate, self.streams)
            start = stop
        self.aligner.flush()
        if len(t):
            self.last_joint_t = float(t[-1])

    def _increasing(self, stream: str, t: np.ndarray, values: np.ndarray):
        """Drop samples whose stamp is not later than every earlier one of the stream, also
        across chunks (counted, warned about at the end)."""
        latest = self.latest.get(stream, -math.inf)
        keep = t > np.maximum.accumulate(np.concatenate([[latest], t]))[:-1]
        self.dropped += int((~keep).sum())
        if len(t):
            self.latest[stream] = max(latest, float(t.max()))
        return t[keep], values[keep]

    def _finish(self) -> None:
        """Close the current trajectory."""
        result = self.aligner.result()
        missing = [s for s in self.aligner.missing() if s != 'joints']
        if result is None:
            if 'joints' not in self.aligner.missing() and missing:
                raise DataError(f'{self.path}: topic {self.topic_of[missing[0]]}: no messages '
                                'during the joint states of a trajectory')
            return
        grid, out = result
        nv = len(self.joint_names)
        joints = out['joints']
        tau = drivers.joint_torques(joints[:, 2 * nv:] if self.effort else out['torque'],
                                    self.data)
        mocap_p = mocap_q = None
        if self.data.mocap_topics:
            poses = np.stack([out[s] for s in self.data.mocap_topics], axis=1)
            mocap_p = poses[..., :3]
            mocap_q = poses[..., 3:] / np.linalg.norm(poses[..., 3:], axis=-1, keepdims=True)
        traj = Trajectory(t=grid, q=joints[:, :nv], qd=joints[:, nv:2 * nv], tau=tau,
                          joint_names=self.joint_names,
                          source=f'{self.path} (trajectory {len(self.found)})',
                          mocap_position=mocap_p, mocap_orientation=mocap_q)
        self.found.append(BagSegment(hold_torques(traj, self.data.torque_samples)))


def read_bag(path, joint_names: Sequence[str], data) -> list[BagSegment]:
    """Read a recording into resampled trajectories, streaming (memory bounded by the output).

    Reads rosbag2 folders (sqlite3, mcap) and ROS 1 `.bag` files through `rosbags`; only the
    configured topics are decoded: `data.joint_states_topic` (sensor_msgs/JointState, joints
    matched by name in any order), the torques (`data.torque_source`: the joint states'
    efforts, or a sensor_msgs/JointState or std_msgs/Float64MultiArray topic in model joint
    order), times `data.torque_gains`, and `data.mocap_topics` (geometry_msgs/PoseStamped).
    Messages are keyed by their header stamps (Float64MultiArray: bag time) and resampled
    onto the grid k / `data.rate` by linear interpolation, as the live `WindowBuffer` does.
    The recording is cut wherever the joint states pause longer than `data.gap`, within the
    `data.segments` time ranges (bag time after the bag's start) if given. Samples with
    repeated or decreasing stamps are dropped with a warning, as are the messages of a topic
    that carries other message types beside the configured one.

    Args:
      path: the bag (a rosbag2 folder or a ROS 1 `.bag` file).
      joint_names: (nv,) the model's joints, the column order of the trajectories.
      data: the `DataConfig`.

    Returns:
      The trajectories in time order; those with fewer than 2 samples are left out.

    Raises:
      DataError: naming the bag and the topic, joint or time: a missing, truncated or
        corrupted bag, a missing topic, a topic of another message type, a joint missing from
        the messages, non-finite values, no data in the time range.
    """
    from rosbags.highlevel import AnyReader, AnyReaderError

    path = pathlib.Path(path)
    if not path.exists():
        raise DataError(f'{path}: bag not found')
    try:
        reader = AnyReader([path])
        reader.open()
    except (AnyReaderError, OSError, ValueError, KeyError) as exc:
        raise DataError(f'{path}: cannot open as a rosbag ({exc})') from None
    try:
        bag = _BagReader(reader, str(path), joint_names, data)
        pairs = data.segments
        origin = reader.start_time
        ranges = ([(origin + round(a * NS_PER_S), origin + round(b * NS_PER_S))
                   for a, b in zip(pairs[::2], pairs[1::2])] or [(None, None)])
        found = []
        for start, stop in ranges:
            found += bag.segments(start, stop)
    except (AnyReaderError, OSError, struct.error) as exc:
        raise DataError(f'{path}: cannot read the bag, it may be truncated or corrupted '
                        f'({exc})') from None
    finally:
        reader.close()
    for topic in bag.ignored:
        warnings.warn(f'{path}: topic {topic}: messages of another type on the topic were '
                      'left out', UserWarning, stacklevel=2)
    if bag.dropped:
        warnings.warn(f'{path}: dropped {bag.dropped} messages whose header stamp did not '
                      'increase', UserWarning, stacklevel=2)
    if not found:
        where = (f'in the time ranges data.segments = {list(data.segments)} s'
                 if data.segments else 'in the bag')
        raise DataError(f'{path}: topic {data.joint_states_topic}: no trajectory {where} '
                        f'({bag.messages} messages read)')
    return found


def split_holdout(segments: Sequence, share: float) -> tuple[list, list]:
    """(fit, held out): the last round(share * N) items are held out; with share > 0 at least
    one is, and at least one stays for the fit (a single item is never held out)."""
    num = len(segments)
    held = 0 if share <= 0.0 or num < 2 else min(max(int(round(share * num)), 1), num - 1)
    return list(segments[:num - held]), list(segments[num - held:])
