"""Central intervals of a posterior given as P particles, that hold a draw from the posterior
with the nominal probability although P is small.

The truth of a calibrated posterior is one more draw from it. The percentiles of P draws
hold one more draw less often than their level says: with P = 16 the 5th-95th percentiles
(linear interpolation) hold it 81 % of the time, the 2.5th-97.5th 85 % (32 particles: 85 %
and 90 %); this, not the posterior, was most of the live session's and CSVGD's shortfall in
`bench/calibration.py`. So:

  * enough particles, (P + 1)(1 - level) / 2 >= 1 (P >= 19 at 90 %, 39 at 95 %): the order
    statistics at ranks (P + 1)(1 -+ level) / 2 (NumPy's `weibull` quantiles, interpolated).
    Distribution-free: between the i-th and j-th of P draws lies one more draw with
    probability (j - i) / (P + 1), whatever the posterior's shape;
  * fewer: the Gaussian prediction interval mean +- t_{P-1} s sqrt(1 + 1 / P), s the sample
    std (ddof 1): exact for draws of a Gaussian posterior.

Runs on the host (NumPy and scipy).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

__all__ = ['central_interval']


def central_interval(particles, level: float) -> np.ndarray:
    """(2, M) lower and upper ends of the central `level` interval of particles (P, M)
    [physical units], P >= 2 (module doc).

    Raises:
      ValueError: fewer than 2 particles, not (P, M), or a level outside (0, 1).
    """
    theta = np.asarray(particles, dtype=float)
    if theta.ndim != 2 or theta.shape[0] < 2:
        raise ValueError(f'central interval: expected particles (P >= 2, M), got {theta.shape}')
    if not 0.0 < level < 1.0:
        raise ValueError(f'central interval: level: expected in (0, 1), got {level!r}')
    num = theta.shape[0]
    tail = (1.0 - level) / 2.0
    if (num + 1) * tail >= 1.0:
        return np.quantile(theta, [tail, 1.0 - tail], axis=0, method='weibull')
    half = (scipy.stats.t.ppf(1.0 - tail, num - 1) * theta.std(axis=0, ddof=1)
            * np.sqrt(1.0 + 1.0 / num))
    mean = theta.mean(axis=0)
    return np.stack([mean - half, mean + half])
