"""`model.integrator: variational` (`core.variational.midpoint_step`) in the estimators.

The midpoint variational integrator is checked as a simulator and then run end to end
through `pipeline.fit` on a simulated double pendulum (damping 0.15 and 0.08 N m s/rad):

  * accuracy: against RK4 at a 10x finer step its error falls 4x when the step halves (second
    order), and its 4 chord-Newton iterations are converged to far below that error at the
    data rates of the fits (100 and 200 Hz; 100 Hz here);
  * gradients: reverse-mode through the rollout (and so through the Newton iterations) agrees
    with central finite differences (component by component: slow; the norm that the
    DiffNEA fit's own compiled step reports: quick);
  * DiffNEA (rollout loss, Adam) and CSVGD (multiple shooting) with the variational
    integrator recover both link masses and both joint dampings (CSVGD on the double
    pendulum: slow; its quick variant identifies a single pendulum, which compiles in half
    the time).

Compiling the reverse-mode gradient of the variational step is what costs (about 14 s for one
step of the double pendulum on one loaded core, RK4's: 11 s), so the quick tests share
compilations: `_held_rollout` traces its step and Newton iteration counts.

The fits' data are simulated by RK4 at a tenth of the sample period (`model.dt`), i.e.
essentially the continuous dynamics, as real sensors would see them, so the recovery includes
whatever bias the variational integrator's own discretisation error brings at the data rate.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.dynamics import variational
from sysid_ros.core.likelihoods import losses
from sysid_ros.core.model import builders
from sysid_ros.io import compile_cache, estimator_data, pipeline
from sysid_ros.io import config as config_io

DAMPING = (0.15, 0.08)                 # [N m s/rad], the truth of the fits
MODEL, PARAMS = builders.double_pendulum(damping=DAMPING)
TRUTH = {'link1.mass': 1.0, 'link2.mass': 1.0, 'joint1.damping': DAMPING[0],
         'joint2.damping': DAMPING[1]}
MASS = {'mass': {'min': 0.5, 'max': 2.0}}                 # [kg]
JOINT_DAMPING = {'damping': {'min': 0.0, 'max': 0.5}}     # [N m s/rad]
DOUBLE_PENDULUM = ('double_pendulum', {'damping': list(DAMPING)},
                   {'link1': MASS, 'link2': MASS, 'joint1': JOINT_DAMPING,
                    'joint2': JOINT_DAMPING})
PENDULUM = ('chain', {'num_links': 1, 'damping': DAMPING[0]},
            {'link1': MASS, 'joint1': JOINT_DAMPING})
RATE = 100.0                           # [Hz], the data of every fit
NOISE = 2e-3                           # [rad, rad/s]
REFERENCE_SUBSTEPS = 10                # RK4 truth: steps per sample period
# Absolute error of the estimates [kg, N m s/rad] (as in test/io/test_pipeline_bayes.py).
TOLERANCE = {'link1.mass': 0.05, 'link2.mass': 0.05, 'joint1.damping': 0.04,
             'joint2.damping': 0.02}


def make_problem(system, integrator, substeps=1, **estimator):
    """`system` (builder, builder_args, parameters) at RATE, integrated by `integrator` with
    `substeps` steps per sample, with the known noise NOISE."""
    builder, builder_args, parameters = system
    model = {'builder': builder, 'builder_args': builder_args, 'actuator': 'viscous',
             'integrator': integrator}
    if substeps > 1:
        model['dt'] = 1.0 / (RATE * substeps)
    return pipeline.build_problem(config_io.from_dict({
        'model': model, 'parameters': parameters,
        'data': {'rate': RATE, 'noise_std': [NOISE]}, 'estimator': estimator}))


def measured(system, duration=1.0, torque_scale=2.0, seed=1):
    """Data of the truth with sensor noise NOISE, simulated by RK4 at REFERENCE_SUBSTEPS steps
    per sample, under a strong excitation so that the dampings show."""
    truth = make_problem(system, 'rk4', substeps=REFERENCE_SUBSTEPS)
    return pipeline.simulate(truth, duration=duration, noise=NOISE, seed=seed,
                             torque_scale=torque_scale)


@pytest.fixture(scope='module')
def double_pendulum_data():
    """1 s (100 samples) of the double pendulum, joint speeds up to 5 and 9 rad/s."""
    return measured(DOUBLE_PENDULUM)


def data_segments(traj, horizon=20):
    """DiffNEA's segments of `horizon` steps of one trajectory (as `pipeline.fit` cuts them)."""
    return losses.make_segments([traj.q], [traj.qd], [traj.tau], horizon)


def check_recovery(label, problem, result, within_std=True):
    """Every estimate within TOLERANCE of the truth (and, for a posterior, within 3 of its
    standard deviations)."""
    truth = np.array([TRUTH[n] for n in problem.names])
    error = result.estimate - truth
    print(f'{label}: mean {dict(zip(problem.names, np.round(result.estimate, 4)))}, '
          f'std {dict(zip(problem.names, np.round(result.std, 4)))}, '
          f'final loss {result.final_loss:.3g}, wall {result.wall_time:.1f} s')
    for name, e, std in zip(problem.names, error, result.std):
        assert abs(e) < TOLERANCE[name], (name, e)
        assert not within_std or abs(e) < 3.0 * std, (name, e, std)
    assert result.consistent.all() and not result.interrupted


# ------------------------------------------------------------------------------------------
# The integrator: order of convergence and Newton iterations
# ------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnames='step_fn')
def _held_rollout(step_fn, x0, controls, dt, substeps, **step_args):
    """States (T, 2 nv) after each of the zero-order-hold `controls` (T, nv) of period `dt`,
    each held over `substeps` steps of dt / substeps (`step_args`: keywords of the step).
    Unlike `integrators.rollout`, the step count and the keywords are traced, so all counts
    (and all Newton iteration counts of the variational step) share one compilation."""
    h = dt / substeps

    def hold(x, u):
        x = jax.lax.fori_loop(0, substeps,
                              lambda _, x: step_fn(MODEL, PARAMS, x, u, h, **step_args), x)
        return x, x

    return jax.lax.scan(hold, x0, controls)[1]


def _variational(x0, controls, dt, substeps, iterations=4):
    """`_held_rollout` of `variational.midpoint_step` with `iterations` chord-Newton steps."""
    return _held_rollout(variational.midpoint_step, x0, controls, dt, substeps,
                         iterations=iterations)


def test_midpoint_rollout_is_second_order_and_newton_converged():
    """1 s of a strongly swinging, damped and driven double pendulum, commands held for
    20 ms, integrated at 50, 100 and 200 Hz against RK4 at 2 kHz."""
    period = 0.02
    t = np.arange(50) * period
    controls = jnp.asarray(np.stack([3.0 * np.sin(2 * np.pi * 0.7 * t),
                                     1.5 * np.cos(2 * np.pi * 1.1 * t)], axis=1))
    x0 = jnp.array([0.8, -0.5, 0.0, 1.0])
    substeps = (1, 2, 4)
    reference = _held_rollout(integrators.rk4, x0, controls, period, 10 * substeps[-1])
    finer = _held_rollout(integrators.rk4, x0, controls, period, 20 * substeps[-1])
    errors = np.array([float(jnp.max(jnp.abs(_variational(x0, controls, period, n) - reference)))
                       for n in substeps])
    print('variational max state error at 50/100/200 Hz:', errors,
          'ratios:', errors[:-1] / errors[1:])
    assert float(jnp.max(jnp.abs(finer - reference))) < 1e-3 * errors[-1]
    np.testing.assert_allclose(errors[:-1] / errors[1:], 4.0, rtol=0.1)

    # The chord Newton solve (4 iterations from the predictor q + dt qd) against a converged
    # one (30) at the fits' rates: its error is under 0.1 % of the discretisation error
    # (0.06 % at 100 Hz, 0.02 % at 200 Hz when this was written; 3 iterations leave 1.5 % and
    # 0.7 %; 4 iterations from Newton's default start q, 0.7 % and 0.35 %).
    for n, error in zip(substeps[1:], errors[1:]):
        newton_error = float(jnp.max(jnp.abs(
            _variational(x0, controls, period, n)
            - _variational(x0, controls, period, n, iterations=30))))
        print(f'Newton error at {n / period:g} Hz: {newton_error:.1e}')
        assert newton_error < 1e-3 * error


# ------------------------------------------------------------------------------------------
# Gradients through the Newton iterations
# ------------------------------------------------------------------------------------------

@pytest.mark.slow   # about 30 s, mostly compiling the gradient; the quick check is in the
#                     DiffNEA test below (norm of the gradient of its compiled step)
def test_rollout_loss_gradient_matches_finite_differences(double_pendulum_data):
    """Reverse-mode gradient of DiffNEA's rollout loss (the pipeline's, on two 20-step
    segments of the data) with respect to the masses and dampings, away from the truth,
    against central differences, component by component."""
    problem = make_problem(DOUBLE_PENDULUM, 'variational')
    segments = data_segments(double_pendulum_data)
    segments = segments._replace(x0=segments.x0[:2], controls=segments.controls[:2],
                                 targets=segments.targets[:2])
    loss_fn = losses.make_loss_fn(problem.model, 'rollout', problem.dt,
                                  integrator='variational', actuator='viscous')

    @jax.jit
    @jax.value_and_grad
    def loss(theta):
        return loss_fn(problem.spec.to_params(theta, problem.base_params), segments)

    theta = jnp.array([1.2, 0.9, 0.25, 0.05])
    grad = np.asarray(loss(theta)[1])
    eps = 1e-6
    fd = np.array([(loss(theta + eps * e)[0] - loss(theta - eps * e)[0]) / (2 * eps)
                   for e in np.eye(theta.size)])
    relative = np.abs(fd - grad) / np.linalg.norm(fd)
    print('gradient', grad, 'central differences', fd, 'relative error', relative)
    assert np.all(np.abs(grad) > 1e-3 * np.linalg.norm(grad))
    assert np.all(relative < 1e-6)


# ------------------------------------------------------------------------------------------
# Fits through the pipeline
# ------------------------------------------------------------------------------------------

def test_diffnea_with_variational_integrator_recovers_double_pendulum(double_pendulum_data):
    """DiffNEA (rollout loss over 5 segments of 20 steps, Adam) from masses off by 30 % and
    25 % and dampings off by a factor 2."""
    iterations = 200
    problem = make_problem(DOUBLE_PENDULUM, 'variational', method='diffnea', particles=1,
                           iterations=iterations, learning_rate=0.1, rollout_horizon=20)
    theta0 = np.array([TRUTH[n] for n in problem.names]) * [1.3, 0.75, 2.0, 0.5]
    result = pipeline.fit(problem, [double_pendulum_data], theta0=theta0)
    check_recovery('DiffNEA (variational)', problem, result, within_std=False)
    assert result.info['num_segments'] == 5 and result.iterations == iterations
    assert result.final_loss < 1e-2 * result.loss_history[0]

    # The gradient that the fit followed: the norm that its compiled step reports (loss and
    # gradient at the state's unconstrained z) against central differences of the loss that
    # the same step reports, at the initial guess.
    trajs = pipeline.prepare_trajectories(problem, [double_pendulum_data])
    prepared = estimator_data.method_data(problem, trajs, 'segments')
    options = compile_cache.method_options(problem, iterations)
    est = compile_cache.compiled_estimator(problem, 'diffnea', prepared.target,
                                           options)   # the fit's
    segments = prepared.data
    state = est.init(jax.random.PRNGKey(0), jnp.asarray(theta0)[None], segments)
    _, info = est.step(state, segments, None)
    eps = 1e-6

    def loss_at(dz):
        moved = state._replace(inner=state.inner._replace(z=state.inner.z + dz))
        return float(est.step(moved, segments, None)[1].loss[0])

    fd = np.array([(loss_at(eps * e) - loss_at(-eps * e)) / (2 * eps)
                   for e in np.eye(problem.spec.num_params)])
    grad_norm = float(info.grad_norm[0])
    relative = abs(np.linalg.norm(fd) - grad_norm) / grad_norm
    print(f'DiffNEA gradient norm {grad_norm:.6e}, central differences: relative error '
          f'{relative:.1e}')
    assert relative < 1e-6


@pytest.mark.slow   # about 40 s; the default run keeps DiffNEA (CSVGD shares its integrator step)
def test_csvgd_with_variational_integrator_recovers_pendulum():
    """CSVGD on a single damped pendulum (link mass and joint damping): 6 particles, 300
    steps, 5 shooting windows of 20 steps over 1 s. The quick variant of the double pendulum
    below (its compilation takes half as long)."""
    problem = make_problem(PENDULUM, 'variational', method='csvgd', particles=6,
                           iterations=300, learning_rate=0.1, shooting_windows=5)
    result = pipeline.fit(problem, [measured(PENDULUM)])
    check_recovery('CSVGD (variational, pendulum)', problem, result)
    assert result.info['max_defect'] < 0.05
    assert result.final_loss < 2.0       # mean squared noise-normalised residual, ~1 at best


@pytest.mark.slow   # about 50 s to compile and 90 s to run on 2 loaded cores
def test_csvgd_with_variational_integrator_recovers_double_pendulum(double_pendulum_data):
    """CSVGD on the double pendulum (both masses and dampings): 8 particles, 400 steps, 5
    shooting windows of 20 steps (6 particles and 200 steps left the loss at 150, far above
    its noise floor of about 1)."""
    problem = make_problem(DOUBLE_PENDULUM, 'variational', method='csvgd', particles=8,
                           iterations=400, learning_rate=0.1, shooting_windows=5)
    result = pipeline.fit(problem, [double_pendulum_data])
    check_recovery('CSVGD (variational, double pendulum)', problem, result)
    assert result.info['max_defect'] < 0.05
    assert result.final_loss < 10.0
