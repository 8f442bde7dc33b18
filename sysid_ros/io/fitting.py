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
    each restart (lowest loss seen).
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

from sysid_ros.core.inference import methods, particles, registry
from sysid_ros.core.inference.base import Estimator
from sysid_ros.core.model.types import Params
from sysid_ros.io import estimator_data
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
    'method_options',
    'fit_estimator',
]

CACHE_SIZE = 16
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

    @property
    def mean(self) -> np.ndarray:
        """(M,) mean over particles."""
        return self.particles.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """(M,) standard deviation over particles (0 for a single particle)."""
        return self.particles.std(axis=0)

    def as_dict(self, which: str = 'mean') -> dict[str, float]:
        """{name: value} of the mean (or 'std')."""
        values = self.mean if which == 'mean' else self.std
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
    method runs on the host), cached per problem structure and options.

    Raises:
      ConfigError: a method that cannot run this problem (naming `estimator.method` or
        `estimator.particles`).
    """
    entry = registry.lookup(method)
    key = (method, target.model, target.spec, target.likelihood, target.loss_fn,
           target.actuator, options, params_digest(problem.base_params))

    def build():
        try:
            est = entry.factory(target, options)
        except ValueError as exc:
            raise _method_error(problem, exc) from exc
        if not entry.jittable:
            return est
        return est._replace(step=jax.jit(est.step), posterior=jax.jit(est.posterior))

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


def fit_estimator(problem: Problem, trajs, method: str, iterations: int,
                  progress: Callable | None = None, theta0=None, seed: int | None = None,
                  start: float | None = None) -> FitResult:
    """Run a registered method on prepared trajectories (module doc); `pipeline.fit`'s
    arguments, with `trajs` from `problem.prepare_trajectories`.

    Raises:
      ConfigError: a parameter without finite bounds for a Bayesian method, too few
        particles, windows too short, a bad `data.noise_std`; DataError: bad data. All of
        them before anything is compiled.
    """
    start = time.perf_counter() if start is None else start
    entry = registry.lookup(method)
    spec = problem.spec
    seed = problem.config.estimator.seed if seed is None else int(seed)
    if entry.bayesian:
        estimator_data.check_bounds(problem, method)
    prepared = estimator_data.method_data(problem, trajs, entry.data)
    options = method_options(problem, iterations)
    try:
        theta_init = particles.initial_particles(spec, problem.base_params,
                                                 options.num_particles, seed, theta0)
    except ValueError as exc:
        raise _method_error(problem, exc) from exc
    est = compiled_estimator(problem, method, prepared.target, options)
    data = prepared.data
    try:
        state = est.init(jax.random.PRNGKey(seed), jnp.asarray(theta_init), data)
    except ValueError as exc:
        raise _method_error(problem, exc) from exc
    best = BestSoFar(theta_init)
    losses = []
    nonfinite = [0]

    def record(previous, new, info):
        loss = np.asarray(info.loss, dtype=float)
        best.update(loss, np.asarray(est.posterior(previous)))
        nonfinite[0] += int(np.asarray(info.num_nonfinite))
        losses.append(float(np.min(loss)))
        return losses[-1]

    def converged(info):
        return bool(np.asarray(info.converged))

    steps = run_steps(lambda s: est.step(s, data, None), state, iterations, record, progress,
                      start, converged)
    final_theta = np.asarray(est.posterior(steps.state), dtype=float)
    try:
        _, final = est.step(steps.state, data, None)       # the loss of the final particles
        final_loss = np.asarray(final.loss, dtype=float)
    except KeyboardInterrupt:
        final, final_loss = steps.info, np.full(final_theta.shape[0], np.nan)
    best.update(final_loss, final_theta)
    history = np.append(np.asarray(losses[1:], dtype=float), float(np.min(final_loss)))
    if entry.bayesian:
        result_theta, result_loss = final_theta, float(np.min(final_loss))
    else:
        result_theta, result_loss = best.theta, float(np.min(best.loss))
    info: dict[str, Any] = dict(prepared.info)
    if final is not None:
        info.update({k: _scalar(v) for k, v in final.extra.items()})
        info['max_defect'] = float(np.max(np.asarray(final.max_defect)))
    best_theta, best_loss = best.overall()
    info.update(num_nonfinite=nonfinite[0], best_loss=best_loss,
                best_particle={n: float(v) for n, v in zip(spec.names, best_theta)})
    consistent = np.asarray(_consistent_fn(problem)(jnp.asarray(result_theta)), dtype=bool)
    return FitResult(method=method, names=spec.names, particles=np.asarray(result_theta),
                     initial=np.asarray(theta_init, dtype=float),
                     lower=np.asarray(spec.lower_bounds, float),
                     upper=np.asarray(spec.upper_bounds, float),
                     loss_history=history, iterations=len(steps.history),
                     final_loss=result_loss, wall_time=time.perf_counter() - start,
                     consistent=consistent, interrupted=steps.interrupted, info=info)


def _consistent_fn(problem: Problem) -> Callable:
    """Jitted `consistent(theta (P, M)) -> (P,) bool` (`spec.is_consistent`)."""
    key = ('consistent', problem.spec, params_digest(problem.base_params))
    return cached(key, lambda: jax.jit(jax.vmap(
        lambda theta: problem.spec.is_consistent(theta, problem.base_params))))
