"""The configured prior toward the nominal model: `parameters.<name>.std`.

A parameter that gives `std` has a Gaussian prior N(nominal, std^2), the nominal value being
its `init`, else the model's (the spec's start, `ParameterSpec.initial_theta`); the others
stay flat within their bounds. It holds the directions that a recording does not determine
(link parameters a motion does not separate, a link whose mass trades with its neighbour's)
near the nominal model instead of letting them run to a bound, and leaves the determined
ones to the data. `with_earlier` joins it with an earlier fit's posterior
(`earlier_estimate`): a parameter the earlier fit holds takes that prior instead.
"""

from __future__ import annotations

import numpy as np

from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.io.problem import Problem

__all__ = ['nominal_prior', 'with_earlier']


def nominal_prior(problem: Problem) -> GaussianPrior | None:
    """The prior of `parameters.<name>.std` (module doc); None where no parameter gives one."""
    stds = problem.config.parameters.std
    if not stds:
        return None
    mean = np.asarray(problem.spec.initial_theta(problem.base_params), dtype=float)
    std = np.array([stds.get(name, np.inf) for name in problem.names])
    return GaussianPrior(mean, np.diag(1.0 / np.square(std)))


def with_earlier(problem: Problem, earlier: GaussianPrior | None) -> GaussianPrior | None:
    """`earlier` (mean (M,), precision (M, M)) with the configured prior on the parameters
    it leaves flat (zero rows and columns of its precision); either alone where the other is
    None."""
    nominal = nominal_prior(problem)
    if nominal is None or earlier is None:
        return earlier if nominal is None else nominal
    precision = np.array(earlier.precision, dtype=float)
    flat = ~np.any(precision != 0.0, axis=0)
    mean = np.where(flat, nominal.mean, np.asarray(earlier.mean, dtype=float))
    precision[flat, flat] = np.diag(nominal.precision)[flat]
    return GaussianPrior(mean, precision)
