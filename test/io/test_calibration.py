"""Coverage of the default fit's intervals, measured as `bench/calibration.py` does.

Statistical bound: if the intervals of level p are calibrated, the number of truths (out of
n) that a parameter's interval holds is Binomial(n, p). The test takes the number of truths
as the sample size, although the pooled rate averages over M parameters (their indicators
within one truth may be correlated, so n is the conservative effective size), and accepts
|coverage - p| <= 3 sqrt(p (1 - p) / n): a calibrated method fails with probability below
about 0.3 % per level. The same bound applied to intervals half as wide (a method that is
overconfident by 2x) must fail, or the test could not detect miscalibration at all.
"""


import numpy as np
import pytest
from scipy import stats

from bench import calibration

NUM_TRUTHS = 100


def _bound(level: float) -> float:
    return 3.0 * np.sqrt(level * (1.0 - level) / NUM_TRUTHS)


@pytest.fixture(scope='module')
def pendulum_draws():
    problem, record = calibration.own_recorder('pendulum', 'exact', noise=1e-3)
    return calibration.run_case(problem, record, 'pendulum/exact/lm', 'lm', NUM_TRUTHS,
                                seed=17, progress=None)


@pytest.mark.parametrize('index, level', list(enumerate(calibration.LEVELS)))
def test_lm_laplace_intervals_hold_the_truth_as_often_as_claimed(pendulum_draws, index,
                                                                 level):
    pooled = calibration.coverage(pendulum_draws)[index].mean()
    print(f'lm Laplace cov{round(100 * level)} = {pooled:.3f} over {NUM_TRUTHS} truths')
    assert all(d.converged for d in pendulum_draws)
    assert abs(pooled - level) <= _bound(level)
    # The bound's power: Gaussian intervals half as wide as they should be cover
    # 2 Phi(z_p / 2) - 1 of the truths, which the same bound rejects.
    halved = 2.0 * stats.norm.cdf(stats.norm.ppf(0.5 + level / 2.0) / 2.0) - 1.0
    assert abs(halved - level) > _bound(level)
