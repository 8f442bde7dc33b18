"""`FitResult`: what a fit returns, whatever the method (registered estimator or factor graph).

Particles are in physical units, one row per restart of a point estimator or per member of a
Bayesian method's posterior sample; `estimate`, `std` and `interval` read them (or the point
estimate and its covariance where set) the same way for every method.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.stats

from sysid_ros.core.inference import intervals, registry

__all__ = ['FitResult']


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Outcome of `pipeline.fit`.

    Attributes:
      method: the method that ran.
      names: (M,) parameter names.
      particles: (P, M) identified parameters, physical units: one row per restart of a
        point estimator, the posterior sample of a Bayesian method.
      initial: (P, M) starting particles.
      lower, upper: (M,) bounds.
      loss_history: (K,) lowest loss over particles at each step [-] (for the Bayesian
        methods the mean squared noise-normalised residual, `core.inference.base`).
      iterations: steps taken (K).
      final_loss: loss of the returned particles (lowest over particles) [-].
      wall_time: seconds spent in `fit`, compilation included [s].
      consistent: (P,) whether each particle is physically consistent (`spec.is_consistent`).
      interrupted: True if stopped by Ctrl-C: a point estimator returns the best particles
        so far, a Bayesian method the latest ones.
      info: method-specific diagnostics (plain Python values).
      marginals: online methods (factor_graph): {'t': (K,) [s], 'mean': (K, M), 'std': (K, M)}
        the estimate and its marginal standard deviation as the data came in; else None.
      best: (M,) a point estimate: the best restart of a point method (lowest loss; never
        the mean of the restarts), the factor graph's mean; None for a posterior sample.
      covariance: (M, M) its covariance (Laplace for lm) [physical units^2], or None.
      covariance_dof: degrees of freedom of that covariance estimate (lm: windows - 1), so
        that its intervals take Student-t quantiles; None: normal quantiles.
      converged: whether the fit converged (`diagnose`); convergence: how it stopped.
      warnings: one line per symptom of a failed fit, each naming the setting to change.
    """

    method: str
    names: tuple[str, ...]
    particles: np.ndarray
    initial: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    loss_history: np.ndarray
    iterations: int
    final_loss: float
    wall_time: float
    consistent: np.ndarray
    interrupted: bool = False
    info: dict = dataclasses.field(default_factory=dict)
    marginals: dict | None = None
    best: np.ndarray | None = None
    covariance: np.ndarray | None = None
    covariance_dof: float | None = None
    converged: bool = False
    convergence: str = ''
    warnings: tuple[str, ...] = ()

    @property
    def estimate(self) -> np.ndarray:
        """(M,) the estimate: `best` where set, else the mean over particles."""
        return self.best if self.best is not None else self.particles.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """(M,) standard deviation: from `covariance` where set, else over particles."""
        if self.covariance is not None:
            return np.sqrt(np.maximum(np.diagonal(self.covariance), 0.0))
        return self.particles.std(axis=0)

    def interval(self, level: float = 0.95) -> np.ndarray | None:
        """(2, M) central interval of probability `level` [physical units], within the
        bounds: of a posterior sample of P >= 2 particles the interval that holds one more
        draw with that probability, as the method's particles are (`Method.particles`,
        `core.inference.intervals`); of a point estimate with a
        covariance, estimate +- z std with z the Student-t quantile of `covariance_dof`
        degrees of freedom where set, else the normal one; None for a point estimate
        without covariance or a single particle."""
        if self.best is None and self.particles.shape[0] > 1:
            ends = intervals.central_interval(self.particles, level,
                                              registry.lookup(self.method).particles)
        elif self.covariance is None:
            return None
        else:
            quantile = 0.5 + level / 2.0
            z = (scipy.stats.t.ppf(quantile, self.covariance_dof) if self.covariance_dof
                 else scipy.stats.norm.ppf(quantile))
            band = z * self.std
            ends = np.stack([self.estimate - band, self.estimate + band])
        return np.clip(ends, self.lower, self.upper)

    def as_dict(self, which: str = 'estimate') -> dict[str, float]:
        """{name: value} of the estimate (or 'std')."""
        values = self.estimate if which == 'estimate' else self.std
        return {n: float(v) for n, v in zip(self.names, values)}
