"""Central intervals of a posterior given as P particles, that hold a draw from the posterior
with the nominal probability although P is small.

The truth of a calibrated posterior is one more draw from it, and the percentiles of P draws
hold one more draw less often than their level says (`docs/design/inference.md`). So:

  * enough particles, (P + 1)(1 - level) / 2 >= 1 (P >= 19 at 90 %, 39 at 95 %): the order
    statistics at ranks (P + 1)(1 -+ level) / 2 (NumPy's `weibull` quantiles, interpolated).
    Distribution-free: between the i-th and j-th of P draws lies one more draw with
    probability (j - i) / (P + 1), whatever the posterior's shape;
  * fewer: the Gaussian prediction interval mean +- t_{P-1} s sqrt(1 + 1 / P), s the sample
    std (ddof 1): exact for draws of a Gaussian posterior.

Particles that are not draws: SVGD's and CSVGD's particles are deterministic points that
repel each other, a quadrature of the posterior rather than a sample (`kind='quadrature'`).
What such a quadrature matches is the posterior's mean and spread, not its tails: the few
outermost points sit inside the posterior's 2.5 % tails (16 points would need 0.4 of a point
beyond each end), so their own percentiles fall short. The interval is mean +- z s, z the
normal quantile and s the points' std (ddof 1).

Runs on the host (NumPy and scipy).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

__all__ = ['KINDS', 'central_interval']

# What a posterior's particles are (module doc).
KINDS = ('draws', 'quadrature')


def central_interval(particles, level: float, kind: str = 'draws') -> np.ndarray:
    """(2, M) lower and upper ends of the central `level` interval of particles (P, M)
    [physical units], P >= 2, that are `kind` (one of KINDS, module doc).

    Raises:
      ValueError: fewer than 2 particles, not (P, M), a level outside (0, 1), an unknown
        kind.
    """
    theta = np.asarray(particles, dtype=float)
    if theta.ndim != 2 or theta.shape[0] < 2:
        raise ValueError(f'central interval: expected particles (P >= 2, M), got {theta.shape}')
    if not 0.0 < level < 1.0:
        raise ValueError(f'central interval: level: expected in (0, 1), got {level!r}')
    if kind not in KINDS:
        raise ValueError(f'central interval: kind: expected one of {" | ".join(KINDS)}, got '
                         f'{kind!r}')
    num = theta.shape[0]
    tail = (1.0 - level) / 2.0
    if kind == 'quadrature':
        half = scipy.stats.norm.ppf(1.0 - tail) * theta.std(axis=0, ddof=1)
        return theta.mean(axis=0) + np.stack([-half, half])
    if (num + 1) * tail >= 1.0:
        return np.quantile(theta, [tail, 1.0 - tail], axis=0, method='weibull')
    half = (scipy.stats.t.ppf(1.0 - tail, num - 1) * theta.std(axis=0, ddof=1)
            * np.sqrt(1.0 + 1.0 / num))
    mean = theta.mean(axis=0)
    return np.stack([mean - half, mean + half])
