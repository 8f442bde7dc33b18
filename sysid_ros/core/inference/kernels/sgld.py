"""Stochastic-gradient Langevin dynamics (SGLD; Welling & Teh 2011) with blackjax's SGLD
kernel, full-batch gradients, C independent chains vmapped.

`log_prob_fn(x, data) -> ()` is a log density of one position x (D,) in the sampler's
coordinates (e.g. `shooting.make_shooting_log_prob` over a spec's unconstrained z);
`state.particles` (C, D) is the posterior sample.

A chain whose log density or gradient is not finite (a diverging simulation) restarts at a
randomly chosen finite chain (`reseeding.reseed_nonfinite` with zero jitter: its state is
copied, and the independent noise of the next transitions separates the two) and is counted.
The chain axis is sharded over a one-axis mesh when several JAX devices exist (`sharding`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import blackjax
import jax
import jax.numpy as jnp

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.checks import check_count, check_positions, check_positive
from sysid_ros.core.inference.reseeding import reseed_nonfinite
from sysid_ros.core.inference.sharding import place_chains, resolve_mesh, shard_particles

__all__ = ['SGLDState', 'SGLDInfo', 'build_kernel']


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


def build_kernel(log_prob_fn: Callable, step_size, num_chains: int, *, temperature=1.0,
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
      Kernel with `init(key, positions (C, D), data) -> SGLDState` (host-side; `data`
      unused; positions e.g. `spec.to_unconstrained(particles.sobol_particles(spec, C))`)
      and `step(state, data) -> (SGLDState, SGLDInfo)`.

    Raises:
      ValueError: step_size or temperature <= 0, num_chains < 1 (init: positions of the
        wrong shape or not finite).
    """
    check_positive('sgld', 'step_size', step_size)
    check_positive('sgld', 'temperature', temperature)
    num_chains = check_count('sgld', 'num_chains', num_chains)
    value_and_grad = jax.vmap(jax.value_and_grad(log_prob_fn), in_axes=(0, None))
    kernel = blackjax.sgld.build_kernel()

    def precomputed(position, gradient):
        """blackjax's gradient estimator: the full-batch gradient, already evaluated."""
        del position
        return gradient

    def init(key, positions, data) -> SGLDState:
        del data
        x = check_positions('sgld', positions, num_chains, 'C chains')
        x, key, step, temp, counter = place_chains(
            mesh, num_chains, x, key, step_size, temperature)
        return SGLDState(particles=x, key=key, step_size=step, temperature=temp,
                         iteration=counter, num_reseeded=counter)

    def step(state: SGLDState, data):
        x = state.particles
        num = x.shape[0]
        active_mesh = resolve_mesh(mesh, num)

        # 1. Full-batch log density and gradient of every chain in one vmapped call.
        log_prob, score = value_and_grad(x, data)
        finite = jnp.isfinite(log_prob) & jnp.all(jnp.isfinite(score), axis=-1)
        score = jnp.where(finite[:, None], score, 0.0)

        # 2. Restart diverged chains at a finite chain, taking over its gradient.
        key, key_reseed, key_noise = jax.random.split(state.key, 3)
        bad = ~finite
        x, score = reseed_nonfinite(key_reseed, x, bad, 0.0, extra=score)

        # 3. One SGLD transition per chain (independent noise).
        def transition(k, position, gradient):
            return kernel(k, position, precomputed, gradient, state.step_size,
                          state.temperature)

        x_new = jax.vmap(transition)(jax.random.split(key_noise, num), x, score)
        x_new = shard_particles(x_new, active_mesh, num, constrain=True)

        num_bad = jnp.sum(bad).astype(jnp.int32)
        new_state = state._replace(particles=x_new, key=key, iteration=state.iteration + 1,
                                   num_reseeded=state.num_reseeded + num_bad)
        info = SGLDInfo(log_prob=jnp.where(finite, log_prob, -jnp.inf),
                        grad_norm=jnp.linalg.norm(score, axis=-1) * finite,
                        num_nonfinite=num_bad)
        return new_state, info

    return Kernel(init=init, step=step)
