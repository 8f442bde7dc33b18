"""Rosbag I/O without ROS: write trajectories as bags, read bags back into trajectories.

Writing (`write_trajectory_bag`) turns `Trajectory` objects into a rosbag2 (sqlite3 or mcap)
of `sensor_msgs/msg/JointState` messages (position, velocity, effort = tau), optionally with
`geometry_msgs/msg/PoseStamped` topics, through `rosbags`. Every message is stored under the
nanosecond of its header stamp. Consecutive trajectories are separated by at least
`TRAJECTORY_GAP` seconds without messages, so that the reader cuts them apart again.

Reading (`read_bag`) streams rosbag2 (sqlite3, mcap) and ROS 1 bags through `rosbags`,
decoding only the configured topics, and resamples them onto the grid k / `data.rate` with
the live `WindowBuffer`'s interpolation (`window_buffer.interpolate`), `_CHUNK` messages at a
time: memory grows with the resampled output, not with the bag. Joint states in little-endian
CDR (every rosbag2) are decoded by a precompiled `struct` layout per distinct name list
(checked against rosbags' serialiser by the tests); others go through rosbags. The recording
is cut into trajectories at pauses longer than `data.gap`, within `data.segments` if given;
`split_holdout` keeps the last `data.holdout` share of them for evaluation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import math
import os
import pathlib
import shutil
import struct
import tempfile
import warnings
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from sysid_ros.io.config import TORQUE_FROM_JOINT_STATES
from sysid_ros.io.trajectory import DataError, Trajectory, continuous_quaternions, hold_torques
from sysid_ros.io.window_buffer import interpolate

__all__ = [
    'STORAGES',
    'TRAJECTORY_GAP',
    'BagSegment',
    'new_bag',
    'write_trajectory_bag',
    'read_bag',
    'split_holdout',
]

STORAGES = ('sqlite3', 'mcap')
# Silence written between consecutive trajectories [s]; more than any sensible `data.gap`.
TRAJECTORY_GAP = 2.0
_NS = 1_000_000_000
_JOINT_STATE = 'sensor_msgs/msg/JointState'
_POSE_STAMPED = 'geometry_msgs/msg/PoseStamped'
# Messages encoded, or decoded before they are resampled, at a time (bounds the memory).
_CHUNK = 20_000


def _typestore():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.LATEST)


def _stamp(types, t_ns: int):
    return types['builtin_interfaces/msg/Time'](sec=int(t_ns // _NS), nanosec=int(t_ns % _NS))


def _cdr_string(text: str, pos: int) -> tuple[bytes, int]:
    """CDR string at body offset `pos` (4-aligned): length with NUL, bytes, NUL; new offset."""
    data = text.encode() + b'\0'
    out = struct.pack('<I', len(data)) + data
    pad = -(pos + len(out)) % 4
    return out + b'\0' * pad, pos + len(out) + pad


class _JointStateEncoder:
    """Little-endian CDR of sensor_msgs/msg/JointState for one fixed list of joint names
    (what `typestore.serialize_cdr` produces, about 20 times faster; checked by the tests)."""

    def __init__(self, names: Sequence[str], frame_id: str = ''):
        frame, pos = _cdr_string(frame_id, 8)
        parts, pos = [frame, struct.pack('<I', len(names))], pos + 4
        for name in names:
            data, pos = _cdr_string(name, pos)
            parts.append(data)
        self._names = b''.join(parts)
        n = len(names)
        pad = -(pos + 4) % 8                    # doubles are 8-aligned in the CDR body
        self._values = struct.Struct(f'<I{pad}x{n}dI4x{n}dI4x{n}d' if n else '<III')
        self._n = n

    def encode(self, t_ns: int, position, velocity, effort) -> bytes:
        n = self._n
        head = b'\0\1\0\0' + struct.pack('<iI', t_ns // _NS, t_ns % _NS)
        return head + self._names + self._values.pack(n, *position, n, *velocity, n, *effort)


def _offsets(trajectories: Sequence[Trajectory]) -> list[float]:
    """Time shift [s] per trajectory: none where it already starts `TRAJECTORY_GAP` after the
    previous one ends (and at t >= 0), else just enough for that."""
    offsets, previous_end = [], None
    for traj in trajectories:
        start = float(traj.t[0])
        earliest = 0.0 if previous_end is None else previous_end + TRAJECTORY_GAP
        offsets.append(max(0.0, earliest - start))
        previous_end = float(traj.t[-1]) + offsets[-1]
    return offsets


def _pose_offsets(t: np.ndarray, trajectories: Sequence[Trajectory], offsets, topic: str
                  ) -> np.ndarray:
    """The shift of the trajectory that each pose stamp falls into (original clock)."""
    if not any(offsets):
        return np.zeros_like(t)
    starts = np.array([float(traj.t[0]) for traj in trajectories])
    ends = np.array([float(traj.t[-1]) for traj in trajectories])
    if np.any(starts[1:] <= ends[:-1]):
        raise ValueError(f'poses[{topic!r}]: the trajectories overlap in time, so pose stamps '
                         'cannot be assigned to one of them; give trajectories on one clock')
    index = np.clip(np.searchsorted(starts, t, side='right') - 1, 0, len(starts) - 1)
    return np.asarray(offsets)[index]


def _check_trajectory(k: int, traj: Trajectory) -> None:
    names = tuple(traj.joint_names)
    if len(names) != traj.nv or len(set(names)) != len(names):
        raise ValueError(f'trajectories[{k}]: expected {traj.nv} unique joint_names, got '
                         f'{list(names)}')
    for key in ('q', 'qd', 'tau'):
        shape = np.shape(getattr(traj, key))
        if shape != (traj.num_samples, traj.nv):
            raise ValueError(f'trajectories[{k}].{key}: expected shape '
                             f'({traj.num_samples}, {traj.nv}), got {shape}')
    if not np.all(np.diff(traj.t) > 0.0):
        raise ValueError(f'trajectories[{k}].t: expected strictly increasing times')


@contextlib.contextmanager
def new_bag(path, storage: str = 'sqlite3'):
    """A `rosbags.rosbag2.Writer` for the new bag `path`, written in a temporary folder beside
    it and renamed into place when the block ends without an error (else removed).

    Raises:
      FileExistsError: `path` exists.
      ValueError: unknown storage.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer

    path = pathlib.Path(path)
    if storage not in STORAGES:
        raise ValueError(f'storage: expected one of {STORAGES}, got {storage!r}')
    if os.path.lexists(path):
        raise FileExistsError(f'{path}: exists already; a bag is never overwritten')
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f'.{path.name}.tmp-', dir=path.parent))
    plugin = StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3
    try:
        # The storage file is named after the folder: stage under the final name.
        with Writer(staging / path.name, version=Writer.VERSION_LATEST,
                    storage_plugin=plugin) as writer:
            yield writer
        os.rename(staging / path.name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_trajectory_bag(path, trajectories: Sequence[Trajectory], *, storage: str = 'sqlite3',
                         joint_states_topic: str = '/joint_states',
                         custom_data: Mapping[str, str] | None = None,
                         poses: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
                         | None = None, mocap_topics: Sequence[str] = ()) -> None:
    """Write trajectories as sensor_msgs/JointState (position, velocity, effort=tau) to a new
    rosbag2 at `path` (storage 'sqlite3' or 'mcap'); consecutive trajectories are separated by a
    time gap so that the reader cuts them apart again; `custom_data` goes into the bag's
    metadata (record the conversion provenance there); `poses`: optional PoseStamped topics
    {topic: (t (T,), position (T,3) [m], quaternion xyzw (T,4))}; `mocap_topics` (K,): the
    trajectories' own poses (`Trajectory.mocap_position`, `mocap_orientation`) as PoseStamped
    topics, one per tracked frame, stamped like the joint states. Written atomically
    (temporary folder, then rename); an existing `path` is an error.

    Times: a trajectory keeps its stamps if it starts at t >= 0 and at least `TRAJECTORY_GAP`
    seconds after the previous one ends; otherwise it is shifted by just enough. Pose stamps are
    in the trajectories' clock and move with the trajectory they fall into.

    Raises:
      FileExistsError: `path` exists.
      ValueError: unknown storage, no trajectories, inconsistent shapes or names, a mocap
        topic for a frame that a trajectory has no poses of.
    """
    if not trajectories:
        raise ValueError('trajectories: expected at least one trajectory')
    for k, traj in enumerate(trajectories):
        _check_trajectory(k, traj)
    offsets = _offsets(trajectories)
    typestore = _typestore()
    types = typestore.types
    header_cls = types['std_msgs/msg/Header']
    pose_cls, point_cls = types[_POSE_STAMPED], types['geometry_msgs/msg/Point']
    pose_body_cls = types['geometry_msgs/msg/Pose']
    quat_cls = types['geometry_msgs/msg/Quaternion']

    pose_arrays = {}
    for k, topic in enumerate(mocap_topics):
        if any(traj.num_tracked <= k for traj in trajectories):
            raise ValueError(f'mocap_topics[{k}] ({topic}): expected every trajectory to carry '
                             f'the poses of at least {k + 1} tracked frames, got '
                             f'{[traj.num_tracked for traj in trajectories]}')
        stamps = np.concatenate([np.round((np.asarray(traj.t, float) + offset) * _NS)
                                 for traj, offset in zip(trajectories, offsets)])
        pose_arrays[topic] = (stamps.astype(np.int64),
                              np.concatenate([traj.mocap_position[:, k] for traj in trajectories]),
                              np.concatenate([traj.mocap_orientation[:, k]
                                              for traj in trajectories]))
    for topic, (t, position, quaternion) in (poses or {}).items():
        t = np.asarray(t, float).reshape(-1)
        try:
            position = np.asarray(position, float).reshape(len(t), 3)
            quaternion = np.asarray(quaternion, float).reshape(len(t), 4)
        except ValueError:
            raise ValueError(f'poses[{topic!r}]: expected t (T,), position (T, 3) and '
                             f'quaternion (T, 4) with T = {len(t)}') from None
        if not np.all(np.diff(t) > 0.0):
            raise ValueError(f'poses[{topic!r}]: expected strictly increasing times')
        shift = _pose_offsets(t, trajectories, offsets, topic)
        pose_arrays[topic] = (np.round((t + shift) * _NS).astype(np.int64), position, quaternion)

    def joint_state_messages(conn):
        for traj, offset in zip(trajectories, offsets):
            encoder = _JointStateEncoder(traj.joint_names)
            stamps = np.round((np.asarray(traj.t, float) + offset) * _NS).astype(np.int64)
            for k in range(0, len(stamps), _CHUNK):     # Python lists of one chunk at a time
                pick = slice(k, k + _CHUNK)
                rows = zip(stamps[pick].tolist(), *(np.asarray(x[pick], float).tolist()
                                                    for x in (traj.q, traj.qd, traj.tau)))
                for t_ns, q, qd, tau in rows:
                    yield t_ns, conn, encoder.encode(t_ns, q, qd, tau)

    def pose_messages(conn, stamps, position, quaternion):
        for k, t_ns in enumerate(stamps.tolist()):
            x, y, z = position[k].tolist()
            qx, qy, qz, qw = quaternion[k].tolist()
            pose = pose_body_cls(position=point_cls(x=x, y=y, z=z),
                                 orientation=quat_cls(x=qx, y=qy, z=qz, w=qw))
            msg = pose_cls(header=header_cls(stamp=_stamp(types, t_ns), frame_id='world'),
                           pose=pose)
            yield t_ns, conn, typestore.serialize_cdr(msg, _POSE_STAMPED)

    with new_bag(path, storage) as writer:
        for key, value in (custom_data or {}).items():
            writer.set_custom_data(str(key), str(value))
        streams = [joint_state_messages(
            writer.add_connection(joint_states_topic, _JOINT_STATE, typestore=typestore))]
        for topic, arrays in pose_arrays.items():
            conn = writer.add_connection(topic, _POSE_STAMPED, typestore=typestore)
            streams.append(pose_messages(conn, *arrays))
        # Time order across topics, as a recorder would store them.
        for t_ns, conn, data in heapq.merge(*streams, key=lambda item: item[0]):
            writer.write(conn, t_ns, data)


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------

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
        wanted = {data.joint_states_topic: ('joints', (_JOINT_STATE,))}
        if not self.effort:
            wanted[data.torque_source] = ('torque', (_FLOAT_ARRAY, _JOINT_STATE))
        for topic in data.mocap_topics:
            wanted[topic] = (topic, (_POSE_STAMPED,))
        self.topic_of = {'joints': data.joint_states_topic, 'torque': data.torque_source}
        topics = {c.topic: c.msgtype for c in reader.connections}
        for topic, (stream, types) in wanted.items():
            if topic not in topics:
                raise DataError(f'{path}: topic {topic} not in the bag; it has '
                                f'{sorted(topics) or "no topics"}')
            if topics[topic] not in types:
                raise DataError(f'{path}: topic {topic}: expected messages of type '
                                f'{" or ".join(types)}, got {topics[topic]}')
            self.topic_of[stream] = topic
            for conn in reader.connections:
                if conn.topic == topic:
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
        msg = self.reader.deserialize(raw, _JOINT_STATE)
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
        if conn.msgtype == _POSE_STAMPED:
            p, o = msg.pose.position, msg.pose.orientation
            t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            return t, np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w])
        if conn.msgtype == _JOINT_STATE:
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
                    if len(slow) >= _CHUNK:
                        self._close_slow(slow, others)
                        slow = []
                else:
                    self.layout = new
                    fast.append(new.values.unpack_from(raw, 4))
            if len(fast) >= _CHUNK:
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
                    vs[:, 3:] = continuous_quaternions(vs[:, 3:],
                                                        self.previous_quat.get(stream))
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
        tau = joints[:, 2 * nv:] if self.effort else out['torque']
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
    order) and `data.mocap_topics` (geometry_msgs/PoseStamped). Messages are keyed by their
    header stamps (Float64MultiArray: bag time) and resampled onto the grid k / `data.rate`
    by linear interpolation, as the live `WindowBuffer` does. The recording is cut wherever the
    joint states pause longer than `data.gap`, within the `data.segments` time ranges (bag
    time after the bag's start) if given. Samples with repeated or decreasing stamps are
    dropped with a warning.

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
        ranges = ([(reader.start_time + round(a * _NS), reader.start_time + round(b * _NS))
                   for a, b in zip(pairs[::2], pairs[1::2])] or [(None, None)])
        found = []
        for start, stop in ranges:
            found += bag.segments(start, stop)
    except (AnyReaderError, OSError, struct.error) as exc:
        raise DataError(f'{path}: cannot read the bag, it may be truncated or corrupted '
                        f'({exc})') from None
    finally:
        reader.close()
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
