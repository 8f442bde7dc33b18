"""Starting particles (P, M) in physical units: the one place every method gets them from.

Row 0 is the user's guess (`theta0`, else the `init` values of the spec, else the nominal
model's values); the other rows fill the bounds box with a scrambled Sobol sequence (seed
000 §1.1), or, for parameters without finite bounds, perturb the guess by N(0, 0.5^2) in the
spec's unconstrained coordinates. Every row is then held `INTERIOR_MARGIN` of the bounds'
width inside them: a start on a bound maps through the sigmoid to ~1e-16 with a zero
gradient and never moves (a URDF friction of 0 with `min: 0`). `gaussian_particles` starts
a Bayesian method around a point estimate and its covariance instead.

Runs on the host (NumPy and scipy), before anything is compiled.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import qmc

from sysid_ros.core.model.parameters import ParameterSpec
from sysid_ros.core.model.types import Params

__all__ = ['INTERIOR_MARGIN', 'GAUSSIAN_FLOOR', 'sobol_particles', 'initial_particles',
           'gaussian_particles']

# Starting values are held this fraction of the bounds' width inside them.
INTERIOR_MARGIN = 1e-3
# Least std of `gaussian_particles`, a fraction of each parameter's bounds width: only keeps
# the normal proper where the covariance is singular (a wider floor starts the particles
# far wider than a narrow posterior).
GAUSSIAN_FLOOR = 1e-6
# Std of the perturbation of unbounded parameters' extra rows, unconstrained coordinates.
UNBOUNDED_SPREAD = 0.5


def sobol_particles(spec: ParameterSpec, num_particles: int, seed: int = 0) -> np.ndarray:
    """(P, M) points of a scrambled Sobol sequence within the bounds (seed §1.1).

    Deterministic for a seed. A count that is not a power of two loses Sobol's balance
    property (scipy's warning is silenced) but keeps its low discrepancy.

    Raises:
      ValueError: num_particles < 1, an empty spec, or a parameter with an infinite bound.
    """
    if int(num_particles) != num_particles or num_particles < 1:
        raise ValueError(f'particles: expected int >= 1, got {num_particles!r}')
    if spec.num_params == 0:
        raise ValueError('particles: the parameter spec is empty')
    lower, upper = _bounds(spec)
    unbounded = [n for n, lo, hi in zip(spec.names, lower, upper)
                 if not (np.isfinite(lo) and np.isfinite(hi))]
    if unbounded:
        raise ValueError('particles: Sobol points need finite bounds; unbounded: '
                         + ', '.join(unbounded))
    sampler = qmc.Sobol(d=spec.num_params, scramble=True, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)
        unit = sampler.random(int(num_particles))
    return lower + (upper - lower) * unit


def initial_particles(spec: ParameterSpec, base_params: Params, num_particles: int,
                      seed: int = 0, theta0=None) -> np.ndarray:
    """(P, M) starting particles (module doc).

    Args:
      spec: the free parameters and their bounds.
      base_params: the nominal Params (row 0's values where neither theta0 nor `init` give
        one).
      num_particles: P >= 1.
      seed: seed of the Sobol sequence (or of the perturbations of unbounded parameters).
      theta0: None, (M,) values of row 0, a `Params` (read through `spec.from_params`), or
        (P, M) particles used as they are (but for the margin).

    Raises:
      ValueError: a theta0 of the wrong shape, non-finite values, num_particles < 1.
    """
    m = spec.num_params
    if int(num_particles) != num_particles or num_particles < 1:
        raise ValueError(f'particles: expected int >= 1, got {num_particles!r}')
    if isinstance(theta0, Params):
        theta0 = spec.from_params(theta0)
    if theta0 is None:
        first = np.asarray(spec.initial_theta(base_params), dtype=float)
    else:
        first = np.asarray(theta0, dtype=float)
        if first.shape not in ((m,), (num_particles, m)):
            raise ValueError(f'theta0: expected ({m},) or ({num_particles}, {m}) for '
                             f'{", ".join(spec.names)}, got {first.shape}')
        if not np.all(np.isfinite(first)):
            raise ValueError('theta0: NaN or inf')
    if first.ndim == 2:
        theta = first.copy()
    else:
        theta = np.empty((num_particles, m))
        theta[0] = first
        if num_particles > 1:
            theta[1:] = _extra_rows(spec, first, num_particles, seed)
    return _inside(theta, *_bounds(spec))


def _inside(theta: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """theta clipped `INTERIOR_MARGIN` of the bounds' width inside them."""
    width = np.where(np.isfinite(upper - lower), upper - lower, 0.0)
    return np.clip(theta, lower + INTERIOR_MARGIN * width, upper - INTERIOR_MARGIN * width)


def _bounds(spec: ParameterSpec) -> tuple[np.ndarray, np.ndarray]:
    return (np.asarray(spec.lower_bounds, dtype=float),
            np.asarray(spec.upper_bounds, dtype=float))


def _extra_rows(spec: ParameterSpec, first: np.ndarray, num_particles: int,
                seed: int) -> np.ndarray:
    """(P - 1, M) rows after the first: Sobol in the bounds, or perturbations of `first`."""
    lower, upper = _bounds(spec)
    if np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)):
        return sobol_particles(spec, num_particles, seed)[1:]
    rng = np.random.default_rng(seed)
    z0 = np.asarray(spec.to_unconstrained(first))
    noise = UNBOUNDED_SPREAD * rng.standard_normal((num_particles - 1, spec.num_params))
    return np.asarray(spec.from_unconstrained(z0 + noise))


def gaussian_particles(spec: ParameterSpec, mean, covariance, num_particles: int,
                       seed: int = 0) -> np.ndarray:
    """(P, M) starting particles around a point estimate: row 0 `mean` (M,), the others drawn
    from N(mean, covariance + diag((GAUSSIAN_FLOOR width)^2)), every row held
    `INTERIOR_MARGIN` inside the bounds (rows outside are clipped).

    Raises:
      ValueError: num_particles < 1, shapes that do not match the spec, non-finite values.
    """
    m = spec.num_params
    if int(num_particles) != num_particles or num_particles < 1:
        raise ValueError(f'particles: expected int >= 1, got {num_particles!r}')
    mean = np.asarray(mean, dtype=float)
    covariance = np.asarray(covariance, dtype=float)
    if mean.shape != (m,) or covariance.shape != (m, m):
        raise ValueError(f'particles: expected a mean ({m},) and covariance ({m}, {m}), got '
                         f'{mean.shape} and {covariance.shape}')
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(covariance))):
        raise ValueError('particles: the point estimate or its covariance is not finite')
    lower, upper = _bounds(spec)
    width = np.asarray(spec.range_width(mean))
    spread = 0.5 * (covariance + covariance.T) + np.diag((GAUSSIAN_FLOOR * width) ** 2)
    rng = np.random.default_rng(seed)
    draws = rng.multivariate_normal(mean, spread, size=int(num_particles) - 1,
                                    method='eigh')
    return _inside(np.concatenate([mean[None], draws]), lower, upper)
