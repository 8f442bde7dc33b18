"""A fleet posterior: robots of one model share a population distribution of each parameter.

Each robot i has its own fit of a parameter, a Gaussian (mean y_i, std s_i) in physical units
(a Laplace posterior, or the moments of particles). The hierarchical model is

    theta_i ~ N(mu, tau^2)          (the fleet: mean mu, spread tau, estimated)
    y_i | theta_i ~ N(theta_i, s_i^2)

parameter by parameter. `fleet_distribution` estimates mu and tau^2 by restricted maximum
likelihood (REML: tau^2 is not biased low by estimating mu, as plain maximum likelihood is with
few robots), `shrunk` gives each robot's posterior under the fleet prior (a robot whose own
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
           'OUTLIER_LEVEL']

# Family-wise false-flag rate of `outliers` over every robot and parameter of one fleet.
OUTLIER_LEVEL = 0.01


class FleetDistribution(NamedTuple):
    """The population distribution of each parameter across a fleet.

    Attributes:
      mean: (M,) fleet mean mu [physical].
      spread: (M,) fleet standard deviation tau [physical] (0: the robots agree within their
        own stds).
      mean_std: (M,) standard deviation of the estimate of mu [physical].
      robots: how many robots' fits it was estimated from (with `members`, some of them).
    """

    mean: np.ndarray
    spread: np.ndarray
    mean_std: np.ndarray
    robots: int


def _weighted_mean(y: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    """(mean, its variance) of y weighted by 1 / var."""
    w = 1.0 / var
    return float(np.sum(w * y) / np.sum(w)), float(1.0 / np.sum(w))


def _reml_spread(y: np.ndarray, s2: np.ndarray) -> float:
    """tau^2 maximising the restricted likelihood of y_i ~ N(mu, s2_i + tau^2)."""

    def negative(log_tau2):
        var = s2 + np.exp(log_tau2)
        mu, mu_var = _weighted_mean(y, var)
        return 0.5 * (np.sum(np.log(var)) + np.log(1.0 / mu_var)
                      + np.sum((y - mu) ** 2 / var))

    scale = max(float(np.var(y)), float(np.median(s2)), 1e-300)
    # tau^2 from 1e-8 to 1e4 times the data's scale, searched in its logarithm.
    low, high = np.log(scale) - 18.0, np.log(scale) + 9.0
    found = optimize.minimize_scalar(negative, bounds=(low, high), method='bounded',
                                     options={'xatol': 1e-6})
    tau2 = float(np.exp(found.x))
    # At the lower end the likelihood is flat: the robots agree within their own stds.
    return 0.0 if found.x < low + 1e-3 or negative(low) <= found.fun else tau2


def fleet_distribution(means, stds, members=None) -> FleetDistribution:
    """The fleet's mean and spread of each parameter from the robots' own fits.

    Args:
      means: (N, M) each robot's posterior mean [physical].
      stds: (N, M) each robot's posterior std [physical], > 0.
      members: (N, M) bool, the robots each parameter's distribution is estimated from
        (default all; e.g. all but the `outliers`).

    Raises:
      ValueError: fewer than 2 robots (members) of a parameter, shapes that differ, or stds
        that are not positive.
    """
    y, s = np.asarray(means, dtype=float), np.asarray(stds, dtype=float)
    members = np.ones(y.shape, bool) if members is None else np.asarray(members, bool)
    if y.ndim != 2 or y.shape != s.shape or members.shape != y.shape:
        raise ValueError(f'means, stds and members: expected (N, M) each, got {y.shape}, '
                         f'{s.shape} and {members.shape}')
    if np.min(members.sum(axis=0), initial=len(y)) < 2:
        raise ValueError(f'means: expected N >= 2 robots of each parameter, got '
                         f'{members.sum(axis=0).tolist()}')
    if not np.all(s > 0.0) or not np.all(np.isfinite(y)):
        raise ValueError('stds: expected positive numbers and finite means')
    mean, spread, mean_std = (np.empty(y.shape[1]) for _ in range(3))
    for j in range(y.shape[1]):
        yj, s2j = y[members[:, j], j], s[members[:, j], j] ** 2
        tau2 = _reml_spread(yj, s2j)
        mu, mu_var = _weighted_mean(yj, s2j + tau2)
        mean[j], spread[j], mean_std[j] = mu, np.sqrt(tau2), np.sqrt(mu_var)
    return FleetDistribution(mean, spread, mean_std, len(y))


def shrunk(means, stds, fleet: FleetDistribution) -> tuple[np.ndarray, np.ndarray]:
    """Each robot's posterior (mean, std) (N, M) under the fleet prior N(mu, tau^2 +
    var(mu)): the precision-weighted combination of its own fit and the fleet's."""
    y, s = np.asarray(means, dtype=float), np.asarray(stds, dtype=float)
    prior_var = fleet.spread ** 2 + fleet.mean_std ** 2
    precision = 1.0 / s ** 2 + 1.0 / prior_var
    mean = (y / s ** 2 + fleet.mean / prior_var) / precision
    return mean, np.sqrt(1.0 / precision)


def outliers(means, stds, level: float = OUTLIER_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(z (N, M), flagged (N, M)): each robot's distance from the fleet of its siblings in
    stds of the predictive N(mu_-i, s_i^2 + tau_-i^2 + var(mu_-i)), and whether it exceeds
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
        scale = np.sqrt(s[i] ** 2 + fleet.spread ** 2 + fleet.mean_std ** 2)
        z[i] = (y[i] - fleet.mean) / scale
    threshold = stats.norm.isf(0.5 * level / y.size)
    return z, np.abs(z) > threshold
