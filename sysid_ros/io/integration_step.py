"""The integration step a fit needs: the fewest integration steps per sample period at which
the integrator's own error is far below the measurement noise.

With `model.dt` empty (the default) the step is chosen from the data (`resolve`), by step
doubling: from measured states (up to STARTS starts spread over the data, HORIZON_S long
each), the model at the given parameters (an estimate: `pipeline.fit` takes that of a fit at
the sample period and fits again where a finer step is needed; the live session its
current one; at the spec's starting values the motions are not the robot's, and the
held-out Panda's undamped start asked for more than 16 RK4 steps per 5 ms sample where its
estimate needs 1) is simulated
under the measured commands with s and with 2 s steps per sample period, s = s0, 2 s0, ...
MAX_SUBSTEPS (s0: the problem's steps so far, 1 for a new problem); the error of s steps,
estimated as

    e(s) = RMS over starts, samples and state dimensions of (x_s - x_2s) / noise std,

is the integrator's discretisation error in noise stds (for RK4 the error of x_2s is 1/16
of x_s's, so the difference is the error of x_s within 7 %). The first s with
e(s) <= STEP_TOLERANCE is taken. Why it matters: a recording from another engine (or the
robot) differs from the model integrated at the sample period by that error, the same in
every window, so it is a bias that no noise estimate sees and that grows, relative to the
posterior, with the square root of the data. Measured on MuJoCo's double pendulum (RK4 at
1 ms, sampled at 100 Hz, noise 2e-3, 20 s): RK4 at the sample period e(1) = 0.013 at the
truth and 0.33 at the starting values (faster motions), e(2) = 0.0008 and 0.012, e(4) =
6e-5 and 5e-4. Noise: `data.noise_std`, else estimated from the data
(`estimator_data.estimate_noise_std`). An explicit `model.dt` is kept as it is; the
equation-error residual and the inverse-dynamics regressors do not integrate, so they keep
one step.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.inference import registry
from sysid_ros.io import estimator_data
from sysid_ros.io.problem import Problem
from sysid_ros.io.trajectory import Trajectory

__all__ = [
    'STEP_TOLERANCE',
    'MAX_SUBSTEPS',
    'HORIZON_S',
    'STARTS',
    'StepChoice',
    'integrates',
    'discretisation_errors',
    'choose_substeps',
    'resolve',
]

# Largest discretisation error accepted, in noise stds (RMS) [-].
STEP_TOLERANCE = 0.01
# Most integration steps per sample period the choice goes to.
MAX_SUBSTEPS = 16
# Length of each simulated stretch [s] (the live session's window, a typical shooting window).
HORIZON_S = 1.0
# Most stretches simulated.
STARTS = 32


class StepChoice(NamedTuple):
    """What `choose_substeps` found.

    Attributes:
      substeps: integration steps per sample period chosen.
      errors: {s: e(s)} for every s tried: discretisation error in noise stds (RMS) [-].
      reached: whether e(substeps) <= the tolerance (False: MAX_SUBSTEPS was not enough,
        or the simulation at these parameters blew up).
    """

    substeps: int
    errors: dict[int, float]
    reached: bool

    def describe(self, problem: Problem) -> str:
        """One line for the fit's log."""
        tried = ', '.join(f'{s}: {e:.2g}' for s, e in self.errors.items())
        verdict = ('' if self.reached else f'; above {STEP_TOLERANCE:g}: set model.dt')
        return (f'integration: {self.substeps} {problem.config.model.integrator} step(s) per '
                f'{problem.dt * 1e3:g} ms sample (discretisation error in noise stds by '
                f'steps {{{tried}}}{verdict})')


def integrates(problem: Problem, method: str) -> bool:
    """Whether `method`'s fit simulates the model (not the inverse-dynamics regressors, not
    the equation-error residual): only then is there a step to choose."""
    return (registry.lookup(method).data != 'regressor'
            and estimator_data.residual_family(problem.config.estimator.residual).simulates)


def _stretches(problem: Problem, trajs: Sequence[Trajectory]):
    """(x0 (S, 2 nv), controls (S, H, nv)) of up to STARTS stretches of HORIZON_S (at most
    the shortest trajectory) spread over the data."""
    steps = max(int(round(HORIZON_S / problem.dt)), 1)
    steps = min(steps, min(t.num_samples for t in trajs) - 1)
    measured, controls = estimator_data.stretches(trajs, steps, STARTS)
    return measured[:, 0], controls


def discretisation_errors(problem: Problem, trajs: Sequence[Trajectory], noise: np.ndarray,
                          theta=None, tolerance: float = STEP_TOLERANCE) -> dict[int, float]:
    """{s: e(s)} for s = `problem.substeps`, twice that, ... up to the first with
    e(s) <= `tolerance` or MAX_SUBSTEPS (module doc); `noise` (2 nv,) std per state
    dimension, `theta` (M,) the parameters (default: the spec's starting values)."""
    spec, cfg = problem.spec, problem.config.model
    theta = spec.initial_theta(problem.base_params) if theta is None else theta
    params = spec.to_params(jnp.asarray(theta, float), problem.base_params)
    x0, controls = _stretches(problem, trajs)

    def simulate(substeps):
        return np.asarray(integrators.rollout_batch(
            problem.model, params, jnp.asarray(x0), jnp.asarray(controls), problem.dt,
            integrator=cfg.integrator, actuator=cfg.actuator, substeps=substeps))

    errors: dict[int, float] = {}
    substeps = problem.substeps
    coarse = simulate(substeps)
    while True:
        fine = simulate(2 * substeps)
        error = float(np.sqrt(np.mean(np.square((coarse - fine) / noise))))
        errors[substeps] = error if np.isfinite(error) else np.inf
        # A simulation that blew up says nothing about the step: no finer one for it.
        if error <= tolerance or substeps >= MAX_SUBSTEPS or not np.isfinite(error):
            return errors
        substeps, coarse = 2 * substeps, fine


def choose_substeps(problem: Problem, trajs: Sequence[Trajectory], theta=None,
                    tolerance: float = STEP_TOLERANCE) -> StepChoice:
    """The fewest integration steps per sample period, no fewer than `problem.substeps`, whose
    discretisation error on `trajs` (prepared: on the problem's time grid) at `theta` is
    within `tolerance` noise stds (module doc)."""
    noise, _ = estimator_data.noise_std(problem, trajs)
    errors = discretisation_errors(problem, trajs, noise, theta, tolerance)
    substeps = max(errors)
    return StepChoice(substeps, errors, errors[substeps] <= tolerance)


def resolve(problem: Problem, trajs: Sequence[Trajectory], integrates: bool = True,
            theta=None) -> tuple[Problem, StepChoice | None]:
    """`problem` with the integration step chosen on `trajs` at `theta` where `model.dt` is
    empty and the fit integrates the model (`integrates`: the function of that name), and
    the choice (None where nothing was chosen). The step only gets
    finer: a live session calls it on every window."""
    if problem.config.model.dt is not None or not integrates:
        return problem, None
    choice = choose_substeps(problem, trajs, theta)
    return dataclasses.replace(problem, substeps=choice.substeps), choice
