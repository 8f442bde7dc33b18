"""The No-U-Turn sampler (NUTS; Hoffman & Gelman 2014) with blackjax's multinomial,
iterative NUTS kernel, C chains vmapped, and its warm-up (`warmup`: blackjax's window
adaptation, or dual averaging of the step size alone, on every chain, then pooled).

`log_prob_fn(x, data) -> ()` is a log density of one position x (D,) in the sampler's
coordinates (e.g. `shooting.make_shooting_log_prob` over a spec's unconstrained z);
`state.particles` (C, D) is the posterior sample.

A chain whose start has a non-finite log density or gradient restarts at a randomly chosen
finite chain (`reseeding.reseed_nonfinite`, zero jitter) and is counted. The chain axis is
sharded over a one-axis mesh when several JAX devices exist (`sharding`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import blackjax
from blackjax.adaptation.base import get_filter_adapt_info_fn
import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.checks import check_count, check_positions, check_positive
from sysid_ros.core.inference.reseeding import reseed_nonfinite
from sysid_ros.core.inference.sharding import place_chains, resolve_mesh, shard_particles

__all__ = ['NUTSState', 'NUTSInfo', 'NUTSWarmup', 'build_kernel', 'warmup']


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
      particles: (C, D) chain positions at the end of the warm-up (start `build_kernel` there).
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


def build_kernel(log_prob_fn: Callable, step_size, inverse_mass_matrix, num_chains: int, *,
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
      Kernel with `init(key, positions (C, D), data) -> NUTSState` (host-side; `data`
      unused) and `step(state, data) -> (NUTSState, NUTSInfo)`.

    Raises:
      ValueError: step_size <= 0, an inverse mass matrix that is not (D,) or (D, D), or
        num_chains / max_num_doublings < 1 (init: positions that do not fit).
    """
    check_positive('nuts', 'step_size', step_size)
    num_chains = check_count('nuts', 'num_chains', num_chains)
    max_num_doublings = check_count('nuts', 'max_num_doublings', max_num_doublings)
    imm = _check_metric('nuts', inverse_mass_matrix)
    kernel = blackjax.nuts.build_kernel(divergence_threshold=divergence_threshold)

    def init(key, positions, data) -> NUTSState:
        del data
        x = check_positions('nuts', positions, num_chains, 'C chains')
        _check_metric('nuts', imm, x.shape[1])
        x, key, step, matrix, counter = place_chains(mesh, num_chains, x, key, step_size, imm)
        return NUTSState(particles=x, key=key, step_size=step, inverse_mass_matrix=matrix,
                         iteration=counter, num_reseeded=counter)

    def step(state: NUTSState, data):
        x = state.particles
        num = x.shape[0]
        active_mesh = resolve_mesh(mesh, num)

        def logdensity(position):
            return log_prob_fn(position, data)

        # 1. Evaluate every chain's start (the data may have changed since the last step).
        chain = jax.vmap(lambda position: blackjax.nuts.init(position, logdensity))(x)
        finite = (jnp.isfinite(chain.logdensity)
                  & jnp.all(jnp.isfinite(chain.logdensity_grad), axis=-1))

        # 2. Restart chains with a non-finite start at a finite chain (state copied whole).
        key, key_reseed, key_step = jax.random.split(state.key, 3)
        bad = ~finite
        _, chain = reseed_nonfinite(key_reseed, x, bad, 0.0, extra=chain)

        # 3. One NUTS transition per chain.
        def transition(k, chain_state):
            return kernel(k, chain_state, logdensity, state.step_size,
                          state.inverse_mass_matrix, max_num_doublings)

        chain, nuts_info = jax.vmap(transition)(jax.random.split(key_step, num), chain)
        x_new = shard_particles(chain.position, active_mesh, num, constrain=True)

        num_bad = jnp.sum(bad).astype(jnp.int32)
        new_state = state._replace(particles=x_new, key=key, iteration=state.iteration + 1,
                                   num_reseeded=state.num_reseeded + num_bad)
        info = NUTSInfo(log_prob=chain.logdensity, acceptance_rate=nuts_info.acceptance_rate,
                        is_divergent=nuts_info.is_divergent,
                        num_integration_steps=nuts_info.num_integration_steps,
                        num_nonfinite=num_bad)
        return new_state, info

    return Kernel(init=init, step=step)


def warmup(key: jax.Array, log_prob_fn: Callable, positions, num_steps: int, data=None,
           *, dense: bool = False, target_acceptance_rate: float = 0.8,
           initial_step_size: float = 1.0, max_num_doublings: int = 10,
           inverse_mass_matrix=None) -> NUTSWarmup:
    """Warm-up for `build_kernel`: blackjax's window adaptation on every chain, then pooled.

    With a given `inverse_mass_matrix` (e.g. the covariance of starting positions drawn from a
    Laplace approximation) only the step size is adapted (dual averaging, Hoffman & Gelman
    2014 §3.2): Stan's windows start from the identity metric, far from a posterior whose
    scales span decades.

    `blackjax.window_adaptation` (Stan's schedule: a fast interval of dual-averaging step-size
    adaptation, slow windows of doubling length that estimate the inverse mass matrix from
    the chain's samples (Welford, regularised towards 1e-3 I), a final fast interval) runs on
    each chain independently (vmapped, as blackjax advises for several chains). The chains'
    matrices are then averaged and their step sizes pooled by the median, so that all chains
    of `build_kernel` share one setting; the per-chain values are returned too.

    Runs on the host and compiles the warm-up (one `lax.scan` of `num_steps`) internally.

    Args:
      key: PRNG key.
      log_prob_fn: `log_prob_fn(x, data) -> ()`, as for `build_kernel`.
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
    num_steps = check_count('nuts_warmup', 'num_steps', num_steps)
    max_num_doublings = check_count('nuts_warmup', 'max_num_doublings', max_num_doublings)
    if not 0.0 < target_acceptance_rate < 1.0:
        raise ValueError(f'nuts_warmup: target_acceptance_rate: expected in (0, 1), got '
                         f'{target_acceptance_rate!r}')
    check_positive('nuts_warmup', 'initial_step_size', initial_step_size)
    x = jnp.asarray(check_positions('nuts_warmup', positions, None, 'C chains'))

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
