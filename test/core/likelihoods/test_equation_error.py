"""The equation-error likelihood: causal filter, dispatch through `likelihood`, gradients,
and a fit of a simulated two-link arm that recovers its truth within its uncertainty."""

import dataclasses

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from sysid_ros.core.dynamics import actuators, rigid_body
from sysid_ros.core.likelihoods import equation_error as ee
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import shooting_windows
from sysid_ros.io import config as config_io
from sysid_ros.io import estimator_data, pipeline
from sysid_ros.io.config import ConfigError

RATE = 200.0


def arm_config(**estimator):
    """Two-link arm (the double pendulum builder) with a payload-like link 2 and viscous +
    Coulomb friction at both joints."""
    return {
        'model': {'builder': 'double_pendulum', 'actuator': 'coulomb_viscous',
                  'builder_args': {'damping': [0.3, 0.1]}, 'integrator': 'rk4'},
        'parameters': {
            'link2': {'mass': {'min': 0.2, 'max': 3.0}, 'com': {'x': {'min': -0.3, 'max': 0.3}}},
            'joint1': {'damping': {'min': 0.0, 'max': 1.0}, 'coulomb': {'min': 0.0, 'max': 1.0}},
            'joint2': {'damping': {'min': 0.0, 'max': 1.0}, 'coulomb': {'min': 0.0, 'max': 1.0}},
        },
        'data': {'rate': RATE},
        'estimator': {'method': 'lm', 'iterations': 40, 'residual': 'equation_error',
                      **estimator},
    }


@pytest.fixture(scope='module')
def problem():
    return pipeline.build_problem(config_io.from_dict(arm_config()))


@pytest.fixture(scope='module')
def truth(problem):
    theta = np.asarray(problem.spec.from_params(problem.base_params)).copy()
    for name, value in (('link2.mass', 1.4), ('link2.com.x', 0.08), ('joint1.coulomb', 0.2),
                        ('joint2.coulomb', 0.05)):
        theta[problem.spec.index(name)] = value
    return theta


@pytest.fixture(scope='module')
def recording(problem, truth):
    params = problem.spec.to_params(jnp.asarray(truth), problem.base_params)
    return [pipeline.simulate(problem, params, duration=12.0, noise=1e-3, seed=seed,
                              torque_scale=0.6) for seed in (3, 4)]


@pytest.fixture(scope='module')
def prepared(problem, recording):
    return estimator_data.method_data(problem, recording, 'shooting')


def test_filter_is_exact_for_cubics_and_delayed_by_half_its_length():
    dt, taps = 0.01, 7
    t = np.arange(40) * dt
    q = np.stack([t ** 3 - t, 2.0 * t ** 2], axis=1)
    qd = np.stack([3 * t ** 2 - 1.0, 4.0 * t], axis=1)
    tau = np.ones_like(q)
    out = ee.filter_samples(q, qd, tau, dt, taps)
    instants = t[taps // 2::taps][:out['q'].shape[0]]          # D = 3 samples back
    np.testing.assert_allclose(out['q'][:, 0], instants ** 3 - instants, atol=1e-12)
    np.testing.assert_allclose(out['qd'][:, 1], 4.0 * instants, atol=1e-12)
    np.testing.assert_allclose(out['qdd'], np.stack([6 * instants, 4.0 + 0 * instants], 1),
                               atol=1e-9)
    np.testing.assert_allclose(out['tau'], 1.0)
    # A torque ramp: its rate through the slope kernel (the first output's oldest torque
    # has no predecessor to average with).
    ramp = ee.filter_samples(q, qd, np.stack([2.0 * t + 1.0, -t], axis=1), dt, taps)
    np.testing.assert_allclose(ramp['tau_rate'][1:], [[2.0, -1.0]] * (len(instants) - 1),
                               atol=1e-9)
    with pytest.raises(ValueError, match='odd number'):
        ee.savitzky_golay_kernels(6, dt)


def test_log_likelihood_is_the_gaussian_of_the_torque_residuals(problem, prepared, truth):
    # Without the timing term (`data.torque_timing_std` 0): independent Gaussians.
    setting = prepared.target.likelihood
    assert float(prepared.data.timing_std) == 1e-3          # the default
    data = prepared.data._replace(timing_std=jnp.asarray(0.0))
    params = problem.spec.to_params(jnp.asarray(truth), problem.base_params)
    terms = lik.log_likelihood(setting, params, jnp.zeros(setting.shooting_shape(data)), data)
    r = np.asarray(ee.torque_residuals(setting, params, data)) / np.asarray(data.noise_std)
    sigma = np.asarray(data.noise_std)
    k, n, _ = r.shape
    expected = -0.5 * np.sum(r ** 2) - k * n * np.sum(np.log(np.sqrt(2 * np.pi) * sigma))
    np.testing.assert_allclose(float(terms.log_lik), expected, rtol=1e-12)
    assert terms.defects.size == 0
    loss = float(lik.residual_loss(setting, data, terms.log_lik))
    assert loss == pytest.approx(np.mean(r ** 2), rel=1e-12)
    half = lik.select_trajectories(data, jnp.arange(k // 2))
    assert half.tau.shape == (k // 2, n, problem.model.nv) and half.x0.shape == (k // 2, 0)


def test_the_timing_offset_is_marginalised(problem, prepared, truth):
    # With a timing std s_t, one piece's log-likelihood is the Gaussian of its residuals
    # with covariance diag(sigma^2) + s_t^2 v v^T (v: its torque rates), and the whitened
    # residuals' squared norm is that Gaussian's quadratic form.
    setting = prepared.target.likelihood
    data = lik.select_trajectories(prepared.data, jnp.arange(1))
    data = data._replace(timing_std=jnp.asarray(2e-3))
    params = problem.spec.to_params(jnp.asarray(truth) * 1.05, problem.base_params)
    terms = lik.log_likelihood(setting, params, jnp.zeros(setting.shooting_shape(data)), data)
    r = np.asarray(ee.torque_residuals(setting, params, data)).reshape(-1)
    v = np.asarray(data.tau_rate).reshape(-1)
    var = np.broadcast_to(np.square(np.asarray(data.noise_std)), data.tau.shape).reshape(-1)
    cov = np.diag(var) + 2e-3 ** 2 * np.outer(v, v)
    quad = r @ np.linalg.solve(cov, r)
    expected = -0.5 * (quad + np.linalg.slogdet(2 * np.pi * cov)[1])
    np.testing.assert_allclose(float(terms.log_lik), expected, rtol=1e-10)
    white = shooting_windows.window_residuals(setting, params, data.x0, data)
    np.testing.assert_allclose(float(jnp.sum(jnp.square(white))), quad, rtol=1e-10)


def test_a_timing_offset_biases_the_fit_unless_marginalised(problem, recording, truth):
    # The torques read 10 ms (two samples) early, by linear interpolation of the held
    # commands: without the timing term the fit puts the offset into the parameters (link2's
    # mass 5.0 stds off, measured); with `data.torque_timing_std` at twice the offset every
    # parameter holds the truth within 3 of its stds (at most 1.2, measured).
    shift = 10e-3
    early = [dataclasses.replace(traj, tau=np.stack(
        [np.interp(traj.t + shift, traj.t, column) for column in traj.tau.T], axis=1))
        for traj in recording]
    z = {}
    for timing in (0.0, 2 * shift):
        d = arm_config()
        d['data']['torque_timing_std'] = timing
        fitted = pipeline.build_problem(config_io.from_dict(d))
        result = pipeline.fit(fitted, early, method='lm')
        assert result.converged, result.warnings
        z[timing] = (result.estimate - truth) / result.std
    assert np.max(np.abs(z[0.0])) > 4.0, dict(zip(problem.names, z[0.0]))
    assert np.all(np.abs(z[2 * shift]) < 3.0), dict(zip(problem.names, z[2 * shift]))


def test_gradient_matches_finite_differences(problem, prepared, truth):
    setting, data = prepared.target.likelihood, prepared.data
    spec, base = problem.spec, problem.base_params
    one = lik.select_trajectories(data, jnp.arange(1))

    def log_lik(theta):
        return lik.log_likelihood(setting, spec.to_params(theta, base),
                                  jnp.zeros(setting.shooting_shape(one)), one).log_lik

    check_grads(log_lik, (jnp.asarray(truth) * 1.1,), order=1, modes=('fwd', 'rev'),
                eps=1e-6, rtol=1e-5)


def test_config_rejects_bad_values(problem):
    d = arm_config()
    d['estimator']['residual'] = 'torque_error'
    with pytest.raises(ConfigError, match=r'estimator\.residual: expected one of '
                                          r'output_error \| equation_error'):
        config_io.from_dict(d)
    d = arm_config()
    d['data']['torque_noise_std'] = [0.1, 0.2, 0.3]
    bad = pipeline.build_problem(config_io.from_dict(d))
    with pytest.raises(ConfigError, match=r'data\.torque_noise_std: expected 1 value or 2'):
        estimator_data.equation_error_problem(bad, [])
    d = arm_config(method='nea')
    nea = pipeline.build_problem(config_io.from_dict(d))
    with pytest.raises(ConfigError, match=r'estimator\.residual: equation_error is a '
                                          r'likelihood of lm'):
        estimator_data.method_data(nea, [], 'regressor')
    with pytest.raises(ValueError, match='not additive'):
        ee.make_equation_error_likelihood(problem.model, 'ff_nn')


def test_lm_recovers_the_truth_within_its_uncertainty(problem, recording, truth, prepared):
    result = pipeline.fit(problem, recording, method='lm')
    assert result.converged, result.warnings
    z = (result.estimate - truth) / result.std
    assert np.all(np.abs(z) < 3.0), dict(zip(problem.names, z))
    # The estimated torque noise is that of the residuals at the truth (filter bias and
    # the propagated sensor noise), within 20 %.
    setting, data = prepared.target.likelihood, prepared.data
    params = problem.spec.to_params(jnp.asarray(truth), problem.base_params)
    at_truth = ee.residual_noise_std(ee.torque_residuals(setting, params, data), 0)
    np.testing.assert_allclose(data.noise_std, at_truth, rtol=0.2)


def test_friction_is_filtered_at_the_measured_samples_like_the_torques(problem, truth):
    # Torques filtered from exact ones at the samples of a slow motion with velocity
    # reversals and strong Coulomb friction, over a 0.1 s filter: the residuals at the truth
    # are the filter's small bias on the rigid-body torque only. Friction taken at the
    # filtered velocities instead jumps at each reversal where the filtered torque ramps
    # (measured: RMS residuals 3e-6 N m against a mismatch of 0.065 and 0.030 N m).
    dt, taps = 1.0 / RATE, 21
    t = np.arange(0.0, 10.0, dt)[:, None]
    amplitude, rate, phase = np.array([0.8, 0.6]), np.array([1.3, 1.7]), np.array([0.0, 0.5])
    q = amplitude * np.sin(rate * t + phase)
    qd = amplitude * rate * np.cos(rate * t + phase)
    qdd = -amplitude * rate ** 2 * np.sin(rate * t + phase)
    theta = truth.copy()
    theta[problem.spec.index('joint1.coulomb')] = 0.8
    theta[problem.spec.index('joint2.coulomb')] = 0.4
    params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
    setting = ee.make_equation_error_likelihood(problem.model, 'coulomb_viscous')
    model, actuator = problem.model, actuators.get_actuator('coulomb_viscous')
    exact = np.asarray(jax.vmap(lambda *x: actuators.command_for(
        model, params, x[0], x[1], rigid_body.rnea(model, params, *x), actuator))(q, qd, qdd))
    smooth = ee.savitzky_golay_kernels(taps, dt)[0]
    out = ee.filter_samples(q, qd, exact, dt, taps)
    # The value filter of the exact torques at the samples (what a measurement gives).
    out['tau'] = ee.filter_samples(exact, qd, exact, dt, taps)['q']
    data = ee.make_torque_data(setting, **{k: v[None] for k, v in out.items()},
                               smooth=smooth, noise_std=1.0)
    at_truth = np.sqrt(np.mean(np.square(ee.torque_residuals(setting, params, data)),
                               axis=(0, 1)))
    sign = np.tanh(np.asarray(data.qd) / actuators.DEFAULT_EPS)
    filtered = np.einsum('l,knlj->knj', smooth,
                         np.tanh(np.asarray(data.qd_taps) / actuators.DEFAULT_EPS))
    mismatch = np.sqrt(np.mean(np.square(np.asarray(params.coulomb) * (sign - filtered)),
                               axis=(0, 1)))
    assert np.all(mismatch > 0.02) and np.all(at_truth < 1e-3 * mismatch), (at_truth, mismatch)
