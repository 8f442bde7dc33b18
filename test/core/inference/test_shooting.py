"""The shooting log density (`inference.shooting`): the defect likelihood of multiple shooting,
and every baseline sampler on it moving towards the truth of a tiny double pendulum."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sampler_targets import KEY

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.inference import shooting, unconstrained
from sysid_ros.core.inference.kernels import cem, emcee, nuts, sgld
from sysid_ros.core.inference.particles import sobol_particles
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.model import builders
from sysid_ros.core.model import parameters


def test_public_names():
    for name in shooting.__all__:
        assert getattr(shooting, name) is not None, name


PENDULUM_TRUE = np.array([1.0, 0.1])          # link2.mass [kg], joint1.damping [N m s/rad]
PENDULUM_NOISE = 0.05                         # on q [rad] and qd [rad/s]


class Pendulum(NamedTuple):
    """The end-to-end problem: spec, base Params, likelihood settings, data, bound widths."""

    spec: parameters.ParameterSpec
    base: object
    likelihood: object
    data: object
    width: np.ndarray


@pytest.fixture(scope='module')
def pendulum():
    """40 steps (0.4 s at 100 Hz) of an unforced double pendulum released at 90 degrees."""
    model, base = builders.double_pendulum(l1=0.5, l2=0.5)
    spec = parameters.make_parameter_spec(model, {'link2.mass': (0.2, 2.0),
                                                  'joint1.damping': (0.0, 0.5)})
    likelihood = lik.make_shooting_likelihood(model, 0.01, num_windows=1, combine='product')
    x0 = jnp.array([np.pi / 2, 0.0, 0.0, 0.0])
    true = spec.to_params(jnp.asarray(PENDULUM_TRUE), base)
    states = np.asarray(integrators.rollout(model, true, x0, jnp.zeros((40, 2)), 0.01))
    noisy = states + PENDULUM_NOISE * np.random.default_rng(0).standard_normal(states.shape)
    noisy[0] = states[0]
    data = lik.make_trajectory_data(likelihood, noisy[None], np.zeros((1, 40, 2)),
                                    PENDULUM_NOISE)
    width = np.asarray(spec.upper_bounds) - np.asarray(spec.lower_bounds)
    return Pendulum(spec, base, likelihood, data, width)


def _distance(problem, theta):
    """(P,) distance of each particle to the truth, in units of the bounds' widths."""
    return np.linalg.norm((np.asarray(theta) - PENDULUM_TRUE) / problem.width, axis=-1)


def _run_pendulum(estimator, state, data, num_steps):
    """num_steps steps of a JAX estimator (jit it); returns the last state."""
    def body(s, _):
        return estimator.step(s, data)[0], None
    return jax.lax.scan(body, state, None, length=num_steps)[0]


@pytest.mark.slow
@pytest.mark.parametrize('method', ['sgld', 'nuts', 'emcee', 'cem'])
def test_each_method_moves_towards_the_true_pendulum_parameters(pendulum, method):
    spec, data = pendulum.spec, pendulum.data
    log_prob = shooting.make_shooting_log_prob(pendulum.likelihood, spec,
                                               base_params=pendulum.base)
    num = 64 if method == 'cem' else 16
    theta0 = sobol_particles(spec, num, seed=1)
    z0 = shooting.shooting_positions(pendulum.likelihood, spec, theta0, data)
    assert z0.shape == (num, 2)
    if method == 'emcee':
        estimator = emcee.build_kernel(log_prob, num)
        state = estimator.init(KEY, z0, None)
        for _ in range(300):
            state, info = estimator.step(state, data)
    else:
        if method == 'sgld':
            # Stable for the posterior's narrowest direction (std about 5e-3 in z).
            estimator, num_steps = sgld.build_kernel(log_prob, 2e-5, num), 400
        elif method == 'nuts':
            estimator, num_steps = nuts.build_kernel(log_prob, 0.02, jnp.full(2, 0.01),
                                                     num), 60
        else:
            estimator, num_steps = cem.build_kernel(log_prob, num, 12, 3), 30
        state = jax.jit(_run_pendulum, static_argnums=(0, 3))(
            estimator, estimator.init(KEY, z0, None), data, num_steps)
    theta = np.asarray(spec.from_unconstrained(jnp.asarray(state.particles)))
    before, after = np.median(_distance(pendulum, theta0)), np.median(
        _distance(pendulum, theta))
    print(f'{method}: median distance to the truth {before:.3f} -> {after:.4f}; mean '
          f'{theta.mean(axis=0)}, std {theta.std(axis=0)}')
    assert np.all(np.asarray(spec.within_bounds(theta)))
    assert after < 0.1 < before
    assert np.all(np.abs(theta.mean(axis=0) - PENDULUM_TRUE) / pendulum.width < 0.05)


@pytest.mark.slow
def test_multiple_shooting_log_prob_adds_the_defect_likelihood(pendulum):
    spec = pendulum.spec
    likelihood = lik.make_shooting_likelihood(pendulum.likelihood.model, 0.01, num_windows=4,
                                              combine='product')
    theta = np.stack([PENDULUM_TRUE, [1.5, 0.3]])
    x = shooting.shooting_positions(likelihood, spec, theta, pendulum.data)
    assert x.shape == (2, 2 + 3 * 4)                   # z and 3 shooting states of 4 dims
    _, states = shooting.split_particles(spec, likelihood, x, pendulum.data)
    log_prob = shooting.make_shooting_log_prob(likelihood, spec, base_params=pendulum.base,
                                               defect_std=0.1)
    values = jax.jit(jax.vmap(log_prob, in_axes=(0, None)))(x, pendulum.data)
    for i in range(2):
        terms = lik.log_likelihood(likelihood, spec.to_params(jnp.asarray(theta[i]),
                                                              pendulum.base),
                                   states[i], pendulum.data)
        expected = (terms.log_lik - 0.5 * np.sum(np.square(terms.defects / 0.1))
                    + unconstrained.log_abs_det_jacobian(spec, x[i, :2]))
        np.testing.assert_allclose(values[i], expected, rtol=1e-10)
    # Shooting states on the measured data: the true parameters leave small defects only.
    assert values[0] > values[1]
