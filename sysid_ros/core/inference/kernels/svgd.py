"""Stein variational gradient descent (SVGD; Liu & Wang 2016) with an optax optimiser.

SVGD moves particles x_1..x_P (P, D) so that they approximate a target density p, along the
kernelised Stein direction (Liu & Wang 2016, eq. 8)

    phi(x_i) = 1/P sum_j [ k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i) ],

the first term pulling particles to high density, the second pushing them apart. The kernel
is an RBF plus a linear kernel on the particles' own normalised coordinates u = (x - mean) /
spread (mean and per-coordinate std of the current particles, constants of the step):

    k(x, y) = exp(-|u(x) - u(y)|^2 / h) + c (u(x) . u(y) + 1),

with the median heuristic h = med^2 / log(P + 1) (med: median distance between particles in
u) and c = LINEAR_WEIGHT. The linear part makes the particles match a Gaussian target's mean
and covariance at any particle count (Liu & Wang 2018, "SVGD as moment matching"); it acts
only while the particles' log-density std is below GATE sqrt(d / 2), that of a posterior
sample of dimension d (`linear_gate`), because far from the posterior it holds the leading
particles back. Intervals are read from the particles' mean and std
(`core.inference.intervals`). Measurements: `docs/design/inference.md`.

As in blackjax's `vi/svgd.py`, the step is taken by an optax optimiser on -phi (optax
minimises): plain SGD gives x <- x + eps phi. A particle whose log density or score is not
finite gets a zero score, is re-seeded next to a finite one (`reseeding`; it takes over that
particle's optimiser moments) and counted.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.reseeding import reseed_nonfinite
from sysid_ros.core.inference.sharding import replicate, resolve_mesh, shard_particles

__all__ = [
    'LINEAR_WEIGHT',
    'GATE',
    'SVGDState',
    'SVGDInfo',
    'particle_scale',
    'median_bandwidth',
    'stein_kernel',
    'linear_gate',
    'stein_direction',
    'build_kernel',
]

# Floor of the kernel bandwidth (in squared normalised units): keeps exp(-d^2 / h) finite
# when all particles coincide.
_MIN_BANDWIDTH = 1e-12
# Floor of a coordinate's spread in the kernel's normalisation (coincident particles).
_MIN_SCALE = 1e-9
# c, the weight of the linear part of the kernel, and the gate's threshold (module doc).
LINEAR_WEIGHT = 0.3
GATE = 3.0


class SVGDState(NamedTuple):
    """State of SVGD.

    Attributes:
      particles: (P, D) particle positions in the sampler's coordinates.
      opt_state: the optax optimiser state over the (P, D) particle array.
      key: PRNG key for re-seeding non-finite particles.
      iteration: () int, steps taken.
      num_reseeded: () int, particles re-seeded so far.
    """

    particles: jax.Array
    opt_state: Any
    key: jax.Array
    iteration: jax.Array
    num_reseeded: jax.Array


class SVGDInfo(NamedTuple):
    """Diagnostics of one SVGD step (at the particles before it).

    Attributes:
      log_prob: (P,) log density of each particle (-inf where not finite).
      grad_norm: (P,) Euclidean norm of each particle's score (0 where not finite).
      bandwidth: () kernel bandwidth h (squared normalised units).
      num_nonfinite: () number of particles whose log density or score was not finite (they
        were re-seeded).
    """

    log_prob: jax.Array
    grad_norm: jax.Array
    bandwidth: jax.Array
    num_nonfinite: jax.Array


def _normalised(x, scale, mask):
    """(P, D) -> (P, D) kernel coordinates u = (x - mean) / scale (mean over the particles),
    zero outside `mask`."""
    u = x - jnp.mean(x, axis=0)
    u = u if scale is None else u / scale
    return u if mask is None else jnp.where(mask, u, 0.0)


def particle_scale(x: jax.Array) -> jax.Array:
    """(P, D) -> (D,) the particles' own spread per coordinate: their std (ddof 0), at least
    1e-9; the kernel's normalisation, so that it sees every direction of the target on
    the same scale however narrow the posterior is in it."""
    return jnp.maximum(jnp.std(x, axis=0), _MIN_SCALE)


def _squared_distances(u):
    """(P, D) -> (P, P) squared Euclidean distances |u_i - u_j|^2 (exactly 0 on the diagonal)."""
    sq = jnp.sum(jnp.square(u), axis=-1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (u @ u.T)
    d2 = jnp.maximum(d2, 0.0)
    return d2 * (1.0 - jnp.eye(u.shape[0], dtype=u.dtype))


def median_bandwidth(x: jax.Array, scale=None, mask=None) -> jax.Array:
    """Median heuristic of Liu & Wang (2016): h = med^2 / log(P + 1).

    med is the median of the distances between distinct particles in normalised coordinates,
    so that sum_j k(x_i, x_j) is about 1 + P exp(-log(P + 1)) ~ 2: a particle's own score and
    the others' weigh about the same.

    Args:
      x: (P, D) particles.
      scale: (D,) normalising scale of each coordinate, or None for 1.
      mask: (D,) bool, coordinates that enter the kernel, or None for all.

    Returns:
      () bandwidth h (at least 1e-12; 1 when P == 1).
    """
    num = x.shape[0]
    if num < 2:
        return jnp.ones((), x.dtype)
    d2 = _squared_distances(_normalised(x, scale, mask))
    rows, cols = np.triu_indices(num, k=1)
    h = _median(d2[rows, cols]) / np.log(num + 1.0)
    return jnp.maximum(h, _MIN_BANDWIDTH)


def _median(values):
    """Exact median of a 1-D array by bisection on the value (sorting is slow on XLA:CPU).

    64 halvings of [min, max] isolate the lower middle order statistic; the upper one is the
    next larger value when the count is even. Only comparisons and integer counts: the
    result does not depend on how the array is split across devices.
    """
    n = values.shape[0]
    k = (n - 1) // 2                                    # 0-based rank of the lower middle

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        enough = jnp.sum(values <= mid) >= k + 1
        return jnp.where(enough, lo, mid), jnp.where(enough, mid, hi)

    _, hi = jax.lax.fori_loop(0, 64, halve, (jnp.min(values), jnp.max(values)))
    lower = jnp.max(jnp.where(values <= hi, values, -jnp.inf))
    if n % 2:
        return lower
    ties = jnp.sum(values <= lower) >= k + 2
    upper = jnp.where(ties, lower, jnp.min(jnp.where(values > lower, values, jnp.inf)))
    return 0.5 * (lower + upper)


def stein_kernel(x: jax.Array, y: jax.Array, bandwidth, scale=None, center=None
                 ) -> jax.Array:
    """k(x, y) = exp(-|u(x) - u(y)|^2 / h) + c (u(x) . u(y) + 1) for particles x, y (D,),
    u(x) = (x - center) / scale (None: 0 and 1)."""
    def coords(a):
        a = a if center is None else a - center
        return a if scale is None else a / scale
    u, v = coords(x), coords(y)
    return (jnp.exp(-jnp.sum(jnp.square(u - v)) / bandwidth)
            + LINEAR_WEIGHT * (jnp.dot(u, v) + 1.0))


def linear_gate(log_prob: jax.Array, finite: jax.Array, dim: int) -> jax.Array:
    """() 1.0 where the entries of log_prob (P,) marked `finite` (P,) (the particles the step
    keeps) spread like the log density of a posterior sample of dimension `dim` (std below
    GATE sqrt(dim / 2)), else 0.0."""
    count = jnp.maximum(jnp.sum(finite), 1)
    values = jnp.where(finite, log_prob, 0.0)
    mean = jnp.sum(values) / count
    var = jnp.sum(jnp.where(finite, jnp.square(values - mean), 0.0)) / count
    return (var < GATE ** 2 * dim / 2.0).astype(values.dtype)


def stein_direction(x: jax.Array, score: jax.Array, bandwidth, scale=None,
                    mask=None, gate=1.0) -> jax.Array:
    """The SVGD direction phi (P, D) of Liu & Wang (2016), eq. 8, for the kernel of the module
    doc (RBF plus linear).

    With u_i = (x_i - mean_j x_j) / scale and K_ij = exp(-|u_i - u_j|^2 / h):

      phi_i = 1/P sum_j (K_ij + c (u_i . u_j + 1)) score_j
              + 1/P (2 / h) sum_j K_ij (u_i - u_j) / scale  +  c u_i / scale,

    c = LINEAR_WEIGHT times `gate`, the last two terms being grad_{x_j} k(x_j, x_i) summed
    (the mean and the scale are constants of the step).

    With a `mask`, the kernel is matrix-valued (Wang, Tang, Bajaj & Liu 2019): the kernel of
    the masked coordinates acts on those coordinates, and the identity kernel delta_ij on
    the others, so that an unmasked coordinate moves along its own particle's score only,
    phi_i = score_i / P (e.g. nuisance variables such as shooting states that belong to
    their particle's parameters).

    Args:
      x: (P, D) particles.
      score: (P, D) grad log p at each particle (must be finite).
      bandwidth: () h.
      scale: (D,) normalising scale of each coordinate (`particle_scale`), or None for 1.
      mask: (D,) bool, coordinates of the kernel, or None for all.
      gate: () multiplies c (`linear_gate`; 0: the RBF alone).

    Returns:
      (P, D) direction of steepest decrease of KL(q || p) in the kernel's RKHS.
    """
    num = x.shape[0]
    u = _normalised(x, scale, mask)
    rbf = jnp.exp(-_squared_distances(u) / bandwidth)                   # (P, P), symmetric
    c = LINEAR_WEIGHT * gate
    attraction = (rbf + c * (u @ u.T + 1.0)) @ score
    repulsion = (2.0 / bandwidth) * (jnp.sum(rbf, axis=1, keepdims=True) * u - rbf @ u) \
        + c * num * u
    if scale is not None:
        repulsion = repulsion / scale
    phi = attraction + repulsion
    if mask is not None:
        phi = jnp.where(mask, phi, score)
    return phi / num


def build_kernel(log_prob_fn: Callable, optimizer: optax.GradientTransformation, *,
                 scale=None, bandwidth=None, jitter: float = 0.1, mesh='auto') -> Kernel:
    """SVGD over flat particles (P, D) with the kernel of the module doc and an optax optimiser.

    Args:
      log_prob_fn: `log_prob_fn(x, data) -> ()` for one particle x (D,), e.g. built with
        `unconstrained.unconstrained_log_density` for bounded physical parameters.
      optimizer: optax optimiser applied to -phi over the whole (P, D) array (as blackjax),
        e.g. `optax.sgd(1e-1)` (plain SVGD) or `optax.adam(1e-2)`.
      scale: (D,) normalising scale of the kernel coordinates, or None for the particles'
        own spread at every step (`particle_scale`).
      bandwidth: fixed kernel bandwidth h, or None for the median heuristic at every step.
      jitter: standard deviation of the re-seeding jitter, normalised units.
      mesh: 'auto' (shard the particles when there are several devices), None or a Mesh.

    Returns:
      Kernel with `init(key, particles (P, D), data) -> SVGDState` (`data` unused) and
      `step(state, data) -> (SVGDState, SVGDInfo)`, `data` passed to `log_prob_fn`. Jit
      `step` yourself; the vmapped scores of all particles are one call.
    """
    scale_arr = None if scale is None else jnp.asarray(scale)
    value_and_grad = jax.vmap(jax.value_and_grad(log_prob_fn), in_axes=(0, None))

    def init(key, particles, data) -> SVGDState:
        del data
        particles = jnp.asarray(particles, jnp.result_type(float))
        if particles.ndim != 2 or particles.shape[0] < 1:
            raise ValueError(f'svgd: expected particles (P >= 1, D), got {particles.shape}')
        num = particles.shape[0]
        active_mesh = resolve_mesh(mesh, num)
        particles, opt_state = shard_particles((particles, optimizer.init(particles)),
                                               active_mesh, num)
        counters = replicate((key, jnp.zeros((), jnp.int32)), active_mesh)
        return SVGDState(particles=particles, opt_state=opt_state, key=counters[0],
                         iteration=counters[1], num_reseeded=counters[1])

    def step(state: SVGDState, data):
        x = state.particles
        num = x.shape[0]
        active_mesh = resolve_mesh(mesh, num)
        log_prob, score = value_and_grad(x, data)
        finite = jnp.isfinite(log_prob) & jnp.all(jnp.isfinite(score), axis=-1)
        score = jnp.where(finite[:, None], score, 0.0)
        scale_x = particle_scale(x) if scale_arr is None else scale_arr
        h = median_bandwidth(x, scale_x) if bandwidth is None else jnp.asarray(bandwidth)
        gate = linear_gate(log_prob, finite, x.shape[1])
        phi = stein_direction(x, score, h, scale_x, gate=gate)
        updates, opt_state = optimizer.update(-phi, state.opt_state, x)
        x_new = optax.apply_updates(x, updates)
        key, sub = jax.random.split(state.key)
        bad = ~finite
        x_new, opt_state = reseed_nonfinite(sub, x_new, bad, jitter, scale_arr, extra=opt_state)
        num_bad = jnp.sum(bad).astype(jnp.int32)
        x_new, opt_state = shard_particles((x_new, opt_state), active_mesh, num, True)
        new_state = SVGDState(particles=x_new, opt_state=opt_state, key=key,
                              iteration=state.iteration + 1,
                              num_reseeded=state.num_reseeded + num_bad)
        info = SVGDInfo(log_prob=jnp.where(finite, log_prob, -jnp.inf),
                        grad_norm=jnp.linalg.norm(score, axis=-1), bandwidth=h,
                        num_nonfinite=num_bad)
        return new_state, info

    return Kernel(init=init, step=step)
