"""ROS 2 messages <-> NumPy arrays; nothing else (no validation beyond shapes, no maths).

  * stamps: `builtin_interfaces/Time` <-> seconds (float) [s];
  * `sensor_msgs/JointState` <-> (t, names, position, velocity, effort), optionally reordered
    by name into the model's joint order;
  * `std_msgs/Float64MultiArray` (what ros2_control's forward command controllers take)
    <-> (n,) torque commands;
  * `geometry_msgs/PoseStamped` <-> (t, frame_id, position (3,), quaternion (4,)), the
    quaternion in ROS order [x, y, z, w];
  * (mass, com (3,), inertia about the com (3, 3)) -> `geometry_msgs/InertiaStamped`;
  * named particles (P, M) <-> `sensor_msgs/PointCloud2`, one point per particle, one FLOAT64
    field per name;
  * (t (T,), names, q (T, n), qd (T, n)) <-> `trajectory_msgs/JointTrajectory` stamped at t[0],
    each point at t - t[0].

Readers never raise on bad values (NaN, wrong lengths): they return what the message holds and
leave the checks to `sysid_ros.io.window_buffer.WindowBuffer`, which counts them.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import InertiaStamped, PoseStamped
import numpy as np
from sensor_msgs.msg import JointState, PointCloud2, PointField
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from sysid_ros_interfaces.msg import ParameterEstimate
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

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
    'arrays_to_inertia',
    'arrays_to_estimate',
    'particles_to_cloud',
    'cloud_to_particles',
    'TrajectoryArrays',
    'arrays_to_trajectory',
    'trajectory_to_arrays',
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


class TrajectoryArrays(NamedTuple):
    """The contents of a JointTrajectory: t (T,) [s] (stamp + time_from_start), names (n,),
    q (T, n) [rad, m], qd (T, n) [rad/s, m/s], qdd (T, n) [rad/s^2, m/s^2] (None unless
    every point has n accelerations)."""

    t: np.ndarray
    names: tuple[str, ...]
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray | None = None


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
      position: (n,) positions [rad, m], or empty.
      velocity: (n,) velocities [rad/s, m/s], or empty.
      effort: (n,) efforts [N m, N], or empty.
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


def arrays_to_inertia(t: float, frame_id: str, mass: float, com, inertia) -> InertiaStamped:
    """(t, frame, mass [kg], com (3,) [m], inertia about the com (3, 3) [kg m^2]) ->
    InertiaStamped."""
    com = np.asarray(com, dtype=float)
    i = np.asarray(inertia, dtype=float)
    msg = InertiaStamped()
    msg.header.stamp = seconds_to_stamp(t)
    msg.header.frame_id = frame_id
    msg.inertia.m = float(mass)
    msg.inertia.com.x, msg.inertia.com.y, msg.inertia.com.z = (float(v) for v in com)
    (msg.inertia.ixx, msg.inertia.ixy, msg.inertia.ixz, msg.inertia.iyy, msg.inertia.iyz,
     msg.inertia.izz) = (float(i[0, 0]), float(i[0, 1]), float(i[0, 2]), float(i[1, 1]),
                         float(i[1, 2]), float(i[2, 2]))
    return msg


def arrays_to_estimate(t: float, names: Sequence[str], mean, covariance,
                       converged: bool) -> ParameterEstimate:
    """(t, (M,) names, (M,) means, (M, M) covariance [physical units]) -> ParameterEstimate
    (covariance row-major)."""
    msg = ParameterEstimate(names=list(names),
                            mean=np.asarray(mean, dtype=float).ravel().tolist(),
                            covariance=np.asarray(covariance, dtype=float).reshape(
                                len(names) ** 2).tolist(),
                            converged=bool(converged))
    msg.header.stamp = seconds_to_stamp(t)
    return msg


def particles_to_cloud(t: float, names: Sequence[str], particles,
                       frame_id: str = '') -> PointCloud2:
    """(P, M) particles [physical units] -> PointCloud2 of P points with one FLOAT64 field per
    name (little endian, dense)."""
    values = np.ascontiguousarray(particles, dtype='<f8')
    count, width = values.shape
    msg = PointCloud2()
    msg.header.stamp = seconds_to_stamp(t)
    msg.header.frame_id = frame_id
    msg.height, msg.width = 1, count
    msg.fields = [PointField(name=str(name), offset=8 * j, datatype=PointField.FLOAT64,
                             count=1) for j, name in enumerate(names)]
    msg.is_bigendian, msg.is_dense = False, True
    msg.point_step = 8 * width
    msg.row_step = msg.point_step * count
    msg.data = values.tobytes()
    return msg


def cloud_to_particles(msg: PointCloud2) -> tuple[tuple[str, ...], np.ndarray]:
    """PointCloud2 of FLOAT64 fields -> (names, (P, M) values).

    Raises:
      ValueError: a field that is not FLOAT64 or a layout other than `particles_to_cloud`'s.
    """
    names = tuple(f.name for f in msg.fields)
    if any(f.datatype != PointField.FLOAT64 or f.offset != 8 * j
           for j, f in enumerate(msg.fields)) or msg.point_step != 8 * len(names):
        raise ValueError(f'expected consecutive FLOAT64 fields, got {msg.fields}')
    dtype = '>f8' if msg.is_bigendian else '<f8'
    values = np.frombuffer(bytes(msg.data), dtype=dtype)
    return names, values.reshape(msg.height * msg.width, len(names)).astype(float)


def _duration(seconds: float) -> Duration:
    stamp = seconds_to_stamp(seconds)
    return Duration(sec=stamp.sec, nanosec=stamp.nanosec)


def arrays_to_trajectory(t, names: Sequence[str], q, qd, qdd=None) -> JointTrajectory:
    """(t (T,) [s], names (n,), q (T, n), qd (T, n), optional qdd (T, n)) -> JointTrajectory
    stamped at t[0] (0: a joint_trajectory_controller starts it on arrival)."""
    t = np.asarray(t, dtype=float)
    msg = JointTrajectory()
    msg.header.stamp = seconds_to_stamp(float(t[0]))
    msg.joint_names = [str(n) for n in names]
    accelerations = np.zeros((len(t), 0)) if qdd is None else np.asarray(qdd)
    msg.points = [JointTrajectoryPoint(positions=_array(qk), velocities=_array(qdk),
                                       accelerations=_array(qddk),
                                       time_from_start=_duration(float(tk - t[0])))
                  for tk, qk, qdk, qddk in zip(t, np.asarray(q), np.asarray(qd),
                                               accelerations)]
    return msg


def trajectory_to_arrays(msg: JointTrajectory) -> TrajectoryArrays:
    """JointTrajectory -> (t (T,), names, q (T, n), qd (T, n)) (copies)."""
    t0 = stamp_to_seconds(msg.header.stamp)
    t = np.array([t0 + stamp_to_seconds(p.time_from_start) for p in msg.points])
    n = len(msg.joint_names)
    complete = msg.points and all(len(p.accelerations) == n for p in msg.points)
    return TrajectoryArrays(t, tuple(msg.joint_names),
                            np.array([p.positions for p in msg.points]).reshape(-1, n),
                            np.array([p.velocities for p in msg.points]).reshape(-1, n),
                            np.array([p.accelerations for p in msg.points]).reshape(-1, n)
                            if complete else None)
