"""DiffNEA losses: one-step and multi-step prediction errors of the forward dynamics.

DiffNEA (Lutter et al. 2021, §3.1 and §4.1.2) learns physical parameters by minimising the
squared error of the forward model: simulate the robot with the candidate parameters (ABA +
actuator model + integrator, `integrators`) and compare with the measured states. Two losses,
both over `Segments` of a measured trajectory:

  * one-step (`one_step_loss`): from every measured state x_t and command u_t predict
    x_{t+1} with one integrator step (teacher forcing); the error is normalised per state
    dimension by the spread of the measured one-step increments x_{t+1} - x_t, so position
    and velocity errors count alike;
  * multi-step (`rollout_loss`): from the measured state at the start of each segment,
    simulate H steps under the measured commands (`integrators.rollout`, vmapped over
    segments) and compare all H predicted states with the measured ones, normalised per
    state dimension by the spread of the measured states. Starting every segment at a
    measured state is multiple shooting without free defect variables.

A loss is `loss_fn(params, segments) -> ()`, the mean normalised squared error, built by
`make_loss_fn`; an estimator maps its parameter vector theta to `Params` first
(`ParameterSpec.to_params`). Every function is pure and jit/vmap/grad-able; the `LossFn`
object is a frozen dataclass (hashable), so it can be a static argument of `jax.jit`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import integrators
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'LOSSES',
    'Segments',
    'make_segments',
    'one_step_loss',
    'rollout_loss',
    'LossFn',
    'make_loss_fn',
    'floored_state_scale',
]

LOSSES = ('one_step', 'rollout')
# Floor of the normalising scales, relative to the largest scale of the same kind (q or qd),
# so that a joint that hardly moves does not blow up the loss.
_SCALE_FLOOR = 1e-3


class Segments(NamedTuple):
    """Windows of measured trajectories, each starting at a measured state.

    Attributes:
      x0: (S, 2 nv) measured state [q; qd] at the start of each segment.
      controls: (S, H, nv) commanded torques [N m, N] over the segment, held for dt each.
      targets: (S, H, 2 nv) measured states after each control step.
      state_scale: (2 nv,) normalising spread of the measured states (rollout loss).
      delta_scale: (2 nv,) normalising spread of the measured one-step increments.
    """

    x0: jax.Array
    controls: jax.Array
    targets: jax.Array
    state_scale: jax.Array
    delta_scale: jax.Array

    @property
    def num_segments(self) -> int:
        return int(self.x0.shape[0])

    @property
    def horizon(self) -> int:
        return int(self.controls.shape[1])


def floored_state_scale(scale: np.ndarray, nv: int) -> np.ndarray:
    """Per-dimension scales (2 nv,) of [q; qd], floored relative to the largest of each kind."""
    out = scale.copy()
    for part in (slice(0, nv), slice(nv, 2 * nv)):
        top = float(np.max(out[part])) if out[part].size else 0.0
        out[part] = np.maximum(out[part], max(_SCALE_FLOOR * top, 1e-12))
    return out


def make_segments(qs: Sequence[np.ndarray], qds: Sequence[np.ndarray],
                  taus: Sequence[np.ndarray], horizon: int, stride: int | None = None
                  ) -> Segments:
    """Cut trajectories into segments of `horizon` steps (NumPy, on the host).

    Segments start every `stride` samples (default: `horizon`, so they do not overlap) and
    never cross from one trajectory into the next. The normalising scales are the standard
    deviations over all given samples (and increments), each floored at 1e-3 of the largest
    scale of its kind.

    Args:
      qs, qds, taus: one (T_k, nv) array per trajectory of positions, velocities and applied
        commands, on the same uniform time grid (sample period = the loss's dt).
      horizon: steps per segment, H >= 1.
      stride: samples between segment starts (>= 1).

    Returns:
      Segments with S = sum_k floor((T_k - 1 - H) / stride) + 1 segments.

    Raises:
      ValueError: bad horizon/stride, mismatched shapes, or no trajectory long enough.
    """
    horizon = int(horizon)
    stride = horizon if stride is None else int(stride)
    if horizon < 1 or stride < 1:
        raise ValueError(f'make_segments: expected horizon, stride >= 1, got {horizon}, '
                         f'{stride}')
    x0s, controls, targets, states, deltas = [], [], [], [], []
    for k, (q, qd, tau) in enumerate(zip(qs, qds, taus)):
        q, qd, tau = (np.asarray(a, dtype=float) for a in (q, qd, tau))
        if not (q.ndim == 2 and q.shape == qd.shape == tau.shape):
            raise ValueError(f'make_segments: trajectory {k}: q, qd, tau must have one '
                             f'shape (T, nv), got {q.shape}, {qd.shape}, {tau.shape}')
        x = np.concatenate([q, qd], axis=1)
        states.append(x)
        deltas.append(np.diff(x, axis=0))
        starts = np.arange(0, x.shape[0] - horizon, stride)
        if starts.size == 0:
            continue
        steps = starts[:, None] + np.arange(horizon)[None, :]           # (S_k, H)
        x0s.append(x[starts])
        controls.append(tau[steps])
        targets.append(x[steps + 1])
    if not x0s:
        raise ValueError(f'make_segments: no trajectory has more than horizon={horizon} '
                         'samples')
    nv = x0s[0].shape[1] // 2
    state_scale = floored_state_scale(np.std(np.concatenate(states), axis=0), nv)
    delta_scale = floored_state_scale(np.std(np.concatenate(deltas), axis=0), nv)
    return Segments(x0=jnp.asarray(np.concatenate(x0s)),
                    controls=jnp.asarray(np.concatenate(controls)),
                    targets=jnp.asarray(np.concatenate(targets)),
                    state_scale=jnp.asarray(state_scale), delta_scale=jnp.asarray(delta_scale))


def one_step_loss(model: RobotModel, params: Params, segments: Segments, dt,
                  integrator='rk4', actuator='viscous', substeps: int = 1):
    """Mean normalised squared one-step prediction error (teacher forcing).

    For every measured pair (x_t, x_{t+1}) in the segments, x_hat = step(x_t, u_t) (with
    `substeps` integrator steps of dt / substeps) and the error (x_hat - x_{t+1}) /
    delta_scale is squared and averaged over pairs and state dimensions.

    Args:
      model: static tree.
      params: physical parameters.
      segments: measured data (`make_segments`).
      dt: control period [s].
      integrator, actuator: names or callables (static), see `integrators.rollout`.
      substeps: integration steps per control period (static).

    Returns:
      () loss [-].
    """
    step_fn = integrators.get_integrator(integrator)
    h = dt / substeps
    x = jnp.concatenate([segments.x0[:, None], segments.targets[:, :-1]], axis=1)
    x = x.reshape(-1, x.shape[-1])
    u = segments.controls.reshape(-1, segments.controls.shape[-1])
    target = segments.targets.reshape(-1, segments.targets.shape[-1])

    def predict(x, u):
        for _ in range(substeps):
            x = step_fn(model, params, x, u, h, actuator)
        return x

    error = (jax.vmap(predict)(x, u) - target) / segments.delta_scale
    return jnp.mean(jnp.square(error))


def rollout_loss(model: RobotModel, params: Params, segments: Segments, dt,
                 integrator='rk4', actuator='viscous', substeps: int = 1):
    """Mean normalised squared multi-step prediction error over the segments.

    Each segment is simulated from its measured start `x0` for H steps
    (`integrators.rollout`, vmapped over segments); the errors of all H predicted states,
    divided by `state_scale`, are squared and averaged over segments, steps and dimensions.

    Args and Returns: as `one_step_loss`.
    """
    def simulate(x0, controls):
        return integrators.rollout(model, params, x0, controls, dt, integrator=integrator,
                                   actuator=actuator, substeps=substeps)[1:]

    predicted = jax.vmap(simulate)(segments.x0, segments.controls)
    error = (predicted - segments.targets) / segments.state_scale
    return jnp.mean(jnp.square(error))


_LOSS_FUNCTIONS = {'one_step': one_step_loss, 'rollout': rollout_loss}


@dataclasses.dataclass(frozen=True)
class LossFn:
    """`loss_fn(params, segments) -> ()`: a DiffNEA loss with its simulator settings bound.

    Hashable (a frozen dataclass of static values), so `jax.jit` can take it as a static
    argument and two equal losses share one compiled program.

    Attributes:
      model: static tree.
      kind: 'one_step' or 'rollout'.
      dt: control period [s].
      integrator, actuator: names (or hashable callables) of `integrators.INTEGRATORS` /
        `actuators.ACTUATORS`.
      substeps: integration steps per control period.
    """

    model: RobotModel
    kind: str
    dt: float
    integrator: object = 'rk4'
    actuator: object = 'viscous'
    substeps: int = 1

    def __call__(self, params: Params, segments: Segments):
        return _LOSS_FUNCTIONS[self.kind](self.model, params, segments, self.dt,
                                          integrator=self.integrator, actuator=self.actuator,
                                          substeps=self.substeps)


def make_loss_fn(model: RobotModel, kind: str = 'rollout', dt: float = 0.01,
                 integrator='rk4', actuator='viscous', substeps: int = 1) -> LossFn:
    """Build a DiffNEA loss `loss_fn(params, segments) -> ()`.

    Args:
      model: static tree.
      kind: 'one_step' (`one_step_loss`) or 'rollout' (`rollout_loss`).
      dt: control period [s] of the segments.
      integrator: name in `integrators.INTEGRATORS` or a step function.
      actuator: name in `actuators.ACTUATORS` or a callable.
      substeps: integration steps per control period (int >= 1).

    Raises:
      ValueError: unknown kind, integrator or actuator; dt <= 0; substeps < 1.
    """
    if kind not in _LOSS_FUNCTIONS:
        raise ValueError(f'loss: expected one of {" | ".join(LOSSES)}, got {kind!r}')
    integrators.get_integrator(integrator)
    actuators.get_actuator(actuator)
    if not float(dt) > 0.0:
        raise ValueError(f'loss: dt: expected > 0, got {dt!r}')
    if int(substeps) != substeps or substeps < 1:
        raise ValueError(f'loss: substeps: expected int >= 1, got {substeps!r}')
    return LossFn(model=model, kind=kind, dt=float(dt), integrator=integrator,
                  actuator=actuator, substeps=int(substeps))
