"""Rosbags written without ROS: `Trajectory` objects as rosbag2 bags (sqlite3 or mcap).

`write_trajectory_bag` stores `sensor_msgs/msg/JointState` messages (position, velocity,
effort = tau), optionally with `geometry_msgs/msg/PoseStamped` topics, through `rosbags`;
every message under the nanosecond of its header stamp. Consecutive trajectories are
separated by at least `TRAJECTORY_GAP` seconds without messages, so that `bags.read_bag`
cuts them apart again. `new_bag` is the writer that every bag of this package goes through:
staged beside its path and renamed into place, never overwriting.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import pathlib
import shutil
import struct
import tempfile
from typing import Mapping, Sequence

import numpy as np

from sysid_ros.io.bags import CHUNK, JOINT_STATE, NS_PER_S, POSE_STAMPED
from sysid_ros.io.trajectory import Trajectory

__all__ = ['STORAGES', 'TRAJECTORY_GAP', 'new_bag', 'write_trajectory_bag']

STORAGES = ('sqlite3', 'mcap')
# Silence written between consecutive trajectories [s]; more than any sensible `data.gap`.
TRAJECTORY_GAP = 2.0


def _typestore():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.LATEST)


def _stamp(types, t_ns: int):
    return types['builtin_interfaces/msg/Time'](sec=int(t_ns // NS_PER_S),
                                                nanosec=int(t_ns % NS_PER_S))


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
        head = b'\0\1\0\0' + struct.pack('<iI', t_ns // NS_PER_S, t_ns % NS_PER_S)
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
    pose_cls, point_cls = types[POSE_STAMPED], types['geometry_msgs/msg/Point']
    pose_body_cls = types['geometry_msgs/msg/Pose']
    quat_cls = types['geometry_msgs/msg/Quaternion']

    pose_arrays = {}
    for k, topic in enumerate(mocap_topics):
        if any(traj.num_tracked <= k for traj in trajectories):
            raise ValueError(f'mocap_topics[{k}] ({topic}): expected every trajectory to carry '
                             f'the poses of at least {k + 1} tracked frames, got '
                             f'{[traj.num_tracked for traj in trajectories]}')
        stamps = np.concatenate([np.round((np.asarray(traj.t, float) + offset) * NS_PER_S)
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
        stamps = np.round((t + shift) * NS_PER_S).astype(np.int64)
        pose_arrays[topic] = (stamps, position, quaternion)

    def joint_state_messages(conn):
        for traj, offset in zip(trajectories, offsets):
            encoder = _JointStateEncoder(traj.joint_names)
            stamps = np.round((np.asarray(traj.t, float) + offset) * NS_PER_S).astype(np.int64)
            for k in range(0, len(stamps), CHUNK):     # Python lists of one chunk at a time
                pick = slice(k, k + CHUNK)
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
            yield t_ns, conn, typestore.serialize_cdr(msg, POSE_STAMPED)

    with new_bag(path, storage) as writer:
        for key, value in (custom_data or {}).items():
            writer.set_custom_data(str(key), str(value))
        streams = [joint_state_messages(
            writer.add_connection(joint_states_topic, JOINT_STATE, typestore=typestore))]
        for topic, arrays in pose_arrays.items():
            conn = writer.add_connection(topic, POSE_STAMPED, typestore=typestore)
            streams.append(pose_messages(conn, *arrays))
        # Time order across topics, as a recorder would store them.
        for t_ns, conn, data in heapq.merge(*streams, key=lambda item: item[0]):
            writer.write(conn, t_ns, data)
