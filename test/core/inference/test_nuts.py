"""NUTS and its warm-up (`kernels.nuts`) on targets whose answer is known
(`sampler_targets`)."""

import jax.numpy as jnp
import numpy as np
import pytest
from sampler_targets import (assert_gaussian, check_truncated, DIVERGING, GAUSSIAN, KEY, LOG_PROB,
                             NUTS, nuts_state, NUTS_STEPS, run, SPEC, start, TRUNCATED)

from sysid_ros.core.inference.kernels import nuts


def test_public_names():
    for name in nuts.__all__:
        assert getattr(nuts, name) is not None, name


def test_nuts_recovers_gaussian_posterior():
    # Step size and mass matrix set by hand: the posterior standard deviation in z is
    # about 0.33 along both axes.
    state, theta, infos = run(NUTS, nuts_state(start(8)), GAUSSIAN, NUTS_STEPS)
    assert int(state.iteration) == NUTS_STEPS and int(state.num_reseeded) == 0
    assert 0.6 < float(np.mean(infos.acceptance_rate)) <= 1.0
    assert not np.any(infos.is_divergent)
    assert_gaussian(np.asarray(theta[50:]).reshape(-1, 2), 'nuts')


def test_nuts_warmup_with_a_given_metric_adapts_the_step_size_only():
    # A metric twice the posterior std in z (as the start ensemble of a Laplace
    # approximation wider than the posterior gives): only the step size is adapted, and the
    # chains it sets recover the posterior.
    metric = np.array([0.4, 0.4])
    warm = nuts.warmup(KEY, LOG_PROB, start(8), 100, GAUSSIAN,
                       inverse_mass_matrix=metric)
    np.testing.assert_array_equal(warm.inverse_mass_matrix, metric)
    assert warm.chain_step_size.shape == (8,) and warm.chain_inverse_mass_matrix.shape == (8, 2)
    assert 0.05 < float(warm.step_size) < 5.0
    state, theta, infos = run(NUTS, nuts_state(warm.particles, warm.step_size, metric),
                              GAUSSIAN, NUTS_STEPS)
    assert 0.6 < float(np.mean(infos.acceptance_rate)) <= 1.0
    assert not np.any(infos.is_divergent)
    assert_gaussian(np.asarray(theta).reshape(-1, 2), 'nuts (given metric)')
    with pytest.raises(ValueError, match='inverse_mass_matrix'):
        nuts.warmup(KEY, LOG_PROB, start(8), 10, GAUSSIAN,
                    inverse_mass_matrix=np.ones(3))


@pytest.mark.slow
def test_nuts_after_window_adaptation_recovers_gaussian_posterior():
    warm = nuts.warmup(KEY, LOG_PROB, start(8), 200, GAUSSIAN)
    assert warm.particles.shape == (8, 2) and warm.chain_step_size.shape == (8,)
    assert warm.inverse_mass_matrix.shape == (2,)
    assert 0.05 < float(warm.step_size) < 5.0
    print('nuts warm-up: step size', warm.step_size, 'inverse mass matrix',
          warm.inverse_mass_matrix)
    adapted = nuts_state(warm.particles, warm.step_size, warm.inverse_mass_matrix)
    state, theta, infos = run(NUTS, adapted, GAUSSIAN, NUTS_STEPS)
    # The adapted inverse mass matrix estimates the posterior variance in z.
    z = np.asarray(SPEC.to_unconstrained(theta)).reshape(-1, 2)
    np.testing.assert_allclose(warm.inverse_mass_matrix, z.var(axis=0), rtol=0.5)
    assert 0.6 < float(np.mean(infos.acceptance_rate)) <= 1.0
    assert not np.any(infos.is_divergent)
    assert_gaussian(np.asarray(theta).reshape(-1, 2), 'nuts (warm-up)')


def test_samples_stay_within_the_bounds():
    _, theta, _ = run(NUTS, nuts_state(start(8)), TRUNCATED, NUTS_STEPS)
    check_truncated(theta[50:], 'nuts')


def test_nonfinite_chains_are_restarted_and_counted():
    state, theta, infos = run(NUTS, nuts_state(start(8)), DIVERGING, NUTS_STEPS)
    # Sobol starts above 2.1 kg are restarted at finite chains; NUTS never moves into NaN.
    assert int(state.num_reseeded) == int(jnp.sum(infos.num_nonfinite)) > 0
    assert np.all(np.isfinite(infos.log_prob))
    assert np.all(np.asarray(theta[:, :, 0]) <= 2.1)


def test_bad_settings_and_positions_are_rejected_before_compiling():
    with pytest.raises(ValueError, match='inverse_mass_matrix'):
        nuts.build_kernel(LOG_PROB, 0.1, jnp.ones((2, 3)), 4)
    with pytest.raises(ValueError, match='NaN'):
        NUTS.init(KEY, np.full((8, 2), np.nan), None)
    with pytest.raises(ValueError, match='does not fit'):
        nuts.build_kernel(LOG_PROB, 0.1, jnp.ones(3), 8).init(KEY, start(8), None)
