"""The affine-invariant ensemble sampler (Goodman & Weare 2010; Foreman-Mackey et al. 2013)
of the `emcee` package, W walkers.

`log_prob_fn(x, data) -> ()` is a log density of one position x (D,) in the sampler's
coordinates (e.g. `shooting.make_shooting_log_prob` over a spec's unconstrained z);
`state.particles` (C, D) is the posterior sample.

It runs on the host, in NumPy: its `step` is not a JAX function and cannot be jitted or
vmapped. It is still a deterministic function of (state, data): no state lives outside
`EmceeState`, which carries the random generator's state.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.checks import check_count, check_positions

__all__ = ['EmceeState', 'EmceeInfo', 'build_kernel']


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


def build_kernel(log_prob_fn: Callable, num_walkers: int, *, moves=None) -> Kernel:
    """Affine-invariant ensemble MCMC (Goodman & Weare 2010) with `emcee.EnsembleSampler`.

    Over 100 lines because `init`, `step` and the host-side sampler cache are closures over
    the factory's settings, and why it runs on the host is documented here.

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
      Kernel with `init(key, positions (W, D), data) -> EmceeState` (`data` unused) and
      `step(state, data) -> (EmceeState, EmceeInfo)`.

    Raises:
      ValueError: num_walkers < 2 (init: positions of the wrong shape, not finite, too few
        walkers for D, or walkers that are not linearly independent).
    """
    import emcee  # host-side dependency, needed only by this baseline

    num_walkers = check_count('emcee', 'num_walkers', num_walkers, minimum=2)
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

    def init(key, positions, data) -> EmceeState:
        del data
        x = check_positions('emcee', positions, num_walkers, 'W walkers')
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

    def step(state: EmceeState, data):
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
