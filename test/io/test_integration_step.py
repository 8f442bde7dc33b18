"""The integration step chosen from the data (`io.integration_step`): step doubling against
a much finer simulation, the choice, and where nothing is chosen."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import integrators
from sysid_ros.io import config as config_io
from sysid_ros.io import estimator_data, integration_step, online, pipeline
from sysid_ros.io.window_buffer import Window

RATE = 25.0            # [Hz]: RK4 at 40 ms is visibly off for the pendulum at this noise
NOISE = 1e-3


def _config(**model):
    return config_io.from_dict({
        'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
                  'actuator': 'viscous', 'integrator': 'rk4', **model},
        'parameters': {'link1': {'mass': {'min': 0.5, 'max': 2.0}},
                       'joint1': {'damping': {'min': 0.0, 'max': 0.5}}},
        'data': {'rate': RATE, 'noise_std': [NOISE]}})


@pytest.fixture(scope='module')
def problem():
    return pipeline.build_problem(_config())


@pytest.fixture(scope='module')
def recording(problem):
    """6 s simulated with 32 RK4 steps per sample (the truth: an engine finer than the fit)."""
    fine = pipeline.build_problem(_config(dt=1.0 / RATE / 32))
    return pipeline.simulate(fine, duration=6.0, noise=NOISE, seed=3, torque_scale=1.5)


def test_step_doubling_measures_the_error_against_a_finer_simulation(problem, recording):
    """e(s) from s against 2 s equals the error of s steps against 64 steps within 10 %,
    and falls as RK4's fourth order says (16 times per doubling, within a factor 2)."""
    noise = np.full(4, NOISE)
    errors = integration_step.discretisation_errors(problem, [recording], noise,
                                                    tolerance=0.0)
    assert list(errors) == [1, 2, 4, 8, 16]
    measured, controls = estimator_data.stretches(
        [recording], int(round(integration_step.HORIZON_S * RATE)), integration_step.STARTS)
    x0 = measured[:, 0]
    params = problem.spec.to_params(jnp.asarray(problem.spec.initial_theta(
        problem.base_params)), problem.base_params)

    def simulate(substeps):
        return np.asarray(integrators.rollout_batch(
            problem.model, params, jnp.asarray(x0), jnp.asarray(controls), problem.dt,
            integrator='rk4', actuator='viscous', substeps=substeps))

    exact = simulate(64)
    for substeps in (1, 2, 4):
        true_error = np.sqrt(np.mean(np.square((simulate(substeps) - exact) / noise)))
        assert errors[substeps] == pytest.approx(true_error, rel=0.1)
        assert 8.0 < errors[substeps] / errors[2 * substeps] < 32.0


def test_choice_is_the_fewest_steps_within_the_tolerance(problem, recording):
    choice = integration_step.choose_substeps(problem, [recording])
    assert choice.reached and choice.substeps > 1
    assert choice.errors[choice.substeps] <= integration_step.STEP_TOLERANCE
    assert all(e > integration_step.STEP_TOLERANCE for s, e in choice.errors.items()
               if s < choice.substeps)
    assert f'{choice.substeps} rk4 step(s) per 40 ms' in choice.describe(problem)
    # Never fewer steps than the problem has (a live session's step only gets finer).
    finer = dataclasses.replace(problem, substeps=4 * choice.substeps)
    resolved, again = integration_step.resolve(finer, [recording])
    assert resolved.substeps == 4 * choice.substeps and list(again.errors) == [
        4 * choice.substeps]


def test_an_explicit_step_or_a_fit_that_does_not_integrate_keeps_its_step(recording):
    given = pipeline.build_problem(_config(dt=1.0 / RATE / 2))
    assert integration_step.resolve(given, [recording]) == (given, None)
    problem = pipeline.build_problem(_config())
    assert integration_step.resolve(problem, [recording], integrates=False) == (problem, None)


@pytest.mark.slow            # 76 s in a fresh clone: a session's programs at two steps
def test_a_live_session_refines_its_step_from_its_second_window(recording):
    """The first window runs at the sample period (no estimate yet); from the second the
    window is simulated at the session's estimate and the step gets finer."""
    cfg = config_io.from_dict({
        **{k: v for k, v in config_io.to_dict(_config()).items() if k != 'estimator'},
        'estimator': {'method': 'csvgd', 'particles': 4},
        'online': {'window_length': 2.0, 'iterations_per_window': 2}})
    session = online.OnlineSession(pipeline.build_problem(cfg))
    n = session.window_samples
    windows = [Window(t=recording.t[k:k + n], q=recording.q[k:k + n],
                      qd=recording.qd[k:k + n], tau=recording.tau[k:k + n])
               for k in (0, n)]
    session.update(windows[0])
    assert session.problem.substeps == 1 and session.integration is None
    session.update(windows[1])
    assert session.problem.substeps > 1 and session.integration.reached
