"""Scores of a posterior on held-out trajectories (`sysid fit --bag`, `sysid evaluate`).

The trajectories are cut into segments of `horizon` steps (`estimator_data.segments`);
every particle simulates every segment from its measured start state under the measured
torques. Real set: the N measured segments; simulated set: all P x N rollouts (as the seed's
experiment 2 compares held-out trajectories with posterior rollouts). States are divided by
the segments' state spread (`Segments.state_scale`) before the distances of KL and MMD.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.likelihoods import metrics
from sysid_ros.io import estimator_data, simulation
from sysid_ros.io.estimator_data import estimate_noise_std
from sysid_ros.io.problem import prepare_trajectories, Problem
from sysid_ros.io.trajectory import Trajectory

__all__ = ['HeldOutRollouts', 'rollouts', 'posterior_metrics']

_segment_log_likelihood = jax.jit(metrics.segment_predictive_log_likelihood)

# Nearest neighbours of the trajectory KL estimate (Heiden et al. 2022, Table 2: k = l = 3).
_KNN = 3


class HeldOutRollouts(NamedTuple):
    """Measured segments and posterior rollouts of them.

    Attributes:
      t: (H,) time within a segment [s].
      real: (N, H, 2 nv) measured states after each control step.
      sim: (P, N, H, 2 nv) rollouts, one per particle and segment.
      scale: (2 nv,) state spread used to normalise distances.
      num_trajectories: trajectories the segments were cut from.
    """

    t: np.ndarray
    real: np.ndarray
    sim: np.ndarray
    scale: np.ndarray
    num_trajectories: int


def rollouts(problem: Problem, particles: np.ndarray,
             trajectories: Sequence[Trajectory], horizon: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> HeldOutRollouts:
    """Simulate every segment of `trajectories` with every particle (P, M) [physical units];
    `progress(done, P)` after each particle.

    Raises:
      DataError: trajectories that do not fit the problem (see `pipeline.prepare_trajectories`).
    """
    cfg = problem.config
    trajs = prepare_trajectories(problem, trajectories)
    segments = estimator_data.segments(problem, trajs, horizon or cfg.estimator.rollout_horizon)
    sims = []
    particles = np.asarray(particles, float)
    for theta in particles:
        params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
        sims.append(np.asarray(simulation.rollout_batch(
            problem.model, params, segments.x0, segments.controls, problem.dt,
            integrator=cfg.model.integrator, actuator=cfg.model.actuator,
            substeps=problem.substeps))[:, 1:])
        if progress is not None:
            progress(len(sims), particles.shape[0])
    t = problem.dt * np.arange(1, segments.horizon + 1)
    return HeldOutRollouts(t, np.asarray(segments.targets), np.stack(sims),
                           np.asarray(segments.state_scale), len(trajs))


def posterior_metrics(problem: Problem, held: HeldOutRollouts) -> dict:
    """KL both ways, MMD^2, predictive log-likelihood and NMSE of the rollouts.

    Returns:
      {'kl_real_sim': d_KL(real || sim), 'kl_sim_real': d_KL(sim || real) (KNN, k = l = 3,
       each segment one sample), 'mmd': MMD^2 (RBF kernel, median bandwidth), 'log_likelihood':
       sum over segments of the log of the posterior predictive mixture [nats] (noise std:
       `data.noise_std`, else estimated from the segments), 'nmse': NMSE of the particles'
       mean prediction [-], 'num_segments', 'horizon', 'num_trajectories', 'num_particles',
       'num_diverged' (particles whose rollouts are not finite and are left out)}.
      A metric that cannot be computed (fewer than k + 1 segments, every rollout diverged)
      is NaN; never an error.
    """
    finite = np.all(np.isfinite(held.sim), axis=(1, 2, 3)) & np.all(
        np.abs(held.sim) < 1e6, axis=(1, 2, 3))
    sim = held.sim[finite]
    real = held.real
    num, horizon, dims = real.shape
    out = {'num_segments': int(num), 'horizon': int(horizon),
           'num_trajectories': int(held.num_trajectories),
           'num_particles': int(held.sim.shape[0]), 'num_diverged': int(np.sum(~finite)),
           'kl_real_sim': math.nan, 'kl_sim_real': math.nan, 'mmd': math.nan,
           'log_likelihood': math.nan, 'nmse': math.nan}
    if sim.shape[0] == 0:
        return out
    scaled_real = real / held.scale
    scaled_sim = (sim / held.scale).reshape(-1, horizon, dims)
    if num > _KNN and scaled_sim.shape[0] > _KNN:
        out['kl_real_sim'] = float(metrics.trajectory_kl(scaled_real, scaled_sim, _KNN, _KNN))
        out['kl_sim_real'] = float(metrics.trajectory_kl(scaled_real, scaled_sim, _KNN, _KNN,
                                                         reverse=True))
    if num > 1 and scaled_sim.shape[0] > 1:
        out['mmd'] = float(metrics.mmd(scaled_real, scaled_sim))
    given = problem.config.data.noise_std
    noise = (np.broadcast_to(np.asarray(given, float), (dims,)) if given else
             estimate_noise_std(real, problem.model.nv))
    out['log_likelihood'] = float(_segment_log_likelihood(real, sim, noise))
    out['nmse'] = float(metrics.nmse(sim.mean(axis=0), real))
    return out
