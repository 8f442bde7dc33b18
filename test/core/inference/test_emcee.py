"""Emcee (`kernels.emcee`) on targets whose answer is known (`sampler_targets`)."""

import numpy as np
import pytest
from sampler_targets import (assert_gaussian, check_truncated, DIVERGING, EMCEE, GAUSSIAN, KEY,
                             LOG_PROB, run_emcee, start, TRUNCATED)

from sysid_ros.core.inference.kernels import emcee


def test_public_names():
    for name in emcee.__all__:
        assert getattr(emcee, name) is not None, name


def test_emcee_recovers_gaussian_posterior():
    state = EMCEE.init(KEY, start(16), None)
    state, theta, infos = run_emcee(state, GAUSSIAN, 1000)
    acceptance = np.mean([info.acceptance_rate for info in infos])
    assert 0.3 < acceptance < 0.9
    assert state.iteration == 1000 and state.num_accepted.sum() > 0
    assert_gaussian(theta[300:].reshape(-1, 2), 'emcee')


def test_emcee_step_is_deterministic_given_state():
    state = EMCEE.init(KEY, start(16), None)
    first, _ = EMCEE.step(state, GAUSSIAN)
    again, _ = EMCEE.step(state, GAUSSIAN)
    np.testing.assert_array_equal(first.particles, again.particles)


def test_samples_stay_within_the_bounds():
    _, theta, _ = run_emcee(EMCEE.init(KEY, start(16), None), TRUNCATED, 600)
    check_truncated(theta[200:], 'emcee')


def test_nonfinite_walkers_are_restarted_and_counted():
    # Walkers that start where the density is NaN (mapped to -inf) are restarted at finite
    # ones; no finite walker ever moves into that region.
    state, theta, infos = run_emcee(EMCEE.init(KEY, start(16), None), DIVERGING, 100)
    assert state.num_reseeded == sum(info.num_nonfinite for info in infos) > 0
    assert np.all(np.isfinite(state.log_prob)) and np.all(theta[:, :, 0] <= 2.1)


def test_bad_settings_and_positions_are_rejected_before_compiling():
    with pytest.raises(ValueError, match='num_walkers'):
        emcee.build_kernel(LOG_PROB, 1)
    with pytest.raises(ValueError, match='>= 2 D'):
        emcee.build_kernel(LOG_PROB, 3).init(KEY, np.random.default_rng(0).normal(
            size=(3, 2)), None)
    with pytest.raises(ValueError, match='linearly independent'):
        EMCEE.init(KEY, np.ones((16, 2)), None)
