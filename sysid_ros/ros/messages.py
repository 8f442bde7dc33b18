"""ROS 2 messages <-> NumPy arrays; nothing else (no validation beyond shapes, no maths).

  * stamps: `builtin_interfaces/Time` <-> seconds (float) [s];
  * `sensor_msgs/JointState` <-> (t, names, position, velocity, effort), optionally reordered
    by name into the model's joint order;
  * `std_msgs/Float64MultiArray` (what ros2_control's forward command controllers take)
    <-> (n,) torque commands;
  * `geometry_msgs/PoseStamped` <-> (t, frame_id, position (3,), quaternion (4,)), the
    quaternion in ROS order [x, y, z, w].

Readers never raise on bad values (NaN, wrong lengths): they return what the message holds and
leave the checks to `sysid_ros.io.window_buffer.WindowBuffer`, which counts them.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

__all__ = [
    'JointStateArrays',
    'stamp_to_seconds',
    'seconds_to_stamp',
    'joint_state_to_arrays',
    'arrays_to_joint_state',
    'reorder_by_name',
    'torque_command_to_array',
    'array_to_torque_command',
    'PoseArrays',
    'pose_to_arrays',
    'arrays_to_pose',
]

_NS = 1_000_000_000


class JointStateArrays(NamedTuple):
    """The contents of a JointState.

    Attributes:
      t: header stamp [s].
      names: (n,) joint names, in message order.
      position: (n,) [rad, m]; velocity: (n,) [rad/s, m/s]; effort: (n,) [N m, N]. Each may be
        empty (the message leaves it out) or, in a broken message, of another length.
    """

    t: float
    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class PoseArrays(NamedTuple):
    """The contents of a PoseStamped: stamp [s], frame_id, position (3,) [m], quaternion (4,)
    [x, y, z, w]."""

    t: float
    frame_id: str
    position: np.ndarray
    orientation: np.ndarray


def stamp_to_seconds(stamp: Time) -> float:
    """builtin_interfaces/Time -> seconds [s]."""
    return stamp.sec + stamp.nanosec * 1e-9


def seconds_to_stamp(t: float) -> Time:
    """Seconds [s] -> builtin_interfaces/Time, rounded to the nearest nanosecond.

    Raises:
      ValueError: for a non-finite time.
    """
    if not math.isfinite(t):
        raise ValueError(f'seconds_to_stamp: expected a finite time, got {t!r}')
    sec = math.floor(t)                         # nanosec in [0, 1e9), also for t < 0
    nanosec = int(round((t - sec) * _NS))
    if nanosec == _NS:
        sec, nanosec = sec + 1, 0
    return Time(sec=int(sec), nanosec=nanosec)


def _array(values) -> np.ndarray:
    return np.array(values, dtype=float)


def joint_state_to_arrays(msg: JointState) -> JointStateArrays:
    """JointState -> (t, names, position, velocity, effort) in message order (copies)."""
    return JointStateArrays(stamp_to_seconds(msg.header.stamp), tuple(msg.name),
                            _array(msg.position), _array(msg.velocity), _array(msg.effort))


def reorder_by_name(names: Sequence[str], values, joint_names: Sequence[str]) -> np.ndarray:
    """Columns `values` (..., n) given in the order of `names` -> (..., nv) in `joint_names`
    order; names not in `joint_names` are dropped.

    Raises:
      ValueError: a joint of `joint_names` missing from `names`, or a length mismatch.
    """
    values = np.asarray(values, dtype=float)
    names = list(names)
    if values.shape[-1:] != (len(names),):
        raise ValueError(f'expected {len(names)} values (one per name), got shape '
                         f'{values.shape}')
    missing = [j for j in joint_names if j not in names]
    if missing:
        raise ValueError(f'no value for joint {missing[0]!r}; the message names {names}')
    return values[..., [names.index(j) for j in joint_names]]


def arrays_to_joint_state(t: float, names: Sequence[str], position=(), velocity=(),
                          effort=(), frame_id: str = '') -> JointState:
    """(t, names, arrays) -> JointState; empty arrays leave the field out.

    Args:
      t: stamp [s].
      names: (n,) joint names.
      position, velocity, effort: (n,) or empty.
      frame_id: header frame.
    """
    msg = JointState()
    msg.header.stamp = seconds_to_stamp(t)
    msg.header.frame_id = frame_id
    msg.name = [str(n) for n in names]
    msg.position = _array(position).ravel()
    msg.velocity = _array(velocity).ravel()
    msg.effort = _array(effort).ravel()
    return msg


def torque_command_to_array(msg: Float64MultiArray) -> np.ndarray:
    """Float64MultiArray -> (n,) values after `layout.data_offset` (copy)."""
    return _array(msg.data)[msg.layout.data_offset:]


def array_to_torque_command(values, label: str = 'joints') -> Float64MultiArray:
    """(n,) torque commands -> Float64MultiArray with one layout dimension named `label`."""
    data = _array(values).ravel()
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=label, size=len(data), stride=len(data))]
    msg.data = data
    return msg


def pose_to_arrays(msg: PoseStamped) -> PoseArrays:
    """PoseStamped -> (t, frame_id, position (3,), quaternion (4,) [x, y, z, w])."""
    p, o = msg.pose.position, msg.pose.orientation
    return PoseArrays(stamp_to_seconds(msg.header.stamp), msg.header.frame_id,
                      np.array([p.x, p.y, p.z]), np.array([o.x, o.y, o.z, o.w]))


def arrays_to_pose(t: float, position, orientation, frame_id: str = 'world') -> PoseStamped:
    """(t, position (3,) [m], quaternion (4,) [x, y, z, w]) -> PoseStamped."""
    p = [float(v) for v in np.asarray(position, dtype=float).ravel()]
    o = [float(v) for v in np.asarray(orientation, dtype=float).ravel()]
    if len(p) != 3 or len(o) != 4:
        raise ValueError(f'arrays_to_pose: expected 3 position and 4 quaternion values, got '
                         f'{len(p)} and {len(o)}')
    msg = PoseStamped()
    msg.header.stamp = seconds_to_stamp(t)
    msg.header.frame_id = frame_id
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = p
    (msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z,
     msg.pose.orientation.w) = o
    return msg
