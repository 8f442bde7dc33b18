"""Central intervals of particle posteriors: one more draw from the posterior falls inside
with the nominal probability, for few and for many particles (Monte Carlo with a binomial
bound), where plain percentiles fall short."""

import numpy as np
import pytest

from sysid_ros.core.inference import intervals

LEVELS = (0.5, 0.9, 0.95)
TRIALS = 20000


def _coverage(draws, truth, level):
    """Each trial is one parameter column: particles (P, TRIALS), truth (TRIALS,)."""
    lo, hi = intervals.central_interval(draws.T, level)
    return np.mean((lo <= truth) & (truth <= hi))


@pytest.mark.parametrize('num, sampler', [
    (16, lambda rng, size: rng.normal(size=size)),            # Gaussian prediction interval
    (64, lambda rng, size: rng.gamma(2.0, size=size)),        # order statistics, skewed
])
def test_intervals_hold_one_more_draw_at_the_nominal_rate(num, sampler):
    """Calibrated posteriors (truth and particles drawn from the same distribution): the
    coverage is nominal within 4 binomial standard errors of TRIALS trials (<= 0.007),
    while the plain percentiles of 16 draws hold the truth 81 % of the time at 90 %."""
    rng = np.random.default_rng(num)
    draws = sampler(rng, (TRIALS, num))
    truth = sampler(rng, TRIALS)
    for level in LEVELS:
        bound = 4.0 * np.sqrt(level * (1.0 - level) / TRIALS)
        assert abs(_coverage(draws, truth, level) - level) < bound, level
    if num == 16:
        lo, hi = np.percentile(draws, [5.0, 95.0], axis=1)
        assert np.mean((lo <= truth) & (truth <= hi)) < 0.9 - 10 * np.sqrt(0.09 / TRIALS)


def test_interval_columns_and_bad_input():
    theta = np.column_stack([np.arange(40.0), -np.arange(40.0)])
    ends = intervals.central_interval(theta, 0.5)
    np.testing.assert_allclose(ends[:, 0], [9.25, 29.75])     # ranks 10.25 and 30.75 of 40
    np.testing.assert_allclose(ends[:, 1], [-29.75, -9.25])
    # SVGD's points, a quadrature: mean +- z s (0 .. 39: mean 19.5, s = sqrt(136.67)).
    half = 0.6744897501960817 * np.sqrt(1640.0 / 12.0)
    np.testing.assert_allclose(intervals.central_interval(theta, 0.5, 'quadrature'),
                               [[19.5 - half, -19.5 - half], [19.5 + half, -19.5 + half]])
    with pytest.raises(ValueError, match='kind'):
        intervals.central_interval(theta, 0.5, 'samples')
    with pytest.raises(ValueError, match='P >= 2'):
        intervals.central_interval(np.ones((1, 3)), 0.9)
    with pytest.raises(ValueError, match='level'):
        intervals.central_interval(theta, 1.0)
