"""SGLD (`kernels.sgld`) on targets whose answer is known (`sampler_targets`)."""

import jax.numpy as jnp
import numpy as np
import pytest
from sampler_targets import (assert_gaussian, check_truncated, DIVERGING, GAUSSIAN, KEY, LOG_PROB,
                             NUM_CHAINS, run, SGLD, SGLD_STEPS, start, TRUNCATED)

from sysid_ros.core.inference.kernels import sgld


def test_public_names():
    for name in sgld.__all__:
        assert getattr(sgld, name) is not None, name


def test_sgld_recovers_gaussian_posterior():
    state = SGLD.init(KEY, start(NUM_CHAINS), None)
    state, theta, infos = run(SGLD, state, GAUSSIAN, SGLD_STEPS)
    assert state.particles.shape == (NUM_CHAINS, 2)
    assert int(state.iteration) == SGLD_STEPS and int(state.num_reseeded) == 0
    assert np.all(np.isfinite(infos.log_prob))
    assert_gaussian(np.asarray(theta[500:]).reshape(-1, 2), 'sgld')


def test_samples_stay_within_the_bounds():
    _, theta, _ = run(SGLD, SGLD.init(KEY, start(NUM_CHAINS), None), TRUNCATED, SGLD_STEPS)
    check_truncated(theta[500:], 'sgld')


def test_nonfinite_chains_are_restarted_and_counted():
    state = SGLD.init(KEY, start(NUM_CHAINS), None)
    state, theta, infos = run(SGLD, state, DIVERGING, SGLD_STEPS)
    assert int(jnp.sum(infos.num_nonfinite)) == int(state.num_reseeded) > 0
    assert np.all(np.isfinite(theta))
    assert np.all(np.isfinite(infos.grad_norm))


@pytest.mark.parametrize('build, message', [
    (lambda: sgld.build_kernel(LOG_PROB, 0.0, 4), 'step_size'),
    (lambda: sgld.build_kernel(LOG_PROB, 0.1, 0), 'num_chains')])
def test_bad_settings_are_rejected_by_the_factory(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_bad_initial_positions_are_rejected_before_compiling():
    with pytest.raises(ValueError, match='32 rows'):
        SGLD.init(KEY, start(4), None)
