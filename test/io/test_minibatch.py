"""Mini-batches of trajectory pieces: the schedule covers every piece each epoch, and the
scaled batch log-likelihoods average to the whole set's."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.model import builders
from sysid_ros.io import minibatch


def test_schedule_is_a_permutation_per_epoch_across_batch_boundaries():
    schedule = minibatch.PieceSchedule(num_pieces=10, batch=3, seed=4)
    stream = np.concatenate([schedule.next_batch() for _ in range(30)])     # 9 epochs
    assert all(len(b) == 3 for b in np.split(stream, 30))
    for epoch in np.split(stream, 9):
        assert sorted(epoch) == list(range(10))
    again = minibatch.PieceSchedule(num_pieces=10, batch=3, seed=4)
    np.testing.assert_array_equal(np.concatenate([again.next_batch() for _ in range(30)]), stream)


@pytest.mark.parametrize('setting, pieces, expected', [
    ('auto', 30, minibatch.AUTO_BATCH_PIECES), ('auto', 5, 5), ('all', 30, 30), (4, 30, 4),
    (50, 30, 30)])
def test_batch_pieces(setting, pieces, expected):
    assert minibatch.batch_pieces(setting, pieces) == expected


def test_schedule_rejects_a_batch_larger_than_the_pieces():
    with pytest.raises(ValueError, match='batch: expected 1 <= batch <= 4'):
        minibatch.PieceSchedule(num_pieces=4, batch=5, seed=0)


def test_scaled_batches_average_to_the_whole_log_likelihood():
    model, params = builders.double_pendulum()
    setting = lik.make_shooting_likelihood(model, 0.01, num_windows=1, combine='product',
                                           integrator='rk4')
    rng = np.random.default_rng(5)
    k, t = 6, 20
    x0 = jnp.asarray(rng.normal(size=(k, 4)) * 0.5)
    controls = jnp.asarray(rng.normal(size=(k, t, 2)))
    states = jax.vmap(lambda x, u: integrators.rollout(model, params, x, u, 0.01,
                                                       integrator='rk4'))(x0, controls)
    observed = states + 1e-3 * rng.normal(size=states.shape)
    data = lik.make_trajectory_data(setting, observed, controls, jnp.full(4, 1e-3))
    shooting = jnp.zeros((k, 0, 4))
    whole = lik.log_likelihood(setting, params, shooting, data).log_lik
    scaled = dataclasses.replace(setting, batch_scale=k / 2)
    batches = [lik.select_trajectories(data, np.array(b)) for b in ([0, 3], [1, 5], [2, 4])]
    values = [lik.log_likelihood(scaled, params, shooting[:2], b).log_lik for b in batches]
    np.testing.assert_allclose(np.mean(values), whole, rtol=1e-12)
    # The loss per observed value does not depend on the scale.
    np.testing.assert_allclose(
        np.mean([lik.residual_loss(scaled, b, v) for b, v in zip(batches, values)]),
        lik.residual_loss(setting, data, whole), rtol=1e-12)
