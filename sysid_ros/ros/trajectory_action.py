"""What `trajectory_publisher` and the estimator's identify_payload send as a
control_msgs/action/FollowJointTrajectory goal: the controller's action picked from the graph,
the move from the current state to a trajectory's first point, the checks before anything
moves, the goal message, and the words for its outcome.

The move is a quintic in time, q(t) = q0 + (q1 - q0) s(t / T) with
s(u) = 10 u^3 - 15 u^4 + 6 u^5, at rest (zero velocity and acceleration) at both ends. Its peak
speed is 15/8 |q1 - q0| / T and its peak acceleration 10 / sqrt(3) |q1 - q0| / T^2, so the
duration T is the shortest that keeps both within `MOVE_LIMIT_SHARE` of each joint's limits,
at least `MIN_MOVE_DURATION`, rounded up to whole sample periods of the trajectory.
"""

from __future__ import annotations

import math
from typing import Iterable

from action_msgs.msg import GoalStatus
from builtin_interfaces.msg import Duration
from control_msgs.action import FollowJointTrajectory
from control_msgs.msg import JointTolerance
import numpy as np
from rclpy.action import get_action_names_and_types

from sysid_ros.io import excitation
from sysid_ros.io.errors import InputError
from sysid_ros.io.excitation import JointTrajectoryData
from sysid_ros.io.problem import Problem
from sysid_ros.ros import messages

__all__ = ['ACTION_TYPE', 'ACTION_SUFFIX', 'MOVE_LIMIT_SHARE', 'MIN_MOVE_DURATION',
           'ControllerChoiceError', 'action_name', 'offered_actions', 'pick_action',
           'move_duration', 'joint_order',
           'with_move', 'START_SPEED', 'DISCOVERY_SETTLE', 'checked_goal', 'make_goal',
           'error_code_name', 'outcome']

ACTION_TYPE = 'control_msgs/action/FollowJointTrajectory'
ACTION_SUFFIX = 'follow_joint_trajectory'
MOVE_LIMIT_SHARE = 0.5          # [-] share of the speed and acceleration limits the move uses
MIN_MOVE_DURATION = 1.0         # [s] shortest move to the first point
START_SPEED = 1e-3              # [rad/s, m/s] largest first-point speed taken as rest
DISCOVERY_SETTLE = 1.0          # [s] graph watched after the first action appears
_PEAK_SPEED = 15.0 / 8.0        # [-] peak of ds/du
_PEAK_ACCELERATION = 10.0 / math.sqrt(3.0)      # [-] peak of |d2s/du2|


class ControllerChoiceError(Exception):
    """No FollowJointTrajectory action, or several and none preferred; the message says
    which."""


def action_name(controller: str) -> str:
    """`/<controller>/follow_joint_trajectory` (a controller name given with its namespace
    keeps it)."""
    return f'/{controller.strip("/")}/{ACTION_SUFFIX}'


def offered_actions(node) -> set[str]:
    """The FollowJointTrajectory action names that `node` sees on the graph now."""
    return {name for name, types in get_action_names_and_types(node) if ACTION_TYPE in types}


def pick_action(names: Iterable[str], preferred: str) -> str:
    """The action to send to, from the FollowJointTrajectory action names on the graph: the
    only one, else the one of the controller `preferred` (a driver profile's
    `trajectory_controller`, in any namespace).

    Raises:
      ControllerChoiceError: none, or several without the preferred one.
    """
    names = sorted(set(names))
    if len(names) == 1:
        return names[0]
    if not names:
        raise ControllerChoiceError(f'no {ACTION_TYPE} action on the graph: is a '
                                    'joint_trajectory_controller loaded and active?')
    wanted = f'/{preferred.strip("/")}/{ACTION_SUFFIX}'
    matches = [n for n in names if n == wanted or n.endswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    raise ControllerChoiceError(f'{len(names)} {ACTION_TYPE} actions ({", ".join(names)}) '
                                f'and {"several" if matches else "none"} of the driver '
                                f"profile's {preferred}: choose one with -p controller:=NAME")


def move_duration(q0: np.ndarray, q1: np.ndarray, qd_max: np.ndarray,
                  qdd_max: np.ndarray) -> float:
    """Duration [s] of the quintic move from q0 to q1 (nv,) within `MOVE_LIMIT_SHARE` of the
    speed limits qd_max and acceleration limits qdd_max (nv,) (inf: none), at least
    `MIN_MOVE_DURATION`."""
    distance = np.abs(np.asarray(q1, dtype=float) - np.asarray(q0, dtype=float))
    by_speed = _PEAK_SPEED * distance / (MOVE_LIMIT_SHARE * np.asarray(qd_max, dtype=float))
    by_acceleration = np.sqrt(_PEAK_ACCELERATION * distance
                              / (MOVE_LIMIT_SHARE * np.asarray(qdd_max, dtype=float)))
    return float(max(MIN_MOVE_DURATION, np.max(by_speed), np.max(by_acceleration)))


def with_move(trajectory: JointTrajectoryData, q0: np.ndarray, qd_max: np.ndarray,
              qdd_max: np.ndarray) -> tuple[JointTrajectoryData, float]:
    """The trajectory (times from 0) after a quintic move from q0 (nv,) in the trajectory's
    joint order to its first point, sampled at the trajectory's median period; returns it
    and the move's duration [s] (the trajectory's first point is then at that time).

    The move's samples start at 0 at q0, as a motion planner's trajectory starts at the
    current state, and end at the trajectory's first point, which is kept once.
    """
    period = float(np.median(np.diff(trajectory.t)))
    duration = move_duration(q0, trajectory.q[0], qd_max, qdd_max)
    steps = math.ceil(duration / period - 1e-9)
    duration = steps * period
    u = np.arange(steps)[:, None] / steps
    step = trajectory.q[0] - np.asarray(q0, dtype=float)
    s = u ** 3 * (10.0 - 15.0 * u + 6.0 * u ** 2)
    ds = 30.0 * u ** 2 * (1.0 - u) ** 2 / duration
    dds = 60.0 * u * (1.0 - u) * (1.0 - 2.0 * u) / duration ** 2
    t = np.concatenate([u[:, 0] * duration, trajectory.t - trajectory.t[0] + duration])
    q, qd, qdd = (np.concatenate([head, tail]) for head, tail in (
        (q0 + s * step, trajectory.q), (ds * step, trajectory.qd),
        (dds * step, trajectory.qdd)))
    return JointTrajectoryData(trajectory.joint_names, t, q, qd, qdd), duration


def joint_order(problem: Problem, trajectory: JointTrajectoryData,
                source: str = 'trajectory') -> list[int]:
    """The model's index of each of the trajectory's joints.

    Raises:
      InputError: the trajectory's joints are not the model's (`source` names it).
    """
    names = list(problem.model.joint_names)
    if set(trajectory.joint_names) != set(names):
        raise InputError(f'{source}: joint_names: expected {", ".join(names)}, got '
                         f'{", ".join(trajectory.joint_names)}')
    return [names.index(j) for j in trajectory.joint_names]


def checked_goal(problem: Problem, trajectory: JointTrajectoryData, q0: np.ndarray,
                 start_tolerance: float, prior: str | None = None,
                 source: str = 'trajectory') -> tuple[JointTrajectoryData | None, float,
                                                      list[str]]:
    """The trajectory after the move from the current positions q0 (nv,), in the
    trajectory's joint order, checked before anything moves: (the goal's trajectory, the
    move's duration [s], []), or (None, 0, why not: one line each).

    Refused: q0 more than `start_tolerance` [rad, m] outside the model's position limits; a
    first point not at rest (`START_SPEED`); any limit of `excitation.limit_violations`
    along the whole goal (the efforts at the design point of `prior`, an estimate.yaml, or
    the configuration's). `source` names the trajectory in the lines.

    Raises:
      InputError: the trajectory's joints are not the model's.
    """
    order = joint_order(problem, trajectory, source)
    model, refusals = problem.model, []
    for j, name in enumerate(trajectory.joint_names):
        lo, hi = (model.q_min[order[j]], model.q_max[order[j]]) if model.q_min else (
            -np.inf, np.inf)
        if not lo - start_tolerance <= q0[j] <= hi + start_tolerance:
            refusals.append(f'current state: {name} at {q0[j]:.4g} is outside its position '
                            f'limits [{lo:.4g}, {hi:.4g}] by more than {start_tolerance:g}')
        if abs(trajectory.qd[0, j]) > START_SPEED:
            refusals.append(f'{source}: {name}: first point at speed '
                            f'{trajectory.qd[0, j]:.4g}: expected a trajectory that starts '
                            'at rest')
    if refusals:
        return None, 0.0, refusals
    limits = excitation.excitation_limits(problem)
    sent, move = with_move(trajectory, q0, np.asarray(limits.qd_max)[order],
                           np.asarray(limits.qdd_max)[order])
    # The move starts where the robot rests (checked above) and ends at the first point:
    # its positions lie between the two.
    refusals = [f'goal: {line}' for line in excitation.limit_violations(
        problem, sent, prior, positions_from=move)]
    if refusals:
        refusals.append(f'goal: times from its start; the move from the current state takes '
                        f'the first {move:.2f} s')
        return None, 0.0, refusals
    return sent, move, []


def _tolerances(names, position: float) -> list[JointTolerance]:
    """One position tolerance [rad, m] per joint; none for 0 (the controller's own)."""
    if position <= 0.0:
        return []
    return [JointTolerance(name=n, position=float(position)) for n in names]


def make_goal(trajectory: JointTrajectoryData, path_tolerance: float, goal_tolerance: float,
              goal_time_tolerance: float) -> FollowJointTrajectory.Goal:
    """The goal: the trajectory stamped 0 (the controller starts it on arrival) with
    positions, velocities and accelerations; position tolerances [rad, m] on the path and at
    the end, and the time allowed past the end [s] (each 0: the controller's default)."""
    seconds = messages.seconds_to_stamp(goal_time_tolerance)
    return FollowJointTrajectory.Goal(
        trajectory=messages.arrays_to_trajectory(trajectory.t - trajectory.t[0],
                                                 trajectory.joint_names, trajectory.q,
                                                 trajectory.qd, trajectory.qdd),
        path_tolerance=_tolerances(trajectory.joint_names, path_tolerance),
        goal_tolerance=_tolerances(trajectory.joint_names, goal_tolerance),
        goal_time_tolerance=Duration(sec=seconds.sec, nanosec=seconds.nanosec))


def error_code_name(code: int) -> str:
    """The FollowJointTrajectory.Result constant's name of an error code, or 'UNKNOWN'."""
    result = FollowJointTrajectory.Result
    named = {getattr(result, n): n for n in dir(result)
             if n.isupper() and isinstance(getattr(result, n), int)}
    return named.get(code, 'UNKNOWN')


def outcome(status: int, error_code: int, error_string: str) -> str:
    """'' for a goal that succeeded, else its end in words (action_msgs GoalStatus `status`,
    the result's `error_code` and `error_string`)."""
    if (status == GoalStatus.STATUS_SUCCEEDED
            and error_code == FollowJointTrajectory.Result.SUCCESSFUL):
        return ''
    ended = {GoalStatus.STATUS_ABORTED: 'aborted',
             GoalStatus.STATUS_CANCELED: 'cancelled'}.get(status, f'ended ({status})')
    return (f'goal {ended}: error_code {error_code} ({error_code_name(error_code)}): '
            f'{error_string or "no error_string"}')
