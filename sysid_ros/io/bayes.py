"""Bayesian identification from measured trajectories: CSVGD, SVGD, SGLD, NUTS, Emcee and CEM
(`core.csvgd`, `core.svgd`, `core.baselines`) behind `pipeline.fit` and `sysid fit`.

    Problem + trajectories -> pieces -> shooting likelihood + TrajectoryData
        -> initial particles (Sobol) -> estimator steps (`pipeline.run_steps`) -> FitResult

Data (`shooting_problem`). The trajectories, resampled at `data.rate` by
`pipeline.prepare_trajectories`, are cut into pieces of one length so that they stack into one
`core.likelihood.TrajectoryData`: the piece length T is the largest multiple of W =
`estimator.shooting_windows` that fits into the shortest trajectory; every trajectory gives
floor(steps / T) consecutive pieces and the steps left at its end are dropped (reported in
`info['dropped_steps']`). Each piece starts at its measured state and is simulated under its
measured commands, so pieces count as independent experiments under
`estimator.likelihood: product` and as members of the mixture under `sum`. Each piece is cut
into W shooting windows of H = T / W >= MIN_WINDOW_STEPS steps. Observations: the joint
positions and velocities [q; qd] at every sample.

Noise (`noise_std`). `data.noise_std` holds one value for all 2 nv observed dimensions or one
per dimension (q of each joint, then qd, in the model's joint order). Left empty, it is
estimated per dimension from the data: the robust spread (1.4826 x median absolute deviation)
of the third differences divided by sqrt(20) (white noise of std s has third differences of
std sqrt(20) s, a smooth signal sampled fast hardly any), floored at NOISE_FLOOR times the
dimension's spread so that exact, simulated data keeps a finite likelihood.
`info['noise_std']` and `info['noise_std_source']` report what was used.

Parameters and particles. Every method moves the unconstrained coordinates z of the
`ParameterSpec` (a bijection onto the bounds box; the log-Jacobian is part of the density, so
the prior is uniform within the bounds) and, for W > 1, the normalised shooting states of
CSVGD's particle [z, s_hat]; the posterior is z mapped back to physical units. This needs
finite bounds on every parameter (ConfigError otherwise). Initial particles
(`initial_particles`): scrambled Sobol points within the bounds (seed `estimator.seed`); the
first particle takes the `init` values of the parameters that give one (or the `theta0` of
`fit`), held INTERIOR_MARGIN of the width inside the bounds. Shooting states start on the
measured data (the ensemble methods Emcee and CEM, which estimate their spread from the
particles, get ENSEMBLE_JITTER of normalised noise on them).

Methods (P = `estimator.particles`, lr = `estimator.learning_rate`):
  * csvgd: `make_csvgd` with Adam(lr) and the paper's MDMM defaults.
  * svgd: `make_svgd` on the shooting log density below, Adam(lr).
  * sgld, nuts, emcee, cem: `core.baselines` on `make_shooting_log_prob`, in which the defects
    of multiple shooting are a Gaussian likelihood term of std DEFECT_STD (normalised units).
    - sgld: P chains; the Langevin step size h is set at the start so that the first drift
      h |grad log p| of the median chain is lr (in z).
    - nuts: P chains; `nuts_warmup` (Stan's window adaptation) for `iterations` transitions
      first, one compiled call without progress reports, then `iterations` NUTS steps; trees
      of at most 2^NUTS_MAX_DOUBLINGS - 1 leapfrog steps.
    - emcee: P walkers; emcee needs P >= 2 D, D = M + K (W - 1) 2 nv (K pieces).
    - cem: population P, CEM_COMPONENTS mixture components (fewer when P < 10 per
      component), elites: the best CEM_ELITE_FRACTION of the population.

Result (`FitResult`). `particles`: the posterior particles (P, M) after the last step (after
Ctrl-C: after the last completed step, `interrupted=True`). `loss_history[k]`: after step k,
the mean squared noise-normalised residual ((y_sim - y) / sigma)^2 of the particle of highest
log-likelihood, i.e. -2 (log-likelihood + log normaliser) / number of observed values (about
1 at the truth when the noise std is right; under `sum`, per piece, combined as the
likelihood combines them). `info`: `max_log_likelihood`, `max_defect` (largest normalised
defect of the final particles; 0 for W = 1), `best_log_likelihood` and `best_particle` (the
highest log-likelihood seen at any step, and that particle), `num_reseeded` (diverged
particles re-seeded or chains restarted), `num_nonfinite` (non-finite evaluations summed over
the steps), `acceptance` (nuts, emcee), `num_divergent` and `step_size` (nuts), `step_size`
(sgld), the data layout (`num_pieces`, `piece_steps`, `window_steps`, `dropped_steps`), the
noise and `likelihood`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sysid_ros.core import baselines, csvgd, losses, svgd
from sysid_ros.core import likelihood as lik
from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline
from sysid_ros.io.pipeline import FitResult, Problem
from sysid_ros.io.trajectory import DataError, Trajectory

__all__ = [
    'BAYESIAN_METHODS',
    'MIN_WINDOW_STEPS',
    'NOISE_FLOOR',
    'ShootingProblem',
    'GaussianPrior',
    'Evaluation',
    'check_bounds',
    'estimate_noise_std',
    'shooting_problem',
    'initial_particles',
    'fit_posterior',
]

BAYESIAN_METHODS = config_io.BAYESIAN_METHODS
# Fewest control steps per shooting window.
MIN_WINDOW_STEPS = 2
# Floor of the estimated noise std, relative to each observed dimension's spread.
NOISE_FLOOR = 1e-3
# Initial values on a bound are moved this fraction of the bounds' width inside.
INTERIOR_MARGIN = 1e-3
# Std of the normalised defects in the baselines' log density (`make_shooting_log_prob`).
DEFECT_STD = 0.1
# Std of the normalised noise on the initial shooting states of Emcee and CEM.
ENSEMBLE_JITTER = 1e-2
NUTS_MAX_DOUBLINGS = 6
CEM_COMPONENTS = 3
CEM_ELITE_FRACTION = 0.2


class ShootingProblem(NamedTuple):
    """The measured data in the form the shooting likelihood takes.

    Attributes:
      likelihood: simulator, windows, observation model ([q; qd]) and combine form.
      data: K pieces of T steps (`core.likelihood.TrajectoryData`).
      info: plain description of the layout and the noise (goes into `FitResult.info`).
    """

    likelihood: lik.ShootingLikelihood
    data: lik.TrajectoryData
    info: dict


class GaussianPrior(NamedTuple):
    """A Gaussian prior N(mean, precision^-1) on theta [physical units], times the uniform
    prior within the bounds (e.g. the previous window's posterior of `io.online`). Passed to
    the jitted CSVGD step as data: new values do not recompile.

    Attributes:
      mean: (M,) in the order of `problem.names`.
      precision: (M, M) symmetric positive definite inverse covariance.
    """

    mean: jax.Array
    precision: jax.Array


def _gaussian_log_prior(theta, prior: GaussianPrior):
    """log N(theta; mean, precision^-1) up to a constant, () for theta (M,)."""
    residual = theta - prior.mean
    return -0.5 * residual @ prior.precision @ residual


# ------------------------------------------------------------------------------------------
# Checks and data (NumPy on the host, before anything is compiled)
# ------------------------------------------------------------------------------------------

def _error(problem: Problem, key: str, message: str) -> config_io.ConfigError:
    return pipeline._config_error(problem.config, key, message)


def check_bounds(problem: Problem, method: str) -> None:
    """Raise ConfigError naming the parameters without a finite min and max (min < max is
    checked with the configuration)."""
    spec = problem.spec
    unbounded = [f'{name} [{lo:g}, {hi:g}]'
                 for name, lo, hi in zip(spec.names, spec.lower_bounds, spec.upper_bounds)
                 if not (np.isfinite(lo) and np.isfinite(hi))]
    if unbounded:
        raise _error(problem, 'parameters', f'{method} samples within the bounds and needs a '
                     f'finite min and max for every parameter; unbounded: '
                     f'{", ".join(unbounded)}')


def _cut_pieces(problem: Problem, trajs: Sequence[Trajectory]):
    """States (K, T + 1, S), commands (K, T, nv) of the pieces, and the layout (module doc)."""
    windows = problem.config.estimator.shooting_windows
    steps = [t.num_samples - 1 for t in trajs]
    shortest = min(steps)
    piece = (shortest // windows) * windows
    if piece < MIN_WINDOW_STEPS * windows:
        raise _error(problem, 'estimator.shooting_windows', f'expected at most '
                     f'{max(shortest // MIN_WINDOW_STEPS, 1)} windows of >= {MIN_WINDOW_STEPS} '
                     f'steps for the shortest trajectory ({shortest} steps at '
                     f'{problem.config.data.rate:g} Hz), got {windows}')
    states, controls = [], []
    for traj in trajs:
        x = np.concatenate([traj.q, traj.qd], axis=1)
        for k in range((traj.num_samples - 1) // piece):
            begin = k * piece
            states.append(x[begin:begin + piece + 1])
            controls.append(traj.tau[begin:begin + piece])
    states, controls = np.stack(states), np.stack(controls)
    info = {'num_pieces': len(states), 'piece_steps': piece, 'window_steps': piece // windows,
            'shooting_windows': windows, 'dropped_steps': int(sum(steps) - len(states) * piece)}
    return states, controls, info


def estimate_noise_std(states: np.ndarray, nv: int) -> np.ndarray:
    """(S,) noise std per state dimension of pieces (K, T + 1, S), see the module doc."""
    third = np.diff(states, n=3, axis=1).reshape(-1, states.shape[-1])
    mad = np.median(np.abs(third - np.median(third, axis=0)), axis=0)
    sigma = 1.4826 * mad / np.sqrt(20.0)
    spread = losses.floored_state_scale(states.reshape(-1, states.shape[-1]).std(axis=0), nv)
    return np.maximum(sigma, NOISE_FLOOR * spread)


def _noise_std(problem: Problem, states: np.ndarray) -> tuple[np.ndarray, str]:
    dims = states.shape[-1]
    given = problem.config.data.noise_std
    if not given:
        return estimate_noise_std(states, problem.model.nv), 'estimated'
    if len(given) not in (1, dims):
        raise _error(problem, 'data.noise_std', f'expected 1 value or {dims} (q of '
                     f'{", ".join(problem.model.joint_names)}, then qd), got {len(given)}')
    return np.broadcast_to(np.asarray(given, dtype=float), (dims,)).copy(), 'config'


def shooting_problem(problem: Problem, trajs: Sequence[Trajectory]) -> ShootingProblem:
    """Cut prepared trajectories into pieces and build the shooting likelihood (module doc).

    Raises:
      ConfigError: a window count that leaves windows of fewer than MIN_WINDOW_STEPS steps,
        a `data.noise_std` of the wrong length.
      DataError: no trajectory, NaN or inf in the data.
    """
    if not trajs:
        raise DataError('no trajectories given')
    cfg = problem.config
    states, controls, info = _cut_pieces(problem, trajs)
    noise, source = _noise_std(problem, states)
    try:
        setting = lik.make_shooting_likelihood(
            problem.model, problem.dt, cfg.estimator.shooting_windows,
            cfg.estimator.likelihood, integrator=cfg.model.integrator,
            actuator=cfg.model.actuator, substeps=problem.substeps)
        data = lik.make_trajectory_data(setting, states, controls, noise)
    except ValueError as exc:
        raise DataError(str(exc)) from exc
    info.update(noise_std=[float(v) for v in noise], noise_std_source=source,
                likelihood=cfg.estimator.likelihood)
    return ShootingProblem(likelihood=setting, data=data, info=info)


def initial_particles(problem: Problem, num_particles: int, seed: int,
                      theta0=None) -> np.ndarray:
    """(P, M) initial particles: Sobol points in the bounds, the first at the given values.

    Args:
      problem: the problem (finite bounds, see `check_bounds`).
      num_particles: P.
      seed: seed of the scrambled Sobol sequence.
      theta0: None (the first particle takes `parameters.*.init` where given), (M,) values
        of the first particle or (P, M) particles. Values are held INTERIOR_MARGIN of the
        width inside the bounds.
    """
    spec = problem.spec
    lower = np.asarray(spec.lower_bounds, dtype=float)
    upper = np.asarray(spec.upper_bounds, dtype=float)
    theta = csvgd.sobol_particles(spec, num_particles, seed=seed)
    if theta0 is None:
        given = [k for k, v in enumerate(spec.init_values) if v is not None]
        theta[0, given] = [spec.init_values[k] for k in given]
    else:
        theta0 = np.asarray(theta0, dtype=float)
        if theta0.ndim == 2:
            if theta0.shape[0] != num_particles:
                raise ValueError(f'fit: theta0: expected ({num_particles}, {spec.num_params}) '
                                 f'for {num_particles} particles, got {theta0.shape}')
            theta = theta0.copy()
        else:
            theta[0] = theta0
    margin = INTERIOR_MARGIN * (upper - lower)
    return np.clip(theta, lower + margin, upper - margin)


# ------------------------------------------------------------------------------------------
# Estimators, compiled once per (problem, method)
# ------------------------------------------------------------------------------------------

class Evaluation(NamedTuple):
    """The particles of a state, evaluated: theta (P, M) physical, log_lik (P,) (-inf where
    not finite), max_defect (P,) largest normalised defect of each (0 for W = 1)."""

    theta: jax.Array
    log_lik: jax.Array
    max_defect: jax.Array


class _Runner(NamedTuple):
    """init(key, theta, data, iterations) -> state; step(state, data) -> (state, info)
    (jitted, except Emcee's host loop)."""

    init: Callable
    step: Callable


def _params_fn(problem: Problem):
    def params_fn(theta):
        return problem.spec.to_params(theta, problem.base_params)
    return params_fn


def _evaluate(problem: Problem, setting: lik.ShootingLikelihood) -> Callable:
    """Jitted `evaluate(x (P, D), data) -> Evaluation`, one per problem and likelihood (shared
    by the methods)."""
    spec, params_fn = problem.spec, _params_fn(problem)

    def one(theta, shooting, data):
        terms = lik.log_likelihood(setting, params_fn(theta), shooting, data)
        return terms.log_lik, jnp.max(jnp.abs(terms.defects), initial=0.0)

    def evaluate(x, data):
        theta, shooting = csvgd.split_particles(spec, setting, jnp.asarray(x), data)
        log_lik, max_defect = jax.vmap(one, in_axes=(0, 0, None))(theta, shooting, data)
        finite = jnp.isfinite(log_lik) & jnp.isfinite(max_defect)
        return Evaluation(theta=theta, log_lik=jnp.where(finite, log_lik, -jnp.inf),
                          max_defect=jnp.where(finite, max_defect, jnp.inf))

    key = ('bayes-evaluate', setting, spec, pipeline._params_digest(problem.base_params))
    return pipeline._cached(key, lambda: jax.jit(evaluate))


def _jitter_shooting(x, num_params: int, key) -> jax.Array:
    """Positions (P, D) with ENSEMBLE_JITTER normal noise on the shooting states."""
    noise = ENSEMBLE_JITTER * jax.random.normal(key, x.shape, x.dtype)
    return x + jnp.where(jnp.arange(x.shape[1]) >= num_params, noise, 0.0)


def _cem_sizes(num: int) -> tuple[int, int]:
    """(components, elites) of CEM for a population of `num`."""
    components = max(1, min(CEM_COMPONENTS, num // 10))
    return components, max(2 * components, int(np.ceil(CEM_ELITE_FRACTION * num)))


def _build_runner(problem: Problem, setting: lik.ShootingLikelihood, method: str,
                  num: int, dim: int, with_prior: bool = False) -> _Runner:
    """The estimator of `method` around the shooting likelihood, jitted (module doc); with a
    prior (csvgd only), `step(state, data, prior)` takes a `GaussianPrior`."""
    spec = problem.spec
    m = spec.num_params
    lr = problem.config.estimator.learning_rate
    log_prob = baselines.make_shooting_log_prob(setting, spec, params_fn=_params_fn(problem),
                                                defect_std=DEFECT_STD)

    def positions(theta, data):
        return baselines.shooting_positions(setting, spec, theta, data)

    if method == 'csvgd':
        est = csvgd.make_csvgd(setting, spec, optax.adam(lr), params_fn=_params_fn(problem),
                               log_prior_fn=_gaussian_log_prior if with_prior else None)

        def init(key, theta, data, iterations):
            return est.init(key, theta, data)
    elif method == 'svgd':
        est = svgd.make_svgd(log_prob, optax.adam(lr))

        def init(key, theta, data, iterations):
            return est.init(key, positions(theta, data))
    elif method == 'sgld':
        est = baselines.make_sgld(log_prob, lr, num)

        def init(key, theta, data, iterations):
            state = est.init(key, positions(theta, data))
            _, info = step(state, data)               # a probe: gradients at the start
            norms = np.asarray(info.grad_norm)
            norms = norms[np.isfinite(norms) & (norms > 0.0)]
            if norms.size:
                state = state._replace(step_size=jnp.asarray(lr / np.median(norms),
                                                             state.step_size.dtype))
            return state
    elif method == 'nuts':
        est = baselines.make_nuts(log_prob, 1.0, np.ones(dim), num,
                                  max_num_doublings=NUTS_MAX_DOUBLINGS)

        def init(key, theta, data, iterations):
            key_warmup, key_chains = jax.random.split(key)
            warm = baselines.nuts_warmup(key_warmup, log_prob, positions(theta, data),
                                         iterations, data,
                                         max_num_doublings=NUTS_MAX_DOUBLINGS)
            state = est.init(key_chains, np.asarray(warm.particles))
            return state._replace(step_size=warm.step_size,
                                  inverse_mass_matrix=warm.inverse_mass_matrix)
    elif method == 'emcee':
        est = baselines.make_emcee(log_prob, num)

        def init(key, theta, data, iterations):
            key_jitter, key_walkers = jax.random.split(key)
            return est.init(key_walkers, _jitter_shooting(positions(theta, data), m,
                                                          key_jitter))
    elif method == 'cem':
        components, elites = _cem_sizes(num)
        est = baselines.make_cem(log_prob, num, elites, components)

        def init(key, theta, data, iterations):
            key_jitter, key_mixture = jax.random.split(key)
            return est.init(key_mixture, _jitter_shooting(positions(theta, data), m,
                                                          key_jitter))
    else:
        raise ValueError(f'bayes: unknown method {method!r}')

    step = est.step if method == 'emcee' else jax.jit(est.step)   # emcee: a host loop
    return _Runner(init=init, step=step)


def _runner(problem: Problem, setting: lik.ShootingLikelihood, method: str, num: int,
            dim: int, with_prior: bool = False) -> _Runner:
    key = ('bayes', method, setting, problem.spec, num, dim, with_prior,
           problem.config.estimator.learning_rate, pipeline._params_digest(problem.base_params))
    return pipeline._cached(key, lambda: _build_runner(problem, setting, method, num, dim,
                                                       with_prior))


def _check_particles(problem: Problem, method: str, num: int, dim: int) -> None:
    """Raise ConfigError for a particle count that `method` cannot run."""
    if num < 1:
        raise _error(problem, 'estimator.particles', f'expected int >= 1, got {num}')
    if method == 'emcee' and num < 2 * dim:
        raise _error(problem, 'estimator.particles', f'emcee needs >= 2 D = {2 * dim} walkers '
                     f'for D = {dim} dimensions (parameters and shooting states), got {num}; '
                     'raise it or lower estimator.shooting_windows')
    if method == 'cem' and num < 2:
        raise _error(problem, 'estimator.particles', f'cem needs a population >= 2, got {num}')


# ------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------

def _log_normaliser(sp: ShootingProblem) -> tuple[float, int]:
    """(c, n): loss = -2 (log_lik + c) / n is the mean squared normalised residual."""
    k, t1, obs = (int(v) for v in sp.data.observations.shape)
    log_norm = t1 * float(np.sum(np.log(np.sqrt(2.0 * np.pi) * np.asarray(sp.data.noise_std))))
    if sp.likelihood.combine == 'product':
        return k * log_norm, k * t1 * obs
    return log_norm, t1 * obs


def fit_posterior(problem: Problem, trajs: Sequence[Trajectory], method: str,
                  iterations: int, progress: Callable | None = None, theta0=None,
                  seed: int | None = None, start: float | None = None,
                  prior: GaussianPrior | None = None) -> FitResult:
    """Run a Bayesian method on prepared trajectories (see the module doc); `pipeline.fit`'s
    arguments, with `trajs` from `pipeline.prepare_trajectories`, and optionally a Gaussian
    `prior` on theta (csvgd only) that multiplies the likelihood (default: uniform within the
    bounds).

    Raises:
      ConfigError: an unknown method, a parameter without finite bounds, too few particles
        for the method, windows shorter than MIN_WINDOW_STEPS, a bad `data.noise_std`.
      DataError: NaN or inf in the data.
      All of them before anything is compiled.
    """
    start = time.perf_counter() if start is None else start
    cfg = problem.config
    if method not in BAYESIAN_METHODS:
        raise _error(problem, 'estimator.method', f'expected one of '
                     f'{" | ".join(BAYESIAN_METHODS)}, got {method!r}')
    seed = cfg.estimator.seed if seed is None else int(seed)
    num = cfg.estimator.particles
    spec = problem.spec
    check_bounds(problem, method)
    if prior is not None and method != 'csvgd':
        raise _error(problem, 'estimator.method', f'a Gaussian prior (the online sequential '
                     f'posterior) needs csvgd, got {method!r}')
    sp = shooting_problem(problem, trajs)
    dim = spec.num_params + sp.likelihood.num_constraints(sp.data)
    _check_particles(problem, method, num, dim)
    theta_init = initial_particles(problem, num, seed, theta0)

    runner = _runner(problem, sp.likelihood, method, num, dim, prior is not None)
    evaluate = _evaluate(problem, sp.likelihood)
    data = sp.data
    state = runner.init(jax.random.PRNGKey(seed), theta_init, data, iterations)
    norm_c, norm_n = _log_normaliser(sp)
    best = pipeline.BestSoFar(theta_init)
    stats = {'num_nonfinite': 0, 'acceptance': [], 'num_divergent': 0}
    latest: list[Evaluation] = []
    # CSVGD's step already evaluates the particles it starts from: record those (one step
    # behind) instead of paying another forward pass per step.
    lagged = method == 'csvgd'

    def record(previous, new, info):
        if lagged:
            evaluation = Evaluation(np.asarray(previous.theta), np.asarray(info.log_lik),
                                    np.asarray(info.max_defect))
        else:
            evaluation = Evaluation(*(np.asarray(v) for v in evaluate(new.particles, data)))
            latest[:] = [evaluation]
        best.update(-evaluation.log_lik, evaluation.theta)
        stats['num_nonfinite'] += int(np.asarray(info.num_nonfinite))
        if hasattr(info, 'acceptance_rate'):
            stats['acceptance'].append(float(np.mean(np.asarray(info.acceptance_rate))))
        if hasattr(info, 'is_divergent'):
            stats['num_divergent'] += int(np.sum(np.asarray(info.is_divergent)))
        return -2.0 * (float(np.max(evaluation.log_lik)) + norm_c) / norm_n

    prior_args = () if prior is None else (GaussianPrior(jnp.asarray(prior.mean),
                                                         jnp.asarray(prior.precision)),)
    steps = pipeline.run_steps(lambda s: runner.step(s, data, *prior_args), state, iterations,
                               record, progress, start)
    if latest:
        final = latest[0]
    else:                             # lagged, or stopped before the first step completed
        final = Evaluation(*(np.asarray(v) for v in evaluate(steps.state.particles, data)))
        best.update(-final.log_lik, final.theta)
    particles = np.asarray(final.theta, dtype=float)
    best_theta, best_loss = best.overall()
    max_log_lik = float(np.max(final.log_lik))
    final_loss = -2.0 * (max_log_lik + norm_c) / norm_n
    history = steps.history
    if lagged and len(history):           # each entry was one step behind
        history = np.append(history[1:], final_loss)
    info: dict[str, Any] = dict(sp.info)
    info.update(
        max_log_likelihood=max_log_lik,
        max_defect=float(np.max(final.max_defect)),
        best_log_likelihood=-best_loss,
        best_particle={n: float(v) for n, v in zip(spec.names, best_theta)},
        num_reseeded=int(np.asarray(getattr(steps.state, 'num_reseeded', 0))),
        num_nonfinite=stats['num_nonfinite'])
    if stats['acceptance']:
        info['acceptance'] = float(np.mean(stats['acceptance']))
    if method == 'nuts':
        info['num_divergent'] = stats['num_divergent']
        info['warmup_steps'] = iterations
    if method in ('nuts', 'sgld'):
        info['step_size'] = float(np.asarray(steps.state.step_size))
    consistent_fn = pipeline._project(problem)[2]
    consistent = np.asarray(consistent_fn(jnp.asarray(particles)), dtype=bool)
    return FitResult(method=method, names=spec.names, particles=particles,
                     initial=np.asarray(theta_init, dtype=float),
                     lower=np.asarray(spec.lower_bounds, float),
                     upper=np.asarray(spec.upper_bounds, float),
                     loss_history=history, iterations=len(history),
                     final_loss=final_loss,
                     wall_time=time.perf_counter() - start, consistent=consistent,
                     interrupted=steps.interrupted, info=info)
