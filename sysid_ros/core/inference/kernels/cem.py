"""The cross-entropy method (CEM; Rubinstein 1999) with a Gaussian-mixture sampling
distribution refitted to the elites by EM (the seed's CEM uses 3 components), in JAX.

`log_prob_fn(x, data) -> ()` is a log density of one position x (D,) in the sampler's
coordinates (e.g. `shooting.make_shooting_log_prob` over a spec's unconstrained z);
`state.particles` (C, D) is the population.

Samples whose log density is not finite get -inf, so they are never elites. The population
axis is sharded over a one-axis mesh when several JAX devices exist (`sharding`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.checks import check_count, check_positions
from sysid_ros.core.inference.sharding import replicate, resolve_mesh, shard_particles

__all__ = ['CEMState', 'CEMInfo', 'build_kernel']


class CEMState(NamedTuple):
    """State of the Gaussian-mixture cross-entropy method.

    Attributes:
      particles: (N, D) current population, drawn from the mixture (the posterior sample;
        evaluated at the next step).
      weights: (K,) mixture weights.
      means: (K, D) component means.
      covariances: (K, D, D) component covariances.
      best_position: (D,) best position evaluated so far.
      best_log_prob: () its log density (-inf before the first step).
      key: PRNG key.
      smoothing: () alpha in (0, 1]: the mixture moves to alpha * refit + (1 - alpha) * old
        (array leaf).
      iteration: () int, steps taken.
    """

    particles: jax.Array
    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    best_position: jax.Array
    best_log_prob: jax.Array
    key: jax.Array
    smoothing: jax.Array
    iteration: jax.Array


class CEMInfo(NamedTuple):
    """Diagnostics of one CEM step.

    Attributes:
      log_prob: (N,) log density of the population evaluated in this step (-inf where not
        finite).
      elite_threshold: () lowest log density among the elites.
      best_log_prob: () best log density so far.
      num_nonfinite: () population members whose log density was not finite.
    """

    log_prob: jax.Array
    elite_threshold: jax.Array
    best_log_prob: jax.Array
    num_nonfinite: jax.Array


def _gaussian_log_pdf(x, mean, chol):
    """log N(x; mean, L L^T) for x (N, D), one component (mean (D,), chol (D, D))."""
    dim = x.shape[-1]
    white = jax.scipy.linalg.solve_triangular(chol, (x - mean).T, lower=True)   # (D, N)
    log_det = jnp.sum(jnp.log(jnp.diagonal(chol)))
    return -0.5 * jnp.sum(jnp.square(white), axis=0) - log_det - 0.5 * dim * np.log(2 * np.pi)


def _cholesky(covariances, reg_covar):
    """Cholesky factors (K, D, D) of the regularised covariances."""
    eye = jnp.eye(covariances.shape[-1], dtype=covariances.dtype)
    return jnp.linalg.cholesky(covariances + reg_covar * eye)


def _sample_mixture(key, weights, means, covariances, num, reg_covar):
    """(num, D) draws from the Gaussian mixture."""
    key_component, key_normal = jax.random.split(key)
    component = jax.random.categorical(key_component, jnp.log(weights), shape=(num,))
    chol = _cholesky(covariances, reg_covar)
    noise = jax.random.normal(key_normal, (num, means.shape[-1]), means.dtype)
    return means[component] + jnp.einsum('nij,nj->ni', chol[component], noise)


def _mixture_log_pdf(x, weights, means, covariances, reg_covar):
    """(N,) log density of the Gaussian mixture at the points x (N, D)."""
    chol = _cholesky(covariances, reg_covar)
    log_pdf = jax.vmap(_gaussian_log_pdf, in_axes=(None, 0, 0), out_axes=1)(x, means, chol)
    return jax.nn.logsumexp(jnp.log(weights) + log_pdf, axis=1)


def _em_refit(x, importance, weights, means, covariances, num_iterations, reg_covar):
    """Refit a K-component mixture to the points x (N, D) by EM, started at the given one.

    E-step: responsibilities r_nk of each component for each point; M-step (Dempster et al.
    1977): means and covariances from the responsibility-weighted points (plus `reg_covar` on
    the diagonal), weights pi_k = sum_n v_n r_nk with the point weights v (N,) = `importance`
    (summing to 1). A component that no point claims (total responsibility below 1e-8) keeps
    its mean and covariance, with weight 0.
    """
    eye = jnp.eye(x.shape[-1], dtype=x.dtype)

    def iteration(_, mixture):
        w, mu, cov = mixture
        chol = _cholesky(cov, reg_covar)
        log_pdf = jax.vmap(_gaussian_log_pdf, in_axes=(None, 0, 0), out_axes=1)(x, mu, chol)
        log_r = jnp.log(w) + log_pdf                                           # (N, K)
        r = jnp.exp(log_r - jax.nn.logsumexp(log_r, axis=1, keepdims=True))
        mass = jnp.sum(r, axis=0)                                              # (K,)
        alive = mass > 1e-8
        safe = jnp.where(alive, mass, 1.0)
        mu_new = (r.T @ x) / safe[:, None]
        centred = x[None] - mu_new[:, None]                                    # (K, N, D)
        cov_new = jnp.einsum('nk,kni,knj->kij', r, centred, centred) / safe[:, None, None]
        cov_new = cov_new + reg_covar * eye
        mu_new = jnp.where(alive[:, None], mu_new, mu)
        cov_new = jnp.where(alive[:, None, None], cov_new, cov)
        w_new = jnp.where(alive, importance @ r, 0.0)
        return w_new / jnp.sum(w_new), mu_new, cov_new

    return jax.lax.fori_loop(0, num_iterations, iteration, (weights, means, covariances))


def _kmeans_plus_plus(key, x, num_components):
    """Indices (K,) of K seeds among the points x (N, D), by k-means++ (Arthur & Vassilvitskii
    2007): the first uniform, each next one with probability proportional to the squared
    distance to the nearest seed so far."""
    keys = jax.random.split(key, num_components)
    chosen = [jax.random.randint(keys[0], (), 0, x.shape[0])]
    nearest = jnp.sum(jnp.square(x - x[chosen[0]]), axis=-1)
    for k in range(1, num_components):
        logits = jnp.where(nearest > 0.0, jnp.log(jnp.maximum(nearest, 1e-300)), -jnp.inf)
        logits = jnp.where(jnp.any(nearest > 0.0), logits, 0.0)
        index = jax.random.categorical(keys[k], logits)
        chosen.append(index)
        nearest = jnp.minimum(nearest, jnp.sum(jnp.square(x - x[index]), axis=-1))
    return jnp.stack(chosen)


def build_kernel(log_prob_fn: Callable, num_samples: int, num_elites: int,
                 num_components: int = 1, *, weighting: str = 'importance',
                 num_em_iterations: int = 5, smoothing: float = 0.7, reg_covar: float = 1e-6,
                 mesh='auto') -> Kernel:
    """Cross-entropy method (Rubinstein 1999) with a Gaussian-mixture sampling distribution.

    Over 100 lines because `init` and `step` are closures over the factory's settings, and
    the mixture-weight update below is documented here.

    Each step:
      1. evaluates the population (N samples drawn from the mixture) in one vmapped call;
      2. keeps the `num_elites` samples of highest log density (`lax.top_k`);
      3. refits the K-component mixture to the elites by `num_em_iterations` EM iterations
         started at the current mixture (so components keep their identity between steps and
         can hold separate modes), then smooths: params <- alpha refit + (1 - alpha) params;
      4. draws the next population from the mixture.
    CEM maximises rather than samples: the mixture contracts onto the best mode(s) at a rate
    set by the elite fraction, down to `reg_covar`, and its spread is no posterior covariance
    (the seed reports that its CEM posterior collapses to a point). `best_position` tracks
    the best sample.

    Mixture weights. In the classic update (`weighting='uniform'`) a component's weight is
    the fraction of the elites it claims. Between modes of equal height that fraction has no
    restoring force: a component that drew more samples gets more elites, hence more weight
    and more samples next time, a neutral random walk that ends with all but one mode
    dropped. With `weighting='importance'` (Kurtz & Song 2013, CE with Gaussian mixtures) the
    weights come from the elites' self-normalised importance weights v_n ~ p(x_n) / q(x_n)
    (q: the mixture that drew them), pi_k = sum_n v_n r_nk, an estimate of the posterior mass
    that each component's elites cover whatever the number of samples it drew, so that
    symmetric modes keep equal weights. Means and covariances are fitted with equal elite
    weights in both cases (the classic CEM update). A component that wins no elite in a step
    keeps its mean and covariance and, through the smoothing, a fraction (1 - alpha) of its
    weight, so it can win elites again.

    Args:
      log_prob_fn: `log_prob_fn(x, data) -> ()` for one position x (D,).
      num_samples: N, population size (static).
      num_elites: elites kept per step, num_components <= num_elites <= N (static).
      num_components: K, mixture components (the seed uses 3).
      weighting: 'importance' or 'uniform' (classic): how the mixture weights are refitted.
      num_em_iterations: EM iterations per refit (static).
      smoothing: alpha in (0, 1], initial `CEMState.smoothing` (1: no smoothing).
      reg_covar: added to the covariance diagonals (floor of the spread), in x's units^2.
      mesh: 'auto' (shard the population when several devices exist), None or a jax Mesh.

    Returns:
      Kernel with `init(key, positions (P, D), data) -> CEMState` (`data` unused) and
      `step(state, data) -> (CEMState, CEMInfo)`. `init` fits the initial mixture to
      the positions (P >= K): means at K points chosen by k-means++, every covariance the
      positions' covariance, equal weights; the first population is the positions themselves
      when P == N, else N draws from that mixture.

    Raises:
      ValueError: counts out of range, unknown weighting, smoothing outside (0, 1],
        reg_covar < 0.
    """
    if weighting not in ('importance', 'uniform'):
        raise ValueError("cem: weighting: expected 'importance' or 'uniform', got "
                         + repr(weighting))
    num_samples = check_count('cem', 'num_samples', num_samples)
    num_components = check_count('cem', 'num_components', num_components)
    num_elites = check_count('cem', 'num_elites', num_elites, minimum=num_components)
    if num_elites > num_samples:
        raise ValueError(f'cem: num_elites: expected <= num_samples = {num_samples}, got '
                         f'{num_elites}')
    num_em_iterations = check_count('cem', 'num_em_iterations', num_em_iterations)
    if not 0.0 < smoothing <= 1.0:
        raise ValueError(f'cem: smoothing: expected in (0, 1], got {smoothing!r}')
    if not reg_covar >= 0.0:
        raise ValueError(f'cem: reg_covar: expected >= 0, got {reg_covar!r}')
    log_prob_batch = jax.vmap(log_prob_fn, in_axes=(0, None))

    @jax.jit
    def initial_mixture(key, x):
        """Mixture fitted to the initial positions, and the first population (jitted)."""
        dim = x.shape[1]
        key_seed, key_draw = jax.random.split(key)
        means = x[_kmeans_plus_plus(key_seed, x, num_components)]
        spread = (jnp.atleast_2d(jnp.cov(x, rowvar=False)) if x.shape[0] > 1
                  else jnp.eye(dim, dtype=x.dtype))
        covariances = jnp.broadcast_to(spread, (num_components, dim, dim))
        weights = jnp.full((num_components,), 1.0 / num_components, x.dtype)
        if x.shape[0] == num_samples:
            population = x
        else:
            population = _sample_mixture(key_draw, weights, means, covariances, num_samples,
                                         reg_covar)
        return population, weights, means, covariances

    def init(key, positions, data) -> CEMState:
        del data
        x = check_positions('cem', positions, None, 'P')
        if x.shape[0] < num_components:
            raise ValueError(f'cem: positions: expected at least num_components = '
                             f'{num_components} rows, got {x.shape[0]}')
        key, sub = jax.random.split(key)
        population, weights, means, covariances = initial_mixture(sub, jnp.asarray(x))
        active_mesh = resolve_mesh(mesh, num_samples)
        population = shard_particles(population, active_mesh, num_samples)
        rest = replicate(
            (weights, means, covariances, means[0], jnp.asarray(-jnp.inf, x.dtype), key,
             jnp.asarray(smoothing, x.dtype), jnp.zeros((), jnp.int32)), active_mesh)
        return CEMState(population, *rest)

    def step(state: CEMState, data):
        x = state.particles
        num = x.shape[0]
        active_mesh = resolve_mesh(mesh, num)

        # 1. Evaluate the population (one vmapped call).
        log_prob = log_prob_batch(x, data)
        finite = jnp.isfinite(log_prob)
        log_prob = jnp.where(finite, log_prob, -jnp.inf)

        # 2. Elites: the num_elites highest log densities.
        elite_values, elite_index = jax.lax.top_k(log_prob, num_elites)
        elites = x[elite_index]

        # 3. EM refit of the mixture to the elites, warm-started, then smoothed. Point
        #    weights of the mixture weights: self-normalised p / q, or equal.
        if weighting == 'importance':
            log_q = _mixture_log_pdf(elites, state.weights, state.means, state.covariances,
                                     reg_covar)
            log_v = jnp.where(jnp.isfinite(elite_values), elite_values - log_q, -jnp.inf)
            log_v = jnp.where(jnp.any(jnp.isfinite(log_v)), log_v, 0.0)
            importance = jax.nn.softmax(log_v)
        else:
            importance = jnp.full((num_elites,), 1.0 / num_elites, x.dtype)
        w, mu, cov = _em_refit(elites, importance, state.weights, state.means,
                               state.covariances, num_em_iterations, reg_covar)
        alpha = state.smoothing
        w = alpha * w + (1.0 - alpha) * state.weights
        mu = alpha * mu + (1.0 - alpha) * state.means
        cov = alpha * cov + (1.0 - alpha) * state.covariances

        # 4. Next population from the refitted mixture; track the best sample.
        key, sub = jax.random.split(state.key)
        population = _sample_mixture(sub, w, mu, cov, num, reg_covar)
        population = shard_particles(population, active_mesh, num, constrain=True)
        improved = elite_values[0] > state.best_log_prob
        best_position = jnp.where(improved, elites[0], state.best_position)
        best_log_prob = jnp.where(improved, elite_values[0], state.best_log_prob)

        new_state = state._replace(particles=population, weights=w, means=mu, covariances=cov,
                                   best_position=best_position, best_log_prob=best_log_prob,
                                   key=key, iteration=state.iteration + 1)
        info = CEMInfo(log_prob=log_prob, elite_threshold=elite_values[-1],
                       best_log_prob=best_log_prob,
                       num_nonfinite=jnp.sum(~finite).astype(jnp.int32))
        return new_state, info

    return Kernel(init=init, step=step)
