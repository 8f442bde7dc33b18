"""DiffNEA (`kernels.diffnea`) recovers the known parameters of a noisy simulated double
pendulum (`point_problems`) through its virtual inertia parameters, and every iterate is
physically consistent.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from point_problems import (check_recovery, consistent, DT, HORIZON, inertia_block, INTEGRATOR,
                            ITERATIONS, MODEL, NOMINAL, ROLLOUT, simulate, SPEC, THETA_GUESS)
import pytest

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.kernels import diffnea
from sysid_ros.core.inference.kernels.diffnea import DiffNEAInfo, DiffNEAState
from sysid_ros.core.inference.particles import initial_particles
from sysid_ros.core.likelihoods import losses
from sysid_ros.core.model import builders, parameters


@pytest.fixture(scope='module')
def measured():
    """Data of the integrator that DiffNEA's loss uses (semi-implicit Euler: fast to compile)."""
    return simulate(INTEGRATOR)


@pytest.fixture(scope='module')
def diffnea_run(measured):
    q, qd, tau = measured
    segments = losses.make_segments([q], [qd], [tau], HORIZON)
    loss_fn = losses.make_loss_fn(MODEL, 'rollout', DT, integrator=INTEGRATOR)
    optimizer = optax.adam(optax.cosine_decay_schedule(0.05, ITERATIONS, alpha=0.01))
    est = diffnea.build_kernel(NOMINAL, SPEC, loss_fn, optimizer)
    step = jax.jit(est.step)
    state = est.init(jax.random.PRNGKey(0), jnp.asarray(THETA_GUESS), segments)
    states, infos = [state], []
    for _ in range(ITERATIONS):
        state, info = step(state, segments)
        states.append(state)
        infos.append(info)
    return est, step, segments, states, infos


def test_diffnea_recovers_double_pendulum(diffnea_run):
    _, _, _, states, infos = diffnea_run
    final = states[-1]
    assert final.theta.shape == (1, SPEC.num_params)
    errors = check_recovery(final.theta[0])
    print('DiffNEA errors:', {k: f'{v:+.2e}' for k, v in errors.items()})
    losses_ = np.array([float(i.loss[0]) for i in infos])
    assert losses_[-1] < 1e-2 * losses_[0]
    assert int(final.iteration) == ITERATIONS
    # Consistent by construction: every iterate, not only the last.
    assert consistent(np.stack([np.asarray(s.theta[0]) for s in states]))
    assert all(int(i.num_nonfinite) == 0 for i in infos)


def test_diffnea_state_and_info_types(diffnea_run):
    est, _, _, states, infos = diffnea_run
    assert isinstance(est, Kernel)
    assert isinstance(states[0], DiffNEAState)
    assert isinstance(infos[0], DiffNEAInfo)
    assert infos[0].loss.shape == (1,) and infos[0].grad_norm.shape == (1,)
    # The non-inertia entries stay within their bounds on every iterate.
    plain = ~inertia_block()
    thetas = np.stack([np.asarray(s.theta[0]) for s in states])[:, plain]
    lower, upper = np.asarray(SPEC.lower_bounds)[plain], np.asarray(SPEC.upper_bounds)[plain]
    assert np.all((thetas >= lower) & (thetas <= upper))


def test_diffnea_skips_nonfinite_data(diffnea_run):
    _, step, segments, states, _ = diffnea_run
    bad = segments._replace(targets=segments.targets.at[0, 0, 0].set(jnp.nan))
    state = states[5]
    new, info = step(state, bad)
    assert int(info.num_nonfinite) == 1
    np.testing.assert_array_equal(new.theta, state.theta)
    assert int(new.iteration) == int(state.iteration) + 1


def test_diffnea_particles_forward_mode_and_init_forms():
    """Several restarts; forward-mode gradients equal reverse-mode ones (single pendulum)."""
    model, params = builders.chain(1, lengths=0.5, masses=0.8, damping=0.05)
    spec = parameters.make_parameter_spec(model, {'link1.mass': (0.1, 2.0),
                                                  'joint1.damping': (0.0, 1.0)})
    t = np.arange(60) * 0.01
    controls = np.sin(2 * np.pi * t)[:, None]
    states = np.asarray(ROLLOUT(model, params, jnp.array([0.2, 0.0]), jnp.asarray(controls),
                                0.01, integrator=INTEGRATOR, actuator='viscous'))
    tau = np.concatenate([controls, controls[-1:]])
    seg = losses.make_segments([states[:, :1]], [states[:, 1:]], [tau], 5)
    loss_fn = losses.make_loss_fn(model, 'one_step', 0.01, integrator=INTEGRATOR)
    grads = {}
    for mode in ('reverse', 'forward'):
        est = diffnea.build_kernel(params, spec, loss_fn, optax.sgd(0.0),
                                   grad_mode=mode)
        state = jax.jit(est.init)(None, initial_particles(spec, params, 4, seed=1), seg)
        assert state.theta.shape == (4, 2)
        np.testing.assert_allclose(state.theta[0], spec.from_params(params), rtol=1e-12)
        assert np.all(np.asarray(spec.within_bounds(state.theta)))
        _, info = jax.jit(est.step)(state, seg)
        grads[mode] = np.asarray(info.grad_norm)
    np.testing.assert_allclose(grads['forward'], grads['reverse'], rtol=1e-8)
    est = diffnea.build_kernel(params, spec, loss_fn, optax.sgd(0.1))
    init = jax.jit(est.init)
    assert init(None, jnp.ones((3, 2)) * 0.5, seg).theta.shape == (3, 2)
    np.testing.assert_allclose(init(None, spec.from_params(params), seg).theta[0],
                               spec.from_params(params))
    with pytest.raises(ValueError, match='grad_mode'):
        diffnea.build_kernel(params, spec, loss_fn, optax.sgd(0.1), grad_mode='x')


def test_all_names_importable():
    for name in diffnea.__all__:
        assert hasattr(diffnea, name), name
