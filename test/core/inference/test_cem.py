"""The cross-entropy method (`kernels.cem`) on targets whose answer is known
(`sampler_targets`), multimodal ones included."""

import jax.numpy as jnp
import numpy as np
import pytest
from sampler_targets import (BIMODAL, CEM, CEM_STEPS, check_truncated, DIVERGING, GAUSSIAN, KEY,
                             LOG_PROB, MEAN, MULTIMODAL, run, SPEC, start, STD, TRUNCATED)

from sysid_ros.core.inference.kernels import cem


def test_public_names():
    for name in cem.__all__:
        assert getattr(cem, name) is not None, name


def test_cem_finds_the_gaussian_mode():
    state = CEM.init(KEY, start(128), None)
    state, _, infos = run(CEM, state, GAUSSIAN, CEM_STEPS)
    best = np.asarray(SPEC.from_unconstrained(state.best_position))
    print('cem gaussian: best', best, 'error / std', np.abs(best - MEAN) / STD)
    np.testing.assert_array_less(np.abs(best - MEAN), 0.05 * STD)
    # The best log density never decreases.
    assert np.all(np.diff(np.asarray(infos.best_log_prob)) >= 0.0)


def test_cem_finds_the_global_mode_of_a_multimodal_target():
    state = CEM.init(KEY, start(128), None)
    state, _, _ = run(CEM, state, MULTIMODAL, CEM_STEPS)
    best = np.asarray(SPEC.from_unconstrained(state.best_position))
    heaviest = np.asarray(SPEC.from_unconstrained(state.means[jnp.argmax(state.weights)]))
    print('cem multimodal: best', best, 'heaviest component', heaviest, state.weights)
    np.testing.assert_allclose(best, [2.0, 0.1], atol=0.005)
    np.testing.assert_allclose(heaviest, [2.0, 0.1], atol=0.01)


def test_cem_mixture_holds_both_modes_of_a_symmetric_bimodal_target():
    state = CEM.init(KEY, start(128), None)
    state, theta, _ = run(CEM, state, BIMODAL, CEM_STEPS)
    means = np.asarray(SPEC.from_unconstrained(state.means))
    weights = np.asarray(state.weights)
    left = np.linalg.norm(means - [1.2, 0.1], axis=1) < 0.05
    right = np.linalg.norm(means - [2.8, 0.1], axis=1) < 0.05
    print('cem bimodal: means', means, 'weights', weights)
    assert left.any() and right.any()
    assert 0.2 < weights[left].sum() < 0.8 and 0.2 < weights[right].sum() < 0.8
    population = np.asarray(theta[-1])
    assert np.mean(population[:, 0] < 2.0) > 0.2 and np.mean(population[:, 0] > 2.0) > 0.2


def test_samples_stay_within_the_bounds():
    _, theta, _ = run(CEM, CEM.init(KEY, start(128), None), TRUNCATED, CEM_STEPS)
    check_truncated(theta, 'cem', check_mean=False)


def test_nonfinite_samples_are_never_elites():
    state, _, infos = run(CEM, CEM.init(KEY, start(128), None), DIVERGING, CEM_STEPS)
    assert int(infos.num_nonfinite[0]) > 0
    assert np.all(np.asarray(SPEC.from_unconstrained(state.best_position))[0] <= 2.1)


@pytest.mark.parametrize('build, message', [
    (lambda: cem.build_kernel(LOG_PROB, 8, 16), 'num_elites'),
    (lambda: cem.build_kernel(LOG_PROB, 16, 2, 3), 'num_elites'),
    (lambda: cem.build_kernel(LOG_PROB, 16, 4, smoothing=0.0), 'smoothing')])
def test_bad_settings_are_rejected_by_the_factory(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_bad_initial_positions_are_rejected_before_compiling():
    with pytest.raises(ValueError, match='num_components'):
        CEM.init(KEY, start(2), None)
