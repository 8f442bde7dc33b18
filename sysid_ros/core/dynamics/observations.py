"""Observation models: motion-capture points of tracked body frames (Heiden et al. 2022, §2.5).

A motion-capture system tracks a frame rigidly attached to a body. The observation of one
tracked frame with world placement (R, p) is four points in the world (base) frame [m],

  y = [p_o, p_x, p_y, p_z] = [p, p + L R e_x, p + L R e_y, p + L R e_z]   (12,),

its origin and the tips of its three axes at L = `AXIS_LENGTH` = 1 m. Differences of such
points compare orientations without any special treatment of SO(3) (a rotation error of
1 mrad moves an axis tip by 1 mm), so a Gaussian likelihood over them is a plain sum of
squares.

The tracked frame is placed in its body's frame by a fixed offset `MocapFrame.offset`
([x, y, z] [m], then URDF roll, pitch, yaw [rad], as `Params.placement`), identity by default.
Its world placement comes from `kinematics.forward_kinematics` at the joint positions q, so the
points are differentiable with respect to q and to `Params.placement`.

A measured pose (position [m] and unit quaternion [x, y, z, w], as geometry_msgs/Pose) becomes
the same four points through `pose_points`, so measured and predicted observations compare
point by point.

`MocapFrame` is static (hashable Python values): it can be a field of a static likelihood
setting and a static argument of `jax.jit`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.model import spatial
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'AXIS_LENGTH',
    'POINTS_PER_FRAME',
    'MocapFrame',
    'make_mocap_frames',
    'frame_points',
    'frame_placement',
    'pose_points',
    'mocap_points',
    'mocap_trajectory',
]

AXIS_LENGTH = 1.0          # [m], distance of the axis points from the origin
POINTS_PER_FRAME = 4       # origin, x, y and z axis tips
_IDENTITY_OFFSET = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class MocapFrame:
    """A tracked frame, rigidly attached to one body (static, hashable).

    Attributes:
      body: index of the body that carries the frame (0 .. nb - 1).
      offset: (6,) placement of the tracked frame in the body frame: [x, y, z] [m], then URDF
        roll, pitch, yaw [rad] (R = Rz(yaw) Ry(pitch) Rx(roll)); zeros = the body frame.
    """

    body: int
    offset: tuple[float, float, float, float, float, float] = _IDENTITY_OFFSET

    @property
    def dim(self) -> int:
        """Observation size of this frame: 4 points x 3 coordinates = 12."""
        return 3 * POINTS_PER_FRAME


def make_mocap_frames(model: RobotModel, frames) -> tuple[MocapFrame, ...]:
    """Validate tracked frames given by body name, body index, `MocapFrame` or (body, offset).

    Args:
      model: the robot; bodies are named by `model.link_names`.
      frames: a sequence whose items are a link name, a body index, a `MocapFrame`, or a pair
        (link name or index, offset (6,) [m, rad]).

    Returns:
      Tuple of `MocapFrame`, in the given order (the order of the observation vector).

    Raises:
      ValueError: naming the offending item: empty sequence, unknown link, index out of range,
        an offset that is not 6 finite numbers, or the same frame twice.
    """
    if isinstance(frames, (str, int, MocapFrame)):
        frames = [frames]
    frames = list(frames)
    if not frames:
        raise ValueError('mocap: expected at least one tracked frame, got none')
    out = []
    for item in frames:
        if isinstance(item, MocapFrame):
            body, offset = item.body, item.offset
        elif isinstance(item, (str, int, np.integer)):
            body, offset = item, _IDENTITY_OFFSET
        else:
            try:
                body, offset = item
            except (TypeError, ValueError):
                raise ValueError(f'mocap: expected a link name, a body index or (body, offset),'
                                 f' got {item!r}') from None
        if isinstance(body, str):
            if body not in model.link_names:
                raise ValueError(f'mocap: unknown link {body!r} of model {model.name!r}; '
                                 f'valid links: {", ".join(model.link_names)}')
            body = model.link_names.index(body)
        if int(body) != body or not 0 <= int(body) < model.num_bodies:
            raise ValueError(f'mocap: body index {body!r} outside [0, {model.num_bodies})')
        offset_array = np.asarray(offset, dtype=float)
        if offset_array.shape != (6,) or not np.all(np.isfinite(offset_array)):
            raise ValueError(f'mocap: offset of body {model.link_names[int(body)]!r}: expected '
                             f'6 finite numbers [x, y, z, roll, pitch, yaw], got {offset!r}')
        frame = MocapFrame(body=int(body), offset=tuple(float(v) for v in offset_array))
        if frame in out:
            raise ValueError(f'mocap: frame {frame} listed twice')
        out.append(frame)
    return tuple(out)


def frame_points(R, p, axis_length: float = AXIS_LENGTH):
    """The four points of frame placements: origin and axis tips.

    Args:
      R: (..., 3, 3) orientation of the frame in the world frame (columns: its axes).
      p: (..., 3) origin of the frame in the world frame [m].
      axis_length: distance of the axis tips from the origin [m].

    Returns:
      (..., 4, 3) points [p_o, p_x, p_y, p_z] in the world frame [m].
    """
    origin = p[..., None, :]
    return jnp.concatenate([origin, origin + axis_length * jnp.swapaxes(R, -1, -2)], axis=-2)


def pose_points(position, orientation):
    """Measured poses of tracked frames -> their motion-capture observation.

    Args:
      position: (..., K, 3) origins of K tracked frames in the world frame [m].
      orientation: (..., K, 4) their unit quaternions [x, y, z, w] in the world frame.

    Returns:
      (..., 12 K) points [p_o, p_x, p_y, p_z] of each frame [m], in the layout of
      `mocap_points` (frame by frame, point by point).
    """
    position = jnp.asarray(position)
    points = frame_points(spatial.quaternion_to_matrix(jnp.asarray(orientation)), position)
    return points.reshape(position.shape[:-2] + (-1,))


def frame_placement(model: RobotModel, params: Params, q, frame: MocapFrame):
    """World placement of a tracked frame at one configuration.

    Args:
      model: static tree.
      params: physical parameters (only `placement` is used, through forward kinematics).
      q: (nv,) joint positions [rad or m].
      frame: the tracked frame (static).

    Returns:
      (R (3, 3), p (3,)): its orientation (columns: its axes) and origin [m] in the world.
    """
    return _placed(*kinematics.forward_kinematics(model, params, q), frame)


def _placed(rots, poss, frame: MocapFrame):
    """(R, p) of `frame` from the body placements (nb, 3, 3), (nb, 3) of forward kinematics."""
    R, p = rots[frame.body], poss[frame.body]
    if frame.offset != _IDENTITY_OFFSET:
        offset = jnp.asarray(frame.offset, dtype=R.dtype)
        R, p = spatial.compose(R, p, *kinematics.placement_transform(offset))
    return R, p


def mocap_points(model: RobotModel, params: Params, q, frames: Sequence[MocapFrame]):
    """Motion-capture observation at one configuration.

    Args:
      model: static tree.
      params: physical parameters (only `placement` is used, through forward kinematics).
      q: (nv,) joint positions [rad or m].
      frames: tracked frames (static), e.g. from `make_mocap_frames`.

    Returns:
      (12 F,) for F frames: per frame the points [p_o, p_x, p_y, p_z] in the world frame [m],
      flattened point by point (x, y, z of p_o first).
    """
    placements = kinematics.forward_kinematics(model, params, q)
    out = [frame_points(*_placed(*placements, frame)).reshape(-1) for frame in frames]
    return jnp.concatenate(out)


def mocap_trajectory(model: RobotModel, params: Params, states, frames: Sequence[MocapFrame]):
    """Motion-capture observations along a batch of states (vmapped over the leading axes).

    Args:
      model: static tree.
      params: physical parameters (one particle).
      states: (..., S) states [q; qd] with S = 2 nv, or (..., nv) joint positions.
      frames: tracked frames (static).

    Returns:
      (..., 12 F) observations [m], see `mocap_points`.
    """
    states = jnp.asarray(states)
    q = states[..., :model.nv]
    lead = q.shape[:-1]
    flat = q.reshape((-1, model.nv))
    points = jax.vmap(lambda qi: mocap_points(model, params, qi, frames))(flat)
    return points.reshape(lead + (points.shape[-1],))
