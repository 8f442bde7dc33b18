"""Box-bounded Levenberg-Marquardt over blocked residuals with free block start states, its
Laplace covariance, and the identifiability of the parameters from the Jacobian.

Problem, for one parameter vector theta (M,) in physical units and K blocks (shooting
windows) k, each with its own free start state s_k (S,):

    min  c = 1/2 sum_k |r_k(theta, s_k)|^2 + 1/2 (theta - mu)^T Lambda (theta - mu)
    s.t. lower <= theta <= upper

r_k: noise-normalised residuals (n,) of block k, its start's observation included (so s_k
is fitted to the data like every other sample: the measured start's noise does not bias
theta, as it does when windows start fixed at noisy measurements); (mu, Lambda): an optional
Gaussian prior. The bounds act on the step, not on the coordinates: a sigmoid-bounded
coordinate that saturates has a zero Jacobian column and stops Gauss-Newton there.

Jacobians: one forward-mode pass (`jax.jacfwd`, M + S tangents) gives J_k = [A_k, B_k],
A_k = dr_k/dtheta (n, M), B_k = dr_k/ds_k (n, S): r_k depends on s_k alone among the starts,
so one tangent per start dimension, shared by all blocks, yields every B_k. The normal
equations have an arrow structure: H_tt = sum A^T A (+ Lambda), H_ts_k = A_k^T B_k,
H_ss_k = B_k^T B_k; the starts are eliminated block by block (Schur complement), so a step
costs K solves of S x S and one of M x M.

Each step (Nielsen's damping update, Madsen, Nielsen & Tingleff 2004, "Methods for
non-linear least squares problems" §3.2):

  1. Damping lambda D with D = diag(H) floored at DIAG_FLOOR of its largest entry
     (Marquardt's scaling: units drop out; a column the data do not see gets the floor, so
     the step leaves that parameter where it is). Parameters on a bound whose reduced
     gradient pushes outward are held (the active set).
  2. trial = clip(theta + delta, lower, upper) with the starts' steps back-substituted;
     residuals and Jacobians at the trial in one pass.
  3. Accepted if the cost fell: lambda *= max(1/3, 1 - (2 rho - 1)^3), nu = 2, with rho the
     actual over the predicted reduction; else lambda *= nu, nu *= 2.
  4. Converged when the Gauss-Newton step from theta is shorter than STEP_TOL standard
     deviations (its Newton decrement g^T C^-1 g below STEP_TOL^2 s^2, with C the reduced
     Hessian and s^2 = sum |r|^2 / (n K - M) the residuals' variance, so that a noise level
     set too high or too low does not end the fit early or late: the answer no longer
     changes on the scale of its own uncertainty), when an accepted step lowered the cost by
     at most FTOL of it, or when the damping exceeded MAX_DAMPING (no step lowers the cost
     any more).

Covariance (`laplace_covariance`): the Schur complement C = H_tt - sum_k H_ts_k H_ss_k^-1
H_st_k is the Gauss-Newton Hessian of theta with the starts profiled out, C_k = A_k^T A_k -
H_ts_k H_ss_k^-1 H_st_k block k's share of it, and u_k = A_k^T r_k - H_ts_k H_ss_k^-1 B_k^T r_k
its effective score. The covariance is cluster-robust with Bell & McCaffrey's (2002) bias
reduction ("CR2"):

    V = sum_k d_k d_k^T + C^-1 Lambda C^-1,   d_k = C^-1 (I - C_k C^-1)^(-1/2) u_k,

the parameter-space form (push-through identity) of scaling block k's residuals by
(I - H_kk)^(-1/2), H_kk its leverage; the prior is one more independent source whose score
at the truth has covariance Lambda (without it, a direction only the prior determines would
get no variance). Like the plain sandwich C^-1 (sum_k u_k u_k^T) C^-1
(CR0) it needs no noise level and stays honest when samples within a block are correlated
or the model misfits the data; unlike CR0 it is unbiased for independent residuals:
scores at the estimate are smaller than at the truth because the fit has absorbed part of
every block's noise (coverage of CR0, CR2 and CR3: `docs/design/inference.md`). Intervals
take Student-t quantiles with K - 1 dof (`covariance_dof`). With one block, C^-1 scaled by
the residual variance (sum |r|^2 / degrees of freedom) is used. Directions C does not
determine at all get no variance here; `undetermined_covariance` gives them theirs from a
prior (e.g. the bounds').
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from sysid_ros.core.inference.base import Kernel, KernelData

__all__ = ['FTOL', 'STEP_TOL', 'MAX_DAMPING', 'INITIAL_DAMPING', 'DIAG_FLOOR', 'Linearization',
           'LMState', 'LMInfo', 'linearize', 'build_kernel', 'run', 'schur_hessian',
           'posterior_covariance', 'laplace_covariance', 'undetermined_covariance',
           'covariance_dof', 'Identifiability',
           'identifiability']

FTOL = 1e-10
STEP_TOL = 1e-2                 # [standard deviations] of a step that no longer counts
MAX_DAMPING = 1e10
INITIAL_DAMPING = 1e-3
DIAG_FLOOR = 1e-12
# Covariance: relative eigenvalue below which C counts as singular, and the floor of the
# eigenvalues of I - C^-1/2 C_k C^-1/2 (a block that alone determines a direction).
PINV_RTOL = 1e-12
LEVERAGE_FLOOR = 1e-6


class Linearization(NamedTuple):
    """Cost and normal equations at (theta, starts), see the module doc.

    Attributes:
      cost: () c, inf where not finite; sum_squares: () sum_k |r_k|^2.
      g_theta: (M,); g_starts: (K, S) gradients.
      h_tt: (M, M); h_ts: (K, M, S); h_ss: (K, S, S) Gauss-Newton Hessian blocks.
      block_h_tt: (K, M, M) A_k^T A_k, each block's share of h_tt (without the prior).
      scores: (K, M) A_k^T r_k.
      num_residuals: () residuals of all blocks (n K).
    """

    cost: jax.Array
    sum_squares: jax.Array
    g_theta: jax.Array
    g_starts: jax.Array
    h_tt: jax.Array
    h_ts: jax.Array
    h_ss: jax.Array
    block_h_tt: jax.Array
    scores: jax.Array
    num_residuals: jax.Array


class LMState(NamedTuple):
    """One parameter vector's Levenberg-Marquardt state: `theta` (M,) [physical units],
    `starts` (K, S) block start states, `lin` the `Linearization` there, `damping` lambda,
    `nu` its growth after a rejection, `converged` () bool (module doc, step 4)."""

    theta: jax.Array
    starts: jax.Array
    lin: Linearization
    damping: jax.Array
    nu: jax.Array
    converged: jax.Array


class LMInfo(NamedTuple):
    """Of one step: `accepted` () bool, `step_norm` () |theta_new - theta| [physical],
    `gain_ratio` () rho."""

    accepted: jax.Array
    step_norm: jax.Array
    gain_ratio: jax.Array


def _prior_terms(prior, theta):
    """(cost, gradient, hessian) of the prior (mean, precision) or zeros for None."""
    m = theta.shape[0]
    if prior is None:
        return jnp.zeros(()), jnp.zeros(m), jnp.zeros((m, m))
    mean, precision = prior
    d = theta - mean
    return 0.5 * d @ precision @ d, precision @ d, precision


def linearize(block_residual_fn: Callable, theta, starts, data, prior=None) -> Linearization:
    """`Linearization` of `block_residual_fn(theta (M,), starts (K, S), data) -> (K, n)`,
    whose block k depends on `starts[k]` alone; `prior`: None or (mean, precision)."""
    def twice(t, shift):
        r = block_residual_fn(t, starts + shift, data)
        return r, r
    (a, b), r = jax.jacfwd(twice, argnums=(0, 1), has_aux=True)(
        theta, jnp.zeros(starts.shape[-1], starts.dtype))            # (K,n,M), (K,n,S)
    prior_cost, prior_grad, prior_hess = _prior_terms(prior, theta)
    sum_squares = jnp.sum(jnp.square(r))
    cost = 0.5 * sum_squares + prior_cost
    scores = jnp.einsum('knm,kn->km', a, r)
    block_h_tt = jnp.einsum('knm,knl->kml', a, a)
    lin = Linearization(cost=cost, sum_squares=sum_squares,
                        g_theta=jnp.sum(scores, axis=0) + prior_grad,
                        g_starts=jnp.einsum('kns,kn->ks', b, r),
                        h_tt=jnp.sum(block_h_tt, axis=0) + prior_hess,
                        h_ts=jnp.einsum('knm,kns->kms', a, b),
                        h_ss=jnp.einsum('kns,knu->ksu', b, b), block_h_tt=block_h_tt,
                        scores=scores, num_residuals=jnp.asarray(float(r.size)))
    finite = jnp.isfinite(cost) & jnp.all(jnp.isfinite(a)) & jnp.all(jnp.isfinite(b))
    return jax.tree_util.tree_map(lambda x: jnp.where(finite, x, 0.0), lin)._replace(
        cost=jnp.where(finite, cost, jnp.inf), sum_squares=jnp.where(finite, sum_squares,
                                                                     jnp.inf))


def _floored(diag):
    """Marquardt's scaling diag(H), floored at DIAG_FLOOR of its largest entry (last axis)."""
    top = jnp.max(diag, axis=-1, keepdims=True, initial=1.0)       # 1 for no entries
    return jnp.maximum(diag, DIAG_FLOOR * top)


def _eliminate(lin: Linearization, damping):
    """Schur complement of the damped start blocks: (C (M, M), reduced gradient (M,),
    H_ss^-1 H_st (K, S, M), H_ss^-1 g_s (K, S))."""
    h_ss = lin.h_ss + damping * jax.vmap(jnp.diag)(_floored(jnp.diagonal(lin.h_ss, 0, 1, 2)))
    inv_st = jnp.linalg.solve(h_ss, jnp.swapaxes(lin.h_ts, 1, 2))      # (K, S, M)
    inv_g = jnp.linalg.solve(h_ss, lin.g_starts[..., None])[..., 0]    # (K, S)
    reduced = lin.h_tt - jnp.einsum('kms,ksl->ml', lin.h_ts, inv_st)
    gradient = lin.g_theta - jnp.einsum('kms,ks->m', lin.h_ts, inv_g)
    return reduced, gradient, inv_st, inv_g


def _decrement(reduced, gradient, free) -> jax.Array:
    """() g^T C^-1 g over the free parameters (the Newton decrement of the reduced
    Hessian C, its diagonal floored as the damping is, so unseen directions count as none)."""
    system = reduced + jnp.diag(_floored(jnp.diagonal(reduced))) * DIAG_FLOOR
    system = jnp.where(free[:, None] & free[None, :], system, jnp.eye(gradient.shape[0]))
    return gradient @ jnp.linalg.solve(system, gradient)


def schur_hessian(lin: Linearization) -> jax.Array:
    """(M, M) Gauss-Newton Hessian of theta with the starts profiled out (module doc)."""
    return _eliminate(lin, 0.0)[0]


def build_kernel(block_residual_fn: Callable, lower, upper) -> Kernel:
    """The kernel of one parameter vector (vmap it over restarts).

    Args:
      block_residual_fn: `fn(theta (M,), starts (K, S), data) -> (K, n)` noise-normalised
        residuals, block k depending on `starts[k]` alone.
      lower, upper: (M,) bounds of theta [physical units] (may be infinite).

    Returns:
      Kernel with `init(key, (theta0 (M,), starts0 (K, S)), data) -> LMState` (`key`
      unused; theta0 clipped into the bounds) and `step(state, data) -> (LMState, LMInfo)`;
      `data` is a `KernelData` of the residuals' data and a prior: None or a (mean (M,),
      precision (M, M)) pair (e.g. `base.GaussianPrior`).
    """
    lower, upper = jnp.asarray(lower), jnp.asarray(upper)
    # One jitted linearisation that init and step both call: JAX traces the residuals' forward
    # Jacobian once for both (tracing it is most of a cold fit's start-up).
    linearized = jax.jit(functools.partial(linearize, block_residual_fn))

    def init(key, position, data: KernelData):
        del key
        theta0, starts0 = position
        data, prior = data
        theta = jnp.clip(jnp.asarray(theta0), lower, upper)
        return LMState(theta=theta, starts=starts0,
                       lin=linearized(theta, starts0, data, prior),
                       damping=jnp.asarray(INITIAL_DAMPING, theta.dtype),
                       nu=jnp.asarray(2.0, theta.dtype), converged=jnp.zeros((), bool))

    def step(state, data: KernelData):
        data, prior = data
        lin, theta = state.lin, state.theta
        reduced, gradient, inv_st, inv_g = _eliminate(lin, state.damping)
        held = ((theta <= lower) & (gradient > 0)) | ((theta >= upper) & (gradient < 0))
        free = ~held
        settled = _decrement(reduced, jnp.where(free, gradient, 0.0), free) <= (
            STEP_TOL ** 2 * lin.sum_squares
            / jnp.maximum(lin.num_residuals - theta.shape[0], 1.0))
        system = reduced + state.damping * jnp.diag(_floored(jnp.diagonal(lin.h_tt)))
        system = jnp.where(free[:, None] & free[None, :], system, jnp.eye(theta.shape[0]))
        delta = jnp.linalg.solve(system, jnp.where(free, -gradient, 0.0))
        trial = jnp.clip(theta + jnp.where(free, delta, 0.0), lower, upper)
        d = trial - theta
        d_starts = -(inv_g + jnp.einsum('ksm,m->ks', inv_st, d))
        quadratic = (d @ lin.h_tt @ d + 2.0 * jnp.einsum('m,kms,ks->', d, lin.h_ts, d_starts)
                     + jnp.einsum('ks,ksu,ku->', d_starts, lin.h_ss, d_starts))
        predicted = -(lin.g_theta @ d + jnp.sum(lin.g_starts * d_starts) + 0.5 * quadratic)
        trial_starts = state.starts + d_starts
        new_lin = linearized(trial, trial_starts, data, prior)
        reduction = lin.cost - new_lin.cost
        accepted = jnp.isfinite(new_lin.cost) & (reduction > 0.0)
        rho = reduction / jnp.where(predicted > 0.0, predicted, jnp.inf)
        shrink = jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
        damping = jnp.where(accepted, state.damping * shrink, state.damping * state.nu)
        converged = (settled | (accepted & (reduction <= FTOL * lin.cost))
                     | (damping > MAX_DAMPING) | state.converged)

        def pick(new, old):
            return jax.tree_util.tree_map(lambda n, o: jnp.where(accepted, n, o), new, old)

        new_state = LMState(theta=pick(trial, theta), starts=pick(trial_starts, state.starts),
                            lin=pick(new_lin, lin),
                            damping=jnp.minimum(damping, 2.0 * MAX_DAMPING),
                            nu=jnp.where(accepted, 2.0, 2.0 * state.nu), converged=converged)
        info = LMInfo(accepted=accepted, step_norm=jnp.where(accepted, jnp.linalg.norm(d), 0.0),
                      gain_ratio=rho)
        return new_state, info

    return Kernel(init=init, step=step)


def run(kernel: Kernel, position, data: KernelData, max_steps: int) -> LMState:
    """The state after `kernel`'s steps from `position` = (theta0 (M,), starts0 (K, S))
    until it has converged or taken `max_steps` (jit-able: a `lax.while_loop`)."""
    def unconverged(carry):
        count, state = carry
        return (count < max_steps) & ~state.converged

    def advance(carry):
        count, state = carry
        return count + 1, kernel.step(state, data)[0]

    start = kernel.init(None, position, data)
    return jax.lax.while_loop(unconverged, advance, (0, start))[1]


def posterior_covariance(lin: Linearization) -> jax.Array:
    """(M, M) C^+ [physical units^2]: the Laplace approximation of theta's posterior when the
    residuals are normalised by the noise a Bayesian likelihood assumes (no rescaling by the
    residuals, no clustering: that likelihood's own posterior, right or wrong)."""
    return _scaled_pinv(schur_hessian(lin))


def laplace_covariance(lin: Linearization) -> jax.Array:
    """(M, M) cluster-robust (CR2) Laplace covariance of theta (module doc) [physical units^2]
    from the `Linearization` at the estimate. Directions the data do not determine (zero
    eigenvalues of the Schur complement) get zero variance; `identifiability` names them."""
    reduced, _, inv_st, inv_g = _eliminate(lin, 0.0)
    if lin.h_ts.shape[0] == 1:
        return _scaled_pinv(reduced) * lin.sum_squares / covariance_dof(lin)
    prior = lin.h_tt - jnp.sum(lin.block_h_tt, axis=0)                         # Lambda
    scores = lin.scores - jnp.einsum('kms,ks->km', lin.h_ts, inv_g)
    shares = lin.block_h_tt - jnp.einsum('kms,ksl->kml', lin.h_ts, inv_st)     # C_k
    # In Jacobi-scaled units (so that units do not decide what is singular):
    # d_k = C^-1/2 (I - C^-1/2 C_k C^-1/2)^-1/2 C^-1/2 u_k.
    scale = 1.0 / jnp.sqrt(_floored(jnp.diagonal(reduced)))
    root_inv = _psd_power(reduced * scale[:, None] * scale[None, :], -0.5)

    def adjusted(share, score):
        kept = root_inv @ (share * scale[:, None] * scale[None, :]) @ root_inv
        eye = jnp.eye(kept.shape[0])
        return root_inv @ _psd_power(eye - kept, -0.5, floor=LEVERAGE_FLOOR) @ (
            root_inv @ (score * scale))

    steps = jax.vmap(adjusted)(shares, scores) * scale                          # (K, M)
    inverse = (root_inv @ root_inv) * scale[:, None] * scale[None, :]             # C^-1
    return steps.T @ steps + inverse @ prior @ inverse


def undetermined_covariance(hessian, variance, scale=None) -> jax.Array:
    """(M, M) covariance of theta along the directions the Gauss-Newton `hessian` (M, M)
    does not determine (eigenvalues of S A S below PINV_RTOL of the largest, S = diag(scale),
    default Jacobi as in `_scaled_pinv`: the directions `laplace_covariance` and
    `posterior_covariance` give no variance): a prior N(., diag(variance)) (M,) [physical
    units^2] conditioned on the combinations the data determine, D - D L^T (L D L^T)^+ L D
    with L those combinations. Zero where every direction is determined."""
    if scale is None:
        scale = 1.0 / jnp.sqrt(_floored(jnp.diagonal(hessian)))
    w, v = jnp.linalg.eigh(hessian * scale[:, None] * scale[None, :])
    kept = w > PINV_RTOL * jnp.max(w)
    determined = (v * kept).T / scale[None, :]                # rows u_i^T S^-1, 0 where not
    variance = jnp.asarray(variance, hessian.dtype)
    spread = determined * variance[None, :]                   # L D
    gram = spread @ determined.T                              # L D L^T
    conditioned = jnp.diag(variance) - spread.T @ jnp.linalg.pinv(gram, hermitian=True) @ spread
    return jnp.where(jnp.all(kept), 0.0, 0.5 * (conditioned + conditioned.T))


def _psd_power(matrix, power, floor=None):
    """A^power of a symmetric positive semi-definite matrix: eigenvalues below PINV_RTOL of
    the largest count as zero (and stay zero), or with `floor` are raised to it."""
    w, v = jnp.linalg.eigh(matrix)
    if floor is None:
        kept = w > PINV_RTOL * jnp.max(w)
        w = jnp.where(kept, jnp.where(kept, w, 1.0) ** power, 0.0)
    else:
        w = jnp.maximum(w, floor) ** power
    return (v * w) @ v.T


def covariance_dof(lin: Linearization) -> jax.Array:
    """() degrees of freedom of `laplace_covariance`: K - 1 for K blocks
    (a variance estimated from K cluster scores; cluster-robust intervals take Student-t
    quantiles with K - 1 dof, Bell & McCaffrey 2002), the residual dof for one block."""
    num_blocks, m, s = lin.h_ts.shape
    if num_blocks == 1:
        return jnp.maximum(lin.num_residuals - m - s, 1.0)
    return jnp.asarray(num_blocks - 1.0)


def _scaled_pinv(hessian, scale=None):
    """A^+ computed as S (S A S)^+ S (S: `scale`, default Jacobi 1/sqrt(diag A)), so that
    parameters of different units do not decide which directions count as singular."""
    if scale is None:
        scale = 1.0 / jnp.sqrt(_floored(jnp.diagonal(hessian)))
    inverse = jnp.linalg.pinv(hessian * scale[:, None] * scale[None, :], hermitian=True)
    return inverse * scale[:, None] * scale[None, :]


class Identifiability(NamedTuple):
    """What a recording determines, from the Gauss-Newton Hessian A at a parameter vector.

    Attributes:
      singular_values: (M,) of the Jacobian with each column scaled by its parameter's
        range, descending [-].
      condition_number: () largest over smallest singular value (inf if one is zero).
      predicted_std: (M,) sqrt(diag(A^+ + U)) [physical units]: the std a fit would have with
        unit-variance independent residuals, U the variance the directions A does not
        determine keep of a uniform prior over each parameter's range
        (`undetermined_covariance`).
      directions: (M, M) right singular vectors (rows, descending): the parameter
        combinations (in range-scaled units) each singular value belongs to.
    """

    singular_values: jax.Array
    condition_number: jax.Array
    predicted_std: jax.Array
    directions: jax.Array


def identifiability(hessian, scale) -> Identifiability:
    """`Identifiability` of a Gauss-Newton Hessian (M, M), each parameter's column scaled by
    its range `scale` (M,) [physical units] (e.g. `ParameterSpec.range_width`)."""
    scale = jnp.asarray(scale)
    scaled = hessian * scale[:, None] * scale[None, :]
    eigenvalues, vectors = jnp.linalg.eigh(scaled)
    order = jnp.argsort(-eigenvalues)
    singular = jnp.sqrt(jnp.maximum(eigenvalues[order], 0.0))
    condition = jnp.where(singular[-1] > 0.0, singular[0] / singular[-1], jnp.inf)
    covariance = (_scaled_pinv(hessian, scale)
                  + undetermined_covariance(hessian, jnp.square(scale) / 12.0, scale))
    std = jnp.sqrt(jnp.maximum(jnp.diagonal(covariance), 0.0))
    return Identifiability(singular_values=singular, condition_number=condition,
                           predicted_std=std, directions=vectors[:, order].T)
