"""Every identification method as an `Estimator` of the contract (`inference.base`) around
its kernel (`inference.kernels`): one factory `make_<method>(target, options) -> Estimator`
per method.

  * Output error over the shooting likelihood (`likelihoods.likelihood`, data a
    `TrajectoryData`) or the equation-error likelihood (`likelihoods.equation_error`, data a
    `TorqueData`): `make_csvgd` (seed 000), `make_svgd`, `make_sgld`, `make_nuts`,
    `make_emcee`, `make_cem` over CSVGD's flat particle x = [z, s_hat] (`shooting`), and
    `make_lm` (box-bounded Gauss-Newton over single-shooting windows whose starts are free;
    the default point method). Their loss is each particle's mean squared noise-normalised
    residual (`likelihood.residual_loss`). For the baselines the defects of multiple
    shooting are a Gaussian likelihood term of std `DEFECT_STD` (normalised units, seed
    §2.3).
  * `make_diffnea`: Adam over the spec's virtual parameters on a rollout or one-step loss
    (`likelihoods.losses`, data `Segments`). `make_nea`: least squares on the joint-torque
    regressor with its consistent refinement (data `RegressorData`).

Warm-ups and probes live in `init`: NUTS adapts its step size for `options.iterations`
transitions; SGLD sets its step size so that the median chain's first drift is
`options.learning_rate` (in z); Emcee and CEM get `ENSEMBLE_JITTER` normalised noise on the
shooting states. `rebase` (the next live window) carries over, per method: CSVGD and SVGD the
particles (shooting states, multipliers and Adam's moments restart); SGLD its step size;
NUTS its step size and mass matrix; Emcee its random generator; CEM a new mixture at the
particles; DiffNEA its Adam state; NEA and LM restart from the particles. The prior
(`GaussianPrior` or None) enters every sampler's log density and LM's cost; DiffNEA and NEA
ignore it. Emcee's `step` runs on the host and must not be jitted (`registry.Method`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sysid_ros.core.inference import consistency, shooting
from sysid_ros.core.inference.base import Estimator, KernelData, StepInfo
from sysid_ros.core.inference.kernels import cem, csvgd, diffnea, emcee, lm, nea, nuts, sgld, svgd
from sysid_ros.core.inference.optimisers import annealed_adam, whitened
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import shooting_windows
from sysid_ros.core.model.parameters import ParameterSpec
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'DEFECT_STD',
    'Target',
    'Options',
    'cem_sizes',
    'make_csvgd',
    'make_svgd',
    'make_sgld',
    'make_nuts',
    'make_emcee',
    'make_cem',
    'make_diffnea',
    'make_nea',
    'make_lm',
    'window_residual_fn',
]

# Std of the normalised defects in the baselines' log density.
DEFECT_STD = 0.1
# Std of the normalised noise on the initial shooting states of Emcee and CEM.
ENSEMBLE_JITTER = 1e-2
# NUTS: deepest tree (2^6 - 1 leapfrog steps); floor of its start ensemble's metric
# (a share of the largest variance).
NUTS_MAX_DOUBLINGS = 6
ENSEMBLE_METRIC_FLOOR = 1e-10
CEM_COMPONENTS = 3
CEM_ELITE_FRACTION = 0.2
# NEA: most Gauss-Newton steps; stop when a step is smaller than NEA_TOLERANCE (bounds-scaled
# units); Levenberg-Marquardt iterations of the consistent refinement and the margin by which
# the refinement from the projection must beat the one from the anchor.
NEA_MAX_ITERATIONS = 20
NEA_TOLERANCE = 1e-9
NEA_REFINE_ITERATIONS = 100
NEA_REFINE_MARGIN = 0.01


class Target(NamedTuple):
    """What is identified, and the model the data are compared with.

    Attributes:
      model: static tree.
      base_params: nominal Params: every value not in the spec.
      spec: the free parameters (M) and their bounds.
      likelihood: the shooting likelihood (output-error methods) or the equation-error
        one (`likelihoods.equation_error`), else None.
      loss_fn: DiffNEA's `loss_fn(params, Segments) -> ()`, else None.
      actuator: actuator model name (NEA's additive friction).
    """

    model: RobotModel
    base_params: Params
    spec: ParameterSpec
    likelihood: lik.ShootingLikelihood | None = None
    loss_fn: Callable | None = None
    actuator: str = 'viscous'

    def params(self, theta):
        """Params of physical values theta (M,)."""
        return self.spec.to_params(theta, self.base_params)


class Options(NamedTuple):
    """Settings that shape a method.

    Attributes:
      num_particles: P (chains, walkers, population, restarts).
      learning_rate: Adam's step size (CSVGD, SVGD, DiffNEA), SGLD's first drift (in z).
      iterations: planned steps (the step-size decay of DiffNEA, CSVGD and SVGD, NUTS's
        warm-up length).
      whiten: CSVGD steps in the starting particles' whitened coordinates (`whitened`):
        `learning_rate` counts in their stds instead of in z (the live session's windows
        that start at a Laplace draw).
    """

    num_particles: int = 1
    learning_rate: float = 5e-2
    iterations: int = 100
    whiten: bool = False


# ------------------------------------------------------------------------------------------
# The shooting likelihood's samplers
# ------------------------------------------------------------------------------------------

def _evaluate_fn(target: Target) -> Callable:
    """`evaluate(x (P, D), data) -> (loss (P,), max_defect (P,))` of flat particles."""
    setting, spec = target.likelihood, target.spec

    def one(theta, states, data):
        terms = lik.log_likelihood(setting, target.params(theta), states, data)
        return terms.log_lik, jnp.max(jnp.abs(terms.defects), initial=0.0)

    def evaluate(x, data):
        theta, states = shooting.split_particles(spec, setting, x, data)
        log_lik, max_defect = jax.vmap(one, in_axes=(0, 0, None))(theta, states, data)
        finite = jnp.isfinite(log_lik) & jnp.isfinite(max_defect)
        loss = lik.residual_loss(setting, data, log_lik)
        return jnp.where(finite, loss, jnp.inf), jnp.where(finite, max_defect, jnp.inf)

    return evaluate


def _log_prob_fn(target: Target) -> Callable:
    """`log_prob(x, KernelData) -> ()`: the baselines' density times the prior."""
    spec = target.spec
    base = shooting.make_shooting_log_prob(target.likelihood, spec, params_fn=target.params,
                                           defect_std=DEFECT_STD)

    def log_prob(x, data_and_prior):
        data, prior = data_and_prior
        value = base(x, data)
        if prior is not None:
            value = value + prior.log_density(spec.from_unconstrained(x[:spec.num_params]))
        return value

    return log_prob


def _check_target(target: Target, method: str) -> None:
    if target.likelihood is None:
        raise ValueError(f'{method}: needs a shooting likelihood (Target.likelihood)')


def _positions(target: Target, theta, data) -> jax.Array:
    """(P, D) flat particles at theta (P, M), the shooting states on the measurements."""
    return shooting.shooting_positions(target.likelihood, target.spec, theta, data)


def _sampler_estimator(target: Target, kernel_step: Callable, start: Callable,
                       restart: Callable, extra: Callable, host: bool = False) -> Estimator:
    """An Estimator around a kernel over flat shooting particles.

    Args:
      target: with a likelihood.
      kernel_step: the kernel's `step(state, KernelData) -> (state, info)`.
      start: `start(key, x (P, D), data) -> state` (with warm-ups and probes).
      restart: `restart(old state, key, x (P, D), data) -> state` for `rebase`.
      extra: `extra(state, kernel info) -> {name: ()}` method diagnostics.
      host: the kernel runs on the host (Emcee): the evaluation is jitted here.
    """
    spec = target.spec
    m = spec.num_params
    evaluate = _evaluate_fn(target)
    if host:
        evaluate = jax.jit(evaluate)

    def init(key, theta0, data):
        return start(key, _positions(target, theta0, data), data)

    def step(state, data, prior=None):
        loss, max_defect = evaluate(state.particles, data)
        new, info = kernel_step(state, KernelData(data, prior))
        grad_norm = getattr(info, 'grad_norm', jnp.zeros_like(loss))
        return new, StepInfo(loss=loss, grad_norm=grad_norm,
                             num_nonfinite=info.num_nonfinite, max_defect=max_defect,
                             converged=jnp.zeros((), bool), extra=extra(new, info))

    def posterior(state):
        return spec.from_unconstrained(jnp.asarray(state.particles)[:, :m])

    def rebase(state, theta, data):
        key = jax.random.PRNGKey(int(np.asarray(state.iteration)) + 1)
        return restart(state, key, _positions(target, theta, data), data)

    return Estimator(init=init, step=step, posterior=posterior, rebase=rebase)


def _jitter_shooting(target: Target, x, key) -> jax.Array:
    """Positions (P, D) with ENSEMBLE_JITTER normal noise on the shooting states."""
    noise = ENSEMBLE_JITTER * jax.random.normal(key, x.shape, x.dtype)
    return x + jnp.where(jnp.arange(x.shape[1]) >= target.spec.num_params, noise, 0.0)


def _particle_optimiser(target: Target, options: Options) -> optax.GradientTransformation:
    """CSVGD's `annealed_adam`, `whitened` if `options.whiten`."""
    optimiser = annealed_adam(options.learning_rate, options.iterations)
    return whitened(optimiser, target.spec.num_params) if options.whiten else optimiser


def make_csvgd(target: Target, options: Options) -> Estimator:
    """CSVGD (`kernels.csvgd`) with `annealed_adam` and the paper's MDMM defaults; the
    prior multiplies the likelihood."""
    _check_target(target, 'csvgd')
    spec = target.spec
    kernel = csvgd.build_kernel(target.likelihood, spec, _particle_optimiser(target, options),
                                params_fn=target.params)

    def init(key, theta0, data):
        return kernel.init(key, theta0, KernelData(data))

    def step(state, data, prior=None):
        new, info = kernel.step(state, KernelData(data, prior))
        loss = jnp.where(jnp.isfinite(info.log_lik),
                         lik.residual_loss(target.likelihood, data, info.log_lik), jnp.inf)
        return new, StepInfo(loss=loss, grad_norm=info.grad_norm,
                             num_nonfinite=info.num_nonfinite, max_defect=info.max_defect,
                             converged=jnp.zeros((), bool),
                             extra={'num_reseeded': new.num_reseeded})

    def rebase(state, theta, data):
        fresh = kernel.init(state.key, theta, KernelData(data))
        return fresh._replace(iteration=state.iteration, num_reseeded=state.num_reseeded,
                              multiplier_rate=state.multiplier_rate, damping=state.damping)

    return Estimator(init=init, step=step, posterior=lambda state: state.theta,
                     rebase=rebase)


def make_svgd(target: Target, options: Options) -> Estimator:
    """SVGD (`kernels.svgd`) on the baselines' shooting density, `annealed_adam`."""
    _check_target(target, 'svgd')
    kernel = svgd.build_kernel(_log_prob_fn(target),
                               annealed_adam(options.learning_rate, options.iterations))

    def start(key, x, data):
        return kernel.init(key, x, KernelData(data))

    def restart(old, key, x, data):
        return start(key, x, data)._replace(iteration=old.iteration,
                                            num_reseeded=old.num_reseeded)

    return _sampler_estimator(target, kernel.step, start, restart,
                              lambda state, info: {'num_reseeded': state.num_reseeded})


def make_sgld(target: Target, options: Options) -> Estimator:
    """SGLD (`kernels.sgld`), P chains; the step size is probed in `init`."""
    _check_target(target, 'sgld')
    log_prob = _log_prob_fn(target)
    kernel = sgld.build_kernel(log_prob, options.learning_rate, options.num_particles)
    grad_norms = jax.jit(jax.vmap(lambda x, data: jnp.linalg.norm(
        jax.grad(log_prob)(x, KernelData(data))), in_axes=(0, None)))

    def start(key, x, data):
        state = kernel.init(key, x, KernelData(data))
        norms = np.asarray(grad_norms(state.particles, data))
        norms = norms[np.isfinite(norms) & (norms > 0.0)]
        if norms.size:
            state = state._replace(step_size=jnp.asarray(
                options.learning_rate / np.median(norms), state.step_size.dtype))
        return state

    def restart(old, key, x, data):
        return kernel.init(key, x, KernelData(data))._replace(
            step_size=old.step_size, iteration=old.iteration, num_reseeded=old.num_reseeded)

    def extra(state, info):
        return {'num_reseeded': state.num_reseeded, 'step_size': state.step_size}

    return _sampler_estimator(target, kernel.step, start, restart, extra)


def _ensemble_metric(x) -> np.ndarray:
    """NUTS's inverse mass matrix from its starting positions x (P, D): their covariance
    (dense when P > D + 1, else its diagonal), floored at ENSEMBLE_METRIC_FLOOR times the
    largest variance so that it stays invertible."""
    x = np.asarray(x, dtype=float)
    cov = np.atleast_2d(np.cov(x, rowvar=False)) if len(x) > 1 else np.eye(x.shape[1])
    floor = ENSEMBLE_METRIC_FLOOR * max(float(np.max(np.diag(cov))), 1e-300)
    if len(x) > x.shape[1] + 1:
        return cov + floor * np.eye(x.shape[1])
    return np.diag(cov) + floor


def make_nuts(target: Target, options: Options) -> Estimator:
    """NUTS (`kernels.nuts`), P chains, metric the covariance of the start
    (`_ensemble_metric`: from the lm estimate, its Laplace approximation), after
    `options.iterations` steps of step-size adaptation in `init` (one compiled call, no
    progress reports). Stan's window adaptation starts from the identity metric, far from a
    posterior whose scales in z span decades."""
    _check_target(target, 'nuts')
    log_prob = _log_prob_fn(target)

    def kernel_at(step_size, inverse_mass_matrix):
        return nuts.build_kernel(log_prob, step_size, inverse_mass_matrix,
                                 options.num_particles, max_num_doublings=NUTS_MAX_DOUBLINGS)

    # The step reads the step size and mass matrix from the state, not from the factory.
    kernel_step = kernel_at(1.0, np.ones(1)).step

    def start(key, x, data):
        key_warmup, key_chains = jax.random.split(key)
        warm = nuts.warmup(key_warmup, log_prob, x, options.iterations, KernelData(data),
                           max_num_doublings=NUTS_MAX_DOUBLINGS,
                           inverse_mass_matrix=_ensemble_metric(x))
        return kernel_at(float(warm.step_size), np.asarray(warm.inverse_mass_matrix)).init(
            key_chains, np.asarray(warm.particles), KernelData(data))

    def restart(old, key, x, data):
        state = kernel_at(float(old.step_size), np.asarray(old.inverse_mass_matrix)).init(
            key, np.asarray(x), KernelData(data))
        return state._replace(iteration=old.iteration, num_reseeded=old.num_reseeded)

    def extra(state, info):
        return {'num_reseeded': state.num_reseeded, 'step_size': state.step_size,
                'acceptance': jnp.mean(info.acceptance_rate),
                'num_divergent': jnp.sum(info.is_divergent)}

    return _sampler_estimator(target, kernel_step, start, restart, extra)


def make_emcee(target: Target, options: Options) -> Estimator:
    """Emcee (`kernels.emcee`), P walkers (P >= 2 D); runs on the host."""
    _check_target(target, 'emcee')
    kernel = emcee.build_kernel(_log_prob_fn(target), options.num_particles)

    def start(key, x, data):
        dim = x.shape[1]
        if options.num_particles < 2 * dim:
            raise ValueError(f'particles: emcee needs >= 2 D = {2 * dim} walkers for D = {dim} '
                             f'dimensions (parameters and shooting states), got '
                             f'{options.num_particles}; raise it or use fewer shooting windows')
        key_jitter, key_walkers = jax.random.split(key)
        return kernel.init(key_walkers, np.asarray(_jitter_shooting(target, x, key_jitter)),
                           KernelData(data))

    def restart(old, key, x, data):
        return start(key, x, data)._replace(random_state=old.random_state,
                                            iteration=old.iteration,
                                            num_reseeded=old.num_reseeded)

    def extra(state, info):
        return {'num_reseeded': state.num_reseeded, 'acceptance': info.acceptance_rate}

    return _sampler_estimator(target, kernel.step, start, restart, extra, host=True)


def cem_sizes(num: int) -> tuple[int, int]:
    """(components, elites) of CEM for a population of `num`."""
    components = max(1, min(CEM_COMPONENTS, num // 10))
    return components, max(2 * components, int(np.ceil(CEM_ELITE_FRACTION * num)))


def make_cem(target: Target, options: Options) -> Estimator:
    """The Gaussian-mixture cross-entropy method (`kernels.cem`): population
    P, `CEM_COMPONENTS` components (fewer when P < 10 per component), the best
    `CEM_ELITE_FRACTION` as elites."""
    _check_target(target, 'cem')
    num = options.num_particles
    if num < 2:
        raise ValueError(f'particles: cem needs a population >= 2, got {num}')
    components, elites = cem_sizes(num)
    kernel = cem.build_kernel(_log_prob_fn(target), num, elites, components)

    def start(key, x, data):
        key_jitter, key_mixture = jax.random.split(key)
        return kernel.init(key_mixture, _jitter_shooting(target, x, key_jitter),
                           KernelData(data))

    def restart(old, key, x, data):
        return start(key, x, data)._replace(iteration=old.iteration)

    return _sampler_estimator(target, kernel.step, start, restart,
                              lambda state, info: {'num_reseeded': jnp.zeros((), jnp.int32)})


# ------------------------------------------------------------------------------------------
# Point estimators
# ------------------------------------------------------------------------------------------

class PointState(NamedTuple):
    """State of DiffNEA and NEA as Estimators.

    Attributes:
      inner: the kernel's state (`diffnea.DiffNEAState`, `nea.NEAState`).
      anchor: (P, M) consistent points within the bounds that inconsistent particles are
        projected towards (`consistency.consistent_anchor` of the start).
      phase: () int: NEA's 0 Gauss-Newton, 1 refinement, 2 done (DiffNEA: always 0).
      rank: (P,) NEA: numerical rank of the last regression.
      raw_consistent: (P,) NEA: whether the last raw least-squares solution was consistent.
      refined: () bool, NEA: the consistent refinement replaced a particle.
    """

    inner: Any
    anchor: jax.Array
    phase: jax.Array
    rank: jax.Array
    raw_consistent: jax.Array
    refined: jax.Array


def _point_state(inner, anchor) -> PointState:
    num = inner.theta.shape[0]
    return PointState(inner=inner, anchor=anchor, phase=jnp.zeros((), jnp.int32),
                      rank=jnp.zeros((num,), jnp.int32),
                      raw_consistent=jnp.ones((num,), bool), refined=jnp.zeros((), bool))


def _anchors(target: Target, theta) -> jax.Array:
    return jax.vmap(lambda t: consistency.consistent_anchor(
        target.spec, target.base_params, t))(jnp.asarray(theta))


def make_diffnea(target: Target, options: Options) -> Estimator:
    """DiffNEA (`kernels.diffnea`): Adam with a cosine-decaying step size from
    `learning_rate` over `iterations` steps; the posterior projects any inconsistent
    particle (single free inertia entries) onto the consistent set."""
    if target.loss_fn is None:
        raise ValueError('diffnea: needs a loss (Target.loss_fn)')
    schedule = optax.cosine_decay_schedule(options.learning_rate, max(options.iterations, 1),
                                           alpha=0.01)
    kernel = diffnea.build_kernel(target.base_params, target.spec, target.loss_fn,
                                  optax.adam(schedule))

    def init(key, theta0, data):
        inner = kernel.init(key, jnp.asarray(theta0), data)
        return _point_state(inner, _anchors(target, inner.theta))

    def step(state, data, prior=None):
        inner, info = kernel.step(state.inner, data)
        loss = jnp.where(jnp.isfinite(info.loss), info.loss, jnp.inf)
        return state._replace(inner=inner), StepInfo(
            loss=loss, grad_norm=info.grad_norm, num_nonfinite=info.num_nonfinite,
            max_defect=jnp.zeros_like(loss), converged=jnp.zeros((), bool), extra={})

    def posterior(state):
        return jax.vmap(lambda t, a: consistency.project_consistent(
            target.spec, target.base_params, t, a))(state.inner.theta, state.anchor)

    def rebase(state, theta, data):
        theta = jnp.asarray(theta)
        z = target.spec.to_unconstrained(theta)
        return state._replace(inner=state.inner._replace(
            theta=target.spec.from_unconstrained(z), z=z))

    return Estimator(init=init, step=step, posterior=posterior, rebase=rebase)


def make_nea(target: Target, options: Options) -> Estimator:
    """NEA (`kernels.nea`); each step is one Gauss-Newton iteration (at most
    NEA_MAX_ITERATIONS, until the step is below NEA_TOLERANCE), then one refinement step, then
    `converged`. The refinement runs only if the raw solution was not physically consistent:
    consistent least squares (`nea.make_consistent_ls`) from the projection and from the
    consistent anchor; the anchor's fit is kept unless the projection's is lower by
    NEA_REFINE_MARGIN, either only if it beats the projection."""
    del options
    spec, base = target.spec, target.base_params
    kernel = nea.build_kernel(target.model, base, spec, actuator=target.actuator)
    refine = nea.make_consistent_ls(target.model, base, spec, actuator=target.actuator,
                                    iterations=NEA_REFINE_ITERATIONS)
    loss_fn = nea.make_regressor_loss(target.model, base, spec, target.actuator)

    def init(key, theta0, data):
        inner = kernel.init(key, jnp.asarray(theta0), data)
        return _point_state(inner, inner.anchor)

    def gauss_newton(state, data):
        inner, info = kernel.step(state.inner, data)
        done = ((jnp.max(info.step_norm) < NEA_TOLERANCE)
                | (inner.iteration >= NEA_MAX_ITERATIONS))
        return state._replace(inner=inner, phase=jnp.where(done, 1, 0).astype(jnp.int32),
                              rank=info.rank.astype(jnp.int32),
                              raw_consistent=info.raw_consistent)

    def refinement(state, data):
        projected = state.inner.theta
        projected_loss = jax.vmap(loss_fn, in_axes=(0, None))(projected, data)
        refined, refined_loss = refine(jnp.concatenate([projected, state.anchor]), data)
        num = projected.shape[0]
        refined = refined.reshape((2, num, -1))
        refined_loss = refined_loss.reshape((2, num))
        # The fit from the anchor keeps what the data cannot see near the nominal values;
        # the one from the projection is taken only if it fits clearly better.
        pick = jnp.where(refined_loss[0] < (1.0 - NEA_REFINE_MARGIN) * refined_loss[1], 0, 1)
        rows = jnp.arange(num)
        candidate, candidate_loss = refined[pick, rows], refined_loss[pick, rows]
        keep = (candidate_loss < projected_loss) & ~jnp.all(state.raw_consistent)
        theta = jnp.where(keep[:, None], candidate, projected)
        return state._replace(inner=state.inner._replace(theta=theta),
                              phase=jnp.full((), 2, jnp.int32), refined=jnp.any(keep))

    def finished(state, data):
        return state

    def step(state, data, prior=None):
        theta = state.inner.theta
        loss = jax.vmap(loss_fn, in_axes=(0, None))(theta, data)
        grad = jax.vmap(jax.grad(loss_fn), in_axes=(0, None))(theta, data)
        new = jax.lax.switch(state.phase, (gauss_newton, refinement, finished), state, data)
        finite = jnp.isfinite(loss)
        extra = {'rank': jnp.min(new.rank), 'raw_consistent': jnp.all(new.raw_consistent),
                 'refined': new.refined,
                 'projected': jnp.any(jnp.abs(new.inner.z - new.inner.theta) > 0.0)}
        return new, StepInfo(loss=jnp.where(finite, loss, jnp.inf),
                             grad_norm=jnp.linalg.norm(grad, axis=-1),
                             num_nonfinite=jnp.sum(~finite), max_defect=jnp.zeros_like(loss),
                             converged=new.phase == 2, extra=extra)

    def posterior(state):
        return state.inner.theta

    def rebase(state, theta, data):
        return init(None, theta, data)

    return Estimator(init=init, step=step, posterior=posterior, rebase=rebase)


def window_residual_fn(target: Target) -> Callable:
    """`fn(theta (M,), starts (K, S), data) -> (K, n)` noise-normalised residuals of each
    single-shooting window from its start state (`shooting_windows.window_residuals`)."""
    if target.likelihood is None or target.likelihood.num_windows != 1:
        raise ValueError('lm: every window starts at its own (fitted) state; needs a shooting '
                         'likelihood with one window per piece (estimator.shooting_windows: 1)')
    setting = target.likelihood
    return lambda theta, starts, data: shooting_windows.window_residuals(
        setting, target.params(theta), starts, data)


def make_lm(target: Target, options: Options) -> Estimator:
    """Levenberg-Marquardt (`kernels.lm`) from each of the P starting
    particles (independent restarts, vmapped), every window's start state a free variable
    that starts at its measurement; stops when every restart has converged. The step's data
    is a `TrajectoryData` of single-shooting windows; `loss` is the mean squared
    noise-normalised residual; `laplace` gives each restart's profiled Hessian and
    cluster-robust covariance. `learning_rate` and `iterations` are not used."""
    del options
    blocks = window_residual_fn(target)
    spec = target.spec
    kernel = lm.build_kernel(blocks, spec.lower, spec.upper)

    def init(key, theta0, data, prior=None):
        return jax.vmap(kernel.init, in_axes=(None, (0, None), None))(
            key, (jnp.asarray(theta0), data.x0), KernelData(data, prior))

    def step(state, data, prior=None):
        new, info = jax.vmap(kernel.step, in_axes=(0, None))(state, KernelData(data, prior))
        lin = state.lin
        finite = jnp.isfinite(lin.cost)
        return new, StepInfo(
            loss=jnp.where(finite, lin.sum_squares / lin.num_residuals, jnp.inf),
            grad_norm=jnp.linalg.norm(lin.g_theta, axis=-1),
            num_nonfinite=jnp.sum(~finite), max_defect=jnp.zeros_like(lin.cost),
            converged=jnp.all(new.converged),
            extra={'damping': jnp.median(new.damping),
                   'accepted': jnp.sum(info.accepted)})

    def posterior(state):
        return state.theta

    def rebase(state, theta, data):
        return init(None, theta, data)

    def laplace(state):
        return (jax.vmap(lm.schur_hessian)(state.lin),
                jax.vmap(lm.laplace_covariance)(state.lin),
                jax.vmap(lm.covariance_dof)(state.lin))

    return Estimator(init=init, step=step, posterior=posterior, rebase=rebase,
                     laplace=laplace)
