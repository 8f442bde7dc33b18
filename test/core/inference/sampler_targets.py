"""Targets whose answer is known, for the baseline samplers' tests (SGLD, NUTS, Emcee, CEM).

Targets are Gaussian mixtures over two physical parameters of the double pendulum
(`link2.mass` in [0.5, 3.5] kg, `link2.com.x` in [-0.5, 0.7] m), sampled in the spec's
unconstrained coordinates through `unconstrained.unconstrained_log_density` (bijection plus
log-Jacobian), so each test checks the samples mapped back to physical units. Every target has
three components and is passed as `data`, so each sampler compiles once per test module.

Tolerances (samples after burn-in, fixed keys): posterior mean within 0.25 standard deviations
per parameter, standard deviations within 20 %, correlation within 0.15.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from sysid_ros.core.inference import unconstrained
from sysid_ros.core.inference.kernels import cem, emcee, nuts, sgld
from sysid_ros.core.inference.particles import sobol_particles
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


def mixture(weights, means, covariances, nan_above=np.inf):
    weights = np.asarray(weights, float) / np.sum(weights)
    covariances = np.asarray(covariances, float)
    log_norm = -0.5 * np.linalg.slogdet(2.0 * np.pi * covariances)[1]
    return Mixture(jnp.asarray(np.log(weights) + log_norm), jnp.asarray(means, float),
                   jnp.asarray(np.linalg.inv(covariances)), jnp.asarray(nan_above, float))


def log_density(theta, target: Mixture):
    """log sum_k w_k N(theta; mu_k, Sigma_k)."""
    diff = theta - target.means                                            # (3, 2)
    quadratic = jnp.einsum('ki,kij,kj->k', diff, target.precisions, diff)
    value = jax.nn.logsumexp(target.log_scales - 0.5 * quadratic)
    return jnp.where(theta[0] > target.nan_above, jnp.nan, value)


# log p(z | target): the posterior of theta under a uniform prior in the bounds, in z.
LOG_PROB = unconstrained.unconstrained_log_density(SPEC, log_density)

MEAN = np.array([2.0, 0.1])
STD = np.array([0.25, 0.1])
CORR = 0.5
COV = np.array([[STD[0] ** 2, CORR * STD[0] * STD[1]], [CORR * STD[0] * STD[1], STD[1] ** 2]])
GAUSSIAN = mixture([1, 1, 1], [MEAN] * 3, [COV] * 3)
# Centred on the upper bound of link2.com.x: half of its mass lies outside the bounds.
TRUNCATED = mixture([1, 1, 1], [[2.0, 0.7]] * 3, [COV] * 3)
NARROW = np.eye(2) * 0.08 ** 2
# Three separated modes; the heaviest (weight 0.5) is the global maximum. It sits at the
# centre of the bounds box, where log |det d theta / d z| is flat, so that it is the mode in z
# too (elsewhere the Jacobian moves the mode in z by about sigma^2 d log|det| / d theta).
MULTIMODAL = mixture([0.25, 0.5, 0.25], [[1.0, -0.2], [2.0, 0.1], [2.8, 0.45]], [NARROW] * 3)
# Two modes of equal mass, mirror images about the centre of the bounds box (so also in z).
BIMODAL = mixture([0.25, 0.25, 0.5], [[1.2, 0.1], [1.2, 0.1], [2.8, 0.1]], [NARROW] * 3)

KEY = jax.random.key(0)


def start(num, seed=0):
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


def run_emcee(state, target, num_steps):
    """num_steps Emcee steps (a host loop); returns the last state, theta and the infos."""
    z, infos = [], []
    for _ in range(num_steps):
        state, info = EMCEE.step(state, target)
        z.append(state.particles)
        infos.append(info)
    return state, np.asarray(SPEC.from_unconstrained(np.stack(z))), infos


def assert_gaussian(theta, label):
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


def nuts_state(positions, step_size=0.5, inverse_mass_matrix=(0.1, 0.1)):
    """NUTS state with the given (array-leaf) step size and inverse mass matrix."""
    return NUTS.init(KEY, positions, None)._replace(
        step_size=jnp.asarray(step_size, float),
        inverse_mass_matrix=jnp.asarray(inverse_mass_matrix, float))


def truncated_mean():
    """Mean of link2.com.x under TRUNCATED: a normal cut at its mean (the upper bound)."""
    # E[x | x < mu] = mu - sigma phi(0) / Phi(0); the lower bound is 12 sigma away.
    return 0.7 - STD[1] * stats.norm.pdf(0.0) / 0.5


def check_truncated(theta, label, check_mean=True):
    """theta (N, 2) samples of TRUNCATED: within the bounds and, with `check_mean`, with the
    truncated posterior's mean (not the untruncated one's, which is the bound)."""
    theta = np.asarray(theta).reshape(-1, 2)
    assert np.all(np.isfinite(theta))
    assert np.all(np.asarray(SPEC.within_bounds(theta)))
    assert np.all(theta < UPPER) and np.all(theta > LOWER)
    if check_mean:
        print(f'{label} truncated: com.x mean {theta[:, 1].mean():.4f}, expected '
              f'{truncated_mean():.4f}')
        assert abs(theta[:, 1].mean() - truncated_mean()) < 0.25 * STD[1]


# A target whose log density is NaN above 2.1 kg (a diverging simulation).
DIVERGING = mixture([1, 1, 1], [MEAN] * 3, [COV] * 3, nan_above=2.1)
