"""The configuration -> problem -> data -> estimator -> FitResult path of `sysid fit`."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.inference import methods
from sysid_ros.io import config as config_io
from sysid_ros.io import estimator_data, pipeline
from sysid_ros.io.config import ConfigError
from sysid_ros.io.trajectory import DataError, Trajectory

RATE = 200.0
DURATION = 6.0
NOISE = 1e-3
INERTIA = ('ixx', 'ixy', 'ixz', 'iyy', 'iyz', 'izz')


def _inertia_block():
    return {a: ({'min': 0.0, 'max': 2.0} if a[1] == a[2] else {'min': -0.5, 'max': 0.5})
            for a in INERTIA}


def dp_config(integrator='rk4', **estimator):
    """Double pendulum with the demo's identifiable set (full inertia blocks)."""
    return {
        'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
                  'joints': ['joint2', 'joint1'], 'actuator': 'viscous',
                  'integrator': integrator,
                  # The first-order integrator at the step that simulates the data (the fit
                  # would otherwise take a finer one, `io.integration_step`).
                  **({'dt': 1.0 / RATE} if integrator == 'semi_implicit_euler' else {})},
        'parameters': {
            'link1': {'mass': {'min': 0.1, 'max': 5.0}, 'inertia': _inertia_block()},
            'link2': {'mass': {'min': 0.1, 'max': 5.0}, 'com': {'x': {'min': -0.2, 'max': 0.2}},
                      'inertia': _inertia_block()},
            'joint1': {'damping': {'min': 0.0, 'max': 1.0}},
            'joint2': {'damping': {'min': 0.0, 'max': 1.0}},
        },
        'data': {'rate': RATE},
        'estimator': {'method': 'nea', 'iterations': 300, 'learning_rate': 0.05,
                      'rollout_horizon': 25, **estimator},
    }


IDENTIFIABLE = ('link1.mass', 'link1.inertia.iyy', 'link2.mass', 'link2.inertia.iyy',
                'joint1.damping', 'joint2.damping')


def perturbed(problem):
    theta = np.asarray(problem.spec.from_params(problem.base_params)).copy()
    for name, factor in (('link1.mass', 1.3), ('link2.mass', 0.75),
                         ('link1.inertia.iyy', 1.25), ('link2.inertia.iyy', 0.8),
                         ('joint1.damping', 2.0), ('joint2.damping', 0.5)):
        theta[problem.spec.index(name)] *= factor
    theta[problem.spec.index('link2.com.x')] = -0.05
    return theta


@pytest.fixture(scope='module')
def problem():
    return pipeline.build_problem(config_io.from_dict(dp_config()))


@pytest.fixture(scope='module')
def simulated(problem):
    return pipeline.simulate(problem, duration=DURATION, noise=NOISE, seed=2, torque_scale=1.0)


def test_build_problem_from_builder(problem):
    assert problem.model.joint_names == ('joint1', 'joint2')        # tree order
    assert problem.dt == pytest.approx(1.0 / RATE) and problem.substeps == 1
    assert problem.names[0] == 'link1.mass' and len(problem.names) == 17
    np.testing.assert_allclose(problem.base_params.damping, [0.15, 0.08])
    cfg = config_io.from_dict(dp_config())
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dt=0.00125))
    assert pipeline.build_problem(cfg).substeps == 4
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dt=0.003))
    with pytest.raises(ConfigError, match='model.dt'):
        pipeline.build_problem(cfg)


def test_build_problem_joint_errors():
    d = dp_config()
    d['model']['joints'] = ['joint1', 'elbow']
    with pytest.raises(ConfigError, match=r"model\.joints: no joint named 'elbow'"):
        pipeline.build_problem(config_io.from_dict(d))
    d['model']['joints'] = ['joint1']
    with pytest.raises(ConfigError, match=r'model\.joints: builder .* cannot lock'):
        pipeline.build_problem(config_io.from_dict(d))
    d = dp_config()
    d['parameters']['link3'] = {'mass': {'min': 0.1, 'max': 1.0}}
    with pytest.raises(ConfigError, match='link3'):
        pipeline.build_problem(config_io.from_dict(d))


def test_build_problem_from_urdf_keeps_configured_joints():
    joints = ['panda_joint1', 'panda_joint2', 'panda_joint4']
    d = {'model': {'urdf': 'example-robot-data:panda', 'joints': joints},
         'parameters': {'panda_link4': {'mass': {'min': 0.5, 'max': 5.0}},
                        'panda_joint4': {'damping': {'max': 1.0}}}}
    problem = pipeline.build_problem(config_io.from_dict(d))
    assert problem.model.joint_names == tuple(joints)
    assert problem.names == ('panda_link4.mass', 'panda_joint4.damping')
    d['model']['joints'] = ['panda_joint1', 'panda_finger_joint1']
    with pytest.raises(ConfigError, match=r'model\.joints: no joint named '
                                          r"'panda_finger_joint1'.*panda_joint7"):
        pipeline.build_problem(config_io.from_dict(d))


def test_payload_on_a_fixed_frame_of_a_reduced_urdf():
    # panda_hand is a fixed frame on panda_joint7's body, whose placement Pinocchio keeps
    # when it merges fixed joints and locks the fingers (and joints 5-7 here do not move it).
    import pinocchio as pin
    from sysid_ros.io import model_io
    from sysid_ros.io import problem as problem_io
    d = {'model': {'urdf': 'example-robot-data:panda',
                   'payload': {'link': 'panda_hand', 'mass': 0.5, 'com': [0.0, 0.0, 0.05]}},
         'parameters': {'payload': {'mass': {'min': 0.0, 'max': 4.0},
                                    'com': {'z': {'min': -0.1, 'max': 0.2}}}}}
    problem = pipeline.build_problem(config_io.from_dict(d))
    assert problem.names == ('payload.mass', 'payload.com.z')
    np.testing.assert_allclose(problem.spec.initial_theta(problem.base_params), [0.5, 0.05])
    params = problem.spec.to_params(jnp.array([2.0, 0.1]), problem.base_params)
    pmodel = model_io.load_pinocchio('example-robot-data:panda')
    hand = pmodel.frames[pmodel.getFrameId('panda_hand')]
    expected = pmodel.inertias[7] + pin.Inertia(
        2.0, hand.placement.act(np.array([0.0, 0.0, 0.1])), np.zeros((3, 3)))
    np.testing.assert_allclose(params.inertial[6], expected.toDynamicParameters(), atol=1e-12)
    # A rigid payload: its inertia in panda_hand's axes (turned about z from the body's).
    d['model']['payload']['inertia'] = {'ixx': 0.002, 'ixy': 0.0005, 'iyy': 0.003, 'izz': 0.004}
    d['parameters']['payload']['inertia'] = {'izz': {'min': 0.0, 'max': 0.1}}
    problem = pipeline.build_problem(config_io.from_dict(d))
    params = problem.spec.to_params(jnp.array([2.0, 0.1, 0.006]), problem.base_params)
    own = np.array([[0.002, 0.0005, 0.0], [0.0005, 0.003, 0.0], [0.0, 0.0, 0.006]])
    expected = pmodel.inertias[7] + hand.placement.act(
        pin.Inertia(2.0, np.array([0.0, 0.0, 0.1]), own))
    np.testing.assert_allclose(params.inertial[6], expected.toDynamicParameters(), atol=1e-12)
    body = {b.name: b for b in problem_io.identified_inertias(problem, [2.0, 0.1, 0.006])}
    np.testing.assert_allclose(body['payload'].inertia, own, atol=1e-15)
    del d['model']['payload']['inertia'], d['parameters']['payload']['inertia']
    d['model']['payload']['link'] = 'gripper'
    with pytest.raises(ConfigError, match=r'model\.payload\.link: no link or frame named '
                                          r"'gripper'"):
        pipeline.build_problem(config_io.from_dict(d))
    del d['model']['payload']
    with pytest.raises(ConfigError, match=r'parameters\.payload\.mass: no payload is '
                                          r'configured \(model\.payload\)'):
        pipeline.build_problem(config_io.from_dict(d))


def test_prepare_trajectories_orders_names_and_resamples(problem, simulated):
    swapped = dataclasses.replace(simulated, q=simulated.q[:, ::-1], qd=simulated.qd[:, ::-1],
                                  tau=simulated.tau[:, ::-1], joint_names=('joint2', 'joint1'))
    coarse = dataclasses.replace(swapped, t=swapped.t[::2], q=swapped.q[::2],
                                 qd=swapped.qd[::2], tau=swapped.tau[::2])
    out = pipeline.prepare_trajectories(problem, [swapped, coarse])
    np.testing.assert_array_equal(out[0].q, simulated.q)
    assert out[1].dt == pytest.approx(1.0 / RATE)
    assert out[1].joint_names == ('joint1', 'joint2')
    wrong = dataclasses.replace(simulated, joint_names=('joint1', 'elbow'), source='x.npz')
    with pytest.raises(DataError, match=r"x\.npz: joint_names: no data for joint 'joint2'"):
        pipeline.prepare_trajectories(problem, [wrong])
    with pytest.raises(DataError, match='no trajectories'):
        pipeline.prepare_trajectories(problem, [])


def _relative_errors(problem, result, truth):
    return {n: (result.estimate[problem.spec.index(n)] - truth[problem.spec.index(n)])
            / truth[problem.spec.index(n)] for n in IDENTIFIABLE}


def test_simulate_is_reproducible_and_noisy(problem, simulated):
    assert simulated.num_samples == int(DURATION * RATE) + 1
    assert simulated.joint_names == problem.model.joint_names
    again = pipeline.simulate(problem, duration=DURATION, noise=NOISE, seed=2, torque_scale=1.0)
    np.testing.assert_array_equal(again.q, simulated.q)
    clean = pipeline.simulate(problem, duration=DURATION, noise=0.0, seed=2, torque_scale=1.0)
    assert 0.5 * NOISE < np.std(simulated.q - clean.q) < 2.0 * NOISE
    np.testing.assert_array_equal(clean.tau, simulated.tau)


def test_fit_nea_recovers_identifiable_parameters(problem, simulated):
    truth = np.asarray(problem.spec.from_params(problem.base_params))
    calls = []
    result = pipeline.fit(problem, [simulated], method='nea', theta0=perturbed(problem),
                          progress=lambda *a: calls.append(a))
    assert result.method == 'nea' and result.names == problem.names
    assert result.particles.shape == (1, 17) and not result.interrupted
    errors = _relative_errors(problem, result, truth)
    print('pipeline NEA relative errors:', {k: f'{v:+.2e}' for k, v in errors.items()})
    assert all(abs(e) < 0.05 for e in errors.values()), errors
    assert abs(result.estimate[problem.spec.index('link2.com.x')]) < 2e-3
    assert result.consistent.all()
    assert result.info['rank'] == 7
    assert 1 <= result.iterations <= methods.NEA_MAX_ITERATIONS
    assert len(calls) == result.iterations and calls[-1][0] == result.iterations
    assert result.final_loss <= result.loss_history[0]
    np.testing.assert_array_equal(result.std, 0.0)
    assert result.as_dict()['link1.mass'] == result.estimate[0]
    # Held-out prediction: the identified model predicts as well as the truth, the initial
    # guess much worse.
    held_out = pipeline.simulate(problem, duration=DURATION, noise=NOISE, seed=3,
                                 torque_scale=1.0)
    scores = {label: pipeline.prediction_error(problem, theta, held_out, horizon=50)
              for label, theta in (('truth', truth), ('guess', perturbed(problem)),
                                   ('nea', result.estimate))}
    assert scores['nea']['rmse_q'] < 2.0 * scores['truth']['rmse_q']
    assert scores['guess']['rmse_q'] > 10.0 * scores['nea']['rmse_q']


def test_fit_diffnea_history_and_interrupt():
    problem = pipeline.build_problem(config_io.from_dict(
        dp_config('semi_implicit_euler', method='diffnea', rollout_horizon=10)))
    traj = pipeline.simulate(problem, duration=1.0, noise=NOISE, seed=0)
    theta0 = perturbed(problem)
    result = pipeline.fit(problem, [traj], iterations=5, theta0=theta0)
    assert result.method == 'diffnea' and result.iterations == 5
    assert result.loss_history.shape == (5,)
    assert result.final_loss < result.loss_history[0]
    assert result.info['num_segments'] == 20 and result.info['horizon'] == 10
    assert result.consistent.all()

    def interrupt(iteration, total, loss, elapsed):
        if iteration == 3:
            raise KeyboardInterrupt

    stopped = pipeline.fit(problem, [traj], iterations=5, theta0=theta0, progress=interrupt)
    assert stopped.interrupted and stopped.iterations == 3
    # Best so far: the particle at which the lowest of the recorded losses was seen.
    assert stopped.final_loss == pytest.approx(min(stopped.loss_history))
    assert stopped.consistent.all()


def test_fit_rejects_methods_it_does_not_run(problem, simulated):
    with pytest.raises(ConfigError, match=r"estimator\.method: .*csvgd.*got 'magic'"):
        pipeline.fit(problem, [simulated], method='magic')
    with pytest.raises(ConfigError, match='iterations'):
        pipeline.fit(problem, [simulated], iterations=0)
    with pytest.raises(ValueError, match=r'theta0: expected shape \(17,\)'):
        pipeline.fit(problem, [simulated], theta0=np.ones(3))


def test_excitation_is_bounded_and_smooth():
    rng = np.random.default_rng(0)
    t = np.arange(0, 10, 0.01)
    u = pipeline.excitation(t, np.array([2.0, 0.5]), rng)
    assert u.shape == (1000, 2)
    assert np.all(np.abs(u) <= np.array([2.0, 0.5]) + 1e-12)
    assert np.max(np.abs(np.diff(u, axis=0))) < 0.1


def test_fit_result_mean_and_std():
    particles = np.array([[1.0, 2.0], [3.0, 4.0]])
    result = pipeline.FitResult(
        method='diffnea', names=('a', 'b'), particles=particles, initial=particles,
        lower=np.zeros(2), upper=np.full(2, np.inf), loss_history=np.ones(3), iterations=3,
        final_loss=1.0, wall_time=0.1, consistent=np.ones(2, bool))
    np.testing.assert_allclose(result.estimate, [2.0, 3.0])
    np.testing.assert_allclose(result.std, [1.0, 1.0])
    assert result.as_dict('std') == {'a': 1.0, 'b': 1.0}


def test_trajectory_objects_without_names_are_accepted(problem, simulated):
    plain = Trajectory(t=simulated.t, q=simulated.q, qd=simulated.qd, tau=simulated.tau)
    out = pipeline.prepare_trajectories(problem, [plain])
    assert out[0].nv == 2
    samples = estimator_data.nea_samples(out[0])
    n = out[0].num_samples - 2 * estimator_data.NEA_EDGE_SAMPLES
    assert all(v.shape == (n, 2) for v in samples.values())
    k = estimator_data.NEA_EDGE_SAMPLES
    np.testing.assert_allclose(samples['tau'][0], 0.5 * (plain.tau[k - 1] + plain.tau[k]))
    assert jnp.asarray(samples['qdd']).shape == (n, 2)


def test_all_names_importable():
    for name in pipeline.__all__:
        assert hasattr(pipeline, name)


@pytest.mark.slow
def test_fit_diffnea_recovers_panda_masses_and_damping():
    """DiffNEA on the 7-DOF Panda (masses of links 5-7, all dampings), from open-loop
    simulated data. Slow: compiling the gradient of a 7-DOF rollout takes minutes on CPU."""
    joints = [f'panda_joint{i}' for i in range(1, 8)]
    d = {'model': {'urdf': 'example-robot-data:panda', 'joints': joints,
                   'actuator': 'viscous', 'integrator': 'rk4'},
         'parameters': {**{f'panda_link{i}': {'mass': {'min': 0.1, 'max': 5.0}}
                           for i in (5, 6, 7)},
                        **{j: {'damping': {'min': 0.0, 'max': 2.0}} for j in joints}},
         'data': {'rate': 100.0},
         'estimator': {'method': 'diffnea', 'iterations': 300, 'learning_rate': 0.05,
                       'loss': 'rollout', 'rollout_horizon': 10}}
    problem = pipeline.build_problem(config_io.from_dict(d))
    spec = problem.spec
    truth = np.asarray(spec.from_params(problem.base_params)).copy()
    truth[3:] = np.linspace(0.3, 0.9, 7)
    true_params = spec.to_params(jnp.asarray(truth), problem.base_params)
    traj = pipeline.simulate(problem, true_params, duration=10.0, noise=1e-4, seed=0,
                             torque_scale=0.3)
    guess = truth.copy()
    guess[:3] *= np.array([1.4, 0.7, 1.3])
    guess[3:] = 1.0
    base = dataclasses.replace(problem, base_params=spec.to_params(jnp.asarray(guess),
                                                                   true_params))
    result = pipeline.fit(base, [traj], theta0=guess)
    rel = (result.estimate - truth) / truth
    print('Panda DiffNEA relative errors:', dict(zip(spec.names, np.round(rel, 4))),
          f'wall {result.wall_time:.0f} s')
    assert result.consistent.all()
    assert np.all(np.abs(rel) < 0.05), dict(zip(spec.names, rel))
