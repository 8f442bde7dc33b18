"""D-optimal excitation: the Fourier coefficients that maximise the information about the
free parameters within the joint limits.

Objective (minimised over the coefficients c (2, nv, L) of `fourier.fourier_trajectory`):

    -1/M log det(S F(c) S + P) + w sum_k,j max(0, use_kj(c) - target)^2

with F the Fisher information of the M free parameters at the design point theta, in the
form of the configured likelihood (`residual`: the output error's acceleration-space
`information.fisher_information`, or the equation error's torque-space
`information.equation_error_information` with the noise its filter leaves), on a design
grid, S = diag(scale) a scaling to unit-free parameters (e.g. each bound's width) that makes
the condition number meaningful, P the prior precision in those scaled units (the uniform
prior over the bounds, 12 / width^2 scaled: 12, or a posterior's; it keeps the determinant
finite when a parameter is not identifiable at all, e.g. an inertia about an axis that a
planar motion never turns), and the use ratios of `limits.usage` of the positions,
velocities, accelerations and commands (the commands' envelope over the parameters the
prior still allows, `effort_envelope`, so that the motion stays within the effort limits for
a robot whose parameters differ from theta). D-optimality (log det) minimises the volume of
the confidence ellipsoid; unlike the condition number of the classic designs it is invariant
to the units (S only adds a constant), smooth, and rewards information on every parameter
that is still uncertain given the prior.

Optimiser: L-BFGS-B (scipy) on the jitted value and exact JAX gradient; the limits enter as
the penalty with `target` slightly below 1, and after the optimisation the motion is checked
on a dense grid and, if some use exceeds 1 there, scaled down about q0 (positions,
velocities and accelerations are linear in c) by bisection until none does.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from sysid_ros.core.dynamics.control import command_torque
from sysid_ros.core.excitation import fourier, information
from sysid_ros.core.excitation import limits as limits_lib
from sysid_ros.core.model.parameters import ParameterSpec
from sysid_ros.core.model.types import Params, RobotModel

PENALTY_WEIGHT = 100.0          # weight w of the limit penalty [-]
PENALTY_TARGET = 0.95           # use ratio the penalty starts at [-]
START_USE = 0.5                 # largest use ratio of the random starting motion [-]
BISECTIONS = 30                 # steps of the scale searches


@dataclasses.dataclass(frozen=True)
class DesignProblem:
    """Everything that defines a design except the coefficients.

    Attributes:
      model: static tree; spec: the free parameters; base: Params of the rest.
      theta: (M,) design point in physical units (the information is taken there).
      actuator: one of `dynamics.control.ADDITIVE_ACTUATORS`.
      limits: `limits.Limits` (margins applied).
      q0: (nv,) start and end position [rad, m].
      duration: [s]; base_frequency: f0 [Hz]; harmonics: L.
      t_design: (N,) design grid [s]; t_check: (K,) dense grid of the hard check [s].
      accel_std: (nv,) noise std of an observed acceleration [rad/s^2, m/s^2] (output
        error).
      weight: recorded (equation error: kept) samples per design-grid sample [-].
      scale: (M,) unit of each scaled parameter [physical units].
      prior_precision: (M,) diagonal prior precision in scaled units [-].
      residual: the likelihood the recording will be fitted with, 'output_error' or
        'equation_error'.
      state_var: (3, nv) noise variance of the filtered q, qd, qdd (equation error).
      torque_var: (nv,) noise variance of the filtered torques [N^2 m^2] (equation error).
      torque_std: (nv,) configured residual std of the equation error [N m], or None: the
        fit estimates it from the residuals.
      effort_radius: (M,) how far each parameter may lie from theta [physical units]: the
        effort limits must hold for the commands of every such parameter (`effort_envelope`);
        None: at theta only.
    """

    model: RobotModel
    spec: ParameterSpec
    base: Params
    theta: np.ndarray
    actuator: str
    limits: limits_lib.Limits
    q0: np.ndarray
    duration: float
    base_frequency: float
    harmonics: int
    t_design: np.ndarray
    t_check: np.ndarray
    accel_std: np.ndarray
    weight: float
    scale: np.ndarray
    prior_precision: np.ndarray
    residual: str = 'output_error'
    state_var: np.ndarray | None = None
    torque_var: np.ndarray | None = None
    torque_std: np.ndarray | None = None
    effort_radius: np.ndarray | None = None

    @property
    def coeff_shape(self) -> tuple[int, int, int]:
        return (2, self.model.nv, self.harmonics)


class Motion(NamedTuple):
    """A motion and its commands on a time grid, (T, nv) each (t: (T,) [s])."""

    t: jax.Array
    q: jax.Array
    qd: jax.Array
    qdd: jax.Array
    u: jax.Array


class DesignResult(NamedTuple):
    """Outcome of `design_trajectory`.

    Attributes:
      coeffs: (2, nv, L) the designed coefficients [rad, m].
      log_det: log det(S F S + P) of the design [-].
      start_log_det: the same of the random starting motion scaled into the limits
        (the optimiser starts from it unscaled: the penalty pulls it in) [-].
      iterations: L-BFGS iterations; message: scipy's reason for stopping.
      shrink: factor (<= 1) the optimised coefficients were scaled by to pass the check.
    """

    coeffs: np.ndarray
    log_det: float
    start_log_det: float
    iterations: int
    message: str
    shrink: float


def motion(problem: DesignProblem, coeffs, t) -> Motion:
    """The motion of `coeffs` on the times t (T,) with its commands at the design point."""
    q, qd, qdd = fourier.fourier_trajectory(coeffs, jnp.asarray(problem.q0), t,
                                            problem.duration, problem.base_frequency)
    params = problem.spec.to_params(jnp.asarray(problem.theta), problem.base)
    u = jax.vmap(lambda a, b, c: command_torque(
        problem.model, params, a, b, c, problem.actuator))(q, qd, qdd)
    return Motion(t, q, qd, qdd, u)


def effort_envelope(problem: DesignProblem, m: Motion) -> jax.Array:
    """(T, nv) largest |command| over the parameters within `effort_radius` of theta, to first
    order: |u| + sum_m |du/dtheta_m| radius_m (exact for the inertial parameters of a body and
    the friction coefficients, in which the command is linear); |u| without a radius."""
    if problem.effort_radius is None:
        return jnp.abs(m.u)
    theta = jnp.asarray(problem.theta)

    def jacobian(q, qd, qdd):
        return jax.jacfwd(lambda th: command_torque(
            problem.model, problem.spec.to_params(th, problem.base), q, qd, qdd,
            problem.actuator))(theta)                                            # (nv, M)

    jac = jax.vmap(jacobian)(m.q, m.qd, m.qdd)
    return jnp.abs(m.u) + jnp.abs(jac) @ jnp.asarray(problem.effort_radius)


def information_matrix(problem: DesignProblem, coeffs) -> jax.Array:
    """(M, M) Fisher information of the coefficients' motion on the design grid."""
    m = motion(problem, coeffs, jnp.asarray(problem.t_design))
    if problem.residual == 'equation_error':
        return information.equation_error_information(
            problem.model, problem.spec, problem.base, jnp.asarray(problem.theta), m.q, m.qd,
            m.qdd, jnp.asarray(problem.state_var), jnp.asarray(problem.torque_var),
            None if problem.torque_std is None else jnp.asarray(problem.torque_std),
            problem.weight, problem.actuator)
    return information.fisher_information(
        problem.model, problem.spec, problem.base, jnp.asarray(problem.theta), m.q, m.qd,
        m.qdd, jnp.asarray(problem.accel_std), problem.weight, problem.actuator)


def scaled_posterior_precision(problem: DesignProblem, info) -> jax.Array:
    """S F S + P (M, M): information in scaled units plus the prior precision."""
    scale = jnp.asarray(problem.scale)
    return info * scale[:, None] * scale[None, :] + jnp.diag(jnp.asarray(
        problem.prior_precision))


def log_det(problem: DesignProblem, info) -> jax.Array:
    """D-criterion log det(S F S + P) of an information matrix F (M, M)."""
    return jnp.linalg.slogdet(scaled_posterior_precision(problem, info))[1]


def objective(problem: DesignProblem, coeffs) -> jax.Array:
    """The minimised objective of the module doc."""
    m = motion(problem, coeffs, jnp.asarray(problem.t_design))
    use = limits_lib.usage(problem.limits, m.q, m.qd, m.qdd, effort_envelope(problem, m))
    return (-log_det(problem, information_matrix(problem, coeffs)) / problem.spec.num_params
            + PENALTY_WEIGHT * limits_lib.penalty(use, PENALTY_TARGET))


def checked_motion(problem: DesignProblem, coeffs) -> tuple[Motion, limits_lib.Usage]:
    """The motion on the dense grid `t_check` and the peak use of each limit, (nv,) each."""
    m = motion(problem, coeffs, jnp.asarray(problem.t_check))
    return m, limits_lib.peak(limits_lib.usage(problem.limits, m.q, m.qd, m.qdd,
                                               effort_envelope(problem, m)))


class DesignFunctions(NamedTuple):
    """Jitted functions of one design problem (compiled once, shared by the optimiser and
    the reports).

    Attributes:
      value_and_grad: flat coefficients (2 nv L,) -> (objective, gradient).
      information: coefficients (2, nv, L) -> (M, M) information.
      check: coefficients -> (Motion on t_check, peak Usage).
    """

    value_and_grad: Callable
    information: Callable
    check: Callable


def make_design_functions(problem: DesignProblem) -> DesignFunctions:
    """Jit the objective's value and gradient, the information and the dense check."""
    shape = problem.coeff_shape
    return DesignFunctions(
        value_and_grad=jax.jit(jax.value_and_grad(
            lambda x: objective(problem, jnp.reshape(x, shape)))),
        information=jax.jit(lambda c: information_matrix(problem, c)),
        check=jax.jit(lambda c: checked_motion(problem, c)))


def largest_use(peak: limits_lib.Usage) -> float:
    """Largest use of any limit in a peak Usage [-]."""
    return max(float(jnp.max(r)) for r in peak)


def largest_scale(peak_fn: Callable, coeffs, target: float) -> float:
    """Largest s in [0, 1] with peak_fn(s coeffs) <= target, by bisection (0 if even the
    rest pose exceeds it)."""
    if float(peak_fn(coeffs)) <= target:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(peak_fn(mid * coeffs)) <= target else (lo, mid)
    return lo


def initial_coefficients(problem: DesignProblem, key, check: Callable) -> np.ndarray:
    """Random coefficients (amplitudes falling as 1 / l over the harmonics) scaled so that
    their motion uses START_USE of the position, velocity or acceleration limits (the
    efforts are left to the penalty: at a start pose whose gravity torque alone uses more
    than START_USE of a limit, a scale by all limits would start from rest, a stationary
    point of the objective). `check` is `DesignFunctions.check`."""
    harmonic = np.arange(1, problem.harmonics + 1)
    raw = np.asarray(jax.random.normal(key, problem.coeff_shape)) / harmonic

    def kinematic_peak(c):
        peak = check(c)[1]
        return largest_use(limits_lib.Usage(peak.position, peak.velocity, peak.acceleration,
                                            jnp.zeros_like(peak.effort)))

    return largest_scale(kinematic_peak, raw, START_USE) * raw


def design_trajectory(problem: DesignProblem, key, iterations: int = 200,
                      log: Callable[[str], None] | None = None,
                      functions: DesignFunctions | None = None) -> DesignResult:
    """Optimise the coefficients (module doc).

    Args:
      problem: the design problem.
      key: PRNG key of the random start.
      iterations: most L-BFGS iterations.
      log: receives a line per 20 iterations (objective and log det).
      functions: `make_design_functions(problem)`, if already compiled.

    Returns:
      DesignResult whose motion passes the hard check on `problem.t_check` unless even a
      motion at rest does not (shrink 0).
    """
    fns = functions or make_design_functions(problem)
    shape = problem.coeff_shape

    def peak(c):
        return largest_use(fns.check(c)[1])

    def criterion(c):
        return float(log_det(problem, fns.information(c)))

    start = initial_coefficients(problem, key, fns.check)
    count = [0]

    def fun(x):
        value, grad = fns.value_and_grad(jnp.asarray(x))
        return float(value), np.asarray(grad, dtype=float)

    def callback(x):
        count[0] += 1
        if log is not None and count[0] % 20 == 0:
            log(f'excite: iteration {count[0]}: objective {fun(x)[0]:.5g}, log det '
                f'{criterion(np.reshape(x, shape)):.5g}')

    result = scipy.optimize.minimize(fun, start.ravel(), jac=True, method='L-BFGS-B',
                                     callback=callback, options={'maxiter': int(iterations)})
    coeffs = np.reshape(result.x, shape)
    shrink = largest_scale(peak, coeffs, 1.0)
    coeffs = shrink * coeffs
    start_log_det = criterion(largest_scale(peak, start, 1.0) * start)
    return DesignResult(coeffs=coeffs, log_det=criterion(coeffs),
                        start_log_det=start_log_det, iterations=int(result.nit),
                        message=str(result.message), shrink=shrink)
