"""`pipeline.fit` with the Bayesian methods (`io.estimator_fit`, `core.inference.methods`) on a
simulated double pendulum.

One small problem for the whole module: two link masses and two joint dampings, 1 s of
data at 100 Hz (100 steps) in 5 shooting windows, 16 particles. CSVGD is run once (module
fixture) and must recover the truth; the other methods take a few steps each; bad input
must fail before the estimator is built (and so before anything is compiled); Ctrl-C returns
the latest particles; `sysid fit --method csvgd` writes the result files. The CSVGD runs of
the module share one compiled step (same problem, particle count and learning rate).
"""

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.core.inference import particles, registry
from sysid_ros.core.inference.base import StepInfo
from sysid_ros.io import compile_cache, estimator_data, estimator_fit
from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline
from sysid_ros.io import results
from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io.config import ConfigError
from sysid_ros.io.trajectory import DataError, Trajectory

NOISE = 2e-3
TRUTH = {'link1.mass': 1.0, 'link2.mass': 1.0, 'joint1.damping': 0.15, 'joint2.damping': 0.08}
# CSVGD recovery: absolute error of the posterior mean [kg, N m s/rad].
TOLERANCE = {'link1.mass': 0.05, 'link2.mass': 0.05, 'joint1.damping': 0.04,
             'joint2.damping': 0.02}
PARTICLES = 16
ITERATIONS = 400


def dp_config(**estimator):
    """The test problem (a plain dict, as in a YAML file)."""
    return {
        'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
                  'actuator': 'viscous', 'integrator': 'semi_implicit_euler',
                  'dt': 0.01},          # the step that simulates the data (else a finer one)
        'parameters': {
            'link1': {'mass': {'min': 0.5, 'max': 2.0}},
            'link2': {'mass': {'min': 0.5, 'max': 2.0}},
            'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
            'joint2': {'damping': {'min': 0.0, 'max': 0.5}},
        },
        'data': {'rate': 100.0, 'noise_std': [NOISE]},
        'estimator': {'method': 'csvgd', 'particles': PARTICLES, 'iterations': ITERATIONS,
                      'shooting_windows': 5, 'learning_rate': 0.1, 'window': 'all',
                      'init': 'sobol', **estimator},
    }


def _problem(**estimator):
    return pipeline.build_problem(config_io.from_dict(dp_config(**estimator)))


@pytest.fixture(scope='module')
def problem():
    return _problem()


@pytest.fixture(scope='module')
def traj(problem):
    """1 s (100 steps) of the nominal model (the truth) with sensor noise NOISE, under a
    strong excitation (joint speeds up to 5 and 9 rad/s), so that the dampings show."""
    return pipeline.simulate(problem, duration=1.0, noise=NOISE, seed=1, torque_scale=2.0)


def _fit_estimator(problem, traj, method, iterations):
    """(the compile cache's Estimator that `pipeline.fit` runs for `method` and `iterations`,
    the prepared data of `traj`)."""
    prepared = estimator_data.method_data(problem, pipeline.prepare_trajectories(problem, [traj]),
                                          registry.lookup(method).data)
    options = compile_cache.method_options(problem, iterations)
    return compile_cache.compiled_estimator(problem, method, prepared.target, options), prepared


@pytest.fixture(scope='module')
def csvgd_fit(problem, traj):
    start = time.perf_counter()
    result = pipeline.fit(problem, [traj])
    return result, time.perf_counter() - start


@pytest.fixture
def no_compilation(monkeypatch):
    """Running the estimator's (jitted) steps fails the test: bad input must stop before."""
    def refuse(*args, **kwargs):
        raise AssertionError('the steps ran before the input was checked')
    monkeypatch.setattr(estimator_fit, 'run_steps', refuse)


def test_all_names_import():
    for module in (estimator_data, estimator_fit, compile_cache, particles):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_csvgd_recovers_the_truth(problem, csvgd_fit):
    result, wall = csvgd_fit
    truth = np.array([TRUTH[n] for n in problem.names])
    error = result.estimate - truth
    print(f'CSVGD: mean {dict(zip(problem.names, np.round(result.estimate, 4)))}, '
          f'std {dict(zip(problem.names, np.round(result.std, 4)))}, '
          f'error {dict(zip(problem.names, np.round(error, 4)))}, '
          f'final loss {result.final_loss:.3g}, max defect {result.info["max_defect"]:.2g}, '
          f'fit {wall:.1f} s')
    for name, e, std in zip(problem.names, error, result.std):
        assert abs(e) < TOLERANCE[name] and abs(e) < 3.0 * std, (name, e, std)
    assert result.method == 'csvgd' and not result.interrupted
    assert result.particles.shape == (PARTICLES, 4) and result.initial.shape == (PARTICLES, 4)
    assert result.iterations == ITERATIONS and result.loss_history.shape == (ITERATIONS,)
    assert np.all(result.particles >= result.lower) and np.all(result.particles <= result.upper)
    assert result.consistent.all()
    # The posterior is narrower than the Sobol cloud it started from, and the particles are
    # continuous simulations (normalised defects near 0).
    assert np.all(result.std < 0.5 * result.initial.std(axis=0))
    assert result.info['max_defect'] < 0.05
    # Loss: mean squared noise-normalised residual of the best particle; about 1 at the end.
    assert result.loss_history[0] > 100.0 * result.final_loss
    assert result.final_loss < 10.0
    info = result.info
    assert info['num_pieces'] == 1 and info['piece_steps'] == 100 and info['window_steps'] == 20
    assert info['noise_std'] == [NOISE] * 4 and info['noise_std_source'] == 'config'
    assert info['likelihood'] == 'product' and info['num_reseeded'] == 0
    assert info['best_loss'] <= result.final_loss
    assert set(info['best_particle']) == set(problem.names)


@pytest.mark.parametrize('method', [
    'svgd', 'sgld', 'emcee', 'cem',
    # Compiling blackjax's window adaptation and NUTS kernel took 2.5 min on 2 loaded cores.
    pytest.param('nuts', marks=pytest.mark.slow)])
def test_other_methods_take_a_few_steps(traj, method):
    # 2 windows: D = 4 parameters + 4 shooting states, so that Emcee's 16 >= 2 D walkers fit;
    # one shape for all methods, so that they share the compiled likelihood evaluation.
    problem = _problem(method=method, iterations=3, shooting_windows=2)
    result = pipeline.fit(problem, [traj])
    assert result.method == method and result.iterations == 3
    assert result.particles.shape == (PARTICLES, 4) and np.all(np.isfinite(result.particles))
    assert np.all(result.particles >= result.lower) and np.all(result.particles <= result.upper)
    assert np.all(np.isfinite(result.loss_history))
    assert result.info['num_reseeded'] >= 0
    if method in ('nuts', 'emcee'):
        assert 0.0 <= result.info['acceptance'] <= 1.0
    if method in ('nuts', 'sgld'):
        assert result.info['step_size'] > 0.0
    # The contract on the estimator that the fit ran (the compile cache's): the same StepInfo
    # fields for every method, a (P, M) posterior, and rebase onto new data at given particles.
    est, prepared = _fit_estimator(problem, traj, method, 3)
    theta0 = particles.initial_particles(problem.spec, problem.base_params, PARTICLES)
    state = est.init(jax.random.PRNGKey(0), jnp.asarray(theta0), prepared.data)
    state, info = est.step(state, prepared.data, None)
    assert isinstance(info, StepInfo)
    assert all(np.shape(v) == (PARTICLES,) for v in (info.loss, info.grad_norm, info.max_defect))
    assert np.shape(info.num_nonfinite) == () and np.shape(info.converged) == ()
    assert np.asarray(est.posterior(state)).shape == (PARTICLES, 4)
    rebased = est.rebase(state, jnp.asarray(theta0), prepared.data)
    if method != 'cem':                  # CEM's population is drawn from its new mixture
        np.testing.assert_allclose(est.posterior(rebased), theta0, rtol=1e-9)
    _, again = est.step(rebased, prepared.data, None)
    assert np.all(np.isfinite(np.asarray(again.loss)))


def test_ctrl_c_keeps_the_latest_particles(problem, traj, csvgd_fit):
    def interrupt(iteration, total, loss, elapsed):
        if iteration == 2:
            raise KeyboardInterrupt

    stopped = pipeline.fit(problem, [traj], progress=interrupt)
    assert stopped.interrupted and stopped.iterations == 2
    # The same two steps by hand (a 2-iteration fit would decay its step size sooner).
    est, prepared = _fit_estimator(problem, traj, 'csvgd', ITERATIONS)
    seed = problem.config.estimator.seed
    theta0 = particles.initial_particles(problem.spec, problem.base_params, PARTICLES, seed)
    state = est.init(jax.random.PRNGKey(seed), jnp.asarray(theta0), prepared.data)
    for _ in range(2):
        state, _ = est.step(state, prepared.data, None)
    np.testing.assert_allclose(stopped.particles, est.posterior(state), rtol=1e-12)
    assert stopped.final_loss == pytest.approx(stopped.loss_history[-1])


def test_bad_input_fails_before_compilation(problem, traj, no_compilation):
    start = time.perf_counter()
    config = problem.config

    def with_estimator(**changes):
        return dataclasses.replace(problem, config=dataclasses.replace(
            config, estimator=dataclasses.replace(config.estimator, **changes)))

    with pytest.raises(ConfigError, match=r'estimator\.particles: expected int >= 1, got 0'):
        pipeline.fit(with_estimator(particles=0), [traj])
    with pytest.raises(ConfigError, match=r'estimator\.shooting_windows: expected at most 50 '
                                          r'windows .* \(100 steps .*got 51'):
        pipeline.fit(with_estimator(shooting_windows=51), [traj])
    with pytest.raises(ConfigError, match=r'estimator\.particles: emcee needs >= 2 D = 40 '):
        pipeline.fit(with_estimator(method='emcee', particles=16), [traj])
    with pytest.raises(ConfigError, match=r'data\.noise_std: expected 1 value or 4'):
        pipeline.fit(dataclasses.replace(problem, config=dataclasses.replace(
            config, data=dataclasses.replace(config.data, noise_std=(0.1, 0.1)))), [traj])
    unbounded = dp_config()
    unbounded['parameters']['joint2']['damping'] = {'min': 0.0}
    with pytest.raises(ConfigError, match=r'parameters: csvgd samples within the bounds .* '
                                          r'unbounded: joint2\.damping \[0, inf\]'):
        pipeline.fit(config_io.from_dict(unbounded), [traj])
    empty = dp_config()
    empty['parameters']['link1']['mass'] = {'min': 2.0, 'max': 2.0}
    with pytest.raises(ConfigError, match=r'parameters\.link1\.mass\.max: expected number > '
                                          r'min = 2\.0'):
        pipeline.fit(config_io.from_dict(empty), [traj])
    nan = dataclasses.replace(traj, qd=traj.qd.copy(), source='run.npz')
    nan.qd[5, 1] = np.nan
    with pytest.raises(DataError, match=r'run\.npz: qd: non-finite value \(nan\) at row 5, '
                                        r"joint 'joint2'"):
        pipeline.fit(problem, [nan])
    three = Trajectory(t=traj.t, q=np.zeros((traj.num_samples, 3)),
                       qd=np.zeros((traj.num_samples, 3)), tau=np.zeros((traj.num_samples, 3)))
    with pytest.raises(DataError, match=r'q: expected 2 joints, got 3'):
        pipeline.fit(problem, [traj, three])
    assert time.perf_counter() - start < 10.0


def test_pieces_of_unequal_trajectories(problem, traj):
    longer = pipeline.simulate(problem, duration=2.2, noise=NOISE, seed=2)      # 220 steps
    prepared = pipeline.prepare_trajectories(problem, [traj, longer])
    sp = estimator_data.shooting_problem(problem, prepared)
    assert sp.data.controls.shape == (3, 100, 2)
    assert sp.data.observations.shape == (3, 101, 4)
    assert sp.info['num_pieces'] == 3 and sp.info['dropped_steps'] == 20
    np.testing.assert_array_equal(sp.data.x0[2],
                                  np.concatenate([longer.q[100], longer.qd[100]]))
    np.testing.assert_array_equal(sp.data.controls[1], longer.tau[:100])
    assert sp.likelihood.combine == 'product' and sp.likelihood.num_windows == 5


def test_noise_std_is_estimated_from_the_data(problem, traj):
    clean = pipeline.simulate(problem, duration=1.0, noise=0.0, seed=1, torque_scale=2.0)
    states = np.concatenate([traj.q, traj.qd], axis=1)[None]
    sigma = estimator_data.estimate_noise_std(states, 2)
    assert np.all(sigma[:2] > 0.7 * NOISE) and np.all(sigma[:2] < 1.5 * NOISE), sigma
    assert np.all(sigma[2:] > 0.7 * NOISE) and np.all(sigma[2:] < 5.0 * NOISE), sigma
    exact = np.concatenate([clean.q, clean.qd], axis=1)[None]
    floor = estimator_data.NOISE_FLOOR * exact[0].std(axis=0)
    assert np.all(estimator_data.estimate_noise_std(exact, 2) >= floor * (1 - 1e-12))
    default = dataclasses.replace(problem, config=dataclasses.replace(
        problem.config, data=dataclasses.replace(problem.config.data, noise_std=())))
    sp = estimator_data.shooting_problem(default, [traj])
    assert sp.info['noise_std_source'] == 'estimated'
    np.testing.assert_allclose(sp.data.noise_std, estimator_data.estimate_noise_std(states, 2))


def test_initial_particles_are_sobol_points_with_init_first():
    with_init = dp_config()
    with_init['parameters']['link1']['mass']['init'] = 1.2
    with_init['parameters']['joint1']['damping']['init'] = 0.0          # on the bound
    problem = pipeline.build_problem(config_io.from_dict(with_init))
    theta = particles.initial_particles(problem.spec, problem.base_params, 8, seed=0)
    lower, upper = np.array(problem.spec.lower_bounds), np.array(problem.spec.upper_bounds)
    margin = particles.INTERIOR_MARGIN * (upper - lower)
    assert theta.shape == (8, 4) and np.all((theta > lower) & (theta < upper))
    assert theta[0, 0] == 1.2 and theta[0, 2] == pytest.approx(margin[2])
    np.testing.assert_array_equal(theta[1:], np.clip(
        particles.sobol_particles(problem.spec, 8, seed=0)[1:], lower + margin, upper - margin))
    nominal = np.clip(np.asarray(problem.spec.initial_theta(problem.base_params)),
                      lower + margin, upper - margin)
    assert theta[0, 1] == pytest.approx(nominal[1])


def test_likelihood_key_is_validated():
    d = dp_config(likelihood='sum')
    assert config_io.from_dict(d).estimator.likelihood == 'sum'
    assert config_io.from_dict(dp_config()).estimator.likelihood == 'product'
    d['estimator']['likelihood'] = 'max'
    with pytest.raises(ConfigError, match=r'estimator\.likelihood: expected one of '
                                          r'product \| sum'):
        config_io.from_dict(d)


def test_cli_fit_csvgd_writes_the_posterior(problem, traj, tmp_path, capsys, csvgd_fit):
    config = tmp_path / 'dp.yaml'
    d = dp_config(method='nea')
    config.write_text(yaml.safe_dump({'/**': {'ros__parameters': d}}, sort_keys=False))
    data = tmp_path / 'run.npz'
    trajectory_io.save_trajectory(data, traj)
    out = tmp_path / 'out'
    # Three steps cannot converge: the results are written and the exit status says so.
    assert cli.main(['fit', '--config', str(config), '--data', str(data), '--out', str(out),
                     '--method', 'csvgd', '--iterations', '3']) == cli.FIT_NOT_CONVERGED
    captured = capsys.readouterr()
    assert 'csvgd: 3 iterations' in captured.out and 'joint2.damping' in captured.out
    assert 'WARNING csvgd did not converge in 3 iterations' in captured.err
    assert sorted(os.listdir(out)) == sorted(results.BASE_FILES)
    estimate = results.read_estimate(out)
    assert estimate['method'] == 'csvgd' and estimate['num_particles'] == PARTICLES
    assert estimate['diagnostics']['likelihood'] == 'product'
    assert estimate['converged'] is False and len(estimate['warnings']) >= 1
    with np.load(out / 'posterior.npz') as posterior:
        particles = posterior['particles']
        assert particles.shape == (PARTICLES, 4)
        assert list(posterior['names']) == list(problem.names)
    for k, name in enumerate(problem.names):
        assert estimate['parameters'][name]['mean'] == pytest.approx(particles[:, k].mean())
        assert estimate['parameters'][name]['std'] == pytest.approx(particles[:, k].std())
