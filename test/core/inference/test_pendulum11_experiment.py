"""Seed 000 experiment 2 (supplement Table 2): on the 11-parameter double pendulum, CSVGD
(SVGD with the multiple-shooting likelihood) must come out best on KL, in both directions,
and on MMD against every baseline (Emcee, CEM, SGLD, NUTS with single and multiple shooting,
SVGD with single shooting), scored on held-out trajectories.

The experiment lives in bench/experiment_pendulum11.py (simulated data with a hidden truth;
see its module doc for the set-up; every method is the registry's estimator). Moderate size:
32 particles, 1000 iterations per method (the script's --quick size; the seed runs 100 and
2000).
"""

import math

import numpy as np
import pytest

from bench import experiment_pendulum11 as exp2


@pytest.fixture(scope='module')
def experiment():
    rows, summary = exp2.run_experiment2(quick=True, num_particles=32, num_iterations=1000)
    print()
    print(exp2.format_table(rows))
    print({k: v for k, v in summary.items() if k != 'csvgd_kl_curve'})
    return rows, summary


def test_problem_is_the_seed_table1():
    spec = exp2.make_spec(exp2._base_model()[0])
    assert spec.num_params == 11
    assert np.all(np.asarray(spec.within_bounds(exp2.TRUE_THETA)))
    np.testing.assert_allclose(spec.lower_bounds, [b[0] for _, _, b in exp2.TABLE1])
    np.testing.assert_allclose(spec.upper_bounds, [b[1] for _, _, b in exp2.TABLE1])


@pytest.mark.slow
def test_every_row_has_finite_metrics_and_csvgd_keeps_every_simulation(experiment):
    rows, _ = experiment
    assert {(r.method, r.column) for r in rows} == {
        (m, c) for m in exp2.METHODS for c in exp2.COLUMNS}
    csvgd = [r for r in rows if (r.method, r.column) == ('csvgd', 'ms')][0]
    assert csvgd.num_diverged == 0
    assert all(math.isfinite(v) for v in (csvgd.kl_real_sim, csvgd.kl_sim_real, csvgd.mmd))
    for row in rows:
        assert np.all(np.isfinite(row.theta)), row.method
        assert np.all(np.asarray(exp2.make_spec(exp2._base_model()[0]).within_bounds(
            row.theta))), row.method


@pytest.mark.slow
def test_csvgd_is_best_on_kl_and_mmd(experiment):
    rows, summary = experiment
    csvgd = [r for r in rows if (r.method, r.column) == ('csvgd', 'ms')][0]
    for row in rows:
        if row is csvgd:
            continue
        label = f'{row.method} {row.column}'
        # A baseline whose metric is not computable (too many diverged simulations) loses.
        if math.isfinite(row.kl_real_sim):
            assert csvgd.kl_real_sim < row.kl_real_sim, label
        if math.isfinite(row.kl_sim_real):
            assert csvgd.kl_sim_real < row.kl_sim_real, label
        if math.isfinite(row.mmd):
            assert csvgd.mmd < row.mmd, label
    assert summary['csvgd_best'] is True
