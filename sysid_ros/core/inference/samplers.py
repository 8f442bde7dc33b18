"""Baseline posterior samplers of seed 000 (Heiden et al. 2022, §2.3, Table 2): SGLD, NUTS,
Emcee and a Gaussian-mixture cross-entropy method (CEM).

All four follow the kernel shape of `svgd.make_svgd`: a factory builds a `base.Kernel`,

    state = kernel.init(key, positions)          # positions (P, D)
    state, info = kernel.step(state, data)

over a generic log density `log_prob_fn(x, data) -> ()` of one position x (D,) in the
sampler's coordinates, and `state.particles` (P, D) is the posterior sample (the current
positions of the P chains / walkers, or CEM's population).

Coordinates. For bounded physical parameters x holds the unconstrained coordinates z of a
`ParameterSpec`, and the log density is built with `svgd.unconstrained_log_density(spec, fn)`,
which adds log |det d theta / d z|: the samples, mapped by `spec.from_unconstrained`, then
follow the posterior of the physical parameters under a uniform prior within the bounds, and
no sample can leave the bounds (the same convention as SVGD and CSVGD). `make_shooting_log_prob`
builds such a density for the single- and multiple-shooting likelihoods of `core.likelihood`;
for multiple shooting the defect constraints become a Gaussian likelihood term (seed §2.3:
N(s^s | s, sigma_def^2), the MCMC counterpart of CSVGD's constraint handling) and x is CSVGD's
flat particle [z, s_hat] (decode it with `csvgd.split_particles`).

Methods:
  * `make_sgld`: stochastic-gradient Langevin dynamics (Welling & Teh 2011) with blackjax's
    SGLD kernel, full-batch gradients, C independent chains vmapped.
  * `make_nuts`: the No-U-Turn sampler (Hoffman & Gelman 2014; blackjax's multinomial,
    iterative NUTS), C chains vmapped; `nuts_warmup` runs blackjax's window adaptation (Stan's
    schedule) on every chain and pools the step size and mass matrix.
  * `make_emcee`: the affine-invariant ensemble sampler (Goodman & Weare 2010; Foreman-Mackey
    et al. 2013) of the `emcee` package. It runs on the host, in NumPy: its `step` is not a
    JAX function and cannot be jitted or vmapped (see `make_emcee`).
  * `make_cem`: the cross-entropy method (Rubinstein 1999) with a Gaussian-mixture sampling
    distribution refitted to the elites by EM (the seed's CEM uses 3 kernels), in JAX.

SGLD, NUTS and CEM are pure JAX: jit `step` yourself. Their particle axis is sharded over a
one-axis mesh when several JAX devices exist (`svgd.particle_mesh`), as for SVGD. A chain or
walker whose log density (or gradient) is not finite, e.g. a diverging simulation, is restarted
at a randomly chosen finite one (`svgd.reseed_nonfinite` with zero jitter: its state is copied,
and the independent randomness of the next transitions separates the two) and counted in the
info; CEM gives such samples log density -inf, so they are never elites.

Emcee lives here rather than in `io/` because it is mathematics only: no files, no ROS and no
state outside the `EmceeState` (which carries the random generator's state), so `step` is a
deterministic function of (state, data) like the others; it merely runs NumPy on the host
around one jitted JAX call per half-ensemble.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import blackjax
from blackjax.adaptation.base import get_filter_adapt_info_fn
import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.model import parameters
from sysid_ros.core.inference import svgd
from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.model.types import Params

__all__ = [
    'SGLDState',
    'SGLDInfo',
    'NUTSState',
    'NUTSInfo',
    'NUTSWarmup',
    'EmceeState',
    'EmceeInfo',
    'CEMState',
    'CEMInfo',
    'make_sgld',
    'make_nuts',
    'nuts_warmup',
    'make_emcee',
    'make_cem',
    'make_shooting_log_prob',
    'shooting_positions',
]


def _check_positions(method: str, positions, num: int | None, what: str) -> np.ndarray:
    """Host-side check of initial positions: (num, D) finite floats; returns a NumPy copy."""
    positions = np.asarray(positions, dtype=float)
    if positions.ndim != 2 or positions.shape[0] < 1 or positions.shape[1] < 1:
        raise ValueError(f'{method}: positions: expected ({what}, D), got {positions.shape}')
    if num is not None and positions.shape[0] != num:
        raise ValueError(f'{method}: positions: expected {num} rows ({what}), got '
                         f'{positions.shape[0]}')
    if not np.all(np.isfinite(positions)):
        raise ValueError(f'{method}: positions hold NaN or inf')
    return positions


def _place_chains(mesh, num_chains: int, positions: np.ndarray, key, *settings):
    """Shards the (C, D) chain positions over `mesh` and replicates beside them the key, each
    setting (cast to the positions' dtype) and an int32 zero iteration counter.

    Returns (positions, key, *settings, counter).
    """
    x = jnp.asarray(positions)
    active_mesh = svgd.resolve_mesh(mesh, num_chains)
    x = svgd.shard_particles(x, active_mesh, num_chains)
    replicated = svgd.replicate(
        (key, *(jnp.asarray(value, x.dtype) for value in settings), jnp.zeros((), jnp.int32)),
        active_mesh)
    return (x, *replicated)


def _check_count(method: str, name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f'{method}: {name}: expected int >= {minimum}, got {value!r}')
    return int(value)


def _check_metric(method: str, inverse_mass_matrix, dim: int | None = None) -> np.ndarray:
    """The inverse mass matrix as a float array: (D,) diagonal or (D, D), D = `dim` when
    given (the positions' dimension)."""
    imm = np.asarray(inverse_mass_matrix, dtype=float)
    if imm.ndim not in (1, 2) or (imm.ndim == 2 and imm.shape[0] != imm.shape[1]):
        raise ValueError(f'{method}: inverse_mass_matrix: expected (D,) or (D, D), got '
                         f'{imm.shape}')
    if dim is not None and imm.shape[0] != dim:
        raise ValueError(f'{method}: inverse_mass_matrix {imm.shape} does not fit positions '
                         f'of dimension {dim}')
    return imm


def _check_positive(method: str, name: str, value) -> None:
    if not np.all(np.asarray(value, dtype=float) > 0.0):
        raise ValueError(f'{method}: {name}: expected > 0, got {value!r}')


# ------------------------------------------------------------------------------------------
# SGLD
# ------------------------------------------------------------------------------------------

class SGLDState(NamedTuple):
    """State of SGLD.

    Attributes:
      particles: (C, D) current position of each chain (the posterior sample).
      key: PRNG key.
      step_size: () Langevin step size h (an array leaf: change it with `_replace` without
        recompiling, e.g. for a decreasing schedule).
      temperature: () temperature of the injected noise (1: the posterior).
      iteration: () int, steps taken.
      num_reseeded: () int, chains restarted so far.
    """

    particles: jax.Array
    key: jax.Array
    step_size: jax.Array
    temperature: jax.Array
    iteration: jax.Array
    num_reseeded: jax.Array


class SGLDInfo(NamedTuple):
    """Diagnostics of one SGLD step (at the positions before it).

    Attributes:
      log_prob: (C,) log density of each chain (-inf where not finite).
      grad_norm: (C,) norm of each chain's gradient (0 where not finite).
      num_nonfinite: () chains whose log density or gradient was not finite (restarted).
    """

    log_prob: jax.Array
    grad_norm: jax.Array
    num_nonfinite: jax.Array


def make_sgld(log_prob_fn: Callable, step_size, num_chains: int, *, temperature=1.0,
              mesh='auto') -> Kernel:
    """Stochastic-gradient Langevin dynamics (Welling & Teh 2011) with full-batch gradients.

    Each chain moves by blackjax's SGLD kernel (Euler step of the overdamped Langevin
    diffusion),

      x <- x + h grad log p(x | data) + sqrt(2 T h) xi,   xi ~ N(0, I),

    whose stationary law approaches p as h -> 0 (the bias of a constant h is O(h): for a
    Gaussian of variance s^2 the chain's variance is s^2 / (1 - h / (2 s^2))). There is no
    Metropolis correction. The gradients of all C chains are one vmapped call.

    Args:
      log_prob_fn: `log_prob_fn(x, data) -> ()` for one position x (D,).
      step_size: h > 0, initial value of `SGLDState.step_size`.
      num_chains: C, independent chains.
      temperature: T > 0, initial `SGLDState.temperature`.
      mesh: 'auto' (shard the chains when several devices exist), None or a jax Mesh.

    Returns:
      Kernel with `init(key, positions (C, D)) -> SGLDState` (host-side; positions e.g.
      `spec.to_unconstrained(csvgd.sobol_particles(spec, C))`) and
      `step(state, data=None) -> (SGLDState, SGLDInfo)`.

    Raises:
      ValueError: step_size or temperature <= 0, num_chains < 1 (init: positions of the
        wrong shape or not finite).
    """
    _check_positive('sgld', 'step_size', step_size)
    _check_positive('sgld', 'temperature', temperature)
    num_chains = _check_count('sgld', 'num_chains', num_chains)
    value_and_grad = jax.vmap(jax.value_and_grad(log_prob_fn), in_axes=(0, None))
    kernel = blackjax.sgld.build_kernel()

    def precomputed(position, gradient):
        """blackjax's gradient estimator: the full-batch gradient, already evaluated."""
        del position
        return gradient

    def init(key, positions) -> SGLDState:
        x = _check_positions('sgld', positions, num_chains, 'C chains')
        x, key, step, temp, counter = _place_chains(
            mesh, num_chains, x, key, step_size, temperature)
        return SGLDState(particles=x, key=key, step_size=step, temperature=temp,
                         iteration=counter, num_reseeded=counter)

    def step(state: SGLDState, data=None):
        x = state.particles
        num = x.shape[0]
        active_mesh = svgd.resolve_mesh(mesh, num)

        # 1. Full-batch log density and gradient of every chain in one vmapped call.
        log_prob, score = value_and_grad(x, data)
        finite = jnp.isfinite(log_prob) & jnp.all(jnp.isfinite(score), axis=-1)
        score = jnp.where(finite[:, None], score, 0.0)

        # 2. Restart diverged chains at a finite chain, taking over its gradient.
        key, key_reseed, key_noise = jax.random.split(state.key, 3)
        bad = ~finite
        x, score = svgd.reseed_nonfinite(key_reseed, x, bad, 0.0, extra=score)

        # 3. One SGLD transition per chain (independent noise).
        def transition(k, position, gradient):
            return kernel(k, position, precomputed, gradient, state.step_size,
                          state.temperature)

        x_new = jax.vmap(transition)(jax.random.split(key_noise, num), x, score)
        x_new = svgd.shard_particles(x_new, active_mesh, num, constrain=True)

        num_bad = jnp.sum(bad).astype(jnp.int32)
        new_state = state._replace(particles=x_new, key=key, iteration=state.iteration + 1,
                                   num_reseeded=state.num_reseeded + num_bad)
        info = SGLDInfo(log_prob=jnp.where(finite, log_prob, -jnp.inf),
                        grad_norm=jnp.linalg.norm(score, axis=-1) * finite,
                        num_nonfinite=num_bad)
        return new_state, info

    return Kernel(init=init, step=step)


# ------------------------------------------------------------------------------------------
# NUTS
# ------------------------------------------------------------------------------------------

class NUTSState(NamedTuple):
    """State of NUTS.

    Attributes:
      particles: (C, D) current position of each chain (the posterior sample).
      key: PRNG key.
      step_size: () leapfrog step size, shared by the chains (array leaf).
      inverse_mass_matrix: (D,) diagonal or (D, D) dense inverse mass matrix, shared by the
        chains (array leaf).
      iteration: () int, steps taken.
      num_reseeded: () int, chains restarted so far.
    """

    particles: jax.Array
    key: jax.Array
    step_size: jax.Array
    inverse_mass_matrix: jax.Array
    iteration: jax.Array
    num_reseeded: jax.Array


class NUTSInfo(NamedTuple):
    """Diagnostics of one NUTS step (blackjax's `NUTSInfo`, reduced; per chain).

    Attributes:
      log_prob: (C,) log density at the new positions.
      acceptance_rate: (C,) mean Metropolis acceptance probability along the trajectory.
      is_divergent: (C,) whether the trajectory diverged (energy error above the threshold).
      num_integration_steps: (C,) leapfrog steps (= gradient evaluations) taken.
      num_nonfinite: () chains whose start position had a non-finite log density or
        gradient (restarted at a finite chain before the transition).
    """

    log_prob: jax.Array
    acceptance_rate: jax.Array
    is_divergent: jax.Array
    num_integration_steps: jax.Array
    num_nonfinite: jax.Array


class NUTSWarmup(NamedTuple):
    """Result of `nuts_warmup`.

    Attributes:
      particles: (C, D) chain positions at the end of the warm-up (start `make_nuts` there).
      step_size: () pooled step size: the median of the chains' adapted step sizes.
      inverse_mass_matrix: (D,) or (D, D) pooled inverse mass matrix: the mean of the
        chains' adapted matrices (each a regularised posterior covariance estimate).
      chain_step_size: (C,) step size adapted by each chain.
      chain_inverse_mass_matrix: (C, D) or (C, D, D) matrix adapted by each chain.
    """

    particles: jax.Array
    step_size: jax.Array
    inverse_mass_matrix: jax.Array
    chain_step_size: jax.Array
    chain_inverse_mass_matrix: jax.Array


def make_nuts(log_prob_fn: Callable, step_size, inverse_mass_matrix, num_chains: int, *,
              max_num_doublings: int = 10, divergence_threshold: float = 1000.0,
              mesh='auto') -> Kernel:
    """The No-U-Turn sampler (Hoffman & Gelman 2014) with blackjax's NUTS kernel.

    blackjax's NUTS is the iterative, multinomial variant (Betancourt 2017; Phan et al.
    2019): each transition samples a momentum, doubles a leapfrog trajectory forwards or
    backwards until it turns back on itself (or `max_num_doublings`), and draws the next state
    from the trajectory in proportion to exp(-energy). The C chains are one vmapped call
    (under `jit` the chains' while loops run in lock step, until the longest finishes).

    The start of every transition is re-evaluated with the step's `data`, so `data` may change
    between steps (sliding windows); this costs one gradient per chain and step, against the
    2^depth - 1 of a trajectory.

    Tune `step_size` and `inverse_mass_matrix` with `nuts_warmup` first.

    Args:
      log_prob_fn: `log_prob_fn(x, data) -> ()` for one position x (D,).
      step_size: () leapfrog step size > 0 (initial `NUTSState.step_size`).
      inverse_mass_matrix: (D,) diagonal or (D, D) dense inverse mass matrix (the posterior
        covariance is the ideal choice), shared by all chains.
      num_chains: C, independent chains.
      max_num_doublings: maximum tree depth (static): at most 2^depth - 1 leapfrog steps.
      divergence_threshold: energy error above which a trajectory counts as divergent.
      mesh: 'auto' (shard the chains when several devices exist), None or a jax Mesh.

    Returns:
      Kernel with `init(key, positions (C, D)) -> NUTSState` (host-side) and
      `step(state, data=None) -> (NUTSState, NUTSInfo)`.

    Raises:
      ValueError: step_size <= 0, an inverse mass matrix that is not (D,) or (D, D), or
        num_chains / max_num_doublings < 1 (init: positions that do not fit).
    """
    _check_positive('nuts', 'step_size', step_size)
    num_chains = _check_count('nuts', 'num_chains', num_chains)
    max_num_doublings = _check_count('nuts', 'max_num_doublings', max_num_doublings)
    imm = _check_metric('nuts', inverse_mass_matrix)
    kernel = blackjax.nuts.build_kernel(divergence_threshold=divergence_threshold)

    def init(key, positions) -> NUTSState:
        x = _check_positions('nuts', positions, num_chains, 'C chains')
        _check_metric('nuts', imm, x.shape[1])
        x, key, step, matrix, counter = _place_chains(mesh, num_chains, x, key, step_size, imm)
        return NUTSState(particles=x, key=key, step_size=step, inverse_mass_matrix=matrix,
                         iteration=counter, num_reseeded=counter)

    def step(state: NUTSState, data=None):
        x = state.particles
        num = x.shape[0]
        active_mesh = svgd.resolve_mesh(mesh, num)

        def logdensity(position):
            return log_prob_fn(position, data)

        # 1. Evaluate every chain's start (the data may have changed since the last step).
        chain = jax.vmap(lambda position: blackjax.nuts.init(position, logdensity))(x)
        finite = (jnp.isfinite(chain.logdensity)
                  & jnp.all(jnp.isfinite(chain.logdensity_grad), axis=-1))

        # 2. Restart chains with a non-finite start at a finite chain (state copied whole).
        key, key_reseed, key_step = jax.random.split(state.key, 3)
        bad = ~finite
        _, chain = svgd.reseed_nonfinite(key_reseed, x, bad, 0.0, extra=chain)

        # 3. One NUTS transition per chain.
        def transition(k, chain_state):
            return kernel(k, chain_state, logdensity, state.step_size,
                          state.inverse_mass_matrix, max_num_doublings)

        chain, nuts_info = jax.vmap(transition)(jax.random.split(key_step, num), chain)
        x_new = svgd.shard_particles(chain.position, active_mesh, num, constrain=True)

        num_bad = jnp.sum(bad).astype(jnp.int32)
        new_state = state._replace(particles=x_new, key=key, iteration=state.iteration + 1,
                                   num_reseeded=state.num_reseeded + num_bad)
        info = NUTSInfo(log_prob=chain.logdensity, acceptance_rate=nuts_info.acceptance_rate,
                        is_divergent=nuts_info.is_divergent,
                        num_integration_steps=nuts_info.num_integration_steps,
                        num_nonfinite=num_bad)
        return new_state, info

    return Kernel(init=init, step=step)


def nuts_warmup(key: jax.Array, log_prob_fn: Callable, positions, num_steps: int, data=None,
                *, dense: bool = False, target_acceptance_rate: float = 0.8,
                initial_step_size: float = 1.0, max_num_doublings: int = 10,
                inverse_mass_matrix=None) -> NUTSWarmup:
    """Warm-up for `make_nuts`: blackjax's window adaptation on every chain, then pooled.

    With a given `inverse_mass_matrix` (e.g. the covariance of starting positions drawn from a
    Laplace approximation) only the step size is adapted (dual averaging, Hoffman & Gelman
    2014 §3.2): Stan's windows start from the identity metric, far from a posterior whose
    scales span decades.

    `blackjax.window_adaptation` (Stan's schedule: a fast interval of dual-averaging step-size
    adaptation, slow windows of doubling length that estimate the inverse mass matrix from
    the chain's samples (Welford, regularised towards 1e-3 I), a final fast interval) runs on
    each chain independently (vmapped, as blackjax advises for several chains). The chains'
    matrices are then averaged and their step sizes pooled by the median, so that all chains
    of `make_nuts` share one setting; the per-chain values are returned too.

    Runs on the host and compiles the warm-up (one `lax.scan` of `num_steps`) internally.

    Args:
      key: PRNG key.
      log_prob_fn: `log_prob_fn(x, data) -> ()`, as for `make_nuts`.
      positions: (C, D) initial positions (e.g. Sobol points mapped to z) where the log
        density is finite (the warm-up restarts no chain).
      num_steps: warm-up transitions per chain (Stan uses 1000; >= 150 for its windows).
      data: passed to `log_prob_fn`.
      dense: adapt a dense (D, D) inverse mass matrix instead of a diagonal one.
      target_acceptance_rate: of the step-size adaptation.
      initial_step_size: first step size of the dual averaging.
      max_num_doublings: maximum tree depth during the warm-up.
      inverse_mass_matrix: None (adapt it) or a fixed (D,) / (D, D) metric (above).

    Returns:
      NUTSWarmup.

    Raises:
      ValueError: num_steps < 1, target_acceptance_rate outside (0, 1), bad positions.
    """
    num_steps = _check_count('nuts_warmup', 'num_steps', num_steps)
    max_num_doublings = _check_count('nuts_warmup', 'max_num_doublings', max_num_doublings)
    if not 0.0 < target_acceptance_rate < 1.0:
        raise ValueError(f'nuts_warmup: target_acceptance_rate: expected in (0, 1), got '
                         f'{target_acceptance_rate!r}')
    _check_positive('nuts_warmup', 'initial_step_size', initial_step_size)
    x = jnp.asarray(_check_positions('nuts_warmup', positions, None, 'C chains'))

    def logdensity(position):
        return log_prob_fn(position, data)

    if inverse_mass_matrix is not None:
        return _step_size_warmup(key, logdensity, x, num_steps, inverse_mass_matrix,
                                 target_acceptance_rate, initial_step_size, max_num_doublings)
    warmup = blackjax.window_adaptation(
        blackjax.nuts, logdensity, is_mass_matrix_diagonal=not dense,
        initial_step_size=initial_step_size, target_acceptance_rate=target_acceptance_rate,
        adaptation_info_fn=get_filter_adapt_info_fn(), max_num_doublings=max_num_doublings)

    def run(chain_key, position):
        result, _ = warmup.run(chain_key, position, num_steps)
        return (result.state.position, result.parameters['step_size'],
                result.parameters['inverse_mass_matrix'])

    final, step_sizes, matrices = jax.vmap(run)(jax.random.split(key, x.shape[0]), x)
    return NUTSWarmup(particles=final, step_size=jnp.median(step_sizes),
                      inverse_mass_matrix=jnp.mean(matrices, axis=0),
                      chain_step_size=step_sizes, chain_inverse_mass_matrix=matrices)


def _step_size_warmup(key, logdensity, x, num_steps, inverse_mass_matrix,
                      target_acceptance_rate, initial_step_size, max_num_doublings
                      ) -> NUTSWarmup:
    """`nuts_warmup` with a fixed metric: per chain, NUTS transitions whose step size
    follows dual averaging towards the target acceptance rate; its final (averaged) step
    size, pooled by the median."""
    imm = jnp.asarray(_check_metric('nuts_warmup', inverse_mass_matrix, x.shape[1]), x.dtype)
    kernel = blackjax.nuts.build_kernel()
    da_init, da_update, da_final = blackjax.adaptation.step_size.dual_averaging_adaptation(
        target_acceptance_rate)

    def run(chain_key, position):
        def transition(carry, step_key):
            chain, averaging = carry
            chain, info = kernel(step_key, chain, logdensity,
                                 jnp.exp(averaging.log_step_size), imm, max_num_doublings)
            return (chain, da_update(averaging, info.acceptance_rate)), None

        start = (blackjax.nuts.init(position, logdensity), da_init(initial_step_size))
        (chain, averaging), _ = jax.lax.scan(transition, start,
                                             jax.random.split(chain_key, num_steps))
        return chain.position, da_final(averaging)

    final, step_sizes = jax.vmap(run)(jax.random.split(key, x.shape[0]), x)
    matrices = jnp.broadcast_to(imm, (x.shape[0],) + imm.shape)
    return NUTSWarmup(particles=final, step_size=jnp.median(step_sizes),
                      inverse_mass_matrix=imm, chain_step_size=step_sizes,
                      chain_inverse_mass_matrix=matrices)


# ------------------------------------------------------------------------------------------
# Emcee
# ------------------------------------------------------------------------------------------

class EmceeState(NamedTuple):
    """State of the Emcee ensemble (NumPy, on the host).

    Attributes:
      particles: (W, D) walker positions (the posterior sample).
      log_prob: (W,) log density of each walker, or None to have it evaluated at the next
        step (set it to None after the data changed).
      random_state: state of the NumPy MT19937 generator that drives emcee's moves and the
        restarts (`numpy.random.RandomState.get_state()`).
      iteration: steps taken.
      num_accepted: (W,) accepted proposals of each walker so far.
      num_reseeded: walkers restarted so far.
    """

    particles: np.ndarray
    log_prob: np.ndarray | None
    random_state: Any
    iteration: int
    num_accepted: np.ndarray
    num_reseeded: int


class EmceeInfo(NamedTuple):
    """Diagnostics of one Emcee step.

    Attributes:
      log_prob: (W,) log density of each walker after the step (and the restarts).
      accepted: (W,) whether each walker's proposal was accepted.
      acceptance_rate: () fraction of the walkers that moved in this step.
      num_nonfinite: () walkers whose log density was not finite after the move (restarted).
    """

    log_prob: np.ndarray
    accepted: np.ndarray
    acceptance_rate: float
    num_nonfinite: int


def make_emcee(log_prob_fn: Callable, num_walkers: int, *, moves=None) -> Kernel:
    """Affine-invariant ensemble MCMC (Goodman & Weare 2010) with `emcee.EnsembleSampler`.

    The seed's Emcee baseline. One `step` is one emcee iteration: the default stretch move
    updates the two halves of the ensemble in turn, each walker proposing along the line
    through a random walker of the other half (so the log density is evaluated twice per
    step, on W / 2 walkers each time). emcee asks for the log densities of a half-ensemble at
    once (`vectorize=True`), answered by ONE jitted, vmapped JAX call
    `jit(vmap(log_prob_fn))(positions, data)` (compiled once per batch shape: W, and the
    half sizes); non-finite values are returned as -inf.

    A walker with log density -inf cannot always come back: its stretch proposals lie on the
    ray from another walker through it, at 1/2 to 2 times the distance, so a walker deep in a
    region where the simulation diverges stays there. Such walkers are restarted after the
    move at a randomly chosen finite walker (position and log density copied; the walkers
    separate at their next moves), as the JAX samplers restart diverged chains, and counted.

    This estimator is NOT a JAX function: emcee proposes and accepts in NumPy on the host, so
    `step` cannot be jitted, vmapped or differentiated; call it in a Python loop. It is still
    functional: the random generator's state travels in `EmceeState.random_state`, and the
    `EnsembleSampler` that `step` reuses keeps nothing between steps (`store=False`; its
    generator is set from the state), so equal states and data give equal results. One
    estimator must not step from two threads at once (the step's data is held in a closure).

    Args:
      log_prob_fn: `log_prob_fn(x, data) -> ()` for one position x (D,).
      num_walkers: W >= 2 D (emcee's requirement for its red-blue moves; checked at `init`).
      moves: emcee moves (`emcee.moves.*`, or a list of (move, weight)); default the
        stretch move with a = 2.

    Returns:
      Kernel with `init(key, positions (W, D)) -> EmceeState` and
      `step(state, data=None) -> (EmceeState, EmceeInfo)`.

    Raises:
      ValueError: num_walkers < 2 (init: positions of the wrong shape, not finite, too few
        walkers for D, or walkers that are not linearly independent).
    """
    import emcee  # host-side dependency, needed only by this baseline

    num_walkers = _check_count('emcee', 'num_walkers', num_walkers, minimum=2)
    batched = jax.jit(jax.vmap(log_prob_fn, in_axes=(0, None)))
    samplers = {}                   # one EnsembleSampler per dimension D, reused by `step`
    current = {}                    # the data of the step in progress
    host_random = np.random.RandomState(0)      # its state is set from EmceeState before use

    def vectorised_log_prob(coords):
        """emcee's vectorised log density: one jitted JAX call for the batch of walkers."""
        values = np.array(batched(np.asarray(coords, dtype=float), current['data']),
                          dtype=float)
        values[~np.isfinite(values)] = -np.inf
        return values

    def sampler_for(dim):
        if dim not in samplers:
            samplers[dim] = emcee.EnsembleSampler(num_walkers, dim, vectorised_log_prob,
                                                  moves=moves, vectorize=True)
        return samplers[dim]

    def init(key, positions) -> EmceeState:
        x = _check_positions('emcee', positions, num_walkers, 'W walkers')
        dim = x.shape[1]
        if num_walkers < 2 * dim:
            raise ValueError(f'emcee: num_walkers: expected >= 2 D = {2 * dim} for {dim} '
                             f'dimensions, got {num_walkers}')
        if not emcee.ensemble.walkers_independent(x):
            raise ValueError('emcee: the initial walkers are not linearly independent; '
                             'spread them out (e.g. Sobol points)')
        seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
        random_state = np.random.RandomState(seed).get_state()
        return EmceeState(particles=x, log_prob=None, random_state=random_state, iteration=0,
                          num_accepted=np.zeros(num_walkers, dtype=int), num_reseeded=0)

    def step(state: EmceeState, data=None):
        sampler = sampler_for(state.particles.shape[1])
        start = emcee.State(state.particles, log_prob=state.log_prob,
                            random_state=state.random_state)
        current['data'] = data
        try:
            with np.errstate(invalid='ignore'):      # -inf - -inf: emcee rejects (NaN < u)
                new = next(sampler.sample(start, iterations=1, store=False,
                                          skip_initial_state_check=True))
        finally:
            current.clear()
        accepted = np.any(new.coords != state.particles, axis=1)
        particles, log_prob = np.array(new.coords), np.array(new.log_prob)

        # Restart walkers stuck at -inf at finite ones (the generator's state travels on).
        bad = ~np.isfinite(log_prob)
        random_state = new.random_state
        num_bad = 0
        if bad.any() and not bad.all():
            host_random.set_state(random_state)
            donors = host_random.choice(np.flatnonzero(~bad), size=int(bad.sum()))
            particles[bad], log_prob[bad] = particles[donors], log_prob[donors]
            random_state, num_bad = host_random.get_state(), int(bad.sum())
        new_state = EmceeState(particles=particles, log_prob=log_prob,
                               random_state=random_state, iteration=state.iteration + 1,
                               num_accepted=state.num_accepted + accepted,
                               num_reseeded=state.num_reseeded + num_bad)
        info = EmceeInfo(log_prob=log_prob, accepted=accepted,
                         acceptance_rate=float(np.mean(accepted)),
                         num_nonfinite=int(bad.sum()))
        return new_state, info

    return Kernel(init=init, step=step)


# ------------------------------------------------------------------------------------------
# CEM
# ------------------------------------------------------------------------------------------

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


def make_cem(log_prob_fn: Callable, num_samples: int, num_elites: int,
             num_components: int = 1, *, weighting: str = 'importance',
             num_em_iterations: int = 5, smoothing: float = 0.7, reg_covar: float = 1e-6,
             mesh='auto') -> Kernel:
    """Cross-entropy method (Rubinstein 1999) with a Gaussian-mixture sampling distribution.

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
    weight, so it can win elites again. On the symmetric bimodal test target, both modes were
    held for 12 of 12 seeds with 24 elites of 128 and alpha = 0.7 (3 of 12 with 'uniform').

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
      Kernel with `init(key, positions (P, D)) -> CEMState` and
      `step(state, data=None) -> (CEMState, CEMInfo)`. `init` fits the initial mixture to
      the positions (P >= K): means at K points chosen by k-means++, every covariance the
      positions' covariance, equal weights; the first population is the positions themselves
      when P == N, else N draws from that mixture.

    Raises:
      ValueError: counts out of range, unknown weighting, smoothing outside (0, 1],
        reg_covar < 0.
    """
    if weighting not in ('importance', 'uniform'):
        raise ValueError(f"cem: weighting: expected 'importance' or 'uniform', got "
                         f"{weighting!r}")
    num_samples = _check_count('cem', 'num_samples', num_samples)
    num_components = _check_count('cem', 'num_components', num_components)
    num_elites = _check_count('cem', 'num_elites', num_elites, minimum=num_components)
    if num_elites > num_samples:
        raise ValueError(f'cem: num_elites: expected <= num_samples = {num_samples}, got '
                         f'{num_elites}')
    num_em_iterations = _check_count('cem', 'num_em_iterations', num_em_iterations)
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

    def init(key, positions) -> CEMState:
        x = _check_positions('cem', positions, None, 'P')
        if x.shape[0] < num_components:
            raise ValueError(f'cem: positions: expected at least num_components = '
                             f'{num_components} rows, got {x.shape[0]}')
        key, sub = jax.random.split(key)
        population, weights, means, covariances = initial_mixture(sub, jnp.asarray(x))
        active_mesh = svgd.resolve_mesh(mesh, num_samples)
        population = svgd.shard_particles(population, active_mesh, num_samples)
        rest = svgd.replicate(
            (weights, means, covariances, means[0], jnp.asarray(-jnp.inf, x.dtype), key,
             jnp.asarray(smoothing, x.dtype), jnp.zeros((), jnp.int32)), active_mesh)
        return CEMState(population, *rest)

    def step(state: CEMState, data=None):
        x = state.particles
        num = x.shape[0]
        active_mesh = svgd.resolve_mesh(mesh, num)

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
        population = svgd.shard_particles(population, active_mesh, num, constrain=True)
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


# ------------------------------------------------------------------------------------------
# The shooting-likelihood problem for the baselines
# ------------------------------------------------------------------------------------------

def make_shooting_log_prob(likelihood: lik.ShootingLikelihood,
                           spec: parameters.ParameterSpec, *,
                           base_params: Params | None = None,
                           params_fn: Callable | None = None,
                           log_prior_fn: Callable | None = None, defect_std: float = 0.1,
                           jacobian: bool = True) -> Callable:
    """The posterior log density of a shooting-likelihood problem for the baselines.

    Over CSVGD's flat particle x = [z, s_hat] (D = M + K (W - 1) S; see `csvgd`):

      log p(x | data) = log-likelihood(theta, shooting states)   (`likelihood.log_likelihood`)
                        + log prior(theta) + log |det d theta / d z|
                        - 1/2 |defects / defect_std|^2,

    the last term being the seed's defect likelihood N(s^s | s, sigma_def^2) (§2.3) on the
    normalised defects, which makes the multiple-shooting constraints a soft penalty that
    MCMC can sample (single shooting, W = 1: x = z and no defect term).

    Args:
      likelihood: simulator, windows, observation model, sum/product form.
      spec: the free parameters and their bounds.
      base_params, params_fn: exactly one: theta -> Params is `spec.to_params(theta,
        base_params)` or `params_fn(theta)` (for tied parameters), as in `make_csvgd`.
      log_prior_fn: `log_prior_fn(theta) -> ()` (default: uniform within the bounds).
      defect_std: sigma_def > 0 of the normalised defects (the seed tunes sigma_def^2 to
        about 1e-2).
      jacobian: include log |det d theta / d z| (the posterior in physical space).

    Returns:
      `log_prob_fn(x, data) -> ()` with `data` a `likelihood.TrajectoryData`; start it at
      `shooting_positions(...)` and decode samples with `csvgd.split_particles`.

    Raises:
      ValueError: neither or both of base_params / params_fn, defect_std <= 0.
    """
    if (base_params is None) == (params_fn is None):
        raise ValueError('shooting log prob: give exactly one of base_params and params_fn')
    _check_positive('shooting log prob', 'defect_std', defect_std)
    if params_fn is None:
        def params_fn(theta):
            return spec.to_params(theta, base_params)
    m = spec.num_params

    def log_prob_fn(x, data: lik.TrajectoryData):
        z = x[:m]
        theta = spec.from_unconstrained(z)
        shooting = data.state_mean + data.state_scale * x[m:].reshape(
            likelihood.shooting_shape(data))
        terms = lik.log_likelihood(likelihood, params_fn(theta), shooting, data)
        value = terms.log_lik - 0.5 * jnp.sum(jnp.square(terms.defects / defect_std))
        if jacobian:
            value = value + svgd.log_abs_det_jacobian(spec, z)
        if log_prior_fn is not None:
            value = value + log_prior_fn(theta)
        return value

    return log_prob_fn


def shooting_positions(likelihood: lik.ShootingLikelihood, spec: parameters.ParameterSpec,
                       theta, data: lik.TrajectoryData) -> jax.Array:
    """(P, D) starting positions [z, s_hat] for `make_shooting_log_prob`.

    theta (P, M) physical values (e.g. `csvgd.sobol_particles`) map to z; the shooting states
    start on the measured data (`likelihood.initial_shooting_states`), as in CSVGD's `init`.

    Raises:
      ValueError: theta not (P, M) or not finite, or data that does not fit the likelihood.
    """
    theta = _check_positions('shooting positions', theta, None, 'P')
    if theta.shape[1] != spec.num_params:
        raise ValueError(f'shooting positions: theta: expected (P, {spec.num_params}) for '
                         f'parameters {", ".join(spec.names)}, got {theta.shape}')
    likelihood.check_data(data)
    z = spec.to_unconstrained(jnp.asarray(theta))
    s_hat = ((lik.initial_shooting_states(likelihood, data) - data.state_mean)
             / data.state_scale).reshape(1, -1)
    s_hat = jnp.broadcast_to(s_hat, (theta.shape[0], s_hat.shape[1])).astype(z.dtype)
    return jnp.concatenate([z, s_hat], axis=1)
