"""How the live session's sequential prior follows the data: the prior-data conflict test
(`conflict_inflation`, a payload picked up) and the noise scale (`noise_scale`, model error
that makes the windows' fits scatter more than their covariances say).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import scipy.stats

from sysid_ros.core.inference.base import GaussianPrior

__all__ = [
    'CONFLICT_LEVEL',
    'MAX_INFLATION',
    'Innovation',
    'positive_definite',
    'is_proper',
    'conflict_inflation',
    'noise_scale',
]

# Prior-data conflict (`conflict_inflation`): the tail probability of the test, and the
# largest inflation (beyond it the prior is as good as flat).
CONFLICT_LEVEL = 1e-3
MAX_INFLATION = 1e12


class Innovation(NamedTuple):
    """How one Laplace window's own fit lay against its prior (`noise_scale`).

    Attributes:
      offset: (M,) the window-alone fit minus the prior's mean [physical].
      prior_covariance: (M, M) the prior's covariance C.
      window_covariance: (M, M) the window-alone fit's Laplace covariance C_w at the
        configured (or estimated) noise, before any noise scale.
    """

    offset: np.ndarray
    prior_covariance: np.ndarray
    window_covariance: np.ndarray


def positive_definite(matrix) -> bool:
    """Whether a symmetric matrix (M, M) is finite and positive definite."""
    matrix = np.asarray(matrix, dtype=float)
    return bool(np.all(np.isfinite(matrix)) and np.linalg.eigvalsh(matrix).min() > 0.0)


def is_proper(prior: GaussianPrior) -> bool:
    """Whether the prior's precision is positive definite (no flat direction)."""
    return positive_definite(prior.precision)


def _solve_decreasing(statistic, target: float) -> float:
    """k in [1, MAX_INFLATION] with statistic(log k) = target, for a statistic that falls with
    k (bisection on log k): 1 where it is at most the target at k = 1, MAX_INFLATION where it
    is still above it there."""
    lo, hi = 0.0, float(np.log(MAX_INFLATION))
    if not statistic(lo) > target:
        return 1.0
    if statistic(hi) > target:
        return MAX_INFLATION
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if statistic(mid) > target else (lo, mid)
    return float(np.exp(hi))


def conflict_inflation(prior: GaussianPrior, theta_window, covariance_window) -> float:
    """The factor k >= 1 by which the prior's covariance is widened for a window whose own
    fit disagrees with it (a payload picked up).

    With d = theta_window - prior mean, C the prior's covariance and C_w the window-alone
    fit's covariance (times the session's noise scale), D(k) = d^T (k C + C_w)^-1 d is
    chi-square with M degrees of freedom when the parameters did not change. Above its
    1 - CONFLICT_LEVEL quantile, k is the value that brings D(k) down to M, its expectation
    (MAX_INFLATION if even that is not enough); else 1.

    Args:
      prior: the sequential prior (mean (M,), precision (M, M)).
      theta_window: (M,) the window's fit without the prior.
      covariance_window: (M, M) its covariance.
    """
    if not is_proper(prior):
        return 1.0                            # a flat direction holds any data
    cov = np.linalg.inv(np.asarray(prior.precision, dtype=float))
    cov_w = np.asarray(covariance_window, dtype=float)
    d = np.asarray(theta_window, dtype=float) - np.asarray(prior.mean, dtype=float)
    m = len(d)

    def statistic(log_k):
        return float(d @ np.linalg.solve(np.exp(log_k) * cov + cov_w, d))

    if not statistic(0.0) > scipy.stats.chi2.ppf(1.0 - CONFLICT_LEVEL, m):
        return 1.0
    return _solve_decreasing(statistic, m)


def noise_scale(innovations: Sequence[Innovation]) -> float:
    """The factor s >= 1 by which the windows' noise variance is multiplied so that their own
    fits scatter about their priors as much as their covariances say (model error).

    For window j with offset d_j, prior covariance C_j and window covariance C_w,j
    (`Innovation`), D_j(s) = d_j^T (C_j + s C_w,j)^-1 d_j is chi-square with M degrees of
    freedom when the model is right and s = 1. Residuals that the model leaves correlated
    in time (an integrator, a friction or a compliance the model lacks) hold less
    information than white noise of their size: each window's fit then scatters more than
    its covariance says, and a posterior of many windows holds the truth less often than it
    claims. s is the value at which the mean of min(D_j(s), q) over the windows is that of
    min(chi-square_M, q), q the conflict test's quantile (innovation-based adaptive
    estimation; the mean, because a posterior of many windows errs by their mean error;
    clipped at q, so that no single window, however far off, outweighs the others; windows
    that fail the conflict test, a payload picked up, are left out by `OnlineSession`); at
    least 1 (the noise std is configured or estimated: s models what the windows' errors
    add), at most MAX_INFLATION.
    """
    if not innovations:
        return 1.0
    d = np.stack([i.offset for i in innovations])[..., None]            # (N, M, 1)
    cov = np.stack([i.prior_covariance for i in innovations])           # (N, M, M)
    cov_w = np.stack([i.window_covariance for i in innovations])        # (N, M, M)
    m = d.shape[1]
    clip = scipy.stats.chi2.ppf(1.0 - CONFLICT_LEVEL, m)
    # E min(X, q) for X ~ chi-square_M: M P(chi-square_{M+2} <= q) + q P(X > q).
    target = m * scipy.stats.chi2.cdf(clip, m + 2) + clip * scipy.stats.chi2.sf(clip, m)

    def statistic(log_s):
        spread = cov + np.exp(log_s) * cov_w
        values = np.sum(d * np.linalg.solve(spread, d), axis=(1, 2))
        return float(np.mean(np.minimum(values, clip)))

    return _solve_decreasing(statistic, target)
