"""Shooting windows of a `likelihood.ShootingLikelihood`: simulated, stitched and observed.

Each of K trajectories of T control steps is cut into W windows of H = T / W steps. Window 0
starts at a given start state, window w >= 1 at the shooting state s_w; all K W windows are
simulated in one vmapped `integrators.rollout` (multiple shooting: Bock & Plitt 1984;
Heiden et al. 2022, §2.3). The predicted trajectory takes samples w H .. w H + H - 1 from
window w (its start first) and the last sample from the end of the last window.

`likelihood` is read through its attributes only: `model`, `dt`, `num_windows`,
`integrator`, `actuator`, `substeps` (the simulator), `observed_dims` and `mocap` (the
observation model).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.dynamics import observations
from sysid_ros.core.model.types import Params

__all__ = [
    'simulate_windows',
    'predicted_trajectories',
    'observe',
    'window_residuals',
]


def simulate_windows(likelihood, params: Params, x0: jax.Array, shooting: jax.Array,
                     controls: jax.Array) -> jax.Array:
    """All K W shooting windows in one vmapped rollout.

    Args:
      likelihood: a `likelihood.ShootingLikelihood`.
      params: physical parameters (one particle).
      x0: (K, S) start of window 0 of each trajectory.
      shooting: (K, W - 1, S) start states of windows 1 .. W - 1.
      controls: (K, T, nv) commands [N m, N].

    Returns:
      (K, W, H + 1, S) states of each window, its start state first.
    """
    k, t, nv = controls.shape
    w = likelihood.num_windows
    h = t // w
    s = x0.shape[-1]
    starts = jnp.concatenate([x0[:, None].astype(shooting.dtype), shooting], axis=1)

    def simulate(start, window_controls):
        return integrators.rollout(likelihood.model, params, start, window_controls,
                                   likelihood.dt, integrator=likelihood.integrator,
                                   actuator=likelihood.actuator, substeps=likelihood.substeps)

    states = jax.vmap(simulate)(starts.reshape(k * w, s), controls.reshape(k * w, h, nv))
    return states.reshape(k, w, h + 1, s)


def predicted_trajectories(windows: jax.Array) -> jax.Array:
    """(K, W, H + 1, S) window states -> (K, T + 1, S) predicted trajectory (module doc)."""
    k, w, h1, s = windows.shape
    body = windows[:, :, :-1].reshape(k, w * (h1 - 1), s)
    return jnp.concatenate([body, windows[:, -1, -1:]], axis=1)


def observe(likelihood, params: Params, states: jax.Array) -> jax.Array:
    """The observation model applied to states.

    Args:
      likelihood: a `likelihood.ShootingLikelihood` (its observation model).
      params: physical parameters (forward kinematics of the motion-capture model).
      states: (..., S) states [q; qd].

    Returns:
      (..., O) observations: the observed state dimensions, then the motion-capture points
      [m] of every tracked frame (`observations.mocap_trajectory`).
    """
    observed = states[..., np.asarray(likelihood.observed_dims, dtype=int)]
    if not likelihood.mocap:
        return observed
    points = observations.mocap_trajectory(likelihood.model, params, states, likelihood.mocap)
    return jnp.concatenate([observed.astype(points.dtype), points], axis=-1)


@functools.singledispatch
def window_residuals(likelihood, params: Params, starts: jax.Array, data) -> jax.Array:
    """Noise-normalised residuals of single-shooting windows from given start states.

    Args:
      likelihood: a `likelihood.ShootingLikelihood` with W = 1.
      params: physical parameters (one particle).
      starts: (K, S) start state of each window (`data.x0` is the measured one).
      data: a `likelihood.TrajectoryData`.

    Returns:
      (K, (T + 1) O) residuals (y_sim - y) / sigma, every sample in time order, the start's
      first; NaN/inf where a simulation diverged.
    """
    k = data.num_trajectories
    windows = simulate_windows(likelihood, params, starts,
                               jnp.zeros((k, 0, starts.shape[-1]), starts.dtype), data.controls)
    predicted = observe(likelihood, params, windows[:, 0])
    return ((predicted - data.observations) / data.noise_std).reshape(k, -1)
