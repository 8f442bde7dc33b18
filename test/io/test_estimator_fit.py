"""Out of the box: a configuration with only model, bounds and data runs the
default method (lm) to a converged, accurate estimate with intervals; failures say so."""

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.core.inference import methods
from sysid_ros.io import compile_cache, diagnosis, estimator_data, integration_step, pipeline
from sysid_ros.io import config as config_io
from sysid_ros.io import results, step_loop, window_refit
from sysid_ros.io import trajectory as trajectory_io

BOUNDS = {'link1': {'mass': {'min': 0.2, 'max': 3.0}, 'com': {'z': {'min': -0.5, 'max': 0.0}}},
          'link2': {'mass': {'min': 0.2, 'max': 3.0}, 'com': {'z': {'min': -0.5, 'max': 0.0}}},
          'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
          'joint2': {'damping': {'min': 0.0, 'max': 0.5}}}
NOISE = 1e-4                                          # [rad, rad/s]


def _config(parameters=BOUNDS, **estimator):
    d = {'model': {'builder': 'double_pendulum', 'integrator': 'rk4'},
         'parameters': parameters, 'data': {'rate': 100.0}}
    if estimator:
        d['estimator'] = estimator
    return d


@pytest.fixture(scope='module')
def problem():
    return pipeline.build_problem(config_io.from_dict(_config()))


@pytest.fixture(scope='module')
def truth(problem):
    """A random truth within the bounds (seeded: the test is reproducible)."""
    rng = np.random.default_rng(16)
    return np.array([rng.uniform(0.5, 2.0), rng.uniform(-0.4, -0.1), rng.uniform(0.5, 2.0),
                     rng.uniform(-0.4, -0.1), rng.uniform(0.02, 0.3), rng.uniform(0.02, 0.3)])


@pytest.fixture(scope='module')
def traj(problem, truth):
    """8 s recorded by the model integrated at 1 ms, an engine finer than the fit's step
    (which the fit chooses, `io.integration_step`)."""
    fine = _config()
    fine['model']['dt'] = 1e-3
    fine = pipeline.build_problem(config_io.from_dict(fine))
    params = fine.spec.to_params(truth, fine.base_params)
    return pipeline.simulate(fine, params, duration=8.0, noise=NOISE, seed=3,
                             torque_scale=3.0)


@pytest.fixture(scope='module')
def lm_fit(problem, traj):
    lines = []
    return pipeline.fit(problem, [traj], log=lines.append), lines


def test_defaults_are_lm_with_windows_from_the_data(problem):
    cfg = problem.config.estimator
    assert cfg.method == 'lm' and cfg.window == 'auto' and cfg.init == 'point'


def test_lm_recovers_a_random_truth_with_intervals(lm_fit, truth, problem):
    result, lines = lm_fit
    error = np.abs(result.estimate - truth) / np.abs(truth)
    print(f'lm: {result.iterations} iterations, max rel error {error.max():.2e}, '
          f'std {result.std}, window {result.info["window_steps"]} steps')
    assert result.converged and result.convergence == 'tolerance' and not result.warnings
    assert error.max() < 1e-3
    lo, hi = result.interval()
    assert np.all(lo <= result.estimate) and np.all(result.estimate <= hi)
    # Coverage is measured by bench/heldout.py over many truths; here the interval must at
    # least be of the size of the error (not zero, not the bounds).
    assert np.all(result.std > 0) and np.all(hi - lo < 0.01 * (result.upper - result.lower))
    ident = result.info['identifiability']
    assert ident['condition_number'] < 1e4 and not ident['warnings']
    # Logged: the integration step chosen at lm's estimate (noise 1e-4: finer than the
    # sample period, e(1) 0.021 noise stds) and the refit at it; nothing else.
    assert lines[0].startswith('integration: ') and result.info['substeps'] > 1
    assert lines[1:] == [f'lm: fitting again at {result.info["substeps"]} steps per sample, '
                         'from its estimate']
    assert result.info['window_source'] == 'auto'
    assert result.info['starts_agreeing'] == '1 of 1'


def test_cli_writes_converged_intervals_and_exits_zero(problem, traj, tmp_path):
    config = tmp_path / 'dp.yaml'
    config.write_text(yaml.safe_dump({'/**': {'ros__parameters': _config()}}, sort_keys=False))
    data = tmp_path / 'run.npz'
    trajectory_io.save_trajectory(data, traj)
    out = tmp_path / 'out'
    assert cli.main(['fit', '--config', str(config), '--data', str(data), '--out',
                     str(out)]) == 0
    estimate = results.read_estimate(out)
    assert estimate['method'] == 'lm' and estimate['converged'] is True
    assert estimate['warnings'] == [] and estimate['convergence'] == 'tolerance'
    for entry in estimate['parameters'].values():
        lo, hi = entry['ci95']
        assert lo <= entry['mean'] <= hi
    assert 'identifiability' in estimate['diagnostics']


def test_an_unidentifiable_parameter_is_named_before_the_fit(traj):
    # A planar pendulum swinging about y never excites ixx of link 2.
    parameters = dict(BOUNDS, link2={**BOUNDS['link2'],
                                     'inertia': {'ixx': {'min': 0.0, 'max': 0.1}}})
    problem = pipeline.build_problem(config_io.from_dict(_config(parameters, iterations=3)))
    lines = []
    result = pipeline.fit(problem, [traj], log=lines.append)
    # Reported at the start (before the fit) and at the estimate (after it).
    for where, key in (('start', 'identifiability_at_start'), ('estimate', 'identifiability')):
        assert 'link2.inertia.ixx' in result.info[key]['poorly_determined']
        assert any(line.startswith(f'WARNING lm: at the {where}:') and 'link2.inertia.ixx'
                   in line for line in lines), lines


def test_several_starts_return_the_best_not_their_mean(traj):
    cfg = config_io.from_dict(_config(particles=4, iterations=2))
    result = pipeline.fit(pipeline.build_problem(cfg), [traj])
    assert any(np.array_equal(result.estimate, row) for row in result.particles)
    assert not np.allclose(result.estimate, result.particles.mean(axis=0))
    assert result.info['starts_agreeing'].endswith('of 4')


def test_bayesian_methods_start_from_the_windows_joint_fit_and_take_mini_batches(
        problem, traj, lm_fit):
    # Measured starts: the carried start profile's refit on mini-batches is test_csvgd's
    # (`test_a_carried_start_profile_follows_the_profile_fitted_every_step`), and here it
    # would compile the Gauss-Newton start fit twice more (batch and all-pieces programs).
    cfg = config_io.from_dict(_config(method='csvgd', particles=4, iterations=2, batch=2,
                                      start='measured'))
    result = pipeline.fit(pipeline.build_problem(cfg), [traj])
    assert result.info['batch_pieces'] == 2 < result.info['num_pieces']
    # Its start fit is the default fit (one lm start for four particles), with lm's result
    # (both stop once a step is below 0.01 of a std: they agree within a few of those).
    start = np.array([result.info['start_fit_estimate'][n] for n in result.names])
    assert np.all(np.abs(start - lm_fit[0].estimate) <= 0.05 * lm_fit[0].std)
    # Row 0 is the Bayesian windows' joint fit (`refit_windows`), which lm's estimate on
    # its shorter windows started: the two agree within lm's intervals.
    joint = np.array([result.info['joint_fit'][n] for n in result.names])
    np.testing.assert_allclose(result.initial[0], joint, rtol=1e-9)
    lo, hi = lm_fit[0].interval(0.99)
    assert np.all((lo <= joint) & (joint <= hi))
    spread = result.initial.std(axis=0) / (result.upper - result.lower)
    assert np.all(spread < 0.05)                 # near the estimate, not Sobol over the box
    assert not result.converged and result.warnings       # two steps: said so


def test_the_bayesian_windows_noise_is_read_at_their_own_fit(problem, traj, truth, lm_fit):
    """The noise std of the Bayesian windows comes from their own joint fit of parameters
    and starts, whatever estimate it starts from: read at an estimate 4 of lm's stds off the
    truth (which the shorter windows of lm allow), these residuals were 1.1-5 times the
    noise, and the posterior that much wider."""
    bayes = pipeline.build_problem(config_io.from_dict(_config(
        method='csvgd', particles=4, iterations=2, batch=2, start='measured')))
    # The step `pipeline.fit` chooses: at one RK4 step per sample the residuals of joint 2's
    # velocity read 1.24e-4 on this 1e-4 noise (the integrator's error, not noise).
    bayes, _ = integration_step.resolve(bayes, [traj])
    point = lm_fit[0]
    noise, joint = [], []
    for offset in (0.0, 4.0):
        theta = np.clip(truth + offset * point.std, point.lower, point.upper)
        prepared = estimator_data.method_data(bayes, [traj], 'shooting', theta=theta)
        refit = window_refit.refit_windows(bayes, prepared, theta)
        assert refit.prepared.info['noise_std_source'] == 'residuals'
        noise.append(np.asarray(refit.prepared.data.noise_std))
        joint.append(refit)
    np.testing.assert_allclose(noise[0], NOISE, rtol=0.1)        # 4 se of 804 samples
    np.testing.assert_allclose(noise[1], noise[0], rtol=1e-4)
    # The joint fit, where the Bayesian particles start, is the same from either estimate,
    # and its Laplace posterior holds the truth (|z| < 4: a chance of 4e-4 for 6
    # parameters of a calibrated posterior).
    std = np.sqrt(np.diagonal(joint[0].covariance))
    np.testing.assert_allclose(joint[1].theta, joint[0].theta, atol=1e-3 * std.min())
    z = (joint[0].theta - truth) / std
    print(f'joint fit: z of the truth {np.round(z, 2)}')
    assert np.all(np.abs(z) < 4.0)


def test_diagnose_names_each_symptom(problem):
    spec = problem.spec
    initial = np.tile(np.asarray(spec.initial_theta(problem.base_params)), (2, 1))
    steps = step_loop.StepsResult(state=None, info=None, history=np.ones(30),
                                  interrupted=False)
    frozen = diagnosis.diagnose('csvgd', np.ones(30), initial, initial, None, 50.0, steps, spec)
    assert not frozen.converged
    assert any('never moved' in w for w in frozen.warnings)
    assert any('loss 50' in w and 'model.actuator' in w for w in frozen.warnings)
    # The likelihood's own hint for a loss far above 1 (the output error's: its alternative).
    hint = estimator_data.residual_family('output_error').misfit
    runaway = diagnosis.diagnose('lm', np.ones(30), initial, initial + 0.01, None, 2.7e8,
                                 steps, spec, misfit=hint)
    assert any('loss 2.7e+08' in w and 'estimator.residual: equation_error' in w
               for w in runaway.warnings), runaway.warnings
    interrupted = diagnosis.diagnose('lm', np.ones(3), initial, initial + 0.01, None, 1.0,
                                     steps._replace(interrupted=True), spec)
    assert not interrupted.converged and interrupted.reason.startswith('interrupted')
    assert interrupted.warnings == (
        'lm was interrupted (Ctrl-C) after 3 iterations: the parameters are where it stopped, '
        'not a converged estimate, and their std is no uncertainty; run the fit to its end',)
    falling = diagnosis.diagnose('csvgd', np.geomspace(10.0, 1.0, 30), initial, initial + 0.01,
                                 None, 1.0, steps, spec)
    assert not falling.converged and 'estimator.iterations' in falling.warnings[0]
    flat = diagnosis.diagnose('csvgd', np.ones(30), initial, initial + 0.01, None, 1.0, steps,
                              spec)
    assert flat.converged and flat.reason.startswith('loss flat') and not flat.warnings
    alone = diagnosis.diagnose('csvgd', np.ones(30), initial[:1], initial[:1] + 0.01, None, 1.0,
                               steps, spec, bayesian=True)
    assert not alone.converged and 'estimator.particles' in alone.warnings[0]
    # A flat loss with particles still contracting (10x over 30 steps: 1.37x between the
    # windows of 4 steps that `diagnosis.SPREAD_SHARE` compares) is no posterior yet; a
    # spread that only fluctuates (+-10 %) has settled.
    contracting = np.geomspace(1.0, 0.1, 30)[:, None] * np.ones((30, 2))
    still = diagnosis.diagnose('csvgd', np.ones(30), initial, initial + 0.01, None, 1.0, steps,
                               spec, bayesian=True, spread=contracting)
    assert not still.converged and 'spread still changed' in still.warnings[0]
    # Particles whose mean sits 2 Laplace stds off the joint fit's mode have not reached
    # the posterior; 0.5 std off they may have; a mode within 2 stds of a bound is not
    # checked (the posterior is truncated there, its mean off its mode).
    lower, upper = np.asarray(spec.lower_bounds), np.asarray(spec.upper_bounds)
    std = 0.01 * (upper - lower)
    covariance = np.diag(std ** 2)
    for shift, at_bound, warned in ((2.0, False, True), (0.5, False, False),
                                    (2.0, True, False)):
        centre = lower + std * (0.01 if at_bound else 50.0)
        theta = centre + (shift + np.array([[-1e-3], [1e-3]])) * std
        off = diagnosis.diagnose('csvgd', np.ones(30), initial, theta, None, 1.0, steps, spec,
                                 bayesian=True, mode=(centre, covariance))
        assert off.converged is not warned
        assert any('from its mode' in w for w in off.warnings) is warned
    wobbling = 1.0 + 0.1 * np.sin(np.arange(30))[:, None] * np.ones((30, 2))
    settled = diagnosis.diagnose('csvgd', np.ones(30), initial, initial + 0.01, None, 1.0,
                                 steps, spec, bayesian=True, spread=wobbling)
    assert settled.converged and not settled.warnings


def test_one_compiled_estimator_serves_options_its_method_does_not_read(problem, traj):
    """lm reads no option, CSVGD its step size and the iterations its step decays over,
    not the particle count: a Bayesian fit's lm start (100 iterations) reuses the lm
    estimator of a plain fit (200), and a new step size or iteration count compiles anew
    (building Estimators only; nothing is compiled here)."""
    prepared = estimator_data.method_data(
        problem, pipeline.prepare_trajectories(problem, [traj]), 'shooting')

    def build(method, *options):
        return compile_cache.compiled_estimator(problem, method, prepared.target,
                                                methods.Options(*options))
    assert build('lm', 1, 1e-2, 100) is build('lm', 3, 5e-2, 200)
    assert build('csvgd', 4, 1e-2, 100) is build('csvgd', 8, 1e-2, 100)
    assert build('csvgd', 4, 1e-2, 100) is not build('csvgd', 4, 5e-2, 100)
    assert build('csvgd', 4, 1e-2, 100) is not build('csvgd', 4, 1e-2, 2)


# A payload the equation error identifies from a start of 0.01 kg (as a tool's nominal
# payload): the torque noise estimated there (3 Gauss-Newton steps) is 5 times the residuals
# at the estimate.
PAYLOAD_TRUTH = np.array([1.3, 0.06, -0.08, 0.12, 0.07])


def _payload_config(**data):
    return {'model': {'builder': 'double_pendulum', 'integrator': 'rk4',
                      'payload': {'link': 'link2', 'mass': 0.01}},
            'parameters': {'payload': {'mass': {'min': 0.0, 'max': 3.0, 'init': 0.01},
                                       'com': {'x': {'min': -0.2, 'max': 0.2},
                                               'z': {'min': -0.2, 'max': 0.2}}},
                           'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
                           'joint2': {'damping': {'min': 0.0, 'max': 0.5}}},
            'data': {'rate': 100.0, **data}, 'estimator': {'residual': 'equation_error'}}


@pytest.fixture(scope='module')
def payload_traj():
    fine = _payload_config()
    fine['model']['dt'] = 1e-3
    fine = pipeline.build_problem(config_io.from_dict(fine))
    params = fine.spec.to_params(PAYLOAD_TRUTH, fine.base_params)
    return pipeline.simulate(fine, params, duration=8.0, noise=NOISE, seed=3, torque_scale=3.0)


def test_torque_noise_estimated_at_a_poor_start_is_estimated_again_at_the_estimate(
        payload_traj):
    problem = pipeline.build_problem(config_io.from_dict(_payload_config()))
    lines = []
    result = pipeline.fit(problem, [payload_traj], log=lines.append)
    assert 'lm: fitting again with the torque noise estimated at its estimate' in lines
    noise = np.asarray(result.info['noise_std'])
    residuals = np.asarray(result.info['residual_noise_std'])
    assert np.all(np.abs(np.log(residuals / noise)) < np.log(estimator_data.NOISE_MISMATCH))
    assert result.converged and not result.warnings
    assert abs(result.estimate[0] - PAYLOAD_TRUTH[0]) < 0.01 * PAYLOAD_TRUTH[0]


def test_a_configured_torque_noise_far_off_the_residuals_names_the_value_to_set(
        payload_traj):
    problem = pipeline.build_problem(config_io.from_dict(_payload_config(
        torque_noise_std=[5.0])))
    result = pipeline.fit(problem, [payload_traj])
    assert not result.converged
    [warning] = [w for w in result.warnings if 'torque noise std' in w]
    suggested = ', '.join(f'{v:.3g}' for v in result.info['residual_noise_std'])
    assert 'joint1 5 (residuals' in warning and 'joint2 5 (residuals' in warning
    assert f'data.torque_noise_std: [{suggested}]' in warning
    assert max(result.info['residual_noise_std']) < 0.5        # the residuals, not the 5 N m
