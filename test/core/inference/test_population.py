"""The fleet posterior (`core.inference.population`) on simulated fleets with known truths:
the spread is recovered, robots with wide fits borrow strength and their intervals hold, a
planted outlier is flagged without false flags among its siblings."""

import numpy as np
import pytest

from sysid_ros.core.inference import population

ROBOTS = 32
SPREAD = 0.03                                   # [kg] the fleet's true spread
MEAN = 1.0                                      # [kg]


def _fleet(seed, wide=0.1, narrow=0.01, params=2):
    """Truths (N, M) around MEAN, and fits (means, stds): half the robots wide (short
    recordings), half narrow."""
    rng = np.random.default_rng(seed)
    truth = MEAN + SPREAD * rng.normal(size=(ROBOTS, params))
    std = np.where(np.arange(ROBOTS)[:, None] < ROBOTS // 2, wide, narrow) * np.ones(
        (ROBOTS, params))
    return truth, truth + std * rng.normal(size=truth.shape), std


def test_the_fleet_spread_is_recovered_and_wide_fits_borrow_strength():
    errors, shrunk_errors, inside = [], [], []
    spreads = []
    for seed in range(20):
        truth, mean, std = _fleet(seed)
        fleet = population.fleet_distribution(mean, std)
        spreads.append(fleet.spread)
        post_mean, post_std = population.shrunk(mean, std, fleet)
        short = slice(0, ROBOTS // 2)
        errors.append(np.abs(mean - truth)[short])
        shrunk_errors.append(np.abs(post_mean - truth)[short])
        inside.append(np.abs(post_mean - truth)[short] <= 1.6449 * post_std[short])
        # Each fit moves towards the fleet's mean by the share s^2 / (s^2 + tau^2 + var(mu)):
        # a narrow one (std 0.01 against a spread of 0.03) by about a tenth.
        prior_var = fleet.spread ** 2 + fleet.mean_std ** 2
        np.testing.assert_allclose((post_mean - mean) / (fleet.mean - mean),
                                   std ** 2 / (std ** 2 + prior_var), rtol=1e-9)
    assert np.mean(spreads) == pytest.approx(SPREAD, rel=0.15)
    # Wide fits (std 0.1 against a spread of 0.03): the error falls to about a third.
    assert np.mean(shrunk_errors) < 0.5 * np.mean(errors)
    # Their 90 % intervals hold the truth 90 +- 5 % of the time (640 intervals).
    assert abs(np.mean(inside) - 0.90) < 0.05


def test_robots_that_agree_within_their_stds_have_no_spread():
    rng = np.random.default_rng(1)
    std = np.full((ROBOTS, 1), 0.05)
    fleet = population.fleet_distribution(MEAN + std * rng.normal(size=std.shape), std)
    assert fleet.spread[0] < 0.02
    assert fleet.mean[0] == pytest.approx(MEAN, abs=4 * fleet.mean_std[0])


def test_a_planted_outlier_is_flagged_and_its_siblings_are_not():
    flagged_outlier, false_flags = 0, 0
    for seed in range(10):
        _, mean, std = _fleet(seed, wide=0.01, narrow=0.01)
        mean[7, 0] *= 1.2                       # one robot's link mass 20 % heavier
        _, flagged = population.outliers(mean, std)
        flagged_outlier += bool(flagged[7, 0])
        false_flags += int(flagged.sum() - flagged[7, 0])
    assert flagged_outlier == 10 and false_flags == 0


def test_an_outlier_left_out_of_the_fleet_leaves_the_spread_of_its_siblings():
    spreads, with_it = [], []
    for seed in range(10):
        _, mean, std = _fleet(seed, wide=0.01, narrow=0.01, params=1)
        mean[7, 0] *= 1.2
        _, flagged = population.outliers(mean, std)
        spreads.append(population.fleet_distribution(mean, std, ~flagged).spread[0])
        with_it.append(population.fleet_distribution(mean, std).spread[0])
    assert np.mean(spreads) == pytest.approx(SPREAD, rel=0.2)
    assert np.mean(with_it) > 1.3 * SPREAD


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match='N >= 2'):
        population.fleet_distribution(np.ones((1, 2)), np.ones((1, 2)))
    with pytest.raises(ValueError, match='N >= 2'):
        population.fleet_distribution(np.ones((3, 1)), np.ones((3, 1)), [[True], [False],
                                                                         [False]])
    with pytest.raises(ValueError, match='positive'):
        population.fleet_distribution(np.ones((3, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match='at least 3'):
        population.outliers(np.ones((2, 1)), np.ones((2, 1)))
