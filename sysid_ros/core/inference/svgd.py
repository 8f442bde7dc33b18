"""Stein variational gradient descent (SVGD; Liu & Wang 2016) with an optax optimiser.

SVGD moves a set of particles x_1..x_P (P, D) so that they approximate a target density p.
Each iteration follows the kernelised Stein direction (Liu & Wang 2016, eq. 8)

    phi(x_i) = 1/P sum_j [ k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i) ],

the first term pulling particles to high density (a kernel-weighted average of the scores),
the second pushing them apart. The kernel is an RBF plus a linear kernel on the particles'
own normalised coordinates u = (x - mean) / spread (mean and per-coordinate std of the
current particles, constants of the step):

    k(x, y) = exp(-|u(x) - u(y)|^2 / h) + c (u(x) . u(y) + 1),

with the median heuristic h = med^2 / log(P + 1) (med: median distance between particles in
u) and c = LINEAR_WEIGHT. The linear part makes SVGD match moments (Liu & Wang 2018, "SVGD
as moment matching"): with it alone the particles' mean and covariance at a fixed point are
a Gaussian target's, at any particle count. With the RBF alone the median heuristic shrinks
the spread as the dimension grows, and without the normalisation by the spread the narrow
directions of an anisotropic target collapse to a point. Measured at the fixed point on
Gaussian targets (stds 1 to 0.01, correlation 0.5; std / true std, mean over coordinates):

    dims, particles   RBF alone   c = 0.1   c = 0.3   c = 1
    2, 16             0.88        0.95      0.985     1.01
    4, 16             0.68        0.92      0.98      1.015
    6, 16             0.63        0.91      0.97      1.01
    10, 16            0.50        0.89      0.97      1.01
    10, 64            -           0.96      0.99      1.00

(RBF alone on unnormalised coordinates: 0.00 for a coordinate 100x narrower than the
widest.) Far from the posterior the linear part misleads: it fits one linear model of the
score across all particles, and where the scores differ by orders of magnitude (a Sobol
start over wide bounds, a truth beyond a bound) it held the leading particles back (with c =
0.1 or 0.3 and no gate, particles for a length whose truth lay beyond its 5 m bound stayed
at 3.0-4.6 m after 400 steps, against 4.75 m and more with the RBF alone). So it acts only
where the particles are a plausible sample of the target: log p over a posterior sample
of dimension d is max - chi^2_d / 2, whose std is sqrt(d / 2) whatever the misfit, and the
gate (`linear_gate`) opens while the particles' log-density std is below
GATE sqrt(d / 2). Intervals are read from the particles' mean and std
(`core.inference.intervals`), so these moments are what calibration rests on.

As in blackjax's `vi/svgd.py`, the step is taken by an optax optimiser on -phi (optax
minimises): plain SGD gives x <- x + eps phi.

Bounds. Parameters are moved in the unconstrained coordinates z of a `ParameterSpec`
(`to_unconstrained`/`from_unconstrained`, a bijection onto the open bounds box), so no
particle can leave its bounds. `unconstrained_log_density` adds log |det d theta / d z| to
the log density, so that the particles in z, mapped to theta, approximate the posterior in
physical space (a uniform prior in theta is a proper logistic density in z; without the
Jacobian the prior would be flat in z and particles could drift to z = +-inf in directions
the data does not determine).

Robustness. A particle whose log density or score is not finite (a diverging simulation)
gets a zero score so that it cannot poison the kernel sums of the others, is then re-seeded
next to a randomly chosen finite particle (its position plus Gaussian jitter in normalised
coordinates; it takes over that particle's optimiser moments), and counted in
`SVGDInfo.num_nonfinite`.

Sharding. With more than one JAX device, `particle_mesh` builds a one-axis mesh and
`shard_particles` places every array with a leading particle axis on it; `jax.jit` then runs
the vmapped per-particle work on all devices and XLA gathers what the kernel needs.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sysid_ros.core.model import parameters
from sysid_ros.core.inference.base import Kernel

__all__ = [
    'PARTICLE_AXIS',
    'SVGDState',
    'SVGDInfo',
    'particle_scale',
    'median_bandwidth',
    'stein_kernel',
    'linear_gate',
    'stein_direction',
    'reseed_nonfinite',
    'log_abs_det_jacobian',
    'unconstrained_log_density',
    'particle_mesh',
    'shard_particles',
    'replicate',
    'resolve_mesh',
    'make_svgd',
]

PARTICLE_AXIS = 'particles'
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


# ------------------------------------------------------------------------------------------
# Kernel and Stein direction
# ------------------------------------------------------------------------------------------

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


# ------------------------------------------------------------------------------------------
# Non-finite particles
# ------------------------------------------------------------------------------------------

def _leading_rows(tree, rows_mask, num, replacement_fn):
    """Apply `replacement_fn(leaf)` to the rows of `rows_mask` in every leaf of leading size P."""
    def fix(leaf):
        if jnp.ndim(leaf) >= 1 and leaf.shape[0] == num:
            mask = rows_mask.reshape((num,) + (1,) * (leaf.ndim - 1))
            return jnp.where(mask, replacement_fn(leaf), leaf)
        return leaf
    return jax.tree_util.tree_map(fix, tree)


def reseed_nonfinite(key: jax.Array, x: jax.Array, bad: jax.Array, jitter, scale=None,
                     extra=None, jitter_mask=None):
    """Move the particles marked `bad` next to randomly chosen good ones.

    Each bad particle i gets the position of a good particle j (uniformly drawn) plus
    Gaussian noise of standard deviation `jitter` in normalised coordinates (times `scale`);
    the rows i of every array in `extra` (e.g. Lagrange multipliers) are copied from row j.
    If no particle is good, nothing moves.

    Args:
      key: PRNG key.
      x: (P, D) particles.
      bad: (P,) bool.
      jitter: () standard deviation of the jitter [normalised units].
      scale: (D,) normalising scale, or None for 1.
      extra: pytree of arrays with leading axis P, copied along, or None.
      jitter_mask: (D,) bool, coordinates that get jitter (None: all).

    Returns:
      (x, extra) with the bad rows replaced.
    """
    num = x.shape[0]
    key_donor, key_noise = jax.random.split(key)
    good = ~bad
    any_good = jnp.any(good)
    weights = jnp.where(any_good, good.astype(x.dtype), jnp.ones((num,), x.dtype))
    donor = jax.random.choice(key_donor, num, (num,), p=weights / jnp.sum(weights))
    noise = jitter * jax.random.normal(key_noise, x.shape, x.dtype)
    if scale is not None:
        noise = noise * scale
    if jitter_mask is not None:
        noise = jnp.where(jitter_mask, noise, 0.0)
    moved = bad & any_good
    x = jnp.where(moved[:, None], x[donor] + noise, x)
    if extra is not None:
        extra = _leading_rows(extra, moved, num, lambda leaf: leaf[donor])
    return x, extra


# ------------------------------------------------------------------------------------------
# Bounded parameters
# ------------------------------------------------------------------------------------------

def log_abs_det_jacobian(spec: parameters.ParameterSpec, z: jax.Array) -> jax.Array:
    """log |det d theta / d z| of `spec.from_unconstrained` at z (M,).

    Elementwise maps: [lo, hi]: log(hi - lo) + log sigmoid(z) + log sigmoid(-z);
    [lo, inf): log sigmoid(z); (-inf, hi]: log sigmoid(-z); unbounded: 0. When the spec has
    DiffNEA inertia blocks the full Jacobian (block diagonal, M x M) goes through `slogdet`.

    Returns:
      () log-determinant.
    """
    z = jnp.asarray(z)
    if spec.diffnea_links:
        jac = jax.jacfwd(spec.from_unconstrained)(z)
        return jnp.linalg.slogdet(jac)[1]
    lower = np.isfinite(np.asarray(spec.lower_bounds, dtype=float))
    upper = np.isfinite(np.asarray(spec.upper_bounds, dtype=float))
    width = np.where(lower & upper, np.asarray(spec.upper_bounds, dtype=float)
                     - np.asarray(spec.lower_bounds, dtype=float), 1.0)
    log_lo = jax.nn.log_sigmoid(z)
    log_hi = jax.nn.log_sigmoid(-z)
    terms = jnp.where(lower & upper, np.log(width) + log_lo + log_hi,
                      jnp.where(lower, log_lo, jnp.where(upper, log_hi, 0.0)))
    return jnp.sum(terms)


def unconstrained_log_density(spec: parameters.ParameterSpec, log_density_fn: Callable,
                              jacobian: bool = True) -> Callable:
    """Turn a log density over physical theta into one over the spec's unconstrained z.

    Args:
      spec: the parameter spec (bounds and bijection).
      log_density_fn: `log_density_fn(theta, *args) -> ()`, e.g. a log-likelihood (a uniform
        prior within the bounds is implied; add a log prior inside it for another one).
      jacobian: add log |det d theta / d z| (True: the particles sample the posterior in
        physical space; False: the density is taken as given in z).

    Returns:
      `fn(z, *args) -> ()`.
    """
    def fn(z, *args):
        value = log_density_fn(spec.from_unconstrained(z), *args)
        if jacobian:
            value = value + log_abs_det_jacobian(spec, z)
        return value
    return fn


# ------------------------------------------------------------------------------------------
# Sharding
# ------------------------------------------------------------------------------------------

def particle_mesh(num_particles: int, devices=None) -> Mesh | None:
    """A one-axis mesh ('particles',) over `devices` (default: all), or None.

    None when there is a single device or when `num_particles` is not a multiple of the
    device count (the particles then stay on one device).
    """
    devices = jax.devices() if devices is None else list(devices)
    if len(devices) < 2 or num_particles % len(devices):
        return None
    return Mesh(np.asarray(devices), (PARTICLE_AXIS,))


def shard_particles(tree, mesh: Mesh | None, num_particles: int, constrain: bool = False):
    """Split every leaf of leading size `num_particles` (and ndim >= 1) along the mesh.

    Args:
      tree: pytree of arrays whose particle-indexed leaves have the particle axis first
        (particles, optimiser moments, multipliers). Pass other leaves through `replicate`.
      mesh: a one-axis mesh from `particle_mesh`, or None (no-op).
      num_particles: P.
      constrain: True inside `jax.jit` (adds sharding constraints), False outside it
        (moves the arrays with `jax.device_put`).
    """
    if mesh is None:
        return tree
    split = NamedSharding(mesh, PartitionSpec(PARTICLE_AXIS))
    whole = NamedSharding(mesh, PartitionSpec())
    put = jax.lax.with_sharding_constraint if constrain else jax.device_put

    def place(leaf):
        by_particle = jnp.ndim(leaf) >= 1 and leaf.shape[0] == num_particles
        return put(leaf, split if by_particle else whole)

    return jax.tree_util.tree_map(place, tree)


def replicate(tree, mesh: Mesh | None, constrain: bool = False):
    """Replicate every leaf over the mesh (no-op for `mesh=None`); see `shard_particles`."""
    if mesh is None:
        return tree
    whole = NamedSharding(mesh, PartitionSpec())
    put = jax.lax.with_sharding_constraint if constrain else jax.device_put
    return jax.tree_util.tree_map(lambda leaf: put(leaf, whole), tree)


def resolve_mesh(mesh, num_particles: int):
    """'auto' -> `particle_mesh(num_particles)`; None or a Mesh unchanged."""
    if isinstance(mesh, str):
        if mesh != 'auto':
            raise ValueError(f"mesh: expected 'auto', None or a jax.sharding.Mesh, got {mesh!r}")
        return particle_mesh(num_particles)
    return mesh


# ------------------------------------------------------------------------------------------
# SVGD estimator
# ------------------------------------------------------------------------------------------

def make_svgd(log_prob_fn: Callable, optimizer: optax.GradientTransformation, *,
              scale=None, bandwidth=None, jitter: float = 0.1, mesh='auto') -> Kernel:
    """SVGD over flat particles (P, D) with the kernel of the module doc and an optax optimiser.

    Args:
      log_prob_fn: `log_prob_fn(x, data) -> ()` for one particle x (D,), e.g. built with
        `unconstrained_log_density` for bounded physical parameters.
      optimizer: optax optimiser applied to -phi over the whole (P, D) array (as blackjax),
        e.g. `optax.sgd(1e-1)` (plain SVGD) or `optax.adam(1e-2)`.
      scale: (D,) normalising scale of the kernel coordinates, or None for the particles'
        own spread at every step (`particle_scale`).
      bandwidth: fixed kernel bandwidth h, or None for the median heuristic at every step.
      jitter: standard deviation of the re-seeding jitter, normalised units.
      mesh: 'auto' (shard the particles when there are several devices), None or a Mesh.

    Returns:
      Kernel with `init(key, particles) -> SVGDState` and
      `step(state, data) -> (SVGDState, SVGDInfo)`. Jit `step` yourself; the vmapped scores
      of all particles are one call.
    """
    scale_arr = None if scale is None else jnp.asarray(scale)
    value_and_grad = jax.vmap(jax.value_and_grad(log_prob_fn), in_axes=(0, None))

    def init(key, particles) -> SVGDState:
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

    def step(state: SVGDState, data=None):
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
