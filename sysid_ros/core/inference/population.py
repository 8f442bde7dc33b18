"""A fleet posterior: robots of one model share a population distribution of each parameter.

Each robot i has its own fit of a parameter, a Gaussian (mean y_i, std s_i) in physical units
(a Laplace posterior, or the moments of particles). The hierarchical model is

    theta_i ~ N(mu, tau^2)          (the fleet: mean mu, spread tau, estimated)
    y_i | theta_i ~ N(theta_i, c s_i^2)

parameter by parameter, where c >= 1 (`std_scale` = sqrt(c)) widens every robot's own std by
what the fleet shows them to be too narrow by: robots whose fits are wide (short recordings)
scattering about the fleet mean further than their stds and the spread allow (a fit's own
interval misses model error). With every s_i alike, c and tau^2 cannot be told apart and
c stays 1. `fleet_distribution` estimates mu, tau^2 and c by restricted maximum likelihood
(REML: tau^2 is not biased low by estimating mu, as plain maximum likelihood is with few
robots), `shrunk` gives each robot's posterior under the fleet prior (a robot whose own
fit is wide borrows strength from its siblings; a narrow one keeps its own), and `outliers`
tests each robot against the fleet of its siblings (leave one out), so that a robot far from
them is flagged without its own value widening the spread it is judged by. Only the robots'
summaries are used: nothing is refitted.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import optimize, stats

__all__ = ['FleetDistribution', 'fleet_distribution', 'shrunk', 'outliers',
           'OUTLIER_LEVEL', 'MAX_VARIANCE_SCALE']

# Family-wise false-flag rate of `outliers` over every robot and parameter of one fleet.
OUTLIER_LEVEL = 0.01
# Largest factor c on the robots' own variances (a std 10x too narrow).
MAX_VARIANCE_SCALE = 100.0


class FleetDistribution(NamedTuple):
    """The population distribution of each parameter across a fleet.

    Attributes:
      mean: (M,) fleet mean mu [physical].
      spread: (M,) fleet standard deviation tau [physical] (0: the robots agree within their
        own stds).
      mean_std: (M,) standard deviation of the estimate of mu [physical].
      robots: how many robots it was estimated from.
      std_scale: (M,) factor >= 1 on every robot's own std [-] (module doc).
    """

    mean: np.ndarray
    spread: np.ndarray
    mean_std: np.ndarray
    robots: int
    std_scale: np.ndarray


def _weighted_mean(y: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    """(mean, its variance) of y weighted by 1 / var."""
    w = 1.0 / var
    return float(np.sum(w * y) / np.sum(w)), float(1.0 / np.sum(w))


def _reml(y: np.ndarray, s2: np.ndarray) -> tuple[float, float]:
    """(tau^2, c) maximising the restricted likelihood of y_i ~ N(mu, c s2_i + tau^2), c in
    [1, MAX_VARIANCE_SCALE]."""

    def negative(x):
        var = np.exp(x[1]) * s2 + np.exp(x[0])
        mu, mu_var = _weighted_mean(y, var)
        return 0.5 * (np.sum(np.log(var)) + np.log(1.0 / mu_var)
                      + np.sum((y - mu) ** 2 / var))

    scale = max(float(np.var(y)), float(np.median(s2)), 1e-300)
    # tau^2 from 1e-8 to 1e4 times the data's scale, searched in its logarithm; first with
    # c = 1, then both from there (a flat direction of c, all s_i alike, leaves c at 1).
    low, high = np.log(scale) - 18.0, np.log(scale) + 9.0
    alone = optimize.minimize_scalar(lambda v: negative((v, 0.0)), bounds=(low, high),
                                     method='bounded', options={'xatol': 1e-6})
    both = optimize.minimize(negative, np.array([alone.x, 0.0]), method='L-BFGS-B',
                             bounds=[(low, high), (0.0, np.log(MAX_VARIANCE_SCALE))])
    log_tau2, log_c = both.x if both.fun < alone.fun else (alone.x, 0.0)
    # At the lower end the likelihood is flat: the robots agree within their own stds.
    flat = log_tau2 < low + 1e-3 or negative((low, log_c)) <= negative((log_tau2, log_c))
    return (0.0 if flat else float(np.exp(log_tau2))), float(np.exp(log_c))


def fleet_distribution(means, stds) -> FleetDistribution:
    """The fleet's mean and spread of each parameter from the robots' own fits.

    Args:
      means: (N, M) each robot's posterior mean [physical].
      stds: (N, M) each robot's posterior std [physical], > 0.

    Raises:
      ValueError: fewer than 2 robots, shapes that differ, or stds that are not positive.
    """
    y, s = np.asarray(means, dtype=float), np.asarray(stds, dtype=float)
    if y.ndim != 2 or y.shape != s.shape or len(y) < 2:
        raise ValueError(f'means and stds: expected (N, M) with N >= 2 robots, got '
                         f'{y.shape} and {s.shape}')
    if not np.all(s > 0.0) or not np.all(np.isfinite(y)):
        raise ValueError('stds: expected positive numbers and finite means')
    mean, spread, mean_std, std_scale = (np.empty(y.shape[1]) for _ in range(4))
    for j in range(y.shape[1]):
        tau2, c = _reml(y[:, j], s[:, j] ** 2)
        mu, mu_var = _weighted_mean(y[:, j], c * s[:, j] ** 2 + tau2)
        mean[j], mean_std[j] = mu, np.sqrt(mu_var)
        spread[j], std_scale[j] = np.sqrt(tau2), np.sqrt(c)
    return FleetDistribution(mean, spread, mean_std, len(y), std_scale)


def shrunk(means, stds, fleet: FleetDistribution) -> tuple[np.ndarray, np.ndarray]:
    """Each robot's posterior (mean, std) (N, M) under the fleet prior N(mu, tau^2 +
    var(mu)): the precision-weighted combination of its own fit (its std widened by
    `fleet.std_scale`) and the fleet's."""
    y = np.asarray(means, dtype=float)
    s = np.asarray(stds, dtype=float) * fleet.std_scale
    prior_var = fleet.spread ** 2 + fleet.mean_std ** 2
    precision = 1.0 / s ** 2 + 1.0 / prior_var
    mean = (y / s ** 2 + fleet.mean / prior_var) / precision
    return mean, np.sqrt(1.0 / precision)


def outliers(means, stds, level: float = OUTLIER_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(z (N, M), flagged (N, M)): each robot's distance from the fleet of its siblings in
    stds of the predictive N(mu_-i, c_-i s_i^2 + tau_-i^2 + var(mu_-i)), and whether it exceeds
    the two-sided threshold that keeps the chance of any false flag among all N x M tests at
    `level` (Bonferroni). Needs at least 3 robots."""
    y, s = np.asarray(means, dtype=float), np.asarray(stds, dtype=float)
    n = len(y)
    if n < 3:
        raise ValueError(f'outliers: expected at least 3 robots, got {n}')
    z = np.empty_like(y)
    for i in range(n):
        rest = np.arange(n) != i
        fleet = fleet_distribution(y[rest], s[rest])
        scale = np.sqrt((fleet.std_scale * s[i]) ** 2 + fleet.spread ** 2
                        + fleet.mean_std ** 2)
        z[i] = (y[i] - fleet.mean) / scale
    threshold = stats.norm.isf(0.5 * level / y.size)
    return z, np.abs(z) > threshold
