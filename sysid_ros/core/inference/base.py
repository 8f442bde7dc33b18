"""The estimator contract that every identification method follows, offline and live.

As in optax and blackjax, a factory builds an `Estimator`, a NamedTuple of pure functions:

    state = estimator.init(key, theta0, data)          # theta0 (P, M) physical particles
    state, info = estimator.step(state, data, prior)   # one iteration
    theta = estimator.posterior(state)                 # (P, M) physical particles
    state = estimator.rebase(state, theta, data)       # next data window (the live node)

A point estimator has P = 1 (or P independent restarts); a Bayesian one returns its sample.
`info` is a `StepInfo` for every method: the same fields, so the fit loop and the live node
never ask which method produced it. `prior` is a `GaussianPrior` passed as data (new values
do not recompile a jitted step) or None (the uniform prior within the bounds).

The methods' own algorithms over their own coordinates (SVGD over flat positions, blackjax's
NUTS kernel, Adam over DiffNEA's virtual parameters, ...) are `Kernel`s, one per module of
`inference.kernels`, all with one signature (`Kernel`); `inference.methods` wraps each into an
`Estimator`, and `inference.registry` maps `estimator.method` to those factories.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

__all__ = ['Estimator', 'Kernel', 'KernelData', 'StepInfo', 'GaussianPrior']


class Estimator(NamedTuple):
    """An identification method (module doc).

    Attributes:
      init: `init(key, theta0 (P, M), data) -> state`; theta0 in physical units, in the order
        of the spec's names.
      step: `step(state, data, prior) -> (state, StepInfo)`.
      posterior: `posterior(state) -> (P, M)` particles in physical units.
      rebase: `rebase(state, theta (P, M), data) -> state`: continue on new data (the next
        live window) from particles `theta`; what carries over is the method's choice and is
        documented by its factory.
      laplace: None, or for a Gauss-Newton method `laplace(state) -> (hessian (P, M, M),
        covariance (P, M, M), dof (P,))`: each particle's Gauss-Newton Hessian of the loss,
        Laplace covariance [physical units^2] at its current values (identifiability at
        the start, uncertainty at the end) and the degrees of freedom of that covariance
        estimate (its intervals use Student-t quantiles).
    """

    init: Callable
    step: Callable
    posterior: Callable
    rebase: Callable
    laplace: Callable | None = None


class Kernel(NamedTuple):
    """A method's algorithm over its own coordinates, as blackjax's kernels; every
    `kernels.<method>.build_kernel` returns one, and `inference.methods` turns it into an
    `Estimator`.

    Attributes:
      init: `init(key, position, data) -> state`: `position` is the start in the kernel's
        coordinates (particles (P, D) for the particle methods, theta (P, M) for DiffNEA and
        NEA, one (theta (M,), starts (K, S)) pair for LM, vmapped over restarts); a kernel
        that needs no key or data at the start ignores them.
      step: `step(state, data) -> (state, info)`, the kernel's own State and Info
        NamedTuples. `data` is one pytree, the same type as `init`'s: the likelihood's data,
        or a `KernelData` (that data and a prior) where the kernel's density includes a
        prior (CSVGD, LM; the samplers pass theirs to their `log_prob_fn` untouched).
    """

    init: Callable
    step: Callable


class KernelData(NamedTuple):
    """A kernel's data when its density includes a prior (`Kernel`).

    Attributes:
      data: the likelihood's data (e.g. a `likelihood.TrajectoryData`).
      prior: a `GaussianPrior`, or None (the uniform prior within the bounds).
    """

    data: Any
    prior: Any = None


class StepInfo(NamedTuple):
    """Diagnostics of one step, the same for every method, describing the particles the step
    started from (`posterior` of the state passed in).

    Attributes:
      loss: (P,) loss of each particle [-]: for the shooting likelihoods the mean squared
        noise-normalised residual, -2 (log-likelihood + log normaliser) / observed values
        (about 1 at the truth when the noise std is right); for the point estimators their
        objective. inf where not finite.
      grad_norm: (P,) norm of the gradient the method followed (0 for gradient-free ones).
      num_nonfinite: () particles whose evaluation was not finite (re-seeded or left as they
        were, as the method documents).
      max_defect: (P,) largest normalised multiple-shooting defect (0 without defects).
      converged: () bool: the method has nothing left to do (further steps change nothing).
      extra: {name: array} method-specific diagnostics (acceptance rate, step size, rank...).
    """

    loss: jax.Array
    grad_norm: jax.Array
    num_nonfinite: jax.Array
    max_defect: jax.Array
    converged: jax.Array
    extra: Any


class GaussianPrior(NamedTuple):
    """A Gaussian prior N(mean, precision^-1) on theta [physical units], times the uniform
    prior within the bounds (e.g. the previous window's posterior of the live node). Passed
    to the step as data: new values do not recompile.

    Attributes:
      mean: (M,) in the order of the spec's names.
      precision: (M, M) symmetric positive semi-definite inverse covariance (zeros: flat).
    """

    mean: jax.Array
    precision: jax.Array

    def log_density(self, theta: jax.Array) -> jax.Array:
        """() log N(theta; mean, precision^-1) up to a constant, theta (M,)."""
        residual = theta - self.mean
        return -0.5 * residual @ self.precision @ residual
