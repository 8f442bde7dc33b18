"""Consistency metrics between sets of trajectories or parameter particles.

The CSVGD paper (Heiden et al. 2022, supplement §1.4 and Table 2) scores a posterior
by simulating one trajectory per particle and comparing the set of simulated trajectories
D_sim (M, T, D) with a set of held-out real trajectories D_real (N, T, D):

  * `trajectory_kl`: the k-nearest-neighbour estimate of KL divergence (their eq. (3), from
    Wang, Kulkarni & Verdú 2009), in both directions d_KL(D_real || D_sim) and
    d_KL(D_sim || D_real), with k = l = 3. Each trajectory is one sample, a point in R^(T D);
    `knn_kl_divergence` is the same estimator on plain sample sets, e.g. parameter particles
    (N, M) against ground-truth parameters, as in the paper's synthetic experiment;
  * `mmd`: maximum mean discrepancy with an RBF kernel (median-heuristic bandwidth);
  * `gaussian_log_likelihood` and `predictive_log_likelihood`: the log-likelihood of held-out
    trajectories under Gaussian observation noise, for one prediction or for the posterior
    predictive mixture over simulated trajectories (`segment_predictive_log_likelihood`: per
    segment, against that segment's rollouts);
  * `nmse`: mean squared error of a prediction normalised by the variance of the observations.

The nearest-neighbour estimators run on the host with `scipy.spatial.cKDTree` (NumPy in,
Python float out): they are evaluation metrics, called once per table row, never inside a
traced estimator step, and they validate their input eagerly. Everything else is pure JAX
and jit/vmap-able.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import spatial, special

__all__ = [
    'knn_kl_divergence',
    'trajectory_kl',
    'mmd',
    'gaussian_log_likelihood',
    'predictive_log_likelihood',
    'segment_predictive_log_likelihood',
    'nmse',
]

# Floor of the nearest-neighbour distances in `knn_kl_divergence`. A duplicated sample (a
# posterior collapsed onto one particle, or the same trajectory twice) has distance exactly 0 to
# its neighbour and log(0) = -inf; the floor keeps the estimate finite, and very large
# (d log(typical distance / floor)), which is the right verdict on a degenerate sample set.
_MIN_DIST = 1e-12


def _as_sample_matrix(samples, name: str) -> np.ndarray:
    """Host float64 (n, d) copy of `samples`, rejecting bad shapes and non-finite values."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f'{name}: expected samples of shape (n, d), got shape {arr.shape}')
    bad = ~np.all(np.isfinite(arr), axis=1)
    if np.any(bad):
        raise ValueError(
            f'{name}: {int(bad.sum())} of {arr.shape[0]} samples hold NaN or inf values '
            '(diverged simulations?); drop them before computing the metric')
    return arr


def knn_kl_divergence(p_samples, q_samples, k: int = 3, l: int = 3, *,  # noqa: E741
                      min_dist: float = _MIN_DIST) -> float:
    """k-nearest-neighbour estimate of KL(p || q) from samples of p and q.

    The estimator of Wang, Kulkarni & Verdú, "Divergence estimation for multidimensional
    densities via k-nearest-neighbor distances", IEEE Trans. Inf. Theory 55(5), 2009 (their
    eq. (17) with fixed k and l), which is eq. (3) of the CSVGD supplement (§1.4):

        KL(p || q) ~ d/n sum_i log(nu_k(i) / rho_l(i)) + psi(l) - psi(k) + log(m / (n - 1)),

    where, for each sample x_i of p,
      nu_k(i)  is the distance from x_i to its k-th nearest neighbour among the m samples of q,
      rho_l(i) is the distance from x_i to its l-th nearest neighbour among the other n - 1
               samples of p,
    d is the dimension of the samples and psi the digamma function. (The paper writes these two
    distances as KNN^p_k(i) and KNN^q_l(i); its definitions in words are the ones above.) The
    digamma term removes the estimator's asymptotic bias for k != l and vanishes for the paper's
    choice k = l = 3. Distances are Euclidean, so rescale dimensions with different units first.

    The estimate is consistent but not exact: at n = m = 2000 in 1 to 3 dimensions its standard
    deviation is a few hundredths of a nat, and its bias grows when q is much narrower than p
    (p's samples then sit in q's sparse tails). It can be slightly negative when p = q.

    Runs on the host (`scipy.spatial.cKDTree`), not under `jax.jit`: this is an evaluation
    metric, called once per comparison.

    Args:
      p_samples: (n, d) samples of p (a 1-D array is read as (n, 1)); n >= l + 1.
      q_samples: (m, d) samples of q; m >= k.
      k: neighbour order among the samples of q.
      l: neighbour order among the other samples of p.
      min_dist: floor of both distances, so that duplicated samples (distance 0) give a large
        finite estimate instead of +-inf.

    Returns:
      The estimate of KL(p || q) [nats], a Python float.

    Raises:
      ValueError: shapes that disagree, too few samples for k or l, or NaN/inf samples.
    """
    p = _as_sample_matrix(p_samples, 'p_samples')
    q = _as_sample_matrix(q_samples, 'q_samples')
    n, d = p.shape
    m = q.shape[0]
    if q.shape[1] != d:
        raise ValueError(f'p_samples and q_samples differ in dimension: {d} vs {q.shape[1]}')
    if int(k) != k or k < 1 or int(l) != l or l < 1:
        raise ValueError(f'k and l must be integers >= 1, got k={k}, l={l}')
    k_q, l_p = int(k), int(l)
    if n < l_p + 1:
        raise ValueError(f'p_samples: need at least l + 1 = {l_p + 1} samples, got {n}')
    if m < k_q:
        raise ValueError(f'q_samples: need at least k = {k_q} samples, got {m}')

    # rho_l(i): the query point itself is among p's samples at distance 0, so the (l + 1)-th
    # smallest distance to all of p is the l-th smallest to the others (duplicates included).
    rho = spatial.cKDTree(p).query(p, k=[l_p + 1])[0][:, 0]
    # nu_k(i): k-th smallest distance from x_i to the samples of q.
    nu = spatial.cKDTree(q).query(p, k=[k_q])[0][:, 0]
    rho = np.maximum(rho, min_dist)
    nu = np.maximum(nu, min_dist)

    log_ratio = np.mean(np.log(nu) - np.log(rho))
    bias_term = special.digamma(l_p) - special.digamma(k_q)
    return float(d * log_ratio + bias_term + np.log(m / (n - 1)))


def trajectory_kl(real, sim, k: int = 3, l: int = 3, *, reverse: bool = False,  # noqa: E741
                  scale=None, min_dist: float = _MIN_DIST) -> float:
    """KNN estimate of the KL divergence between a real and a simulated set of trajectories.

    As in the CSVGD supplement (§1.4 eq. (3) and Table 2), each trajectory is one
    sample: it is flattened to a vector of length T D, distances between trajectories are
    Euclidean over all time steps and dimensions, and d in eq. (3) is the dimension of these
    vectors, T D (which is why the paper's values are in the thousands). The estimator is
    `knn_kl_divergence` with k = l = 3 by default.

    The paper reports both directions: `trajectory_kl(real, sim)` is d_KL(D_real || D_sim), and
    `trajectory_kl(real, sim, reverse=True)` is d_KL(D_sim || D_real).

    Args:
      real: (N, T, D) real (held-out) trajectories.
      sim: (M, T, D) simulated trajectories, e.g. one per posterior particle.
      k: neighbour order in the second set of the divergence.
      l: neighbour order in the first set of the divergence.
      reverse: False for d_KL(real || sim), True for d_KL(sim || real).
      scale: optional (D,) or scalar divisor of each observed dimension before the distances
        are taken (e.g. per-dimension standard deviations, §1.3); None leaves data as is.
      min_dist: distance floor, see `knn_kl_divergence`.

    Returns:
      The estimated divergence [nats], a Python float.

    Raises:
      ValueError: sets that are not (·, T, D) with the same T and D, too few trajectories, or
        NaN/inf values (diverged simulations).
    """
    real = np.asarray(real, dtype=np.float64)
    sim = np.asarray(sim, dtype=np.float64)
    if real.ndim != 3 or sim.ndim != 3:
        raise ValueError(
            f'real and sim: expected trajectory sets (N, T, D), got shapes {real.shape} '
            f'and {sim.shape}')
    if real.shape[1:] != sim.shape[1:]:
        raise ValueError(
            f'real and sim: trajectories differ in (T, D): {real.shape[1:]} vs {sim.shape[1:]}')
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        if np.any(~np.isfinite(scale)) or np.any(scale <= 0):
            raise ValueError(f'scale: expected positive finite values, got {scale}')
        real, sim = real / scale, sim / scale
    p, q = (sim, real) if reverse else (real, sim)
    return knn_kl_divergence(
        p.reshape(p.shape[0], -1), q.reshape(q.shape[0], -1), k=k, l=l, min_dist=min_dist)


def _sq_dists(a: jax.Array, b: jax.Array) -> jax.Array:
    """(n, m) squared Euclidean distances between the rows of a (n, d) and b (m, d)."""
    d2 = jnp.sum(a * a, -1)[:, None] + jnp.sum(b * b, -1)[None, :] - 2.0 * a @ b.T
    return jnp.maximum(d2, 0.0)


def _off_diagonal_mean(kernel: jax.Array) -> jax.Array:
    """Mean of the off-diagonal entries of a square matrix."""
    n = kernel.shape[0]
    return (jnp.sum(kernel) - jnp.trace(kernel)) / (n * (n - 1))


def mmd(x, y, bandwidth=None, *, unbiased: bool = True) -> jax.Array:
    """Squared maximum mean discrepancy between samples x and y with an RBF kernel.

    Gretton et al., "A kernel two-sample test", JMLR 13, 2012: with the kernel
    k(a, b) = exp(-|a - b|^2 / (2 h^2)),

        unbiased (their eq. (3), U-statistic):
          MMD^2_u = mean_{i!=j} k(x_i, x_j) + mean_{i!=j} k(y_i, y_j) - 2 mean_{i,j} k(x_i, y_j),
        biased (their eq. (5), V-statistic): the same with the diagonals kept in the means.

    The CSVGD paper (Table 2) reports an "MMD" column without giving its estimator, kernel or
    bandwidth; we default to the unbiased estimate, whose expectation is exactly MMD^2 (zero for
    equal distributions; single estimates may be slightly negative). Both are at most 2 with
    this kernel, so the paper's values above 2 come from a different normalisation: compare
    rankings with it, not magnitudes.

    Samples of any trailing shape are flattened, so trajectory sets (N, T, D) compare as
    vectors of length T D, as `trajectory_kl` does. With `bandwidth=None`, h is the median
    heuristic: the median Euclidean distance between distinct samples of the pooled set x U y
    (1 if that median is 0), held constant under differentiation (`stop_gradient`).

    Jit-able with `unbiased` static, e.g. `jax.jit(mmd, static_argnames='unbiased')`.

    Args:
      x: (n, ...) samples of p; n >= 2 for the unbiased estimate.
      y: (m, ...) samples of q, same trailing shape as x; m >= 2 for the unbiased estimate.
      bandwidth: () kernel length scale h in the units of the samples, or None for the median
        heuristic.
      unbiased: True for MMD^2_u, False for the biased MMD^2_b.

    Returns:
      () the MMD^2 estimate.

    Raises:
      ValueError: trailing shapes that differ, or fewer than 2 samples for the unbiased form.
    """
    x = jnp.asarray(x)
    y = jnp.asarray(y)
    if x.shape[1:] != y.shape[1:]:
        raise ValueError(f'x and y: sample shapes differ: {x.shape[1:]} vs {y.shape[1:]}')
    n, m = x.shape[0], y.shape[0]
    if n < 1 or m < 1 or (unbiased and (n < 2 or m < 2)):
        raise ValueError(f'x and y: too few samples ({n}, {m}) for the '
                         f'{"unbiased" if unbiased else "biased"} estimate')
    # One pooled (n + m, n + m) matrix of squared distances, centred on the pooled mean first
    # so that the expanded form |a|^2 + |b|^2 - 2 a.b cancels less.
    pooled = jnp.concatenate([x.reshape(n, -1), y.reshape(m, -1)])
    pooled = pooled - jnp.mean(pooled, axis=0)
    num = n + m
    d2 = jnp.where(jnp.eye(num, dtype=bool), 0.0, _sq_dists(pooled, pooled))

    if bandwidth is None:
        # Median of the num_pairs distances between distinct samples. Sorted, the flattened
        # matrix holds the num zeros of its diagonal, then every pair twice, so the median is
        # the mean of entries num + num_pairs - 1 and num + num_pairs. Held constant under
        # differentiation: no tangents flow into the sort.
        num_pairs = num * (num - 1) // 2
        ordered = jnp.sort(jax.lax.stop_gradient(d2).ravel())
        middle = jnp.sqrt(ordered[num + num_pairs - 1:num + num_pairs + 1])
        median = 0.5 * (middle[0] + middle[1])
        bandwidth = jnp.where(median > 0, median, 1.0)
    kernel = jnp.exp(-0.5 * d2 / jnp.square(bandwidth))
    k_xx, k_yy, k_xy = kernel[:n, :n], kernel[n:, n:], kernel[:n, n:]

    if unbiased:
        return _off_diagonal_mean(k_xx) + _off_diagonal_mean(k_yy) - 2.0 * jnp.mean(k_xy)
    return jnp.mean(k_xx) + jnp.mean(k_yy) - 2.0 * jnp.mean(k_xy)


def gaussian_log_likelihood(pred, obs, noise_std) -> jax.Array:
    """Log-likelihood of observations under independent Gaussian noise around a prediction.

        log p(obs | pred) = sum over all entries of log N(obs; pred, noise_std^2),

    the single-shooting Gaussian trajectory likelihood (Heiden et al. 2022, §1.2) evaluated
    on held-out data. Sums over every entry; `jax.vmap` it for one value per trajectory.

    Args:
      pred: (..., D) predicted observations, e.g. a simulated trajectory (T, D).
      obs: (..., D) observed values, broadcastable with pred.
      noise_std: () or (D,) standard deviation of the noise per observed dimension, > 0, in the
        units of obs.

    Returns:
      () the log-likelihood [nats].
    """
    noise_std = jnp.asarray(noise_std)
    z = (jnp.asarray(obs) - jnp.asarray(pred)) / noise_std
    log_pdf = -0.5 * jnp.square(z) - jnp.log(noise_std) - 0.5 * jnp.log(2.0 * jnp.pi)
    return jnp.sum(log_pdf)


def predictive_log_likelihood(real, sim, noise_std) -> jax.Array:
    """Log-likelihood of held-out trajectories under the posterior predictive mixture.

    Each simulated trajectory (one per particle or posterior sample) is the centre of an
    equally weighted Gaussian component, the mixture of Heiden et al. 2022, eq. (1):

        sum_i log( 1/M sum_j N(real_i; sim_j, noise_std^2) ),

    computed with a log-sum-exp over components. One real trajectory at a time is compared
    with all M simulations (`lax.map`), so memory stays O(M T D). With M = 1 this is
    `gaussian_log_likelihood` summed over the real trajectories.

    Args:
      real: (N, T, D) held-out real trajectories.
      sim: (M, T, D) simulated trajectories.
      noise_std: () or (D,) observation noise standard deviation per dimension, > 0.

    Returns:
      () the log-likelihood of all N real trajectories [nats].
    """
    real = jnp.asarray(real)
    sim = jnp.asarray(sim)
    per_sim = jax.vmap(gaussian_log_likelihood, in_axes=(0, None, None))

    def one_real(traj):
        log_lik = per_sim(sim, traj, noise_std)                    # (M,)
        return jax.nn.logsumexp(log_lik) - jnp.log(sim.shape[0])

    return jnp.sum(jax.lax.map(one_real, real))


def segment_predictive_log_likelihood(real, sim, noise_std) -> jax.Array:
    """`predictive_log_likelihood` of segments, each against the rollouts of that segment only.

        sum_i log( 1/M sum_j N(real_i; sim_{j,i}, noise_std^2) ),

    for held-out segments that each start from their own measured state, so the rollouts of
    segment i are the mixture components of segment i alone. jit it once per shape.

    Args:
      real: (N, T, D) measured segments.
      sim: (M, N, T, D) rollouts, one per posterior sample and segment.
      noise_std: () or (D,) observation noise standard deviation per dimension, > 0.

    Returns:
      () the log-likelihood of all N segments [nats].
    """
    per_segment = jax.vmap(lambda r, s: predictive_log_likelihood(r[None], s, noise_std),
                           in_axes=(0, 1))
    return jnp.sum(per_segment(jnp.asarray(real), jnp.asarray(sim)))


def nmse(pred, obs, *, per_dim: bool = False) -> jax.Array:
    """Mean squared error normalised by the variance of the observations, per dimension.

        NMSE_d = mean((pred[..., d] - obs[..., d])^2) / var(obs[..., d]),

    with means and the (population, ddof = 0) variance over all leading axes, e.g. time steps,
    or trajectories and time steps. So NMSE is 0 for a perfect prediction and exactly 1 for
    predicting the mean of obs everywhere, whatever the units of each dimension. A dimension in
    which obs is constant gives 0 if predicted exactly and inf otherwise.

    Args:
      pred: (..., D) predictions, broadcastable to obs.
      obs: (..., D) observations (at least 2-D).
      per_dim: return the (D,) values instead of their mean.

    Returns:
      () mean over dimensions of NMSE_d, or (D,) NMSE_d if per_dim.
    """
    obs = jnp.asarray(obs)
    pred = jnp.broadcast_to(jnp.asarray(pred), obs.shape)
    axes = tuple(range(obs.ndim - 1))
    mse = jnp.mean(jnp.square(pred - obs), axis=axes)
    var = jnp.var(obs, axis=axes)
    constant = var == 0
    ratio = jnp.where(constant, jnp.where(mse == 0, 0.0, jnp.inf),
                      mse / jnp.where(constant, 1.0, var))
    return ratio if per_dim else jnp.mean(ratio)
