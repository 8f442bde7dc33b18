"""Excitation design (`excitation.design`): the effort envelope, the objective's gradient
against finite differences, and a design's limits on a dense grid."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.excitation import design, limits
from sysid_ros.core.model import builders
from sysid_ros.core.model.parameters import make_parameter_spec

DURATION = 2.0          # [s]
ACCEL_STD = 0.3         # [rad/s^2]


@pytest.fixture(scope='module')
def pendulum():
    """Double pendulum with link masses and joint dampings free; a 2 s design problem."""
    model, base = builders.double_pendulum(damping=0.1)
    spec = make_parameter_spec(model, {'link1.mass': (0.5, 2.0), 'link2.mass': (0.5, 2.0),
                                       'joint1.damping': (0.0, 0.5),
                                       'joint2.damping': (0.0, 0.5)})
    lim = limits.Limits(q_min=jnp.array([-1.5, -2.0]), q_max=jnp.array([1.5, 2.0]),
                        qd_max=jnp.array([4.0, 5.0]), qdd_max=jnp.array([30.0, 30.0]),
                        u_max=jnp.array([30.0, 12.0]))
    problem = design.DesignProblem(
        model=model, spec=spec, base=base, theta=np.array([1.0, 1.0, 0.1, 0.1]),
        actuator='viscous', limits=lim, q0=np.array([0.2, -0.1]), duration=DURATION,
        base_frequency=0.5, harmonics=3, t_design=np.linspace(0.0, DURATION, 21),
        t_check=np.linspace(0.0, DURATION, 401), accel_std=np.full(2, ACCEL_STD),
        weight=10.0, scale=np.array([1.5, 1.5, 0.5, 0.5]), prior_precision=np.full(4, 12.0))
    return problem, design.make_design_functions(problem)


def test_effort_envelope_adds_each_parameters_reach(pendulum):
    """The commands are linear in the dampings: the envelope over dampings within r of theta
    is |u| + r |qd| per joint, and without a radius it is |u|."""
    import dataclasses
    problem, _ = pendulum
    radius = np.array([0.0, 0.0, 0.05, 0.2])
    robust = dataclasses.replace(problem, effort_radius=radius)
    coeffs = 0.2 * np.random.default_rng(3).normal(size=problem.coeff_shape)
    m = design.motion(problem, jnp.asarray(coeffs), jnp.asarray(problem.t_design))
    np.testing.assert_allclose(np.asarray(design.effort_envelope(problem, m)),
                               np.abs(np.asarray(m.u)))
    np.testing.assert_allclose(np.asarray(design.effort_envelope(robust, m)),
                               np.abs(np.asarray(m.u)) + np.abs(np.asarray(m.qd)) * [0.05, 0.2],
                               rtol=1e-10)


def test_objective_gradient_matches_finite_differences(pendulum):
    problem, fns = pendulum
    rng = np.random.default_rng(1)
    x = 0.2 * rng.normal(size=int(np.prod(problem.coeff_shape)))
    value, grad = fns.value_and_grad(jnp.asarray(x))
    assert np.isfinite(float(value))
    h = 1e-6
    for _ in range(3):
        direction = rng.normal(size=x.shape)
        plus = float(fns.value_and_grad(jnp.asarray(x + h * direction))[0])
        minus = float(fns.value_and_grad(jnp.asarray(x - h * direction))[0])
        np.testing.assert_allclose((plus - minus) / (2 * h), float(grad @ direction),
                                   rtol=1e-5, atol=1e-7)


def test_design_raises_information_and_respects_limits_on_a_dense_grid(pendulum):
    problem, fns = pendulum
    result = design.design_trajectory(problem, jax.random.PRNGKey(0), iterations=25,
                                      functions=fns)
    assert result.log_det > result.start_log_det + 1.0
    motion, peak = fns.check(jnp.asarray(result.coeffs))
    assert design.largest_use(peak) <= 1.0
    q = np.asarray(motion.q)
    assert np.all(q >= np.asarray(problem.limits.q_min))
    assert np.all(q <= np.asarray(problem.limits.q_max))
    assert np.all(np.abs(np.asarray(motion.u)) <= np.asarray(problem.limits.u_max))
    np.testing.assert_allclose(q[[0, -1]], [problem.q0, problem.q0], atol=1e-12)


def test_largest_scale_shrinks_a_motion_into_its_limits(pendulum):
    problem, fns = pendulum
    coeffs = 3.0 * np.ones(problem.coeff_shape)

    def peak(c):
        return design.largest_use(fns.check(jnp.asarray(c))[1])

    assert peak(coeffs) > 1.0
    s = design.largest_scale(peak, coeffs, 1.0)
    assert 0.0 < s < 1.0
    assert peak(s * coeffs) <= 1.0 < peak(min(1.0, 1.01 * s) * coeffs)
