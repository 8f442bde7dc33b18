"""Constrained Stein variational gradient descent (CSVGD; seed 000, Heiden et al. 2022).

CSVGD approximates the posterior over simulation parameters theta given measured
trajectories with the multiple-shooting likelihood of `likelihoods.likelihood`. Each particle
is CSVGD's flat particle (`shooting`)

    x = [z, s_hat]   (D = M + K (W - 1) S,)

with z the unconstrained coordinates of theta (no particle leaves its bounds) and s_hat the
normalised shooting states of every window start after the first. The defects c(x) (C = K
(W - 1) S,), the jumps between consecutive windows in units of state_scale, must vanish.

Constraints: the modified differential method of multipliers (MDMM; Platt & Barr 1988), as in
the paper. Particle i carries multipliers lambda_i (C,); its Lagrangian is

    L_i(x) = log p(x | D) - w (lambda_i . c(x) + mu / 2 |c(x)|^2)

(log p: log-likelihood + log prior + log |det d theta / d z|). Each step the particles ascend
L (descend the constraint violation) while the multipliers rise by gradient ascent:

    x_i      <- x_i + optimizer(phi_i),
    phi_i     = SVGD direction of log p at x_i  -  1/P grad_x [w (lambda_i . c + mu/2 |c|^2)],
    lambda_i <- lambda_i + alpha c(x_i).

The constraint force of a particle acts on that particle only, weighted 1/P like its own
score inside phi: a particle's multipliers belong to its own defects. mu (`damping`) makes the
saddle attractive; the multipliers should rise slowly compared with how fast an optimiser
step moves the defects (keep alpha below mu / 10). Near a solution the residual defect decays
with time constant ~ mu / alpha iterations.

Scaling: w = H mean_o (state_scale_o / noise_std_o)^2 is the curvature of one window's
log-likelihood with respect to a normalised state (H samples), so that the defaults mu = 10,
alpha = 0.3 work across noise levels and window lengths, and lambda is dimensionless.

Kernel: by default ('parameters') a matrix-valued kernel (Wang et al. 2019): SVGD's kernel
(`kernels.svgd`) of the z coordinates acts on z (its linear part only without shooting
states, W = 1), the identity on the shooting states, so the parameters follow SVGD while each
particle's shooting states follow its own score. 'all' runs plain SVGD over the whole
augmented particle. Measurements behind these choices: `docs/design/inference.md`.

Each step evaluates all particles in one vmapped call (all K W windows of all P particles);
jit `step` yourself. With several JAX devices the particle axis is sharded (`sharding`). A
particle whose simulation diverges (non-finite likelihood, defects or score) gets a zero score
and constraint force, log-likelihood -inf in the info, and is re-seeded next to a finite
particle (`reseeding`), taking over its shooting states, multipliers and optimiser moments.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sysid_ros.core.inference import sharding
from sysid_ros.core.inference.base import Kernel, KernelData
from sysid_ros.core.inference.kernels import svgd
from sysid_ros.core.inference.reseeding import reseed_nonfinite
from sysid_ros.core.inference.unconstrained import log_abs_det_jacobian
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import profiled_start
from sysid_ros.core.model import parameters
from sysid_ros.core.model.types import Params

__all__ = [
    'KERNELS',
    'CSVGDState',
    'CSVGDInfo',
    'build_kernel',
]

KERNELS = ('all', 'parameters')


class CSVGDState(NamedTuple):
    """State of CSVGD.

    Attributes:
      theta: (P, M) particles in physical units, in the order of `spec.names` (the posterior).
      particles: (P, D) flat decision variables [z, s_hat] (see the module doc).
      multipliers: (P, C) Lagrange multipliers of the normalised defects.
      opt_state: optax state over the (P, D) particle array.
      key: PRNG key for re-seeding.
      iteration: () int, steps taken.
      num_reseeded: () int, particles re-seeded so far.
      multiplier_rate: () alpha, gradient-ascent rate of the multipliers.
      damping: () mu, weight of MDMM's damping term. Both are array leaves: change them with
        `state._replace(...)` without recompiling `step`.
      profile: with `start: profiled`, each particle's carried `profiled_start.StartProfile`
        (leaves with a leading P axis; refitted when `profiled_start.profile_due`), else None.
    """

    theta: jax.Array
    particles: jax.Array
    multipliers: jax.Array
    opt_state: Any
    key: jax.Array
    iteration: jax.Array
    num_reseeded: jax.Array
    multiplier_rate: jax.Array
    damping: jax.Array
    profile: Any = None


class CSVGDInfo(NamedTuple):
    """Diagnostics of one CSVGD step (at the particles before it).

    Attributes:
      log_lik: (P,) combined log-likelihood of each particle (-inf where not finite).
      max_defect: (P,) largest absolute normalised defect of each particle (0 for W = 1).
      grad_norm: (P,) norm of each particle's Lagrangian score (0 where not finite).
      bandwidth: () kernel bandwidth.
      num_nonfinite: () particles whose simulation diverged (they were re-seeded).
    """

    log_lik: jax.Array
    max_defect: jax.Array
    grad_norm: jax.Array
    bandwidth: jax.Array
    num_nonfinite: jax.Array


def build_kernel(likelihood: lik.ShootingLikelihood, spec: parameters.ParameterSpec,
                 optimizer: optax.GradientTransformation, *, base_params: Params | None = None,
                 params_fn: Callable | None = None, multiplier_rate: float = 0.3,
                 damping: float = 10.0, kernel: str = 'parameters',
                 jacobian: bool = True, jitter: float = 0.05, mesh='auto',
                 carry_start: bool = True) -> Kernel:
    """CSVGD estimator over parameters and shooting states (see the module doc).

    Over 100 lines because `init`, `step` and their helpers are closures over the factory's
    settings, as blackjax's kernels are.

    Args:
      likelihood: simulator, windows, observation model and sum/product form.
      spec: the free parameters and their bounds.
      optimizer: optax optimiser applied to -phi over the (P, D) particles, e.g.
        `optax.adam(5e-2)`.
      base_params: Params supplying every value not in the spec (theta -> Params is then
        `spec.to_params(theta, base_params)`).
      params_fn: `params_fn(theta) -> Params` instead of `base_params`, for tied parameters
        (e.g. one link length that sets both a COM and the next joint's origin).
      multiplier_rate: alpha, gradient-ascent rate of the multipliers (initial value of
        `CSVGDState.multiplier_rate`); keep it below damping / 10.
      damping: mu >= 0, weight of MDMM's damping term w mu / 2 |c|^2 (initial value of
        `CSVGDState.damping`).
      kernel: 'parameters' (SVGD's kernel on z, identity on the shooting states; see the
        module doc) or 'all' (SVGD's kernel over the whole particle [z, s_hat]; its linear
        part off where there are shooting states).
      jacobian: include log |det d theta / d z| (posterior in physical space; see `svgd`).
      jitter: standard deviation of the re-seeding jitter in z.
      mesh: 'auto' (shard particles when several devices exist), None or a jax Mesh.
      carry_start: with `start: profiled`, carry each particle's start profile from step to
        step (`CSVGDState.profile`, `profiled_start.StartProfile`); False fits it from the
        measured start in every step (the reference the carried profile was measured
        against, `bench/profiled_start.py`).

    Returns:
      Kernel with `init(key, theta (P, M), data) -> CSVGDState` (theta physical, e.g. from
      `particles.initial_particles`) and `step(state, data) -> (CSVGDState, CSVGDInfo)`;
      `data` is a `KernelData` of a `likelihood.TrajectoryData` and a `GaussianPrior` (or
      None) that multiplies the uniform prior within the bounds (data: new values do not
      recompile `step`).

    Raises:
      ValueError: neither or both of base_params / params_fn, unknown kernel, damping < 0.
    """
    if (base_params is None) == (params_fn is None):
        raise ValueError('csvgd: give exactly one of base_params and params_fn')
    if params_fn is None:
        def params_fn(theta):
            return spec.to_params(theta, base_params)
    if kernel not in KERNELS:
        raise ValueError(f'csvgd: kernel: expected one of {" | ".join(KERNELS)}, got '
                         f'{kernel!r}')
    if not damping >= 0.0:
        raise ValueError(f'csvgd: damping: expected >= 0, got {damping!r}')
    m = spec.num_params

    profiled = carry_start and getattr(likelihood, 'start', 'measured') == 'profiled'

    def log_density(x, data, prior, profile):
        """Per particle: (log p(x), normalised defects (C,)); (log-likelihood, carried start
        profile) as aux."""
        z = x[:m]
        theta = spec.from_unconstrained(z)
        shooting = data.state_mean + data.state_scale * x[m:].reshape(
            likelihood.shooting_shape(data))
        if profile is None:
            terms = lik.log_likelihood(likelihood, params_fn(theta), shooting, data)
        else:
            terms = lik.log_likelihood(likelihood, params_fn(theta), shooting, data,
                                       profile=profile)
        log_prob = terms.log_lik
        if jacobian:
            log_prob = log_prob + log_abs_det_jacobian(spec, z)
        if prior is not None:
            log_prob = log_prob + prior.log_density(theta)
        return (log_prob, terms.defects.reshape(-1)), (terms.log_lik, terms.profile)

    def scores(x, multipliers, damping, weight, data, prior, profile):
        """Per particle: the score of log p and the gradient of the constraint terms
        w (lambda . c + mu / 2 |c|^2), from one forward and one (batched) backward pass."""
        (log_prob, defects), pullback, (log_lik, profile) = jax.vjp(
            lambda v: log_density(v, data, prior, profile), x, has_aux=True)
        # Both cotangents through one vmapped backward pass: the checkpointed simulation is
        # recomputed once instead of twice.
        cotangents = (jnp.stack([jnp.ones_like(log_prob), jnp.zeros_like(log_prob)]),
                      jnp.stack([jnp.zeros_like(defects),
                                 weight * (multipliers + damping * defects)]))
        (both,) = jax.vmap(pullback)(cotangents)
        return log_prob, log_lik, defects, both[0], both[1], profile

    batched_scores = jax.vmap(scores, in_axes=(0, 0, None, None, None, None, 0))

    def refreshed(x, data, profile):
        """The particles' carried start profiles, refitted where `profiled_start.profile_due`
        says (one decision for all particles, so the fit runs only when due)."""
        def refit(profile):
            theta = spec.from_unconstrained(x[:, :m])
            return jax.vmap(lambda t, p: profiled_start.refresh_start_profile(
                likelihood, params_fn(t), data, p))(theta, profile)
        return jax.lax.cond(profiled_start.profile_due(profile, data), refit, lambda p: p, profile)

    def constraint_weight(data):
        """w = H mean_o (state_scale_o / noise_std_o)^2 (see the module doc); for motion
        capture the spread of each measured coordinate takes the place of state_scale_o
        (`ShootingLikelihood.observation_scale`)."""
        h = likelihood.window_length(data.num_steps)
        scale = likelihood.observation_scale(data)
        return h * jnp.mean(jnp.square(scale / data.noise_std))

    def empty_profiles(num, data):
        """P start profiles of `data` that are due for a fit (`profiled_start.start_profile`)."""
        return jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (num,) + leaf.shape),
                                      profiled_start.start_profile(likelihood, data))

    def kernel_mask(dim):
        if kernel == 'all':
            return None
        return np.arange(dim) < m

    def init(key, theta, data: KernelData) -> CSVGDState:
        data = data.data
        theta = np.asarray(theta, dtype=float)
        if theta.ndim != 2 or theta.shape[1] != m:
            raise ValueError(f'csvgd: theta: expected (P, {m}) for parameters '
                             f'{", ".join(spec.names)}, got {theta.shape}')
        if theta.shape[0] < 1:
            raise ValueError('csvgd: expected at least one particle, got 0')
        if not np.all(np.isfinite(theta)):
            raise ValueError('csvgd: theta holds NaN or inf')
        likelihood.check_data(data)
        num = theta.shape[0]
        z = spec.to_unconstrained(jnp.asarray(theta))
        s_hat = (lik.initial_shooting_states(likelihood, data) - data.state_mean) \
            / data.state_scale
        s_hat = jnp.broadcast_to(s_hat.reshape(1, -1), (num, s_hat.size)).astype(z.dtype)
        particles = jnp.concatenate([z, s_hat], axis=1)
        multipliers = jnp.zeros((num, likelihood.num_constraints(data)), z.dtype)
        profile = empty_profiles(num, data) if profiled else None
        active_mesh = sharding.resolve_mesh(mesh, num)
        theta_z, particles, multipliers, opt_state, profile = sharding.shard_particles(
            (spec.from_unconstrained(z), particles, multipliers, optimizer.init(particles),
             profile), active_mesh, num)
        key, counter, rate, mu = sharding.replicate(
            (key, jnp.zeros((), jnp.int32), jnp.asarray(multiplier_rate, z.dtype),
             jnp.asarray(damping, z.dtype)), active_mesh)
        return CSVGDState(theta=theta_z, particles=particles, multipliers=multipliers,
                          opt_state=opt_state, key=key, iteration=counter,
                          num_reseeded=counter, multiplier_rate=rate, damping=mu,
                          profile=profile)

    def step(state: CSVGDState, data: KernelData):
        data, prior = data
        x, multipliers = state.particles, state.multipliers
        num, dim = x.shape
        active_mesh = sharding.resolve_mesh(mesh, num)
        mask = kernel_mask(dim)

        # 1. Per particle: score of log p and gradient of the constraint terms of its
        #    Lagrangian; all simulations of all particles in one vmapped call.
        #    A carried start profile is refitted first where due.
        profile = state.profile
        if profiled:
            if profile.x0.shape[1:] != data.x0.shape:   # data of other pieces (mini-batches)
                profile = empty_profiles(num, data)
            profile = refreshed(x, data, profile)
        log_prob, log_lik, defects, score, constraint, profile = batched_scores(
            x, multipliers, state.damping, constraint_weight(data), data, prior, profile)
        finite = (jnp.isfinite(log_prob) & jnp.all(jnp.isfinite(score), axis=-1)
                  & jnp.all(jnp.isfinite(constraint), axis=-1)
                  & jnp.all(jnp.isfinite(defects), axis=-1))
        score = jnp.where(finite[:, None], score, 0.0)
        constraint = jnp.where(finite[:, None], constraint, 0.0)
        defects = jnp.where(finite[:, None], defects, 0.0)

        # 2. SVGD direction of log p (kernel on the normalised particles) plus each
        #    particle's own constraint force, weighted 1/P like its own score in phi; then the
        #    optimiser's step. The constraint force is not kernel-averaged: a particle's
        #    multipliers belong to its own defects, and sharing them drove neighbours apart.
        scale = svgd.particle_scale(x)
        bandwidth = svgd.median_bandwidth(x, scale, mask)
        gate = svgd.linear_gate(log_prob, finite, m) if dim == m else 0.0
        phi = svgd.stein_direction(x, score, bandwidth, scale, mask, gate) - constraint / num
        updates, opt_state = optimizer.update(-phi, state.opt_state, x)
        x_new = optax.apply_updates(x, updates)

        # 3. MDMM: multipliers rise along the constraint violation (gradient ascent).
        multipliers_new = multipliers + state.multiplier_rate * defects

        # 4. Re-seed diverged particles next to finite ones (jitter on z only; the donor's
        #    shooting states, multipliers and optimiser moments fit its trajectory).
        key, sub = jax.random.split(state.key)
        bad = ~finite
        x_new, (multipliers_new, opt_state, profile) = reseed_nonfinite(
            sub, x_new, bad, jitter, extra=(multipliers_new, opt_state, profile),
            jitter_mask=np.arange(dim) < m)

        x_new, multipliers_new, opt_state, profile = sharding.shard_particles(
            (x_new, multipliers_new, opt_state, profile), active_mesh, num, constrain=True)
        num_bad = jnp.sum(bad).astype(jnp.int32)
        new_state = CSVGDState(theta=spec.from_unconstrained(x_new[:, :m]), particles=x_new,
                               multipliers=multipliers_new, opt_state=opt_state, key=key,
                               iteration=state.iteration + 1,
                               num_reseeded=state.num_reseeded + num_bad,
                               multiplier_rate=state.multiplier_rate, damping=state.damping,
                               profile=profile)
        max_defect = jnp.max(jnp.abs(defects), axis=-1, initial=0.0)
        info = CSVGDInfo(log_lik=jnp.where(finite, log_lik, -jnp.inf), max_defect=max_defect,
                         grad_norm=jnp.linalg.norm(score - constraint, axis=-1),
                         bandwidth=bandwidth,
                         num_nonfinite=num_bad)
        return new_state, info

    return Kernel(init=init, step=step)
