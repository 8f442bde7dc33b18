"""DiffNEA losses: segments, zero loss at the true parameters, sensitivity, gradients.

Data are simulated with the same integrator as the loss, so the true parameters reproduce them
exactly. Programs are compiled once per (loss, integrator) and vmapped over parameter sets.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.likelihoods import losses
from sysid_ros.core.model import builders

DT = 0.01
NUM_STEPS = 120
HORIZON = 10
MODEL, TRUE = builders.double_pendulum(damping=0.1)

_rollout = jax.jit(integrators.rollout, static_argnames=('integrator', 'actuator', 'substeps'))


def _controls(num, seed=0):
    t = np.arange(num) * DT
    rng = np.random.default_rng(seed)
    freq, phase = rng.uniform(0.3, 1.5, (3, 2)), rng.uniform(0, 2 * np.pi, (3, 2))
    return 3.0 * np.sum(np.sin(2 * np.pi * freq * t[:, None, None] + phase), axis=1)


@functools.lru_cache(maxsize=None)
def _data(integrator):
    """(q, qd, tau) of one simulated trajectory (NUM_STEPS + 1 samples)."""
    controls = _controls(NUM_STEPS)
    x0 = jnp.array([0.3, -0.2, 0.0, 0.0])
    states = np.asarray(_rollout(MODEL, TRUE, x0, jnp.asarray(controls), DT,
                                 integrator=integrator, actuator='viscous'))
    tau = np.concatenate([controls, controls[-1:]])
    return states[:, :2], states[:, 2:], tau


def _perturbed():
    """(3,) stacked Params: truth, heavier link 2, more damping."""
    heavy = dataclasses.replace(TRUE, inertial=TRUE.inertial.at[1].multiply(1.1))
    damped = dataclasses.replace(TRUE, damping=TRUE.damping * 1.5)
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), TRUE, heavy, damped)


def test_make_segments_shapes_scales_and_boundaries():
    q = np.arange(22.0).reshape(11, 2)
    qd = 2 * q
    tau = -q
    seg = losses.make_segments([q, q[:7]], [qd, qd[:7]], [tau, tau[:7]], horizon=3)
    # Trajectory 1: starts 0, 3, 6 (need start + 3 <= 10); trajectory 2: starts 0, 3.
    assert seg.num_segments == 5 and seg.horizon == 3
    np.testing.assert_array_equal(seg.x0[1], np.concatenate([q[3], qd[3]]))
    np.testing.assert_array_equal(seg.controls[2], tau[6:9])
    np.testing.assert_array_equal(seg.targets[2, -1], np.concatenate([q[9], qd[9]]))
    np.testing.assert_array_equal(seg.x0[3], np.concatenate([q[0], qd[0]]))  # no crossing
    allx = np.concatenate([np.concatenate([q, qd], 1), np.concatenate([q[:7], qd[:7]], 1)])
    np.testing.assert_allclose(seg.state_scale, allx.std(0))
    assert np.all(np.asarray(seg.delta_scale) > 0)
    overlapping = losses.make_segments([q], [qd], [tau], horizon=3, stride=1)
    assert overlapping.num_segments == 8


def test_make_segments_floors_still_joints_and_rejects_bad_input():
    q = np.zeros((20, 2))
    q[:, 0] = np.linspace(0, 1, 20)               # joint 2 never moves
    seg = losses.make_segments([q], [q], [q], horizon=5)
    scale = np.asarray(seg.state_scale)
    assert scale[1] == pytest.approx(1e-3 * scale[0])
    with pytest.raises(ValueError, match='horizon'):
        losses.make_segments([q], [q], [q], horizon=0)
    with pytest.raises(ValueError, match='no trajectory'):
        losses.make_segments([q], [q], [q], horizon=30)
    with pytest.raises(ValueError, match='trajectory 0'):
        losses.make_segments([q], [q[:-1]], [q], horizon=2)


@pytest.mark.parametrize('kind,integrator', [('one_step', 'semi_implicit_euler'),
                                             ('rollout', 'rk4')])
def test_loss_is_zero_at_truth_and_grows_with_errors(kind, integrator):
    q, qd, tau = _data(integrator)
    seg = losses.make_segments([q], [qd], [tau], HORIZON)
    loss_fn = losses.make_loss_fn(MODEL, kind, DT, integrator=integrator, actuator='viscous')
    values = np.asarray(jax.jit(jax.vmap(loss_fn, in_axes=(0, None)))(_perturbed(), seg))
    assert values[0] < 1e-20
    assert np.all(values[1:] > 1e-6)


def test_rollout_of_one_step_equals_one_step_loss():
    q, qd, tau = _data('semi_implicit_euler')
    seg = losses.make_segments([q], [qd], [tau], horizon=1)
    seg = seg._replace(delta_scale=seg.state_scale)
    params = jax.tree_util.tree_map(lambda x: x[1], _perturbed())

    @jax.jit
    def both(params, seg):
        return (losses.one_step_loss(MODEL, params, seg, DT, 'semi_implicit_euler'),
                losses.rollout_loss(MODEL, params, seg, DT, 'semi_implicit_euler'))

    one, multi = both(params, seg)
    np.testing.assert_allclose(one, multi, rtol=1e-12)


def test_rollout_loss_gradient_matches_finite_differences():
    q, qd, tau = _data('semi_implicit_euler')
    seg = losses.make_segments([q], [qd], [tau], HORIZON)
    loss_fn = losses.make_loss_fn(MODEL, 'rollout', DT, integrator='semi_implicit_euler')

    def loss_of_damping(d):
        return loss_fn(dataclasses.replace(TRUE, damping=d), seg)

    value_and_grad = jax.jit(jax.value_and_grad(loss_of_damping))
    d0 = jnp.array([0.2, 0.05])
    value, grad = value_and_grad(d0)
    assert np.all(np.isfinite(grad)) and value > 0
    eps = 1e-6
    for k in range(2):
        e = jnp.zeros(2).at[k].set(eps)
        fd = (value_and_grad(d0 + e)[0] - value_and_grad(d0 - e)[0]) / (2 * eps)
        np.testing.assert_allclose(grad[k], fd, rtol=1e-5)


def test_loss_fn_is_hashable_and_validated():
    a = losses.make_loss_fn(MODEL, 'rollout', DT, integrator='rk4')
    b = losses.make_loss_fn(MODEL, 'rollout', DT, integrator='rk4')
    assert a == b and hash(a) == hash(b)
    assert a != losses.make_loss_fn(MODEL, 'one_step', DT, integrator='rk4')
    with pytest.raises(ValueError, match='loss'):
        losses.make_loss_fn(MODEL, 'three_step', DT)
    with pytest.raises(ValueError, match='integrator'):
        losses.make_loss_fn(MODEL, 'rollout', DT, integrator='euler')
    with pytest.raises(ValueError, match='actuator'):
        losses.make_loss_fn(MODEL, 'rollout', DT, actuator='magic')
    with pytest.raises(ValueError, match='dt'):
        losses.make_loss_fn(MODEL, 'rollout', 0.0)
    with pytest.raises(ValueError, match='substeps'):
        losses.make_loss_fn(MODEL, 'rollout', DT, substeps=0)


def test_all_names_importable():
    for name in losses.__all__:
        assert hasattr(losses, name)
