"""The fit of one registered estimator on prepared trajectories (`pipeline.fit`).

    problem + prepared trajectories -> starting data and particles (`io.start_fit`)
        -> registry factory -> Estimator (jitted, cached: `io.compile_cache`)
        -> init(key, theta0, data) -> step ... step (`io.step_loop`) -> posterior
        -> diagnosis (`io.diagnosis`) -> FitResult

* Starting particles: row 0 the `init` values or the nominal model, the others Sobol
  points in the bounds (`estimator.seed`); a Bayesian method with `estimator.init: point`
  starts from a point fit (`start_point_fit`, `io.start_fit`).
* Each step's `StepInfo` describes the particles it started from; one more step after the
  last gives the loss of the final particles (its new state is discarded). `loss_history[k]`
  is the lowest loss over particles after step k.
* Result particles: a Bayesian method's final sample; a point estimator's best iterate of
  each restart (lowest loss seen), its estimate the best restart (`FitResult.best`, with
  how many restarts agreed), and for lm its Laplace covariance and the identifiability
  of the parameters (`diagnosis.identifiability_report`) at the start
  (`info['identifiability_at_start']`, logged before the fit) and at the estimate
  (`info['identifiability']`, logged after it).
* Ctrl-C stops the loop after the last completed step (`interrupted=True`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.inference import registry
from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.core.inference.kernels import lm
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.io import estimator_data
from sysid_ros.io.compile_cache import cached, compiled_estimator, method_error, method_options
from sysid_ros.io.compile_cache import params_digest
from sysid_ros.io.diagnosis import diagnose, identifiability_report, starts_agreeing
from sysid_ros.io.fit_result import FitResult
from sysid_ros.io.minibatch import batch_pieces, PieceSchedule
from sysid_ros.io.problem import Problem
from sysid_ros.io.start_fit import fit_start, START_FIT_ITERATIONS
from sysid_ros.io.step_loop import BestSoFar, run_steps, StepsResult

__all__ = ['start_point_fit', 'fit_estimator']


def start_point_fit(problem: Problem, trajs, seed: int, log: Callable | None = None,
                    prior: GaussianPrior | None = None, theta0=None) -> FitResult:
    """The point fit a Bayesian method with `estimator.init: point` starts from: the default
    point method as `sysid fit` runs it by default, one start on single-shooting windows from
    the data (`window: auto`), with `prior`. One start, whatever `estimator.particles` says
    (the Bayesian method's count, not restarts): P particles do not cost P fits. `theta0`
    (M,): where it starts (None: the configured start, as lm's)."""
    cfg = problem.config.estimator
    single = dataclasses.replace(problem, config=dataclasses.replace(
        problem.config, estimator=dataclasses.replace(cfg, shooting_windows=1, window='auto',
                                                      particles=1)))
    return fit_estimator(single, trajs, registry.DEFAULT_POINT_METHOD, START_FIT_ITERATIONS,
                         seed=seed, log=log, prior=prior, theta0=theta0)


def fit_estimator(problem: Problem, trajs, method: str, iterations: int,
                  progress: Callable | None = None, theta0=None, seed: int | None = None,
                  start: float | None = None, log: Callable | None = None,
                  point: FitResult | None = None,
                  prior: GaussianPrior | None = None) -> FitResult:
    """Run a registered method on prepared trajectories (module doc); `pipeline.fit`'s
    arguments, with `trajs` from `problem.prepare_trajectories`; `log(line)` receives the
    identifiability report and the start fit's summary; `point`: the start fit of a Bayesian
    method with `init: point` where it was already run (`start_point_fit`); `prior`: a
    Gaussian prior in physical units (`earlier_estimate.read_prior`), None: flat. A point
    method without `theta0` starts at the prior's mean.

    Raises:
      ConfigError: a parameter without finite bounds for a Bayesian method, too few
        particles, windows too short, a bad `data.noise_std`; DataError: bad data. All of
        them before anything is compiled.
    """
    start = time.perf_counter() if start is None else start
    log = log or (lambda line: None)
    entry = registry.lookup(method)
    spec = problem.spec
    cfg = problem.config.estimator
    seed = cfg.seed if seed is None else int(seed)
    if entry.bayesian:
        estimator_data.check_bounds(problem, method)
    elif theta0 is None and prior is not None:
        theta0 = np.asarray(prior.mean, dtype=float)
    options = method_options(problem, iterations)
    if not (entry.bayesian and cfg.init == 'point' and theta0 is None):
        point = None
    elif point is None:
        # lm's windows each start at their own state: single shooting, windows from the data.
        point = start_point_fit(problem, trajs, seed, log, prior)
    begin = fit_start(problem, trajs, method, entry.data, point, theta0,
                      options.num_particles, seed, log, prior)
    prepared, theta_init, joint_fit = begin.prepared, begin.theta, begin.joint_fit
    info: dict[str, Any] = dict(begin.info)
    info.update(prepared.info)
    target, data, schedule = _minibatches(problem, entry, prepared, seed)
    next_data = (lambda: data) if schedule is None else (
        lambda: lik.select_trajectories(data, schedule.next_batch()))
    if schedule is not None:
        info['batch_pieces'] = schedule.batch
    est = compiled_estimator(problem, method, target, options)
    try:
        state = est.init(jax.random.PRNGKey(seed), jnp.asarray(theta_init), next_data())
    except ValueError as exc:
        raise method_error(problem, exc) from exc
    if est.laplace is not None:
        hessian = np.asarray(est.laplace(state)[0][0], dtype=float)
        info['identifiability_at_start'] = _identifiability(problem, method, hessian,
                                                            theta_init[0], 'start', log)
    best = BestSoFar(theta_init)
    losses = []
    spreads = []
    nonfinite = [0]

    def record(previous, new, step_info):
        loss = np.asarray(step_info.loss, dtype=float)
        theta = np.asarray(est.posterior(previous))
        best.update(loss, theta)
        spreads.append(np.std(theta, axis=0))
        nonfinite[0] += int(np.asarray(step_info.num_nonfinite))
        losses.append(float(np.min(loss)))
        return losses[-1]

    steps = run_steps(lambda s: est.step(s, next_data(), prior), state, iterations, record,
                      progress, start, lambda step_info: bool(np.asarray(step_info.converged)))
    final_theta, final, final_loss = _final_step(est, steps, data, prior)
    best.update(final_loss, final_theta)
    history = np.append(np.asarray(losses[1:], dtype=float), float(np.min(final_loss)))
    best_theta, best_loss = best.overall()
    if entry.bayesian:
        result_theta, result_loss, point_estimate = final_theta, float(np.min(final_loss)), None
    else:
        result_theta, result_loss = best.theta, float(np.min(best.loss))
        point_estimate = best_theta
        info['starts_agreeing'] = starts_agreeing(best.theta, best.loss, best_theta, spec)
    if final is not None:
        info.update({k: _scalar(v) for k, v in final.extra.items()})
        info['max_defect'] = float(np.max(np.asarray(final.max_defect)))
    info.update(num_nonfinite=nonfinite[0], best_loss=best_loss,
                best_particle={n: float(v) for n, v in zip(spec.names, best_theta)})
    covariance = covariance_dof = None
    if est.laplace is not None and np.isfinite(best_loss):
        hessian, covariance, covariance_dof = _best_laplace(est, steps.state, best)
        covariance = covariance + np.asarray(lm.undetermined_covariance(
            jnp.asarray(hessian), jnp.square(spec.range_width(best_theta)) / 12.0))
        info['identifiability'] = _identifiability(problem, method, hessian, best_theta,
                                                   'estimate', log)
    # Mini-batch losses are noisy: the convergence test reads their mean over an epoch.
    epoch = 1 if schedule is None else -(-schedule.num_pieces // schedule.batch)
    misfit = estimator_data.residual_family(cfg.residual).misfit
    diagnosis = diagnose(method, _running_mean(history, epoch), theta_init, result_theta, final,
                         result_loss, steps, spec, shooting_windows=cfg.shooting_windows,
                         bayesian=entry.bayesian,
                         spread=np.asarray(spreads[1:] + [np.std(final_theta, axis=0)]),
                         mode=joint_fit, misfit=misfit)
    mismatch = []
    if not steps.interrupted:
        stats = estimator_data.residual_stats_at(
            prepared, np.mean(result_theta, axis=0) if point_estimate is None
            else point_estimate)
        if stats is not None:
            info['residual_noise_std'], info['residual_correlation'] = (
                s.tolist() for s in stats)
            mismatch = estimator_data.noise_mismatch(problem, info)
    biased = (estimator_data.acceleration_noise_warning(problem, info)
              + estimator_data.correlated_residuals_warning(problem, info))
    consistent = np.asarray(_consistent_fn(problem)(jnp.asarray(result_theta)), dtype=bool)
    return FitResult(method=method, names=spec.names, particles=np.asarray(result_theta),
                     initial=np.asarray(theta_init, dtype=float),
                     lower=np.asarray(spec.lower_bounds, float),
                     upper=np.asarray(spec.upper_bounds, float),
                     loss_history=history, iterations=len(steps.history),
                     final_loss=result_loss, wall_time=time.perf_counter() - start,
                     consistent=consistent, interrupted=steps.interrupted, info=info,
                     best=point_estimate, covariance=covariance,
                     covariance_dof=covariance_dof,
                     converged=diagnosis.converged and not mismatch,
                     convergence=diagnosis.reason,
                     warnings=diagnosis.warnings + tuple(f'{method}: {w}'
                                                         for w in mismatch + biased))


def _final_step(est, steps: StepsResult, data, prior):
    """((P, M) final particles, their StepInfo, (P,) loss) from one more step on all of
    `data` with `prior` (its new state discarded); on Ctrl-C the last step's info and NaN
    losses."""
    final_theta = np.asarray(est.posterior(steps.state), dtype=float)
    try:
        _, final = est.step(steps.state, data, prior)
        return final_theta, final, np.asarray(final.loss, dtype=float)
    except KeyboardInterrupt:
        return final_theta, steps.info, np.full(final_theta.shape[0], np.nan)


def _identifiability(problem: Problem, method: str, hessian: np.ndarray, theta, where: str,
                     log) -> dict:
    """`identifiability_report` at theta (M,) from the Gauss-Newton `hessian` (M, M) there;
    its warnings go to `log`, saying `where` it was computed ('start' or 'estimate': a
    payload at its starting mass of 0.01 kg leaves its COM undetermined, at its estimate
    not)."""
    report = identifiability_report(problem, hessian, theta)
    for line in report['warnings']:
        log(f'WARNING {method}: at the {where}: {line}')
    return report


def _best_laplace(est, state, best: BestSoFar) -> tuple[np.ndarray, np.ndarray, float]:
    """(M, M) Gauss-Newton Hessian, (M, M) Laplace covariance [physical units^2] and its
    degrees of freedom at the best restart: a Gauss-Newton method's `state` holds each
    restart's best point (it moves only on a lower cost), so its Laplace terms there are the
    best restart's."""
    hessians, covariances, dofs = est.laplace(state)
    restart = int(np.argmin(best.loss))
    return (np.asarray(hessians[restart], dtype=float),
            np.asarray(covariances[restart], dtype=float), float(dofs[restart]))


def _scalar(value):
    """A plain Python value of a () array (for `FitResult.info`)."""
    value = np.asarray(value)
    if value.dtype == bool:
        return bool(value)
    if np.issubdtype(value.dtype, np.integer):
        return int(value)
    return float(value)


def _minibatches(problem: Problem, entry: registry.Method,
                 prepared: estimator_data.MethodData, seed: int):
    """(target, data, PieceSchedule or None): a method that takes mini-batches
    (`Method.minibatch`) sees `estimator.batch` pieces a step (`io.minibatch`) when the
    pieces are single-shooting windows combined by 'product' and there are more of them;
    its likelihood then scales the batch's log-likelihood by K / B."""
    target, data = prepared.target, prepared.data
    setting = target.likelihood
    if (not entry.minibatch or setting is None or setting.num_windows != 1
            or setting.combine != 'product'):
        return target, data, None
    num = data.num_trajectories
    batch = batch_pieces(problem.config.estimator.batch, num)
    if batch == num:
        return target, data, None
    target = target._replace(likelihood=dataclasses.replace(setting, batch_scale=num / batch))
    return target, data, PieceSchedule(num, batch, seed)


def _running_mean(history: np.ndarray, window: int) -> np.ndarray:
    """Mean of each entry of `history` and the `window - 1` before it (fewer at the start)."""
    if window <= 1:
        return history
    sums = np.cumsum(np.concatenate([[0.0], history]))
    counts = np.minimum(np.arange(1, history.size + 1), window)
    ends = np.arange(1, history.size + 1)
    return (sums[ends] - sums[ends - counts]) / counts


def _consistent_fn(problem: Problem) -> Callable:
    """Jitted `consistent(theta (P, M)) -> (P,) bool` (`spec.is_consistent`)."""
    key = ('consistent', problem.spec, params_digest(problem.base_params))
    return cached(key, lambda: jax.jit(jax.vmap(
        lambda theta: problem.spec.is_consistent(theta, problem.base_params))))
