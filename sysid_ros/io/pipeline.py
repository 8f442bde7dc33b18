"""The one path from a configuration to a posterior, shared by `sysid fit` and the ROS node,
and the io layer's front door: what users and nodes call lives here or is re-exported here.

    config -> Problem (`io.problem`) -> data (`io.estimator_data`) -> estimator (registry)
        -> fit loop (`io.estimator_fit`) -> FitResult

`fit` dispatches: a planar mechanism (`MechanismProblem`) to the factor graph
(`io.mechanism_fit`), everything else to the registered estimator of `estimator.method`
(`io.estimator_fit.fit_estimator`). Simulation and held-out scores: `io.simulation`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import numpy as np

from sysid_ros.core.inference import registry
from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.io import config as config_io
from sysid_ros.io import config_sections
from sysid_ros.io import estimator_data
from sysid_ros.io import integration_step
from sysid_ros.io import nominal_prior
from sysid_ros.io.config import Config, config_error
from sysid_ros.io.estimator_fit import fit_estimator, start_point_fit
from sysid_ros.io.fit_result import FitResult
from sysid_ros.io.problem import build_problem, MechanismProblem, prepare_trajectories, Problem
from sysid_ros.io.simulation import excitation, prediction_error, simulate, typical_torque
from sysid_ros.io.trajectory import Trajectory

__all__ = [
    'FIT_METHODS',
    'Problem',
    'MechanismProblem',
    'FitResult',
    'build_problem',
    'prepare_trajectories',
    'fit',
    'excitation',
    'typical_torque',
    'simulate',
    'prediction_error',
]

FIT_METHODS = config_sections.METHODS


def fit(config: Config | Problem | MechanismProblem | str,
        trajectories: Sequence[Trajectory | str], progress: Callable | None = None,
        method: str | None = None, iterations: int | None = None, theta0=None,
        seed: int | None = None, log: Callable | None = None,
        prior: GaussianPrior | None = None) -> FitResult:
    """Identify the configured parameters from measured trajectories.

    Args:
      config: a Config, a YAML path, or an already built Problem.
      trajectories: Trajectory objects or `.npz`/`.csv` paths.
      progress: called after every step as `progress(iteration, total, loss, elapsed_s)`.
      method: one of FIT_METHODS (default: `estimator.method`).
      iterations: steps (default: `estimator.iterations`; a method may stop earlier once
        converged, e.g. NEA).
      theta0: initial (M,) or (P, M) physical values (default: `parameters.*.init`, else the
        nominal model's values, for the first particle; see `core.inference.particles`).
      seed: seed of the starting particles and the methods' randomness (default:
        `estimator.seed`).
      prior: a Gaussian prior over the parameters in physical units, e.g. an earlier fit's
        posterior (`earlier_estimate.read_prior`); None: flat within the bounds. Joined with
        the configured `parameters.<name>.std` (`nominal_prior.with_earlier`). Not for
        mechanisms (factor_graph).
      log: `log(line)` receives warnings before the fit (identifiability) and notes,
        among them the integration step chosen (`io.integration_step`: with `model.dt`
        empty, the fewest steps per sample whose discretisation error is far below the
        noise) and a refit where the torque noise estimated at the start was off
        (`_fit_with_noise`).

    Returns:
      FitResult. On Ctrl-C (KeyboardInterrupt) during the steps: the particles of the last
      completed step (a point estimator's best so far), with `interrupted=True`.

    Raises:
      ConfigError, DataError: bad configuration or data, before anything is compiled.
    """
    start = time.perf_counter()
    problem = (config if isinstance(config, (Problem, MechanismProblem))
               else build_problem(config))
    cfg = problem.config
    method = method or cfg.estimator.method
    if method not in FIT_METHODS:
        raise config_error(cfg, 'estimator.method', f'sysid fit runs {" | ".join(FIT_METHODS)}'
                           f', got {method!r}; pass --method to choose one')
    mismatch = config_io.check_graph_method(method, cfg.model.mechanism)
    if mismatch:
        raise config_error(cfg, 'estimator.method', mismatch)
    iterations = int(iterations if iterations is not None else cfg.estimator.iterations)
    if iterations < 1:
        raise config_error(cfg, 'estimator.iterations', f'expected >= 1, got {iterations}')
    trajs = prepare_trajectories(problem, trajectories)
    if isinstance(problem, MechanismProblem):
        if prior is not None:
            raise config_error(cfg, 'estimator.method', 'factor_graph takes no prior from an '
                               'earlier estimate')
        if cfg.parameters.std:
            raise config_error(cfg, f'parameters.{next(iter(cfg.parameters.std))}.std',
                               'factor_graph takes no prior; expected no std')
        from sysid_ros.io import mechanism_fit      # gtsam is imported only for mechanisms
        return mechanism_fit.fit_factor_graph(problem, trajs, progress, start)
    spec = problem.spec
    if theta0 is not None:
        theta0 = np.asarray(theta0, dtype=float)
        if theta0.ndim not in (1, 2) or theta0.shape[-1] != spec.num_params:
            raise ValueError(f'fit: theta0: expected shape ({spec.num_params},) or (P, '
                             f'{spec.num_params}) for {", ".join(spec.names)}; got '
                             f'{theta0.shape}')
    log = log or (lambda line: None)
    seed = cfg.estimator.seed if seed is None else int(seed)
    prior = nominal_prior.with_earlier(problem, prior)

    def fit_once(problem: Problem, theta0, **more) -> FitResult:
        return fit_estimator(problem, trajs, method, iterations, progress=progress,
                             theta0=theta0, seed=seed, start=start, log=log, prior=prior,
                             **more)

    if cfg.model.dt is not None or not integration_step.integrates(problem, method):
        return _fit_with_noise(problem, method, fit_once, theta0, log)
    return _fit_with_step(problem, trajs, method, fit_once, theta0, seed, log, prior)


def _fit_with_noise(problem: Problem, method: str, fit_once: Callable, theta0,
                    log: Callable) -> FitResult:
    """`fit_once(problem, theta0)` (`fit_estimator`), and once more from its estimate where
    the torque noise it estimated at the start (the equation error without
    `data.torque_noise_std`) is off the residuals at that estimate
    (`estimator_data.noise_mismatch`): from nominal values far off, as a payload of 0.01 kg
    for one of a few kg, the start's residuals are tens of N m where the estimate's are
    tenths, and the joints would stay weighed by the start's. (A Bayesian method's data are
    prepared at its point start fit's estimate already.) Then `_fit_with_filter`."""
    result = fit_once(problem, theta0)
    if (not result.interrupted and not registry.lookup(method).bayesian
            and result.info.get('noise_std_source') == 'estimated'
            and estimator_data.noise_mismatch(problem, result.info)):
        log(f'{method}: fitting again with the torque noise estimated at its estimate')
        result = fit_once(problem, result.estimate)
    return _fit_with_filter(problem, method, fit_once, result, log)


def _fit_with_filter(problem: Problem, method: str, fit_once: Callable, result: FitResult,
                     log: Callable) -> FitResult:
    """`result`, or a fit again from its estimate with a longer equation-error filter where
    `estimator.filter_window` is empty and more than
    `estimator_data.ACCELERATION_NOISE_SHARE` of the accelerations' variance is velocity
    noise (`estimator_data.longer_filter_window`): least squares on noisy accelerations
    shrinks the inertia, a payload's mass 5-11 % at 100 Hz on bench/realistic.py's
    recordings."""
    cfg = problem.config
    if result.interrupted or cfg.estimator.filter_window is not None:
        return result
    seconds = estimator_data.longer_filter_window(problem, result.info)
    if seconds is None:
        return result
    log(f'{method}: fitting again with estimator.filter_window {seconds:.3g} s: velocity '
        "noise is more than 2 % of the accelerations' variance at the default")
    longer = dataclasses.replace(problem, config=dataclasses.replace(
        cfg, estimator=dataclasses.replace(cfg.estimator, filter_window=seconds)))
    return fit_once(longer, result.estimate)


def _fit_with_step(problem: Problem, trajs, method: str, fit_once: Callable, theta0,
                   seed: int, log: Callable, prior) -> FitResult:
    """`fit` with the integration step chosen from the data (`model.dt` empty): at the
    estimate of a fit at the sample period (the point method's own fit, or a Bayesian
    method's start fit), which is kept where that step is fine enough; else the method runs
    (again) at the finer step, a Bayesian method from its start fit run again there (so
    that it starts where the default lm fit ends). At the spec's starting values the step
    would be chosen for motions the robot did not make: the held-out Panda's undamped start
    needed more than 16 RK4 steps per 5 ms sample, its estimate 1."""
    bayesian = registry.lookup(method).bayesian
    if bayesian:
        probe = start_point_fit(problem, trajs, seed, prior=prior)
    else:
        probe = fit_once(problem, theta0)
    if probe.interrupted:                                   # Ctrl-C: nothing more
        return probe
    finer, step = integration_step.resolve(problem, trajs, theta=probe.estimate)
    log(step.describe(finer))
    if finer.substeps == problem.substeps:
        result = probe if not bayesian else fit_once(finer, theta0, point=probe)
    elif not bayesian:
        log(f'{method}: fitting again at {finer.substeps} steps per sample, from its estimate')
        result = fit_once(finer, probe.estimate)
    else:           # its start fit is then lm's fit again at that step, as lm's own would be
        log(f'{method}: its start fit again at {finer.substeps} steps per sample, from its '
            'estimate')
        point = start_point_fit(finer, trajs, seed, prior=prior, theta0=probe.estimate)
        result = fit_once(finer, theta0, point=point)
    result.info.update(substeps=step.substeps, discretisation_error={
        str(s): e for s, e in step.errors.items()})
    return result
