"""Planar closed-chain mechanisms (`model.mechanism`, `core.constrained.mechanisms`)
identified by `factor_graph`: GTSAM's fixed-lag smoother with the parameters as graph
variables (`graph.identification`), run over the trajectories in turn.

Its Gaussian posterior is returned as the 2M sigma points of the unscented transform (their
mean and standard deviation are exactly the marginal's), with the estimate and its marginal
standard deviation over time in `FitResult.marginals`. The data are the angle coordinates
(the crank encoder: q, its rate: qd, a gyroscope on the crank) and torques.
`estimator.iterations` is not used (iSAM2 takes one Gauss-Newton step per sample), nor are
`fit`'s theta0 and seed (the prior comes from `parameters`). gtsam is imported only here.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Sequence

import numpy as np

from sysid_ros.core.constrained import mechanisms
from sysid_ros.io.config import config_error
from sysid_ros.io.fit_result import FitResult
from sysid_ros.io.problem import MechanismProblem
from sysid_ros.io.trajectory import DataError, Trajectory

__all__ = ['fit_factor_graph']

# factor_graph: sensor noise when data.noise_std is empty [rad, rad/s]; marginal covariance
# of the parameters every this many steps (FitResult.marginals).
GRAPH_DEFAULT_NOISE = (1e-3, 1e-2)
GRAPH_MARGINAL_EVERY = 5


def _graph_noise(problem: MechanismProblem) -> tuple[float, float]:
    """(angle [rad], rate [rad/s]) sensor noise std from data.noise_std (one or two numbers)."""
    noise = problem.config.data.noise_std or GRAPH_DEFAULT_NOISE
    if len(noise) > 2:
        raise config_error(problem.config, 'data.noise_std', 'factor_graph: expected one '
                           f'number or two (angle, rate), got {list(noise)}')
    return float(noise[0]), float(noise[-1])


def _sigma_points(mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """(2M, M) unscented-transform points mean +- sqrt(M) L_i (cov = L L^T): their mean and
    (population) covariance are exactly mean and cov."""
    chol = np.linalg.cholesky(cov)
    offsets = np.sqrt(mean.size) * chol.T
    return np.concatenate([mean + offsets, mean - offsets])


def fit_factor_graph(problem: MechanismProblem, trajs: Sequence[Trajectory],
                     progress: Callable | None, start: float) -> FitResult:
    """The fixed-lag smoother over each trajectory in turn; the Gaussian posterior of the
    parameters after one is the prior of the next. The first prior has the mean
    `parameters.*.init` (else the nominal value) and std (max - min) / 4."""
    from sysid_ros.graph import identification
    cfg, mech = problem.config, problem.mechanism
    lower, upper = (np.array(b, dtype=float) for b in zip(*cfg.parameters.bounds.values()))
    nominal = identification.get_parameters(mech, problem.names, problem.base_params)
    mean = np.array([cfg.parameters.init.get(n, v) for n, v in zip(problem.names, nominal)])
    cov = np.diag(((upper - lower) / 4.0) ** 2)
    initial = mean[None].copy()
    angle_sigma, rate_sigma = _graph_noise(problem)
    total = sum(traj.num_samples for traj in trajs)
    trace = collections.defaultdict(list)
    done, t_offset = 0, 0.0
    for traj in trajs:
        try:
            q0, v0 = identification.assemble(mech, problem.q_branch, traj.q[0], traj.qd[0])
        except mechanisms.MechanismError as exc:
            raise DataError(f'{traj.source or "trajectory"}: q: row 0: {exc}') from exc

        def report(step, _, error, elapsed, done=done):
            if progress is not None:
                progress(done + step, total, error, time.perf_counter() - start)

        res = identification.identify_online(
            mech, problem.base_params, problem.names, mean, cov, q0, v0, traj.tau[:-1],
            traj.q, problem.dt, cfg.estimator.lag, angle_sigma, gyro=traj.qd,
            gyro_bar=mech.angle_bars, gyro_sigma=rate_sigma,
            covariance_every=GRAPH_MARGINAL_EVERY, progress=report)
        mean, cov = res.mean[-1], res.cov
        rows = ~np.isnan(res.std[:, 0])
        trace['t'].append(t_offset + traj.t[rows] - traj.t[0])
        trace['mean'].append(res.mean[rows])
        trace['std'].append(res.std[rows])
        trace['loss'].append(res.error)
        done, t_offset = done + traj.num_samples, t_offset + traj.duration + problem.dt
    particles = _sigma_points(mean, cov)
    is_mass = np.array([n.endswith('.mass') for n in problem.names])
    consistent = np.all(np.where(is_mass, particles > 0.0, particles >= 0.0), axis=1)
    loss = np.concatenate(trace.pop('loss'))
    wall = time.perf_counter() - start
    return FitResult(
        method='factor_graph', names=problem.names, particles=particles, initial=initial,
        lower=lower, upper=upper, loss_history=loss, iterations=loss.size,
        final_loss=float(loss[-1]), wall_time=wall, consistent=consistent,
        info={'lag_steps': cfg.estimator.lag, 'angle_noise': angle_sigma,
              'rate_noise': rate_sigma, 'covariance': cov.tolist(),
              'real_time_factor': t_offset / wall},
        marginals={k: np.concatenate(v) for k, v in trace.items()}, best=mean,
        covariance=cov, converged=True, convergence='every sample smoothed')
