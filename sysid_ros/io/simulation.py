"""Synthetic recordings and held-out scores: the model simulated under a smooth random
excitation (`simulate`, for demos, tests and benchmarks; with the motion-capture poses of the
tracked frames, `tracked_poses`), the excitation itself (used by the `sim_robot` node too),
rollouts of measured segments (`prediction_error`)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.constrained import mechanisms
from sysid_ros.core.dynamics import integrators, observations, rigid_body
from sysid_ros.core.model.types import Params, RobotModel
from sysid_ros.io import estimator_data
from sysid_ros.io.problem import MechanismProblem, prepare_trajectories, Problem
from sysid_ros.io.trajectory import DataError, Trajectory

__all__ = [
    'rollout',
    'rollout_batch',
    'typical_torque',
    'excitation',
    'joint_sines',
    'tracked_poses',
    'simulate',
    'prediction_error',
]

rollout = jax.jit(integrators.rollout, static_argnames=('integrator', 'actuator', 'substeps'))


rollout_batch = integrators.rollout_batch


@jax.jit
def _gravity_and_inertia(model: RobotModel, params: Params, q):
    """Gravity torques (S, nv) and mass-matrix diagonals (S, nv) at configurations (S, nv)."""
    def one(qi):
        zero = jnp.zeros_like(qi)
        return (rigid_body.rnea(model, params, qi, zero, zero),
                jnp.diag(rigid_body.crba(model, params, qi)))
    return jax.vmap(one)(q)


def typical_torque(model: RobotModel, params: Params, rng: np.random.Generator) -> np.ndarray:
    """(nv,) typical torque per joint: spread of gravity torques plus mass-matrix diagonal
    times 1 rad/s^2, over random configurations."""
    lo = np.where(np.isfinite(model.q_min), model.q_min, -np.pi)
    hi = np.where(np.isfinite(model.q_max), model.q_max, np.pi)
    q = jnp.asarray(rng.uniform(lo, hi, size=(32, model.nv)))
    gravity, mass = _gravity_and_inertia(model, params, q)
    return np.asarray(jnp.std(gravity, axis=0) + jnp.mean(mass, axis=0))


def excitation(t: np.ndarray, scale: np.ndarray, rng: np.random.Generator,
               num_sines: int = 5, max_frequency: float = 1.0) -> np.ndarray:
    """Smooth random torques: per joint a sum of `num_sines` sinusoids.

    Frequencies are uniform in [0.1, max_frequency] Hz, phases uniform, amplitudes uniform
    and normalised so the peak of each joint's sum is at most `scale[j]`.

    Args:
      t: (T,) times [s].
      scale: (nv,) peak torque per joint [N m].
      rng: NumPy generator.

    Returns:
      (T, nv) torques [N m].
    """
    nv = len(scale)
    freq = rng.uniform(0.1, max_frequency, size=(num_sines, nv))
    phase = rng.uniform(0.0, 2.0 * np.pi, size=(num_sines, nv))
    amp = rng.uniform(0.5, 1.0, size=(num_sines, nv))
    amp = amp / amp.sum(axis=0) * np.asarray(scale)
    return np.sum(amp[None] * np.sin(2 * np.pi * freq[None] * t[:, None, None] + phase[None]),
                  axis=1)


def joint_sines(t: np.ndarray, q_min, q_max, v_max, rng: np.random.Generator,
                num_sines: int = 5, max_frequency: float = 1.0, margin: float = 0.1,
                speed: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Smooth random joint motion inside the limits: per joint a sum of `num_sines` sinusoids
    about the middle of its range.

    Frequencies are uniform in [0.1, max_frequency] Hz, phases uniform and amplitude weights
    uniform in [0.5, 1]; each joint's amplitudes are scaled together so that their sum (the
    peak distance from the middle) is at most (1 - margin) times its half range and the sum
    of amplitude times angular frequency (the peak speed) at most `speed` times its velocity
    limit.

    Args:
      t: (T,) times [s].
      q_min, q_max: (nv,) position limits [rad or m] (infinite: -pi and pi).
      v_max: (nv,) velocity limits [rad/s or m/s] (infinite or 0: no speed bound).
      rng: NumPy generator.
      num_sines, max_frequency: sinusoids per joint and their highest frequency [Hz].
      margin: fraction of each half range kept free at both ends [-], in [0, 1).
      speed: largest fraction of each velocity limit used [-].

    Returns:
      q, qd, qdd: (T, nv) positions, velocities and accelerations [rad, rad/s, rad/s^2 or m,
      m/s, m/s^2].
    """
    lo = np.where(np.isfinite(q_min), q_min, -np.pi)
    hi = np.where(np.isfinite(q_max), q_max, np.pi)
    v_max = np.asarray(v_max, float)
    v_max = np.where(v_max > 0.0, v_max, np.inf)
    nv = len(lo)
    omega = 2.0 * np.pi * rng.uniform(0.1, max_frequency, size=(num_sines, nv))
    phase = rng.uniform(0.0, 2.0 * np.pi, size=(num_sines, nv))
    weight = rng.uniform(0.5, 1.0, size=(num_sines, nv))
    weight = weight / weight.sum(axis=0)
    peak = np.minimum((1.0 - margin) * 0.5 * (hi - lo),
                      speed * v_max / np.sum(weight * omega, axis=0))
    amp = weight * peak                                                  # (num_sines, nv)
    angle = omega[None] * np.asarray(t, float)[:, None, None] + phase[None]
    q = 0.5 * (lo + hi) + np.sum(amp * np.sin(angle), axis=1)
    qd = np.sum(amp * omega * np.cos(angle), axis=1)
    qdd = -np.sum(amp * omega ** 2 * np.sin(angle), axis=1)
    return q, qd, qdd


def tracked_poses(problem: Problem, params: Params, q: np.ndarray, noise: float = 0.0,
                  rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Motion-capture poses of the tracked frames `problem.mocap` at joint positions q.

    Args:
      problem: the problem (model and tracked frames).
      params: physical parameters (forward kinematics).
      q: (T, nv) joint positions [rad or m].
      noise: std [m] of the Gaussian noise on each coordinate of the origin, and of the
        rotation vector [rad] of a random rotation (world axes) divided by the 1 m axis
        length (`observations.AXIS_LENGTH`), so that the axis tips see noise of that size.
      rng: generator of the noise (needed when noise > 0).

    Returns:
      position (T, K, 3) [m] and orientation (T, K, 4) unit quaternions [x, y, z, w] of the
      K tracked frames in the world frame.
    """
    from scipy.spatial.transform import Rotation

    placements = [jax.vmap(lambda qi, f=frame: observations.frame_placement(
        problem.model, params, qi, f))(jnp.asarray(q)) for frame in problem.mocap]
    rotation = np.stack([np.asarray(R) for R, _ in placements], axis=1)         # (T, K, 3, 3)
    position = np.stack([np.asarray(p) for _, p in placements], axis=1)         # (T, K, 3)
    shape = position.shape
    rotation = Rotation.from_matrix(rotation.reshape(-1, 3, 3))
    if noise > 0.0:
        position = position + rng.normal(0.0, noise, shape)
        tilt = rng.normal(0.0, noise / observations.AXIS_LENGTH, (len(rotation), 3))
        rotation = Rotation.from_rotvec(tilt) * rotation
    return position, rotation.as_quat().reshape(shape[:2] + (4,))


def simulate(problem: Problem, params: Params | None = None, duration: float = 10.0,
             noise: float = 0.0, seed: int = 0, torque_scale: float = 1.0,
             x0=None, mocap_noise: float = 0.0) -> Trajectory:
    """Simulate the model under a random smooth excitation and add sensor noise.

    The commands are `excitation(...)` with peaks of `torque_scale` times a typical torque of
    each joint (gravity spread + inertia, see `typical_torque`), clipped to the effort limits;
    the model is integrated with the configured integrator, actuator and substeps, starting
    at rest at q = 0 (clipped into the joint limits). Noise: independent N(0, noise^2) added
    to every q [rad, m] and qd [rad/s, m/s] sample; the torques are the exact commands. With
    tracked frames (`problem.mocap`) the trajectory carries their poses at the true states
    (`tracked_poses`, noise `mocap_noise`).

    Args:
      problem: the problem (model, integrator, actuator, rate).
      params: true parameters (default: the nominal `problem.base_params`).
      duration: [s].
      noise: sensor noise standard deviation.
      seed: seed of the excitation and the noise.
      torque_scale: excitation strength.
      x0: (2 nv,) initial state (default: at rest at q = 0).
      mocap_noise: noise of the motion-capture poses [m] (see `tracked_poses`).

    Returns:
      Trajectory with T = round(duration / dt) + 1 samples (tau of the last sample repeats
      the previous command).
    """
    if isinstance(problem, MechanismProblem):
        return _simulate_mechanism(problem, params, duration, noise, seed, torque_scale)
    model, cfg = problem.model, problem.config
    params = problem.base_params if params is None else params
    rng = np.random.default_rng(seed)
    num = int(round(duration / problem.dt))
    t = np.arange(num + 1) * problem.dt
    scale = torque_scale * typical_torque(model, params, rng)
    limit = np.asarray(model.effort_max if model.effort_max else [np.inf] * model.nv, float)
    limit = np.where(limit > 0.0, limit, np.inf)            # 0: no limit given in the URDF
    controls = np.clip(excitation(t[:-1], scale, rng), -limit, limit)
    if x0 is None:
        q0 = np.clip(np.zeros(model.nv), model.q_min or -np.inf, model.q_max or np.inf)
        x0 = np.concatenate([q0, np.zeros(model.nv)])
    states = np.asarray(rollout(model, params, jnp.asarray(x0, float), jnp.asarray(controls),
                                problem.dt, integrator=cfg.model.integrator,
                                actuator=cfg.model.actuator, substeps=problem.substeps))
    if not np.all(np.isfinite(states)):
        raise DataError('simulate: the simulation diverged; lower the excitation or the step')
    q, qd = states[:, :model.nv], states[:, model.nv:]
    if noise > 0.0:
        q = q + rng.normal(0.0, noise, q.shape)
        qd = qd + rng.normal(0.0, noise, qd.shape)
    tau = np.concatenate([controls, controls[-1:]], axis=0)
    traj = Trajectory(t=t, q=q, qd=qd, tau=tau, joint_names=model.joint_names,
                      source='simulate')
    if not problem.mocap:
        return traj
    position, orientation = tracked_poses(problem, params, states[:, :model.nv], mocap_noise,
                                          rng)
    return dataclasses.replace(traj, mocap_position=position, mocap_orientation=orientation)


def prediction_error(problem: Problem, theta, trajectory: Trajectory, horizon: int = 100
                     ) -> dict[str, float]:
    """Score parameters by simulating held-out data.

    The trajectory is cut into segments of `horizon` steps; each is simulated from its
    measured start under the measured commands.

    Args:
      problem: the problem.
      theta: (M,) physical parameter values.
      trajectory: held-out data on the problem's time grid.
      horizon: steps per segment.

    Returns:
      {'nmse': normalised mean squared state error [-] (the rollout loss),
       'rmse_q': root mean squared joint-position error [rad or m],
       'rmse_qd': root mean squared joint-velocity error [rad/s or m/s]}.
    """
    traj = prepare_trajectories(problem, [trajectory])[0]
    segments = estimator_data.segments(problem, [traj], horizon)
    params = problem.spec.to_params(jnp.asarray(theta, float), problem.base_params)
    cfg = problem.config
    nv = problem.model.nv

    predicted = np.asarray(rollout_batch(
        problem.model, params, segments.x0, segments.controls, problem.dt,
        integrator=cfg.model.integrator, actuator=cfg.model.actuator,
        substeps=problem.substeps))[:, 1:]
    error = predicted - np.asarray(segments.targets)
    scale = np.asarray(segments.state_scale)
    finite = np.all(np.isfinite(error))
    return {'nmse': float(np.mean(np.square(error / scale))) if finite else math.inf,
            'rmse_q': float(np.sqrt(np.mean(np.square(error[..., :nv])))) if finite
            else math.inf,
            'rmse_qd': float(np.sqrt(np.mean(np.square(error[..., nv:])))) if finite
            else math.inf}


def _simulate_mechanism(problem: MechanismProblem, params, duration: float, noise: float,
                        seed: int, torque_scale: float) -> Trajectory:
    """Angle-coordinate encoders and rates (noise std `noise`) of the mechanism under a smooth
    random torque (peaks `torque_scale` times `mechanisms.typical_torque`), simulated by RK4
    in the angle coordinates at dt / 20 from rest at the builder's configuration."""
    from sysid_ros.graph import identification
    mech = problem.mechanism
    params = problem.base_params if params is None else params
    num = int(round(duration / problem.dt))
    scale = torque_scale * np.asarray(mechanisms.typical_torque(mech, params,
                                                                problem.q_branch))

    def torque(t):
        return excitation(t, scale, np.random.default_rng(seed))

    u, _, _, angle, rate = identification.simulate_sensors(
        mech, params, problem.q_branch, torque, problem.dt, num, encoder_sigma=noise,
        gyro_bar=list(mech.angle_bars), gyro_sigma=noise, seed=seed)
    if not (np.all(np.isfinite(angle)) and np.all(np.isfinite(rate))):
        raise DataError('simulate: the simulation diverged; lower the excitation or the step')
    return Trajectory(t=np.arange(num + 1) * problem.dt, q=angle, qd=rate,
                      tau=np.concatenate([u, u[-1:]]), joint_names=problem.joint_names,
                      source='simulate')
