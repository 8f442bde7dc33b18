"""The real Panda log through the live estimator node (`bench/experiment_panda_log.py`, quick:
the first 8 s at a tenth of real time), scored on the held-out end of the log against the
offline fit of the same samples (slow: the estimator compiles; about 3-5 minutes on 2 cores).
"""

import math
import os

import pytest

from bench import experiment_panda_log

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.isdir(os.path.join(experiment_panda_log.SOURCE, 'rbt_log')),
                       reason='the panda-gaz2019 log is not in ../shared/data'),
]


@pytest.fixture(scope='module')
def case():
    """The quick case, run once for the module (printed: `pytest -s` shows the numbers)."""
    result = experiment_panda_log.panda_log_case(quick=True)
    print({k: v for k, v in result.items() if k != 'buffer'})
    return result


def test_the_live_estimate_predicts_held_out_torques_with_a_finite_ratio_to_offline(case):
    assert case['windows'] >= experiment_panda_log.STEADY_WINDOWS, case
    assert math.isfinite(case['nrmse_offline']) and case['nrmse_offline'] > 0.0, case
    assert math.isfinite(case['ratio']), case


@pytest.mark.xfail(strict=True, reason='the live friction parameters stay near their lower '
                   'bound (Coulomb 0.004-0.009 N m, std ~1e-3, where the offline fit finds '
                   '0.10-0.46 N m) and the means still move by more than a std per window; '
                   'see docs/measurements/held-out.md, "Real Panda log through the live node"')
def test_the_live_estimate_of_the_real_panda_log_converges(case):
    assert case['converged'], (f'the live means moved by more than one std within the last '
                               f'{experiment_panda_log.STEADY_WINDOWS} windows; held-out '
                               f'nRMSE per window: {case["nrmse_history"]}')
