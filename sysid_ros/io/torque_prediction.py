"""The joint torques a model predicts on a recording, and how far they are from the measured
ones: how a fit is judged on real logs, where no truth is known (`sysid predict`).

Prediction: inverse dynamics (RNEA) plus the configured actuator's friction and offsets at the
recorded q, qd and qdd (`estimator_data.nea_samples`: Savitzky-Golay accelerations where the
recording has none, torques matched to them, the filter's edges dropped). Scores per joint:
nRMSE = RMS(predicted - measured) / RMS(measured) [-], their mean over joints, and the pooled
relative error ||predicted - measured|| / ||measured|| over all joints and samples, which
weighs the joints by their torques.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import actuators, rigid_body
from sysid_ros.io import estimator_data
from sysid_ros.io.problem import Problem
from sysid_ros.io.trajectory import Trajectory

__all__ = ['torque_function', 'torque_nrmse', 'pooled_relative_error', 'TorqueScores',
           'torque_scores', 'Prediction', 'predict_torques']


@functools.lru_cache(maxsize=16)
def torque_function(model, actuator: str) -> Callable:
    """Jitted `torques(params, q, qd, qdd) -> (N, nv)` [N m or N] of (N, nv) samples: RNEA
    plus `actuator`'s friction and offsets, over the joint gains (the effort the joints need
    for that motion); one
    compiled function per model and actuator."""
    actuator_fn = actuators.get_actuator(actuator)

    def one(params, q, qd, qdd):
        return actuators.command_for(model, params, q, qd,
                                     rigid_body.rnea(model, params, q, qd, qdd), actuator_fn)

    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0)))


def torque_nrmse(predicted, measured) -> tuple[float, np.ndarray]:
    """(mean over joints, (nv,) per joint) of RMS(predicted - measured) / RMS(measured) of
    (N, nv) torques [-]."""
    per_joint = (np.sqrt(np.mean(np.square(predicted - measured), axis=0))
                 / np.sqrt(np.mean(np.square(measured), axis=0)))
    return float(np.mean(per_joint)), per_joint


def pooled_relative_error(predicted, measured) -> float:
    """||predicted - measured|| / ||measured|| over all (N, nv) samples and joints [-]."""
    return float(np.linalg.norm(predicted - measured) / np.linalg.norm(measured))


class TorqueScores(NamedTuple):
    """Scores of (N, nv) predicted torques against measured ones (module doc)."""

    nrmse: float
    per_joint: np.ndarray
    pooled: float


def torque_scores(predicted, measured) -> TorqueScores:
    """`TorqueScores` of (N, nv) predicted against measured torques."""
    predicted, measured = np.asarray(predicted), np.asarray(measured)
    return TorqueScores(*torque_nrmse(predicted, measured),
                        pooled_relative_error(predicted, measured))


class Prediction(NamedTuple):
    """`predict_torques`' result.

    Attributes:
      fitted, nominal: the scores of the model at the estimate and at the configured nominal
        values.
      measured, predicted: (N, nv) torques of all samples [N m or N], the estimate's.
      num_samples: N.
    """

    fitted: TorqueScores
    nominal: TorqueScores
    measured: np.ndarray
    predicted: np.ndarray
    num_samples: int


def predict_torques(problem: Problem, theta, trajs: Sequence[Trajectory]) -> Prediction:
    """The torques of the model at theta (M,) [physical units] and at the nominal values on
    prepared trajectories (`problem.prepare_trajectories`), scored (module doc)."""
    parts = {k: [] for k in ('q', 'qd', 'qdd', 'tau')}
    for traj in trajs:
        for k, v in estimator_data.nea_samples(traj).items():
            parts[k].append(v)
    q, qd, qdd = (jnp.asarray(np.concatenate(parts[k])) for k in ('q', 'qd', 'qdd'))
    measured = np.concatenate(parts['tau'])
    torques = torque_function(problem.model, problem.config.model.actuator)
    params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
    predicted = np.asarray(torques(params, q, qd, qdd))
    nominal = np.asarray(torques(problem.base_params, q, qd, qdd))
    return Prediction(torque_scores(predicted, measured), torque_scores(nominal, measured),
                      measured, predicted, measured.shape[0])
