"""Where a fit starts: its data and starting particles, from a point fit where there is one.

A Bayesian method with `estimator.init: point` starts from a point fit (lm on
single-shooting windows from the data, `estimator_fit.start_point_fit`): its windows are
measured at that estimate, single-shooting windows are refitted jointly from it
(`window_refit.refit_windows`), and the particles are drawn around that joint fit and its
Laplace covariance (`particles.gaussian_particles`; the point fit's own estimate and
covariance for multiple shooting). Without a converged point fit: `theta0` or the nominal
values in row 0 and Sobol points in the bounds (`particles.initial_particles`). The data's
windows (`window: auto`) and the equation error's estimated torque noise are measured at the
point fit's estimate, else at row 0 of `theta0`, else at the nominal values.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from sysid_ros.core.inference import particles
from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.io import estimator_data
from sysid_ros.io.compile_cache import method_error
from sysid_ros.io.fit_result import FitResult
from sysid_ros.io.problem import Problem
from sysid_ros.io.window_refit import refit_windows

__all__ = ['START_FIT_ITERATIONS', 'Start', 'fit_start']

# Steps of the point fit that starts a Bayesian method (`estimator.init: point`): as many as
# `sysid fit`'s default lm takes (`estimator.iterations`' default), so that it is that fit.
START_FIT_ITERATIONS = 200


class Start(NamedTuple):
    """`fit_start`'s result.

    Attributes:
      prepared: the method's data (`estimator_data.method_data`), refitted where it could.
      theta: (P, M) starting particles [physical units].
      joint_fit: ((M,) mode, (M, M) Laplace covariance) of the windows' joint fit, or None.
      info: plain description of the start (`FitResult.info`): 'start_fit' (its summary),
        'start_fit_estimate' (name -> value), 'joint_fit'.
    """

    prepared: estimator_data.MethodData
    theta: np.ndarray
    joint_fit: tuple[np.ndarray, np.ndarray] | None
    info: dict


def fit_start(problem: Problem, trajs, method: str, data_kind: str, point: FitResult | None,
              theta0, num_particles: int, seed: int, log: Callable,
              prior: GaussianPrior | None = None) -> Start:
    """The data and starting particles of `method` (whose registry data kind is `data_kind`)
    on prepared trajectories `trajs`, from the point fit `point` (None: no point start);
    `log(line)` receives the start fit's summary; `prior` joins the windows' joint fit.

    Raises:
      ConfigError: too few particles, or bounds the particles cannot be drawn in.
    """
    info = {}
    joint_fit = None
    if point is not None:
        info['start_fit'] = _summary(point)
        info['start_fit_estimate'] = {n: float(v) for n, v in zip(point.names, point.estimate)}
        log(f'{method}: starting from the {point.method} estimate ({info["start_fit"]})')
        if point.warnings or point.covariance is None:
            log(f'{method}: the start fit did not converge; starting from Sobol points')
            point = None
    if point is not None:
        at = point.estimate
    elif theta0 is not None:
        at = np.asarray(theta0, dtype=float).reshape(-1, problem.spec.num_params)[0]
    else:
        at = None
    prepared = estimator_data.method_data(problem, trajs, data_kind, theta=at)
    start_fit = None if point is None else (point.estimate, point.covariance)
    if point is not None and data_kind == 'shooting':
        refit = refit_windows(problem, prepared, point.estimate, prior)
        prepared = refit.prepared
        if refit.theta is not None:
            start_fit = joint_fit = (refit.theta, refit.covariance)
            info['joint_fit'] = {n: float(v) for n, v in zip(problem.spec.names, refit.theta)}
    try:
        if start_fit is not None:
            theta0 = particles.gaussian_particles(problem.spec, *start_fit, num_particles, seed)
        theta = particles.initial_particles(problem.spec, problem.base_params, num_particles,
                                            seed, theta0)
    except ValueError as exc:
        raise method_error(problem, exc) from exc
    return Start(prepared, theta, joint_fit, info)


def _summary(point: FitResult) -> str:
    """One line: the point fit's loss, iterations, wall time and how it stopped."""
    return (f'loss {point.final_loss:.4g}, {point.iterations} iterations, '
            f'{point.wall_time:.1f} s, {point.convergence}')
