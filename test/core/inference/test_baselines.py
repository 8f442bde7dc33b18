"""The baseline samplers (SGLD, NUTS, Emcee, CEM) on targets whose answer is known.

Targets are Gaussian mixtures over two physical parameters of the double pendulum
(`link2.mass` in [0.5, 3.5] kg, `link2.com.x` in [-0.5, 0.7] m), sampled in the spec's
unconstrained coordinates through `unconstrained.unconstrained_log_density` (bijection plus
log-Jacobian), so each test checks the samples mapped back to physical units. Every target has
three components and is passed as `data`, so each sampler compiles once for the whole module.

Tolerances (samples after burn-in, fixed keys): posterior mean within 0.25 standard deviations
per parameter, standard deviations within 20 %, correlation within 0.15. The numbers measured
when this file was written are in the report of the change that added it.
"""

import os
import pathlib
import subprocess
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.inference import shooting, unconstrained
from sysid_ros.core.inference.kernels import cem, emcee, nuts, sgld
from sysid_ros.core.inference.particles import sobol_particles
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.model import builders
from sysid_ros.core.model import parameters

MODEL, NOMINAL = builders.double_pendulum()
SPEC = parameters.make_parameter_spec(MODEL, {'link2.mass': (0.5, 3.5),
                                              'link2.com.x': (-0.5, 0.7)})
LOWER = np.asarray(SPEC.lower_bounds)
UPPER = np.asarray(SPEC.upper_bounds)


class Mixture(NamedTuple):
    """A Gaussian mixture over theta (2,): log weights plus log normalisers (3,), means (3, 2),
    precisions (3, 2, 2); the log density is NaN where theta[0] > nan_above (a diverging
    simulation)."""

    log_scales: jax.Array
    means: jax.Array
    precisions: jax.Array
    nan_above: jax.Array


def _mixture(weights, means, covariances, nan_above=np.inf):
    weights = np.asarray(weights, float) / np.sum(weights)
    covariances = np.asarray(covariances, float)
    log_norm = -0.5 * np.linalg.slogdet(2.0 * np.pi * covariances)[1]
    return Mixture(jnp.asarray(np.log(weights) + log_norm), jnp.asarray(means, float),
                   jnp.asarray(np.linalg.inv(covariances)), jnp.asarray(nan_above, float))


def _log_density(theta, target: Mixture):
    """log sum_k w_k N(theta; mu_k, Sigma_k)."""
    diff = theta - target.means                                            # (3, 2)
    quadratic = jnp.einsum('ki,kij,kj->k', diff, target.precisions, diff)
    value = jax.nn.logsumexp(target.log_scales - 0.5 * quadratic)
    return jnp.where(theta[0] > target.nan_above, jnp.nan, value)


# log p(z | target): the posterior of theta under a uniform prior in the bounds, in z.
LOG_PROB = unconstrained.unconstrained_log_density(SPEC, _log_density)

MEAN = np.array([2.0, 0.1])
STD = np.array([0.25, 0.1])
CORR = 0.5
COV = np.array([[STD[0] ** 2, CORR * STD[0] * STD[1]], [CORR * STD[0] * STD[1], STD[1] ** 2]])
GAUSSIAN = _mixture([1, 1, 1], [MEAN] * 3, [COV] * 3)
# Centred on the upper bound of link2.com.x: half of its mass lies outside the bounds.
TRUNCATED = _mixture([1, 1, 1], [[2.0, 0.7]] * 3, [COV] * 3)
NARROW = np.eye(2) * 0.08 ** 2
# Three separated modes; the heaviest (weight 0.5) is the global maximum. It sits at the
# centre of the bounds box, where log |det d theta / d z| is flat, so that it is the mode in z
# too (elsewhere the Jacobian moves the mode in z by about sigma^2 d log|det| / d theta).
MULTIMODAL = _mixture([0.25, 0.5, 0.25], [[1.0, -0.2], [2.0, 0.1], [2.8, 0.45]], [NARROW] * 3)
# Two modes of equal mass, mirror images about the centre of the bounds box (so also in z).
BIMODAL = _mixture([0.25, 0.25, 0.5], [[1.2, 0.1], [1.2, 0.1], [2.8, 0.1]], [NARROW] * 3)

KEY = jax.random.key(0)


def _start(num, seed=0):
    """(num, 2) initial positions in z: scrambled Sobol points in the bounds (seed §1.1)."""
    return SPEC.to_unconstrained(jnp.asarray(sobol_particles(SPEC, num, seed=seed)))


def _run(estimator, state, target, num_steps):
    """num_steps jitted steps; returns the last state, theta (num_steps, P, 2) and the infos."""
    def body(s, _):
        s, info = estimator.step(s, target)
        return s, (SPEC.from_unconstrained(s.particles), info)
    state, (theta, infos) = jax.lax.scan(body, state, None, length=num_steps)
    return state, theta, infos


run = jax.jit(_run, static_argnames=('estimator', 'num_steps'))

# One scan length per method, so that each compiles once in this module.
SGLD_STEPS, NUTS_STEPS, CEM_STEPS = 1500, 300, 40


def _run_emcee(state, target, num_steps):
    """num_steps Emcee steps (a host loop); returns the last state, theta and the infos."""
    z, infos = [], []
    for _ in range(num_steps):
        state, info = EMCEE.step(state, target)
        z.append(state.particles)
        infos.append(info)
    return state, np.asarray(SPEC.from_unconstrained(np.stack(z))), infos


def _assert_gaussian(theta, label):
    """theta (N, 2) samples: mean, standard deviations and correlation of the target."""
    mean = theta.mean(axis=0)
    std = theta.std(axis=0)
    corr = np.corrcoef(theta.T)[0, 1]
    print(f'{label}: mean error / std {np.abs(mean - MEAN) / STD}, std ratio {std / STD}, '
          f'corr {corr:.3f}')
    np.testing.assert_array_less(np.abs(mean - MEAN), 0.25 * STD)
    np.testing.assert_allclose(std, STD, rtol=0.2)
    assert abs(corr - CORR) < 0.15


NUM_CHAINS = 32
SGLD = sgld.build_kernel(LOG_PROB, 0.01, NUM_CHAINS)
NUTS = nuts.build_kernel(LOG_PROB, 0.1, jnp.ones(2), 8)
EMCEE = emcee.build_kernel(LOG_PROB, 16)
CEM = cem.build_kernel(LOG_PROB, 128, 24, 3)


def test_public_names():
    for module in (sgld, nuts, emcee, cem, shooting):
        for name in module.__all__:
            assert getattr(module, name) is not None, name


# ------------------------------------------------------------------------------------------
# The analytic Gaussian posterior
# ------------------------------------------------------------------------------------------

def test_sgld_recovers_gaussian_posterior():
    state = SGLD.init(KEY, _start(NUM_CHAINS), None)
    state, theta, infos = run(SGLD, state, GAUSSIAN, SGLD_STEPS)
    assert state.particles.shape == (NUM_CHAINS, 2)
    assert int(state.iteration) == SGLD_STEPS and int(state.num_reseeded) == 0
    assert np.all(np.isfinite(infos.log_prob))
    _assert_gaussian(np.asarray(theta[500:]).reshape(-1, 2), 'sgld')


def _nuts_state(positions, step_size=0.5, inverse_mass_matrix=(0.1, 0.1)):
    """NUTS state with the given (array-leaf) step size and inverse mass matrix."""
    return NUTS.init(KEY, positions, None)._replace(
        step_size=jnp.asarray(step_size, float),
        inverse_mass_matrix=jnp.asarray(inverse_mass_matrix, float))


def test_nuts_recovers_gaussian_posterior():
    # Step size and mass matrix set by hand: the posterior standard deviation in z is
    # about 0.33 along both axes.
    state, theta, infos = run(NUTS, _nuts_state(_start(8)), GAUSSIAN, NUTS_STEPS)
    assert int(state.iteration) == NUTS_STEPS and int(state.num_reseeded) == 0
    assert 0.6 < float(np.mean(infos.acceptance_rate)) <= 1.0
    assert not np.any(infos.is_divergent)
    _assert_gaussian(np.asarray(theta[50:]).reshape(-1, 2), 'nuts')


def test_nuts_warmup_with_a_given_metric_adapts_the_step_size_only():
    # A metric twice the posterior std in z (as the start ensemble of a Laplace
    # approximation wider than the posterior gives): only the step size is adapted, and the
    # chains it sets recover the posterior.
    metric = np.array([0.4, 0.4])
    warm = nuts.warmup(KEY, LOG_PROB, _start(8), 100, GAUSSIAN,
                       inverse_mass_matrix=metric)
    np.testing.assert_array_equal(warm.inverse_mass_matrix, metric)
    assert warm.chain_step_size.shape == (8,) and warm.chain_inverse_mass_matrix.shape == (8, 2)
    assert 0.05 < float(warm.step_size) < 5.0
    state, theta, infos = run(NUTS, _nuts_state(warm.particles, warm.step_size, metric),
                              GAUSSIAN, NUTS_STEPS)
    assert 0.6 < float(np.mean(infos.acceptance_rate)) <= 1.0
    assert not np.any(infos.is_divergent)
    _assert_gaussian(np.asarray(theta).reshape(-1, 2), 'nuts (given metric)')
    with pytest.raises(ValueError, match='inverse_mass_matrix'):
        nuts.warmup(KEY, LOG_PROB, _start(8), 10, GAUSSIAN,
                    inverse_mass_matrix=np.ones(3))


@pytest.mark.slow
def test_nuts_after_window_adaptation_recovers_gaussian_posterior():
    warm = nuts.warmup(KEY, LOG_PROB, _start(8), 200, GAUSSIAN)
    assert warm.particles.shape == (8, 2) and warm.chain_step_size.shape == (8,)
    assert warm.inverse_mass_matrix.shape == (2,)
    assert 0.05 < float(warm.step_size) < 5.0
    print('nuts warm-up: step size', warm.step_size, 'inverse mass matrix',
          warm.inverse_mass_matrix)
    start = _nuts_state(warm.particles, warm.step_size, warm.inverse_mass_matrix)
    state, theta, infos = run(NUTS, start, GAUSSIAN, NUTS_STEPS)
    # The adapted inverse mass matrix estimates the posterior variance in z.
    z = np.asarray(SPEC.to_unconstrained(theta)).reshape(-1, 2)
    np.testing.assert_allclose(warm.inverse_mass_matrix, z.var(axis=0), rtol=0.5)
    assert 0.6 < float(np.mean(infos.acceptance_rate)) <= 1.0
    assert not np.any(infos.is_divergent)
    _assert_gaussian(np.asarray(theta).reshape(-1, 2), 'nuts (warm-up)')


def test_emcee_recovers_gaussian_posterior():
    state = EMCEE.init(KEY, _start(16), None)
    state, theta, infos = _run_emcee(state, GAUSSIAN, 1000)
    acceptance = np.mean([info.acceptance_rate for info in infos])
    assert 0.3 < acceptance < 0.9
    assert state.iteration == 1000 and state.num_accepted.sum() > 0
    _assert_gaussian(theta[300:].reshape(-1, 2), 'emcee')


def test_emcee_step_is_deterministic_given_state():
    state = EMCEE.init(KEY, _start(16), None)
    first, _ = EMCEE.step(state, GAUSSIAN)
    again, _ = EMCEE.step(state, GAUSSIAN)
    np.testing.assert_array_equal(first.particles, again.particles)


def test_cem_finds_the_gaussian_mode():
    state = CEM.init(KEY, _start(128), None)
    state, _, infos = run(CEM, state, GAUSSIAN, CEM_STEPS)
    best = np.asarray(SPEC.from_unconstrained(state.best_position))
    print('cem gaussian: best', best, 'error / std', np.abs(best - MEAN) / STD)
    np.testing.assert_array_less(np.abs(best - MEAN), 0.05 * STD)
    # The best log density never decreases.
    assert np.all(np.diff(np.asarray(infos.best_log_prob)) >= 0.0)


# ------------------------------------------------------------------------------------------
# CEM on multimodal targets
# ------------------------------------------------------------------------------------------

def test_cem_finds_the_global_mode_of_a_multimodal_target():
    state = CEM.init(KEY, _start(128), None)
    state, _, _ = run(CEM, state, MULTIMODAL, CEM_STEPS)
    best = np.asarray(SPEC.from_unconstrained(state.best_position))
    heaviest = np.asarray(SPEC.from_unconstrained(state.means[jnp.argmax(state.weights)]))
    print('cem multimodal: best', best, 'heaviest component', heaviest, state.weights)
    np.testing.assert_allclose(best, [2.0, 0.1], atol=0.005)
    np.testing.assert_allclose(heaviest, [2.0, 0.1], atol=0.01)


def test_cem_mixture_holds_both_modes_of_a_symmetric_bimodal_target():
    state = CEM.init(KEY, _start(128), None)
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


# ------------------------------------------------------------------------------------------
# Bounds, divergences and bad input
# ------------------------------------------------------------------------------------------

def _truncated_mean():
    """Mean of link2.com.x under TRUNCATED: a normal cut at its mean (the upper bound)."""
    # E[x | x < mu] = mu - sigma phi(0) / Phi(0); the lower bound is 12 sigma away.
    return 0.7 - STD[1] * stats.norm.pdf(0.0) / 0.5


@pytest.mark.parametrize('method', ['sgld', 'nuts', 'emcee', 'cem'])
def test_samples_stay_within_the_bounds(method):
    if method == 'emcee':
        _, theta, _ = _run_emcee(EMCEE.init(KEY, _start(16), None), TRUNCATED, 600)
        theta = theta[200:]
    elif method == 'cem':
        _, theta, _ = run(CEM, CEM.init(KEY, _start(128), None), TRUNCATED, CEM_STEPS)
    else:
        estimator = SGLD if method == 'sgld' else NUTS
        state = SGLD.init(KEY, _start(NUM_CHAINS), None) if method == 'sgld' else _nuts_state(
            _start(8))
        _, theta, _ = run(estimator, state, TRUNCATED,
                          SGLD_STEPS if method == 'sgld' else NUTS_STEPS)
        theta = theta[500:] if method == 'sgld' else theta[50:]
    theta = np.asarray(theta).reshape(-1, 2)
    assert np.all(np.isfinite(theta))
    assert np.all(np.asarray(SPEC.within_bounds(theta)))
    assert np.all(theta < UPPER) and np.all(theta > LOWER)
    if method != 'cem':
        # The truncated posterior, not the untruncated one (whose mean is the bound).
        print(f'{method} truncated: com.x mean {theta[:, 1].mean():.4f}, expected '
              f'{_truncated_mean():.4f}')
        assert abs(theta[:, 1].mean() - _truncated_mean()) < 0.25 * STD[1]


def test_nonfinite_chains_are_restarted_and_counted():
    diverging = _mixture([1, 1, 1], [MEAN] * 3, [COV] * 3, nan_above=2.1)
    state = SGLD.init(KEY, _start(NUM_CHAINS), None)
    state, theta, infos = run(SGLD, state, diverging, SGLD_STEPS)
    assert int(jnp.sum(infos.num_nonfinite)) == int(state.num_reseeded) > 0
    assert np.all(np.isfinite(theta))
    assert np.all(np.isfinite(infos.grad_norm))

    state, theta, infos = run(NUTS, _nuts_state(_start(8)), diverging, NUTS_STEPS)
    # Sobol starts above 2.1 kg are restarted at finite chains; NUTS never moves into NaN.
    assert int(state.num_reseeded) == int(jnp.sum(infos.num_nonfinite)) > 0
    assert np.all(np.isfinite(infos.log_prob))
    assert np.all(np.asarray(theta[:, :, 0]) <= 2.1)

    state, _, infos = run(CEM, CEM.init(KEY, _start(128), None), diverging, CEM_STEPS)
    assert int(infos.num_nonfinite[0]) > 0
    assert np.all(np.asarray(SPEC.from_unconstrained(state.best_position))[0] <= 2.1)

    # Walkers that start where the density is NaN (mapped to -inf) are restarted at finite
    # ones; no finite walker ever moves into that region.
    state, theta, infos = _run_emcee(EMCEE.init(KEY, _start(16), None), diverging, 100)
    assert state.num_reseeded == sum(info.num_nonfinite for info in infos) > 0
    assert np.all(np.isfinite(state.log_prob)) and np.all(theta[:, :, 0] <= 2.1)


@pytest.mark.parametrize('build, message', [
    (lambda: sgld.build_kernel(LOG_PROB, 0.0, 4), 'step_size'),
    (lambda: sgld.build_kernel(LOG_PROB, 0.1, 0), 'num_chains'),
    (lambda: nuts.build_kernel(LOG_PROB, 0.1, jnp.ones((2, 3)), 4), 'inverse_mass_matrix'),
    (lambda: emcee.build_kernel(LOG_PROB, 1), 'num_walkers'),
    (lambda: cem.build_kernel(LOG_PROB, 8, 16), 'num_elites'),
    (lambda: cem.build_kernel(LOG_PROB, 16, 2, 3), 'num_elites'),
    (lambda: cem.build_kernel(LOG_PROB, 16, 4, smoothing=0.0), 'smoothing'),
])
def test_bad_settings_are_rejected_by_the_factories(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_bad_initial_positions_are_rejected_before_compiling():
    with pytest.raises(ValueError, match='32 rows'):
        SGLD.init(KEY, _start(4), None)
    with pytest.raises(ValueError, match='NaN'):
        NUTS.init(KEY, np.full((8, 2), np.nan), None)
    with pytest.raises(ValueError, match='does not fit'):
        nuts.build_kernel(LOG_PROB, 0.1, jnp.ones(3), 8).init(KEY, _start(8), None)
    with pytest.raises(ValueError, match='>= 2 D'):
        emcee.build_kernel(LOG_PROB, 3).init(KEY, np.random.default_rng(0).normal(
            size=(3, 2)), None)
    with pytest.raises(ValueError, match='linearly independent'):
        EMCEE.init(KEY, np.ones((16, 2)), None)
    with pytest.raises(ValueError, match='num_components'):
        CEM.init(KEY, _start(2), None)


# ------------------------------------------------------------------------------------------
# End to end: a tiny double pendulum with a shooting likelihood
# ------------------------------------------------------------------------------------------

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


_TWO_DEVICES = """
import sys
import jax
import numpy as np
jax.config.update('jax_enable_x64', True)
sys.path.insert(0, sys.argv[2])
import test_baselines as T
assert len(jax.devices()) == 2
sgld, _, _ = T.run(T.SGLD, T.SGLD.init(T.KEY, T._start(32), None), T.GAUSSIAN,
                   T.SGLD_STEPS)
assert len(sgld.particles.sharding.device_set) == 2
nuts, _, _ = T.run(T.NUTS, T._nuts_state(T._start(8)), T.GAUSSIAN, T.NUTS_STEPS)
cem, _, _ = T.run(T.CEM, T.CEM.init(T.KEY, T._start(128), None), T.GAUSSIAN, T.CEM_STEPS)
np.savez(sys.argv[1], sgld=sgld.particles, nuts=nuts.particles, cem=cem.particles)
"""


@pytest.mark.slow
def test_particles_sharded_over_two_devices_give_the_same_result(tmp_path):
    env = dict(os.environ, XLA_FLAGS=(os.environ.get('XLA_FLAGS', '')
                                      + ' --xla_force_host_platform_device_count=2'))
    out = tmp_path / 'two.npz'
    subprocess.run([sys.executable, '-c', _TWO_DEVICES, str(out),
                    str(pathlib.Path(__file__).parent)], check=True, env=env, timeout=600)
    two = np.load(out)
    one = {'sgld': run(SGLD, SGLD.init(KEY, _start(32), None), GAUSSIAN, SGLD_STEPS)[0],
           'nuts': run(NUTS, _nuts_state(_start(8)), GAUSSIAN, NUTS_STEPS)[0],
           'cem': run(CEM, CEM.init(KEY, _start(128), None), GAUSSIAN, CEM_STEPS)[0]}
    for name, state in one.items():
        np.testing.assert_allclose(two[name], state.particles, atol=1e-12, err_msg=name)
