"""Whether live input is what the estimator assumes: joint states at the resampling rate, and
efforts that are joint torques. Each failed check is one warning line (the estimator shows it
on `/diagnostics` and in its log in the first seconds):

  * rate: joint states that arrive below `data.rate` (by more than RATE_SHORTFALL) are
    interpolated between, not measured: a franka_bringup `/joint_states` republished by
    `joint_state_publisher` at 30 Hz where the 1 kHz stream is `/franka/joint_states`;
  * repeats: joint states whose positions repeat the previous message's while the robot
    moves (more than REPEAT_SHARE of consecutive pairs) come from a republish faster than
    its source, or from a driver that holds its last reading; the windows then see steps;
  * efforts: per joint, the least-squares scale from the torques the nominal model needs for
    the measured motion (`torque_prediction.predict_torques` at the spec's starting values)
    to the efforts; a median scale over the joints that carry torque beyond EFFORT_SCALE_LIMIT
    either way says the efforts are not joint torques: a UR's `/joint_states` effort is motor
    current [A], a Franka's commanded torques leave out gravity.
"""

from __future__ import annotations

import numpy as np

from sysid_ros.io.problem import Problem
from sysid_ros.io.torque_prediction import predict_torques
from sysid_ros.io.trajectory import Trajectory

__all__ = ['RATE_SHORTFALL', 'REPEAT_SHARE', 'EFFORT_SCALE_LIMIT', 'LOADED_SHARE',
           'rate_warning', 'repeat_warning', 'effort_scales', 'effort_warning']

RATE_SHORTFALL = 0.1            # [-] input rate more than this share below data.rate
REPEAT_SHARE = 0.2              # [-] consecutive messages with the same positions
EFFORT_SCALE_LIMIT = 5.0        # [-] efforts this many times off the model's torques
# [-] joints whose model torque RMS is below this share of the largest joint's carry too
# little to judge their scale
LOADED_SHARE = 0.1


def rate_warning(input_rate: float, rate: float, topic: str) -> str | None:
    """A warning where joint states arrive at `input_rate` [Hz] more than RATE_SHORTFALL
    below the resampling rate `rate` [Hz] (`data.rate`) of `topic`, else None."""
    if not input_rate > 0.0 or input_rate >= (1.0 - RATE_SHORTFALL) * rate:
        return None
    return (f'{topic} arrives at {input_rate:.1f} Hz, below data.rate {rate:g} Hz: the '
            "windows interpolate between its messages; read the driver's full-rate topic "
            '(franka_ros2: /franka/joint_states, 1 kHz) or lower data.rate')


def repeat_warning(positions: np.ndarray, topic: str) -> str | None:
    """A warning where more than REPEAT_SHARE of consecutive joint-state messages of
    `topic` repeat the previous positions (N, nv) exactly while others differ, else None."""
    positions = np.asarray(positions, dtype=float)
    if len(positions) < 3:
        return None
    same = np.all(np.diff(positions, axis=0) == 0.0, axis=1)
    if same.all() or not same.mean() > REPEAT_SHARE:     # standing still, or measured
        return None
    return (f'{topic}: {100.0 * same.mean():.0f} % of consecutive messages repeat the '
            'previous positions while the robot moves: a republish faster than its source, '
            "or a driver holding its last reading; read the driver's measured stream")


def effort_scales(problem: Problem, traj: Trajectory) -> np.ndarray:
    """(nv,) least-squares scale s_j of efforts = s_j x model torque per joint at the
    spec's starting values on a prepared trajectory; NaN for a joint whose model torque RMS
    is below LOADED_SHARE of the largest joint's."""
    start = np.asarray(problem.spec.initial_theta(problem.base_params), dtype=float)
    prediction = predict_torques(problem, start, [traj])
    model, measured = prediction.predicted, prediction.measured
    power = np.sum(model * model, axis=0)
    rms = np.sqrt(power / max(model.shape[0], 1))
    scale = np.sum(model * measured, axis=0) / np.where(power > 0.0, power, 1.0)
    return np.where(rms >= LOADED_SHARE * np.max(rms), scale, np.nan)


def effort_warning(problem: Problem, traj: Trajectory, source: str) -> str | None:
    """A warning where the efforts of `source` (a topic, or `joint_states.effort`) on a
    prepared trajectory are not joint torques for this model (module doc), else None."""
    scales = effort_scales(problem, traj)
    judged = scales[np.isfinite(scales)]
    if not judged.size:
        return None
    median = float(np.median(judged))
    if 1.0 / EFFORT_SCALE_LIMIT <= median <= EFFORT_SCALE_LIMIT:
        return None
    joints = ', '.join(f'{j} {s:.3g}' for j, s in zip(problem.joint_names, scales)
                       if np.isfinite(s))
    return (f'the efforts of {source} are {median:.3g} times the torques the nominal model '
            f'needs for the measured motion (per joint: {joints}): they are not joint '
            'torques [N m] (motor currents? commands without gravity?); give the estimator '
            'joint torques (data.torque_source)')
