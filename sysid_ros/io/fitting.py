"""The fit loop that every estimator runs offline, and the cache of compiled estimators.

    problem + prepared trajectories -> `estimator_data.method_data` (Target, data)
        -> registry factory -> Estimator (jitted, cached per problem structure)
        -> init(key, theta0, data) -> step ... step (`run_steps`) -> posterior -> FitResult

  * Starting particles: `core.inference.particles.initial_particles` (row 0 the `init`
    values or the nominal model, the others Sobol points in the bounds; `estimator.seed`).
  * Each step's `StepInfo` describes the particles it started from; one more step after the
    last gives the loss of the final particles (its new state is discarded). `loss_history[k]`
    is the lowest loss over particles after step k.
  * Result particles: a Bayesian method's final sample; a point estimator's best iterate of
    each restart (lowest loss seen), its estimate the best restart (`FitResult.best`, with
    how many restarts agreed), and for lm its Laplace covariance and the identifiability
    of the parameters at the start (`identifiability_report`).
  * A Bayesian method with `estimator.init: point` starts from an lm fit: windows measured
    at its estimate, then for single-shooting windows their joint fit from it
    (`refit_windows`), particles drawn around that fit and its Laplace covariance
    (`particles.gaussian_particles`; lm's own estimate and covariance for multiple
    shooting); `init: sobol`, or a start fit that did not converge: Sobol points.
  * `diagnose` decides whether the fit converged and lists the symptoms of a failed one.
  * Ctrl-C stops the loop after the last completed step (`interrupted=True`).

Compiled estimators are cached per (method, problem structure, nominal parameters, options),
at most `CACHE_SIZE` of them (least recently used dropped), so the live node's windows and
repeated fits compile once.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from sysid_ros.core.inference import levenberg_marquardt as lm
from sysid_ros.core.inference import intervals, methods, particles, registry
from sysid_ros.core.inference.base import Estimator, GaussianPrior
from sysid_ros.core.model.types import Params
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.io import estimator_data
from sysid_ros.io.minibatch import PieceSchedule, batch_pieces
from sysid_ros.io.config import config_error
from sysid_ros.io.problem import Problem

__all__ = [
    'CACHE_SIZE',
    'FitResult',
    'BestSoFar',
    'StepsResult',
    'run_steps',
    'cached',
    'params_digest',
    'compiled_estimator',
    'start_point_fit',
    'method_options',
    'fit_estimator',
    'identifiability_report',
    'refit_windows',
    'WindowRefit',
    'Diagnosis',
    'diagnose',
]

CACHE_SIZE = 16
# Steps of the point fit that starts a Bayesian method (`estimator.init: point`).
START_FIT_ITERATIONS = 100
# `refit_windows`: rounds of (joint fit, noise estimate), each fit weighting the residuals
# by the noise of the round before, and the most Levenberg-Marquardt steps of each fit.
REFIT_ROUNDS = 3
REFIT_STEPS = 20
# Restarts agree with the best one within these shares of loss and bounds width.
AGREE_LOSS = 1e-3
AGREE_WIDTH = 1e-3
# Identifiability warnings (`identifiability_report`).
IDENTIFIABILITY_CONDITION = 1e8
IDENTIFIABILITY_WIDTH = 0.1
# `diagnose`: convergence by a flat loss, particles that never moved, defects, loss.
STALL_RTOL = 1e-4
STALL_SHARE = 0.1
STALL_STEPS = 10
MOVED_WIDTH = 1e-6
DEFECT_TOLERANCE = 0.05
LOSS_LIMIT = 10.0
# A posterior sample has settled when the mean per-parameter spread (std) of its particles
# over the last SPREAD_SHARE of the steps is within a factor SPREAD_RTOL of that over the
# SPREAD_SHARE before: particles that still contract (or spread) are no posterior yet. An
# eighth: CSVGD's and SVGD's steps decay over the last half (`methods.annealed_adam`), and
# their particles contract from the constant step's jitter to the posterior early in the
# decay (pendulum, 12 truths: 0.8-3.0x the final spread at half-way, 0.9-1.7x at 60 %,
# within 10 % at 80 % in 9 of 12 fits); over the last quarter against the one before, 16
# of 40 fits were called unconverged.
SPREAD_SHARE = 0.125
SPREAD_RTOL = 1.3
# A posterior sample from the windows' joint fit (`refit_windows`) has reached the
# posterior when its mean lies within MODE_OFFSET Laplace stds of the fit's mode, for every
# parameter whose mode lies at least MODE_MARGIN of those stds inside its bounds (nearer,
# the posterior is truncated and its mean not its mode). CSVGD's particles from lm's
# estimate sat 1.3-2.3 stds off it on 3 of 4 MuJoCo double-pendulum truths, two of them
# called converged by the spread check, and within 0.01 on the fourth and on the pendulum.
MODE_OFFSET = 1.0
MODE_MARGIN = 2.0
_CACHE: collections.OrderedDict = collections.OrderedDict()


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Outcome of `fit`.

    Attributes:
      method: the method that ran.
      names: (M,) parameter names.
      particles: (P, M) identified parameters, physical units: one row per restart of a
        point estimator, the posterior sample of a Bayesian method (`io.bayes`).
      initial: (P, M) starting particles.
      lower, upper: (M,) bounds.
      loss_history: (K,) lowest loss over particles at each step [-] (for the Bayesian
        methods the mean squared noise-normalised residual, see `io.bayes`).
      iterations: steps taken (K).
      final_loss: loss of the returned particles (lowest over particles) [-].
      wall_time: seconds spent in `fit`, compilation included [s].
      consistent: (P,) whether each particle is physically consistent (`spec.is_consistent`).
      interrupted: True if stopped by Ctrl-C: a point estimator returns the best particles
        so far, a Bayesian method the latest ones.
      info: method-specific diagnostics (plain Python values).
      marginals: online methods (factor_graph): {'t': (K,) [s], 'mean': (K, M), 'std': (K, M)}
        the estimate and its marginal standard deviation as the data came in; else None.
      best: (M,) a point estimate: the best restart of a point method (lowest loss; never
        the mean of the restarts), the factor graph's mean; None for a posterior sample.
      covariance: (M, M) its covariance (Laplace for lm) [physical units^2], or None.
      covariance_dof: degrees of freedom of that covariance estimate (lm: windows - 1), so
        that its intervals take Student-t quantiles; None: normal quantiles.
      converged: whether the fit converged (`diagnose`); convergence: how it stopped.
      warnings: one line per symptom of a failed fit, each naming the setting to change.
    """

    method: str
    names: tuple[str, ...]
    particles: np.ndarray
    initial: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    loss_history: np.ndarray
    iterations: int
    final_loss: float
    wall_time: float
    consistent: np.ndarray
    interrupted: bool = False
    info: dict = dataclasses.field(default_factory=dict)
    marginals: dict | None = None
    best: np.ndarray | None = None
    covariance: np.ndarray | None = None
    covariance_dof: float | None = None
    converged: bool = False
    convergence: str = ''
    warnings: tuple[str, ...] = ()

    @property
    def estimate(self) -> np.ndarray:
        """(M,) the estimate: `best` where set, else the mean over particles."""
        return self.best if self.best is not None else self.particles.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """(M,) standard deviation: from `covariance` where set, else over particles."""
        if self.covariance is not None:
            return np.sqrt(np.maximum(np.diagonal(self.covariance), 0.0))
        return self.particles.std(axis=0)

    def interval(self, level: float = 0.95) -> np.ndarray | None:
        """(2, M) central interval of probability `level` [physical units], within the
        bounds: of a posterior sample of P >= 2 particles the interval that holds one more
        draw with that probability, as the method's particles are (`Method.particles`,
        `core.inference.intervals`); of a point estimate with a
        covariance, estimate +- z std with z the Student-t quantile of `covariance_dof`
        degrees of freedom where set, else the normal one; None for a point estimate
        without covariance or a single particle."""
        if self.best is None and self.particles.shape[0] > 1:
            ends = intervals.central_interval(self.particles, level,
                                              registry.lookup(self.method).particles)
        elif self.covariance is None:
            return None
        else:
            quantile = 0.5 + level / 2.0
            z = (scipy.stats.t.ppf(quantile, self.covariance_dof) if self.covariance_dof
                 else scipy.stats.norm.ppf(quantile))
            band = z * self.std
            ends = np.stack([self.estimate - band, self.estimate + band])
        return np.clip(ends, self.lower, self.upper)

    def as_dict(self, which: str = 'estimate') -> dict[str, float]:
        """{name: value} of the estimate (or 'std')."""
        values = self.estimate if which == 'estimate' else self.std
        return {n: float(v) for n, v in zip(self.names, values)}


def params_digest(params: Params) -> str:
    """A hex digest of every leaf of `params` (cache keys of compiled functions)."""
    digest = hashlib.sha1()
    for leaf in jax.tree_util.tree_leaves(params):
        digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return digest.hexdigest()


def cached(key, build: Callable):
    """`build()` once per hashable `key` (most recently used kept, CACHE_SIZE in all)."""
    if key in _CACHE:
        _CACHE.move_to_end(key)
    else:
        _CACHE[key] = build()
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return _CACHE[key]


def method_options(problem: Problem, iterations: int) -> methods.Options:
    """The method options of the problem's `estimator` section for `iterations` steps."""
    cfg = problem.config.estimator
    return methods.Options(num_particles=cfg.particles, learning_rate=cfg.learning_rate,
                           iterations=iterations)


def compiled_estimator(problem: Problem, method: str, target: methods.Target,
                       options: methods.Options) -> Estimator:
    """The registry's Estimator of `method`, its step and posterior jitted (unless the
    method runs on the host), cached per problem structure and the options it reads
    (`registry.Method.options_read`).

    Raises:
      ConfigError: a method that cannot run this problem (naming `estimator.method` or
        `estimator.particles`).
    """
    entry = registry.lookup(method)
    options = entry.options_read(options)
    key = (method, target.model, target.spec, target.likelihood, target.loss_fn,
           target.actuator, options, params_digest(problem.base_params))

    def build():
        try:
            est = entry.factory(target, options)
        except ValueError as exc:
            raise _method_error(problem, exc) from exc
        if not entry.jittable:
            return est
        return est._replace(step=jax.jit(est.step), posterior=jax.jit(est.posterior),
                            laplace=est.laplace and jax.jit(est.laplace))

    return cached(key, build)


def _method_error(problem: Problem, exc: ValueError):
    message = str(exc)
    if message.startswith('particles: '):
        return config_error(problem.config, 'estimator.particles',
                            message[len('particles: '):])
    return config_error(problem.config, 'estimator.method', message)


class BestSoFar:
    """Per particle row, the lowest loss seen so far and the parameters that had it.

    Attributes:
      theta: (P, M) parameters of each row's best step [physical units].
      loss: (P,) their loss (inf until a finite loss is seen).
    """

    def __init__(self, theta):
        self.theta = np.array(theta, dtype=float)
        self.loss = np.full(self.theta.shape[0], np.inf)

    def update(self, loss, theta) -> None:
        """Keep the rows of `theta` (P, M) whose `loss` (P,) beats the row's best (NaN never)."""
        loss = np.asarray(loss, dtype=float)
        improved = loss < self.loss
        self.loss = np.where(improved, loss, self.loss)
        self.theta[improved] = np.asarray(theta, dtype=float)[improved]

    def overall(self) -> tuple[np.ndarray, float]:
        """(M,) parameters and loss of the best row."""
        k = int(np.argmin(self.loss))
        return self.theta[k].copy(), float(self.loss[k])


class StepsResult(NamedTuple):
    """Outcome of `run_steps`.

    Attributes:
      state: the estimator state after the last completed step.
      info: what the last completed step returned (None if no step completed).
      history: (K,) the loss recorded at each completed step.
      interrupted: True if Ctrl-C (KeyboardInterrupt) stopped the loop.
    """

    state: Any
    info: Any
    history: np.ndarray
    interrupted: bool


def run_steps(step: Callable, state, iterations: int, record: Callable,
              progress: Callable | None = None, start: float | None = None,
              converged: Callable | None = None) -> StepsResult:
    """Run `iterations` estimator steps with progress reports; Ctrl-C stops them cleanly.

    Args:
      step: `step(state) -> (state, info)`, e.g. a jitted estimator step with its data bound.
      state: the initial state.
      iterations: most steps to take.
      record: `record(previous_state, state, info) -> loss` after each step: the loss of
        the history (and any best-so-far bookkeeping, e.g. `BestSoFar.update`).
      progress: called after each step as `progress(iteration, iterations, loss, elapsed_s)`.
      start: `time.perf_counter()` at which the elapsed time starts (default: now).
      converged: `converged(info) -> bool`; True stops the loop early.

    Returns:
      StepsResult. A KeyboardInterrupt, in a step or in `progress`, ends the loop with the
      state of the last completed step and `interrupted=True`.
    """
    start = time.perf_counter() if start is None else start
    history: list[float] = []
    info = None
    interrupted = False
    try:
        for k in range(iterations):
            new_state, new_info = step(state)
            history.append(float(record(state, new_state, new_info)))
            state, info = new_state, new_info
            if progress is not None:
                progress(k + 1, iterations, history[-1], time.perf_counter() - start)
            if converged is not None and converged(info):
                break
    except KeyboardInterrupt:
        interrupted = True
    return StepsResult(state=state, info=info, history=np.asarray(history, dtype=float),
                       interrupted=interrupted)


def _scalar(value):
    """A plain Python value of a () array (for `FitResult.info`)."""
    value = np.asarray(value)
    if value.dtype == bool:
        return bool(value)
    if np.issubdtype(value.dtype, np.integer):
        return int(value)
    return float(value)


def start_point_fit(problem: Problem, trajs, seed: int, log: Callable | None = None) -> FitResult:
    """The point fit a Bayesian method with `estimator.init: point` starts from: the default
    point method on single-shooting windows from the data (`window: auto`)."""
    cfg = problem.config.estimator
    single = dataclasses.replace(problem, config=dataclasses.replace(
        problem.config, estimator=dataclasses.replace(cfg, shooting_windows=1, window='auto')))
    return fit_estimator(single, trajs, registry.DEFAULT_POINT_METHOD, START_FIT_ITERATIONS,
                         seed=seed, log=log)


def fit_estimator(problem: Problem, trajs, method: str, iterations: int,
                  progress: Callable | None = None, theta0=None, seed: int | None = None,
                  start: float | None = None, log: Callable | None = None,
                  point: FitResult | None = None) -> FitResult:
    """Run a registered method on prepared trajectories (module doc); `pipeline.fit`'s
    arguments, with `trajs` from `problem.prepare_trajectories`; `log(line)` receives the
    identifiability report and the start fit's summary; `point`: the start fit of a Bayesian
    method with `init: point` where it was already run (`start_point_fit`).

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
    info: dict[str, Any] = {}
    joint_fit = None
    if entry.bayesian:
        estimator_data.check_bounds(problem, method)
    options = method_options(problem, iterations)
    if not (entry.bayesian and cfg.init == 'point' and theta0 is None):
        point = None
    else:
        # lm's windows each start at their own state: single shooting, windows from the data.
        point = point if point is not None else start_point_fit(problem, trajs, seed, log)
        info['start_fit'] = _start_summary(point)
        log(f'{method}: starting from the {point.method} estimate ({info["start_fit"]})')
        if point.warnings or point.covariance is None:
            log(f'{method}: the start fit did not converge; starting from Sobol points')
            point = None
    prepared = estimator_data.method_data(problem, trajs, entry.data,
                                          theta=None if point is None else point.estimate)
    start_fit = None if point is None else (point.estimate, point.covariance)
    if point is not None and entry.data == 'shooting':
        refit = refit_windows(problem, prepared, point.estimate)
        prepared = refit.prepared
        if refit.theta is not None:
            start_fit = joint_fit = (refit.theta, refit.covariance)
            info['joint_fit'] = {n: float(v) for n, v in zip(spec.names, refit.theta)}
    try:
        if start_fit is not None:
            theta0 = particles.gaussian_particles(spec, *start_fit, options.num_particles,
                                                  seed)
        theta_init = particles.initial_particles(spec, problem.base_params,
                                                 options.num_particles, seed, theta0)
    except ValueError as exc:
        raise _method_error(problem, exc) from exc
    info.update(prepared.info)
    target, data, schedule = _minibatches(problem, entry, prepared, seed)
    next_data = (lambda: data) if schedule is None else (
        lambda: lik.select_trajectories(data, schedule.next()))
    if schedule is not None:
        info['batch_pieces'] = schedule.batch
    est = compiled_estimator(problem, method, target, options)
    try:
        state = est.init(jax.random.PRNGKey(seed), jnp.asarray(theta_init), next_data())
    except ValueError as exc:
        raise _method_error(problem, exc) from exc
    if est.laplace is not None:
        hessian = np.asarray(est.laplace(state)[0][0], dtype=float)
        report = identifiability_report(problem, hessian, theta_init[0])
        info['identifiability'] = report
        for line in report['warnings']:
            log(f'WARNING {method}: {line}')
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

    def converged(step_info):
        return bool(np.asarray(step_info.converged))

    steps = run_steps(lambda s: est.step(s, next_data(), None), state, iterations, record,
                      progress, start, converged)
    final_theta = np.asarray(est.posterior(steps.state), dtype=float)
    try:
        _, final = est.step(steps.state, data, None)       # the loss of the final particles
        final_loss = np.asarray(final.loss, dtype=float)
    except KeyboardInterrupt:
        final, final_loss = steps.info, np.full(final_theta.shape[0], np.nan)
    best.update(final_loss, final_theta)
    history = np.append(np.asarray(losses[1:], dtype=float), float(np.min(final_loss)))
    best_theta, best_loss = best.overall()
    if entry.bayesian:
        result_theta, result_loss, point_estimate = final_theta, float(np.min(final_loss)), None
    else:
        result_theta, result_loss = best.theta, float(np.min(best.loss))
        point_estimate = best_theta
        info['starts_agreeing'] = _agreeing(best.theta, best.loss, best_theta, spec)
    if final is not None:
        info.update({k: _scalar(v) for k, v in final.extra.items()})
        info['max_defect'] = float(np.max(np.asarray(final.max_defect)))
    info.update(num_nonfinite=nonfinite[0], best_loss=best_loss,
                best_particle={n: float(v) for n, v in zip(spec.names, best_theta)})
    covariance = covariance_dof = None
    if est.laplace is not None and np.isfinite(best_loss):
        # A Gauss-Newton method's state holds each restart's best point (it moves only on a
        # lower cost), so its Laplace terms there are the best restart's.
        _, covariances, dofs = est.laplace(steps.state)
        restart = int(np.argmin(best.loss))
        covariance = np.asarray(covariances[restart], dtype=float)
        covariance_dof = float(dofs[restart])
    # Mini-batch losses are noisy: the convergence test reads their mean over an epoch.
    epoch = 1 if schedule is None else -(-schedule.num_pieces // schedule.batch)
    diagnosis = diagnose(method, _running_mean(history, epoch), theta_init, result_theta, final,
                         result_loss,
                         steps, spec, shooting_windows=cfg.shooting_windows,
                         bayesian=entry.bayesian,
                         spread=np.asarray(spreads[1:] + [np.std(final_theta, axis=0)]),
                         mode=joint_fit)
    consistent = np.asarray(_consistent_fn(problem)(jnp.asarray(result_theta)), dtype=bool)
    return FitResult(method=method, names=spec.names, particles=np.asarray(result_theta),
                     initial=np.asarray(theta_init, dtype=float),
                     lower=np.asarray(spec.lower_bounds, float),
                     upper=np.asarray(spec.upper_bounds, float),
                     loss_history=history, iterations=len(steps.history),
                     final_loss=result_loss, wall_time=time.perf_counter() - start,
                     consistent=consistent, interrupted=steps.interrupted, info=info,
                     best=point_estimate, covariance=covariance,
                     covariance_dof=covariance_dof, converged=diagnosis.converged,
                     convergence=diagnosis.reason, warnings=diagnosis.warnings)


class WindowRefit(NamedTuple):
    """`refit_windows`' result: `prepared` the Bayesian windows' data, `theta` (M,) their
    joint fit [physical units] and `covariance` (M, M) its Laplace covariance under their
    likelihood (`lm.posterior_covariance`, the starts profiled out) [physical units^2];
    theta and covariance None where nothing was refitted or the fit is not finite."""

    prepared: estimator_data.MethodData
    theta: np.ndarray | None
    covariance: np.ndarray | None


def refit_windows(problem: Problem, prepared: estimator_data.MethodData, theta,
                  prior: GaussianPrior | None = None) -> WindowRefit:
    """The shooting data of single-shooting windows refitted from a point estimate `theta`
    (M,) (unchanged for multiple shooting, whose later windows start at free states):
    Levenberg-Marquardt on these windows, parameters and start states together, from theta
    and the starts that fit it (at most REFIT_STEPS steps; REFIT_ROUNDS of them when the
    noise is estimated, each weighting the residuals by the last round's estimate), then

      * each window's start state the fitted one instead of the noisy measurement, which
        the Bayesian likelihood would hold fixed: errors in variables made CSVGD's 90 %
        intervals hold 72 % of 40 random pendulum truths (`bench/calibration.py`);
      * an estimated noise std (no `data.noise_std` configured) replaced by that of the
        residuals at the joint fit (`likelihood.residual_noise_std`): third differences of
        fast motion at 100 Hz hold signal, which made the estimate 1-13 times the true noise
        and the posterior that much wider; and residuals at theta itself, fitted on other
        (shorter) windows, were up to 47 % above the true noise in qd where theta was 2 of
        its stds off the truth, which made the pendulum's 90 / 95 % intervals over-cover;
      * the joint fit and its Laplace covariance with that noise: the Gaussian approximation
        of the posterior the Bayesian methods sample, where they start (`fit_estimator`).

    `prior` (a `GaussianPrior` in physical units, e.g. the live session's sequential prior)
    joins the fit and its covariance: then they approximate prior x windows' likelihood.
    """
    setting = prepared.target.likelihood
    if setting.num_windows != 1:
        return WindowRefit(prepared, None, None)
    estimated = prepared.info.get('noise_std_source') == 'estimated'
    key = ('refit_windows', problem.model, problem.spec, setting, estimated,
           params_digest(problem.base_params))
    spec, base = problem.spec, problem.base_params

    def build():
        kernel = lm.make_levenberg_marquardt(methods.window_residual_fn(prepared.target),
                                             spec.lower, spec.upper)

        def refit_round(_, carry):
            t, data, prior = carry
            joint = lm.run(kernel, t, data.x0, data, REFIT_STEPS, prior)
            data = data._replace(x0=joint.starts)
            if estimated:    # non-finite residuals (a diverged window) keep the last estimate
                free = spec.num_params + data.x0.size
                noise = lik.residual_noise_std(setting, spec.to_params(joint.theta, base),
                                               data, free)
                data = data._replace(noise_std=jnp.where(
                    jnp.isfinite(noise) & (noise > 0.0), noise, data.noise_std))
            return joint.theta, data, prior

        def refit(t, data, prior):
            data = data._replace(x0=lik.fit_window_starts(setting, spec.to_params(t, base),
                                                          data))
            t, data, _ = jax.lax.fori_loop(0, REFIT_ROUNDS if estimated else 1, refit_round,
                                           (t, data, prior))
            # The kernel's own linearisation at the final noise (traced once, with its steps').
            covariance = lm.posterior_covariance(kernel.init(t, data.x0, data, prior).lin)
            return data.x0, data.noise_std, t, covariance

        return jax.jit(refit)

    x0, noise, joint, covariance = cached(key, build)(jnp.asarray(theta), prepared.data, prior)
    data, info = prepared.data._replace(x0=x0), dict(prepared.info, window_starts='fitted')
    if estimated:
        data = data._replace(noise_std=noise)
        info.update(noise_std=[float(v) for v in noise], noise_std_source='residuals')
    joint, covariance = np.asarray(joint, float), np.asarray(covariance, float)
    if not (np.all(np.isfinite(joint)) and np.all(np.isfinite(covariance))):
        joint = covariance = None
    return WindowRefit(prepared._replace(data=data, info=info), joint, covariance)


def _start_summary(point: FitResult) -> str:
    return (f'loss {point.final_loss:.4g}, {point.iterations} iterations, '
            f'{point.wall_time:.1f} s, {point.convergence}')


def _agreeing(theta, loss, best_theta, spec) -> str:
    """'k of P': restarts whose loss is within AGREE_LOSS of the best and whose parameters
    are within AGREE_WIDTH of the bounds' width (or relative) of the best's."""
    width = np.asarray(spec.range_width(best_theta))
    best_loss = np.min(loss)
    close = (np.all(np.abs(theta - best_theta) <= AGREE_WIDTH * width, axis=1)
             & (loss <= best_loss * (1.0 + AGREE_LOSS)))
    return f'{int(np.sum(close))} of {theta.shape[0]}'


def identifiability_report(problem: Problem, hessian: np.ndarray, theta) -> dict:
    """What the recording determines at theta (M,) from the Gauss-Newton Hessian (M, M)
    there (`lm.identifiability`) as plain values:
    singular values, condition number, predicted std per parameter, the weakest
    combination, and warning lines for a condition number above IDENTIFIABILITY_CONDITION
    or parameters whose predicted std exceeds IDENTIFIABILITY_WIDTH of their bounds width."""
    spec = problem.spec
    width = np.asarray(spec.range_width(theta))
    ident = lm.identifiability(jnp.asarray(hessian), jnp.asarray(width))
    singular = np.asarray(ident.singular_values, dtype=float)
    condition = float(ident.condition_number)
    std = np.asarray(ident.predicted_std, dtype=float)
    weakest = np.asarray(ident.directions[-1], dtype=float)
    combination = ' '.join(f'{v:+.2f} {n}' for v, n in sorted(
        zip(weakest, spec.names), key=lambda p: -abs(p[0])) if abs(v) >= 0.1)
    poor = [n for n, sd, w, sv in zip(spec.names, std, width, np.diagonal(hessian))
            if sd > IDENTIFIABILITY_WIDTH * w or sv <= 0.0]
    warnings = []
    if condition > IDENTIFIABILITY_CONDITION:
        warnings.append(f'the recording hardly determines the combination {combination} '
                        f'(condition number {condition:.3g} of the range-scaled Jacobian); '
                        'fix or drop a parameter of it, or record more varied motion')
    if poor:
        warnings.append(f'predicted std above {IDENTIFIABILITY_WIDTH:g} of the bounds width '
                        f'(or no sensitivity): {", ".join(poor)}')
    return {'condition_number': condition, 'singular_values': singular.tolist(),
            'predicted_std': {n: float(v) for n, v in zip(spec.names, std)},
            'weakest_combination': combination, 'poorly_determined': poor,
            'warnings': warnings}


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


def _loss_fall(history: np.ndarray, tail: int) -> float:
    """Relative fall of the lowest loss over the last `tail` steps of `history` (inf when
    there are no steps before them or no finite loss)."""
    before, recent = history[:-tail], history[-tail:]
    if not before.size or not np.isfinite(np.min(before)):
        return np.inf
    return float((np.min(before) - np.min(recent)) / max(abs(np.min(before)), 1e-300))


class Diagnosis(NamedTuple):
    """`converged`, how the fit stopped (`reason`) and the `warnings` lines (`diagnose`)."""

    converged: bool
    reason: str
    warnings: tuple[str, ...]


def diagnose(method: str, history, initial, theta, final, loss: float, steps: StepsResult,
             spec, shooting_windows: int = 1, bayesian: bool = False,
             spread=None, mode=None) -> Diagnosis:
    """Whether a fit converged, and its symptoms of failure, each a warning line naming the
    setting to change:

      * converged: the method's own tolerance (`StepInfo.converged`), or a loss that fell
        by less than STALL_RTOL over the last STALL_SHARE of the steps (at least
        STALL_STEPS); else the iteration budget ran out while the loss still fell;
      * particles that never moved: every particle within MOVED_WIDTH of the bounds' width
        of its start;
      * defects: the largest normalised shooting defect above DEFECT_TOLERANCE (multiple
        shooting only);
      * the loss (mean squared noise-normalised residual, ~1 at the truth) above LOSS_LIMIT;
      * a Bayesian method (`bayesian`) with one particle: its std is no uncertainty;
      * a Bayesian method whose particles' spread (`spread` (steps, M): their std per
        parameter after each step) still changes: `_spread_change` above SPREAD_RTOL. A
        sample that still contracts holds the truth in nearly all its intervals, one that
        still spreads in too few; a flat loss (the best particle's) does not show either;
      * a Bayesian method whose particles' mean is off the posterior's mode `mode`
        ((M,) mode, (M, M) Laplace covariance [physical units], `refit_windows`' joint
        fit): `_mode_offsets` above MODE_OFFSET; the spread check does not see it.
    """
    warnings = []
    history = np.asarray(history, dtype=float)
    if steps.interrupted:
        return Diagnosis(False, 'interrupted (Ctrl-C)', ())
    if final is not None and bool(np.asarray(final.converged)):
        converged, reason = True, 'tolerance'
    else:
        tail = max(STALL_STEPS, int(np.ceil(STALL_SHARE * history.size)))
        fall = _loss_fall(history, tail)
        converged = bool(fall < STALL_RTOL)
        reason = (f'loss flat (fell {max(fall, 0.0):.2g} over the last {tail} iterations)'
                  if converged else f'iteration budget ({history.size}) spent')
        if not converged:
            warnings.append(f'{method} did not converge in {history.size} iterations (the '
                            f'loss still fell {fall:.2g} over the last {tail}); raise '
                            'estimator.iterations')
    width = np.asarray(spec.range_width(initial[0]))
    if np.all(np.abs(np.asarray(theta) - np.asarray(initial)) <= MOVED_WIDTH * width):
        warnings.append(f'{method}: the particles never moved from their start; check '
                        'estimator.learning_rate and estimator.window')
    if final is not None and shooting_windows > 1:
        defect = float(np.max(np.asarray(final.max_defect)))
        if defect > DEFECT_TOLERANCE:
            warnings.append(f'{method}: shooting defects up to {defect:.3g} (normalised) '
                            f'> {DEFECT_TOLERANCE:g}: the windows do not join; shorten '
                            'estimator.window or raise estimator.iterations')
    change = _spread_change(spread) if bayesian and spread is not None else 1.0
    if change > SPREAD_RTOL:
        warnings.append(f'{method}: the particles\' spread still changed by a factor '
                        f'{change:.2f} over the last {SPREAD_SHARE:.0%} of the iterations; '
                        'raise estimator.iterations')
    if bayesian and mode is not None:
        offsets = _mode_offsets(theta, *mode, spec)
        worst = int(np.argmax(offsets))
        if offsets[worst] > MODE_OFFSET:
            warnings.append(f'{method}: the particles\' mean of {spec.names[worst]} lies '
                            f'{offsets[worst]:.2g} stds (of the Laplace posterior at the '
                            'windows\' joint fit) from its mode: they have not reached the '
                            'posterior; raise estimator.iterations')
    if bayesian and np.asarray(theta).shape[0] < 2:
        warnings.append(f'{method}: one particle has no spread, so the reported std is no '
                        'uncertainty; set estimator.particles (e.g. 32)')
    if not np.isfinite(loss) or loss > LOSS_LIMIT:
        warnings.append(f'{method}: loss {loss:.4g} (mean squared residual in noise stds; ~1 '
                        'when the model fits): the model misses the data; check '
                        'model.actuator, model.integrator, the bounds and data.noise_std')
    return Diagnosis(converged and not warnings, reason, tuple(warnings))


def _spread_change(spread) -> float:
    """Largest factor (>= 1) between a parameter's mean spread over the last SPREAD_SHARE of
    the steps and that over the SPREAD_SHARE before (1 for too short a history or a spread
    of zero)."""
    spread = np.asarray(spread, dtype=float)
    tail = int(np.ceil(SPREAD_SHARE * len(spread)))
    if spread.ndim != 2 or tail < 1 or 2 * tail > len(spread):
        return 1.0
    last, before = spread[-tail:].mean(axis=0), spread[-2 * tail:-tail].mean(axis=0)
    ok = (last > 0.0) & (before > 0.0) & np.isfinite(last) & np.isfinite(before)
    if not np.any(ok):
        return 1.0
    ratio = last[ok] / before[ok]
    return float(np.max(np.maximum(ratio, 1.0 / ratio)))


def _mode_offsets(theta, mode, covariance, spec) -> np.ndarray:
    """(M,) |mean of the particles theta (P, M) - mode| in the Laplace stds of `covariance`,
    0 for a parameter whose mode lies within MODE_MARGIN stds of a bound or whose std is 0."""
    std = np.sqrt(np.maximum(np.diagonal(covariance), 0.0))
    mode = np.asarray(mode, dtype=float)
    inside = ((mode - MODE_MARGIN * std > np.asarray(spec.lower_bounds, float))
              & (mode + MODE_MARGIN * std < np.asarray(spec.upper_bounds, float)) & (std > 0))
    offset = np.abs(np.mean(np.asarray(theta, float), axis=0) - mode) / np.where(inside, std,
                                                                                1.0)
    return np.where(inside, offset, 0.0)


def _consistent_fn(problem: Problem) -> Callable:
    """Jitted `consistent(theta (P, M)) -> (P,) bool` (`spec.is_consistent`)."""
    key = ('consistent', problem.spec, params_digest(problem.base_params))
    return cached(key, lambda: jax.jit(jax.vmap(
        lambda theta: problem.spec.is_consistent(theta, problem.base_params))))
