"""An earlier fit's results as the prior of the next: the robot without its load first, then
the load on that posterior (`sysid fit --prior`), or the design point of an excitation
(`sysid excite --prior`).

`path` is a results folder of `sysid fit` or the `estimate.yaml` in it. Only the parameters
both the earlier estimate and the new configuration name are taken (by name); the others
keep a flat prior (zero precision) and their configured starting values. The covariance is
`posterior.npz`'s `covariance` beside the estimate where it has one (lm's Laplace
covariance; the correlations between link parameters are strong), else the estimate's stds
(a posterior sample's marginal spread).
"""

from __future__ import annotations

import math
import os
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.io.errors import InputError, located, read_yaml

__all__ = ['EarlierEstimate', 'estimate_path', 'read_means_and_stds', 'read_prior']


class EarlierEstimate(NamedTuple):
    """`read_prior`'s result.

    Attributes:
      prior: mean (M,) and precision (M, M) [physical units^-2], zero rows and columns for
        the parameters the earlier estimate does not hold.
      theta0: (M,) where the fit starts: the earlier estimate, else the spec's start.
      names: the parameters taken from the earlier estimate.
      source: 'covariance' (posterior.npz) or 'stds' (estimate.yaml).
    """

    prior: GaussianPrior
    theta0: np.ndarray
    names: tuple[str, ...]
    source: str


def estimate_path(path: str | os.PathLike) -> str:
    """The `estimate.yaml` of a results folder, or `path` itself."""
    path = os.fspath(path)
    return os.path.join(path, 'estimate.yaml') if os.path.isdir(path) else path


def read_means_and_stds(path: str | os.PathLike, names: Sequence[str]
                        ) -> dict[str, tuple[float, float]]:
    """{name: (mean, std)} of the parameters of `names` that a saved estimate holds with a
    finite mean and a positive std.

    Raises:
      InputError: not an estimate.yaml, or none of `names` in it (naming the file).
    """
    path = estimate_path(path)
    estimate = read_yaml(path)
    entries = estimate.get('parameters') if isinstance(estimate, Mapping) else None
    if not isinstance(entries, Mapping):
        raise InputError(located(path, 'parameters', 'expected the map of an estimate.yaml '
                                 '(sysid fit)'))
    found = {}
    for name in names:
        entry = entries.get(name)
        if isinstance(entry, Mapping) and 'mean' in entry and 'std' in entry:
            mean, std = float(entry['mean']), float(entry['std'])
            if math.isfinite(mean) and math.isfinite(std) and std > 0.0:
                found[name] = (mean, std)
    if not found:
        raise InputError(located(path, 'parameters', f'expected a mean and a positive std of '
                                 f'at least one of {", ".join(names)}'))
    return found


def _covariance(folder: str, names: Sequence[str]) -> np.ndarray | None:
    """The (K, K) block of `posterior.npz`'s covariance for `names`, or None where the file,
    its covariance or one of the names is missing, or the block is not positive definite."""
    path = os.path.join(folder, 'posterior.npz')
    try:
        with np.load(path, allow_pickle=False) as f:
            stored = [str(n) for n in f['names']]
            covariance = np.asarray(f['covariance'], dtype=float)
    except (OSError, ValueError, KeyError):
        return None
    if any(n not in stored for n in names):
        return None
    index = [stored.index(n) for n in names]
    block = covariance[np.ix_(index, index)]
    if not np.all(np.isfinite(block)) or np.any(np.linalg.eigvalsh(block) <= 0.0):
        return None
    return block


def read_prior(path: str | os.PathLike, names: Sequence[str], start) -> EarlierEstimate:
    """The prior over parameters `names` (M,) from an earlier fit's results (module doc);
    `start` (M,): the starting values of the parameters it does not hold.

    Raises:
      InputError: see `read_means_and_stds`.
    """
    found = read_means_and_stds(path, names)
    held = tuple(n for n in names if n in found)
    index = np.array([list(names).index(n) for n in held])
    mean = np.asarray(start, dtype=float).copy()
    mean[index] = [found[n][0] for n in held]
    block = _covariance(os.path.dirname(os.path.abspath(estimate_path(path))), held)
    source = 'covariance'
    if block is None:
        block, source = np.diag([found[n][1] ** 2 for n in held]), 'stds'
    precision = np.zeros((len(names), len(names)))
    inverse = np.linalg.inv(block)
    precision[np.ix_(index, index)] = 0.5 * (inverse + inverse.T)
    prior = GaussianPrior(mean=mean, precision=precision)
    return EarlierEstimate(prior, mean.copy(), held, source)
