"""Single/multiple-shooting likelihood: windows vs one rollout, the Gaussian log-density by
hand, sum vs product forms, and data validation before any compilation."""

import dataclasses
import functools

import csvgd_problems as dp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.likelihoods import likelihood as lk
from sysid_ros.core.likelihoods import profiled_start as ps
from sysid_ros.core.likelihoods import shooting_windows as sw

T, W = 12, 3
NOISE = np.array([0.1, 0.2, 0.3, 0.4])


def _setting(num_windows=W, combine='sum', observed=None):
    return lk.make_shooting_likelihood(dp.MODEL, dp.DT, num_windows, combine, observed,
                                       integrator=dp.INTEGRATOR, actuator=dp.ACTUATOR)


def _data(setting, lengths=((1.0, 2.0), (2.0, 1.0)), noise=NOISE):
    states = np.stack([dp.simulate(a, b, T) for a, b in lengths])
    return lk.make_trajectory_data(setting, states, np.zeros((len(lengths), T, 2)), noise)


def test_all_names_import():
    for name in lk.__all__:
        assert hasattr(lk, name), name


def test_windows_on_the_true_trajectory_have_no_defects_and_reproduce_it():
    setting = _setting()
    data = _data(setting)
    params = dp.make_params_fn()(jnp.asarray(dp.theta_from_lengths([1.0, 2.0])))
    shooting = lk.initial_shooting_states(setting, data)
    assert shooting.shape == (2, W - 1, 4)
    windows = jax.jit(sw.simulate_windows, static_argnums=0)(
        setting, params, data.x0, shooting, data.controls)
    assert windows.shape == (2, W, T // W + 1, 4)
    predicted = sw.predicted_trajectories(windows)
    np.testing.assert_allclose(predicted[0], dp.simulate(1.0, 2.0, T), atol=1e-12)
    terms = lk.log_likelihood(setting, params, shooting, data)
    np.testing.assert_allclose(terms.defects[0], 0.0, atol=1e-12)
    assert np.max(np.abs(terms.defects[1])) > 1e-3          # the other trajectory's lengths


def test_log_likelihood_by_hand_and_sum_vs_product():
    theta = jnp.asarray(dp.theta_from_lengths([1.2, 1.7]))
    params = dp.make_params_fn()(theta)
    single = _setting(num_windows=1)
    data = _data(single)
    shooting = jnp.zeros((2, 0, 4))
    terms = lk.log_likelihood(single, params, shooting, data)
    rollout = dp.simulate(1.2, 1.7, T)
    residual = (rollout[None] - np.asarray(data.observations)) / NOISE
    expected = (-0.5 * np.sum(residual ** 2, axis=(1, 2))
                - (T + 1) * np.sum(np.log(np.sqrt(2 * np.pi) * NOISE)))
    np.testing.assert_allclose(terms.per_trajectory, expected, rtol=1e-12)
    np.testing.assert_allclose(terms.log_lik, np.logaddexp(*expected) - np.log(2.0),
                               rtol=1e-12)
    product = lk.log_likelihood(_setting(1, 'product'), params, shooting, data)
    np.testing.assert_allclose(product.log_lik, np.sum(expected), rtol=1e-12)
    assert terms.defects.shape == (2, 0, 4)


def test_partial_observation_and_gradients_are_finite():
    setting = _setting(observed=(0, 1))
    data = _data(setting, noise=0.05)
    assert data.observations.shape == (2, T + 1, 2) and data.noise_std.shape == (2,)
    shooting = lk.initial_shooting_states(setting, data)
    # Unobserved velocities start at the mean of the measured states.
    np.testing.assert_allclose(shooting[..., 2:], np.broadcast_to(data.state_mean[2:],
                                                                  (2, W - 1, 2)))

    def total(theta, shooting):
        terms = lk.log_likelihood(setting, dp.make_params_fn()(theta), shooting, data)
        return terms.log_lik + jnp.sum(terms.defects)

    grads = jax.jit(jax.grad(total, argnums=(0, 1)))(
        jnp.asarray(dp.theta_from_lengths([1.5, 1.5])), shooting)
    assert all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.parametrize('states, controls, noise, match', [
    (np.zeros((2, T + 1, 4)), np.zeros((2, T, 2)), 0.0, 'noise_std'),
    (np.zeros((2, T + 1, 3)), np.zeros((2, T, 2)), 0.1, 'states'),
    (np.zeros((2, T + 1, 4)), np.zeros((2, T - 1, 2)), 0.1, 'controls'),
    ([np.zeros((T + 1, 4)), np.zeros((T, 4))], np.zeros((2, T, 2)), 0.1, 'unequal'),
    (np.full((1, T + 1, 4), np.nan), np.zeros((1, T, 2)), 0.1, 'NaN'),
    (np.zeros((1, T + 2, 4)), np.zeros((1, T + 1, 2)), 0.1, 'does not divide'),
    ([], [], 0.1, 'no trajectory'),
])
def test_bad_data_is_rejected_on_the_host(states, controls, noise, match):
    with pytest.raises(ValueError, match=match):
        lk.make_trajectory_data(_setting(), states, controls, noise)


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match='combine'):
        _setting(combine='mean')
    with pytest.raises(ValueError, match='num_windows'):
        _setting(num_windows=0)
    with pytest.raises(ValueError, match='observed'):
        _setting(observed=(0, 4))
    with pytest.raises(ValueError, match='start'):
        lk.make_shooting_likelihood(dp.MODEL, dp.DT, 1, start='fitted')
    with pytest.raises(ValueError, match='single shooting'):
        lk.make_shooting_likelihood(dp.MODEL, dp.DT, W, start='profiled')


def test_default_setting_has_no_mocap_and_observes_state_dimensions():
    """The observation-model extension leaves the state-dimension path as it was: the default
    setting tracks no frame, observes the listed state dimensions, and weighs csvgd's
    constraints with their state scale."""
    setting = _setting(observed=(0, 3))
    assert setting.mocap == () and setting.observation_dim == 2
    data = _data(setting, noise=0.05)
    np.testing.assert_array_equal(setting.observation_scale(data),
                                  np.asarray(data.state_scale)[[0, 3]])
    np.testing.assert_array_equal(data.states[..., [0, 3]], data.observations)
    states = jnp.asarray(np.asarray(data.states)[0])
    np.testing.assert_array_equal(sw.observe(setting, None, states),
                                  np.asarray(states)[:, [0, 3]])


def test_fitted_window_starts_are_the_least_squares_starts():
    """A window whose measured start carries noise: the fitted start minimises the window's
    residuals (scipy's least squares on the same residuals agrees) and lies much nearer the
    true start than the measured one; on noise-free data it stays at the true start."""
    from scipy.optimize import least_squares
    single = _setting(num_windows=1)
    clean = _data(single)
    params = dp.make_params_fn()(jnp.asarray(dp.theta_from_lengths([1.0, 2.0])))
    fit = jax.jit(lambda data: ps.fit_window_starts(single, params, data))
    np.testing.assert_allclose(fit(clean)[0], clean.x0[0], atol=1e-10)
    offset = jnp.asarray([0.05, -0.03, 0.1, 0.02])
    noisy = clean._replace(x0=clean.x0 + offset,
                           observations=clean.observations.at[:, 0].add(offset))
    first = noisy._replace(x0=noisy.x0[:1], controls=noisy.controls[:1],
                           observations=noisy.observations[:1])
    residuals = jax.jit(lambda start: sw.window_residuals(single, params, start[None],
                                                          first)[0])
    reference = least_squares(lambda s: np.asarray(residuals(jnp.asarray(s))),
                              np.asarray(noisy.x0[0]), xtol=1e-14, ftol=1e-14).x
    fitted = np.asarray(fit(noisy)[0])
    np.testing.assert_allclose(fitted, reference, atol=1e-8)
    assert np.linalg.norm(fitted - clean.x0[0]) < 0.2 * np.linalg.norm(offset)


@functools.cache
def _noisy_starts():
    """Single-shooting settings with the measured and the profiled start, data whose measured
    starts are 0.01-0.03 off the true ones, the parameter map and a parameter vector (the
    same objects for every test, so that the jitted functions below compile once)."""
    measured = _setting(num_windows=1, combine='product')
    profiled = dataclasses.replace(measured, start='profiled')
    clean = _data(measured)
    offset = jnp.asarray([[0.02, -0.01, 0.03, 0.01], [-0.01, 0.02, -0.02, 0.03]])
    data = clean._replace(x0=clean.x0 + offset,
                          observations=clean.observations.at[:, 0].add(offset))
    return measured, profiled, data, dp.make_params_fn(), jnp.asarray(
        dp.theta_from_lengths([1.1, 1.9]))


@jax.jit
def _measured_log_lik(theta, data):
    """Log-likelihood from the measured starts `data.x0` of data shaped as `_noisy_starts`'."""
    measured, _, _, params_fn, _ = _noisy_starts()
    return lk.log_likelihood(measured, params_fn(theta), jnp.zeros((2, 0, 4)), data).log_lik


@jax.jit
def _fitted_starts(theta, data, iterations):
    """`fit_window_starts` of data shaped as `_noisy_starts`'; the iteration count is traced,
    so every count shares one compilation."""
    measured, _, _, params_fn, _ = _noisy_starts()
    return ps.fit_window_starts(measured, params_fn(theta), data, iterations)


def test_profiled_start_log_likelihood_and_its_gradient(monkeypatch):
    """With `start: profiled` the log-likelihood is the measured-start one evaluated at the
    fitted starts, above the measured-start one, and its gradient in the parameters (the fit
    held constant) equals central finite differences of the profiled log-likelihood itself
    (envelope theorem) to 1e-7 once the fit has converged (5 Gauss-Newton steps here; with
    the default 2 the gradient was 1.8e-4 off on these start errors of 0.01-0.03, ten times
    the live configuration's noise)."""
    monkeypatch.setattr(ps, 'PROFILE_ITERATIONS', 5)
    _, profiled, data, params_fn, theta = _noisy_starts()
    no_shooting = jnp.zeros((2, 0, 4))

    def profiled_log_lik(t):
        return lk.log_likelihood(profiled, params_fn(t), no_shooting, data).log_lik

    def value_and_pullback(t):
        value, pullback = jax.vjp(profiled_log_lik, t)
        return value, pullback(jnp.ones_like(value))[0]

    # Per particle, as csvgd takes its scores: a VJP under vmap.
    at_profiled = jax.jit(jax.vmap(value_and_pullback))
    starts = _fitted_starts(theta, data, 5)
    values, grads = at_profiled(jnp.stack([theta, theta]))
    value, grad = values[0], grads[0]
    np.testing.assert_array_equal(grads[1], grad)
    np.testing.assert_allclose(value, _measured_log_lik(theta, data._replace(x0=starts)),
                               rtol=1e-12)
    assert value > _measured_log_lik(theta, data)
    h = 1e-6
    fd = np.array([np.diff(at_profiled(jnp.stack([theta - h * e, theta + h * e]))[0])[0]
                   / (2 * h) for e in np.eye(len(theta))])
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-7 * np.max(np.abs(fd)))


def test_carried_start_profile_reaches_the_fitted_profile():
    """A carried `StartProfile` (what csvgd keeps per particle): refreshed on new data it
    holds the starts of PROFILE_ITERATIONS Gauss-Newton steps and the Jacobian they used;
    evaluated at fixed parameters its chord steps reach the fully fitted starts, its
    log-likelihood the profiled one and its gradient (envelope of the linearised profile)
    finite differences of the converged profile, to the chord's small bias; a refresh on the
    same data takes one Gauss-Newton step from the carried starts (to the fitted ones), and
    new data refit from the measured ones."""
    _, profiled, data, params_fn, theta = _noisy_starts()
    no_shooting = jnp.zeros((2, 0, 4))
    refresh = jax.jit(lambda t, d, p: ps.refresh_start_profile(profiled, params_fn(t), d, p))

    def carried(t, p):
        terms = lk.log_likelihood(profiled, params_fn(t), no_shooting, data, profile=p)
        return terms.log_lik, terms.profile
    evaluate = jax.jit(jax.value_and_grad(carried, has_aux=True))

    def converged(t):
        return _fitted_starts(t, data, 8)

    def at_fitted(t, s):
        return _measured_log_lik(t, data._replace(x0=s))

    empty = ps.start_profile(profiled, data)
    assert bool(ps.profile_due(empty, data))
    profile = refresh(theta, data, empty)
    np.testing.assert_allclose(profile.starts,
                               _fitted_starts(theta, data, ps.PROFILE_ITERATIONS), atol=1e-12)
    assert not bool(ps.profile_due(profile, data))
    best = converged(theta)
    for _ in range(4):
        (value, profile), grad = evaluate(theta, profile)
    h = 1e-6
    fd = np.array([(at_fitted(theta + h * e, converged(theta + h * e))
                    - at_fitted(theta - h * e, converged(theta - h * e))) / (2 * h)
                   for e in np.eye(len(theta))])
    # The chord steps stop where J0^T r = 0 for the Jacobian J0 of the refresh, off the
    # optimum by the drift of J times the residual: here 2.8e-4 noise stds, 6e-7 in the
    # log-likelihood and 1.9e-4 of the gradient (measured).
    np.testing.assert_array_less(np.abs(profile.starts - best) / NOISE, 1e-3)
    np.testing.assert_allclose(value, at_fitted(theta, best), rtol=0, atol=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-3 * np.max(np.abs(fd)))
    assert int(profile.age) == 4
    again = refresh(theta, data, profile._replace(age=jnp.asarray(ps.PROFILE_REFRESH)))
    assert bool(ps.profile_due(profile._replace(age=jnp.asarray(ps.PROFILE_REFRESH)), data))
    np.testing.assert_array_less(np.abs(again.starts - best) / NOISE, 1e-4)  # 7e-6
    other = data._replace(x0=data.x0 - 0.02)               # new data: other measured starts
    assert bool(ps.profile_due(again, other))
    np.testing.assert_array_equal(refresh(theta, other, again).x0, other.x0)


def test_residual_noise_std_recovers_the_noise_of_the_data():
    """Gaussian noise of known std on a true trajectory: the residuals at the truth, starts
    fitted, give that std per dimension (within sampling error), whatever the assumed one."""
    single = lk.make_shooting_likelihood(dp.MODEL, dp.DT, 1, 'product', None,
                                         integrator=dp.INTEGRATOR, actuator=dp.ACTUATOR)
    steps = 400
    states = np.stack([dp.simulate(1.0, 2.0, steps)])
    noise = np.array([1e-3, 2e-3, 5e-3, 1e-2])
    noisy = states + np.random.default_rng(5).normal(size=states.shape) * noise
    data = lk.make_trajectory_data(single, noisy, np.zeros((1, steps, 2)), 10.0 * noise)
    params = dp.make_params_fn()(jnp.asarray(dp.theta_from_lengths([1.0, 2.0])))
    data = data._replace(x0=ps.fit_window_starts(single, params, data))
    estimate = lk.residual_noise_std(single, params, data, num_free=4)
    # The std of a sample std over n = 401 samples is about 1 / sqrt(2 n) = 3.5 %.
    np.testing.assert_allclose(estimate, noise, rtol=0.12)
