"""Online identification of mechanism parameters in the factor graph.

An extension of Blanco-Claraco et al. 2021, whose graphs hold no parameter variables.

A parameter variable p (key 'p'), e.g. [rocker mass, crank friction], joins every dynamics factor
of a dependent-coordinate graph (the paper's Fig 2); sensors (angle encoders on the angle bars,
optionally gyroscopes on bars) enter as measurement factors. A fixed-lag smoother (iSAM2 by
default, see `smoother.make_smoother`) keeps the last `window` steps and re-stamps p at every step
so that it never leaves the window; its marginal covariance is read from the smoother's graph
(which holds the marginal of the steps already dropped) after each update.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import gtsam
import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.constrained import mechanisms as mm
from sysid_ros.graph.factors import (bind, encoder_residual, FactorLibrary, gyro_residual, key,
                                     position_residual, stacked_factor, velocity_residual)
from sysid_ros.graph.smoother import make_smoother, Sigmas


# With noisy sensors the kinematic factors need not be 1e-6-tight: looser ones keep the
# marginal covariance (a Cholesky factorisation) well conditioned.
IDENTIFICATION_SIGMAS = Sigmas(integrator=1e-3, position=1e-3, velocity=1e-3, acceleration=1e-3)


def parameter_names(mech: mm.Mechanism) -> tuple[str, ...]:
    """Names of the identifiable parameters: '<bar>.mass' and '<angle bar>.damping'."""
    return (tuple(f'{name}.mass' for name in mech.bar_names)
            + tuple(f'{mech.bar_names[k]}.damping' for k in mech.angle_bars))


def set_parameters(mech, names: tuple[str, ...], params: mm.MechanismParams, p):
    """`params` with the entries `names` replaced by p (len(names),) [kg, N m s/rad]."""
    masses, damping = params.bar_masses, params.damping
    angle_names = [mech.bar_names[k] for k in mech.angle_bars]
    for i, name in enumerate(names):
        bar, field = name.rsplit('.', 1)
        if field == 'mass':
            masses = masses.at[mech.bar_names.index(bar)].set(p[i])
        else:
            damping = damping.at[angle_names.index(bar)].set(p[i])
    return dataclasses.replace(params, bar_masses=masses, damping=damping)


def get_parameters(mech, names: tuple[str, ...], params: mm.MechanismParams) -> np.ndarray:
    """(len(names),) values of the entries `names` of `params` [kg, N m s/rad]."""
    angle_names = [mech.bar_names[k] for k in mech.angle_bars]
    values = []
    for name in names:
        bar, field = name.rsplit('.', 1)
        values.append(params.bar_masses[mech.bar_names.index(bar)] if field == 'mass'
                      else params.damping[angle_names.index(bar)])
    return np.asarray(values, dtype=float)


def assemble(mech, q_branch, angle, rate, num_steps=16):
    """Initial state from measured angle coordinates, on the branch of q_branch.

    The angles are moved from those of q_branch to `angle` (nz,) [rad] in `num_steps`
    increments, solving the position problem at each (continuation keeps the branch).

    Returns:
      (q (n,) [m], v (n,) [m/s]) with v = R(q) rate, rate (nz,) [rad/s].

    Raises:
      MechanismError: the configuration is singular or cannot be assembled (names the
        constraint).
    """
    angle = np.asarray(angle, dtype=float)
    start = np.asarray(mm.bar_angles(mech, jnp.asarray(q_branch)))
    turn = np.angle(np.exp(1j * (angle - start)))  # shortest way round
    q = jnp.asarray(q_branch, dtype=float)
    for s in np.linspace(0.0, 1.0, num_steps + 1)[1:]:
        q = mm.solve_position(mech, jnp.asarray(start + s * turn), q)
    z = jnp.asarray(start + turn)
    mm.check_configuration(mech, q, z)
    v = mm.velocity_transform(mech, q, z) @ jnp.asarray(rate, dtype=float)
    return np.asarray(q), np.asarray(v)


def check_parameter_names(mech, names) -> tuple[str, ...]:
    """Validates `names` against `parameter_names(mech)`; raises MechanismError naming the bad
    one."""
    known = parameter_names(mech)
    for name in names:
        if name not in known:
            raise mm.MechanismError(f"parameter '{name}': unknown; expected one of {known}")
    return tuple(names)


def parametric_dynamics_residual(mech, names, q, v, a, p, params, u):
    """Equations of motion in a form linear in the parameters p (masses and frictions):

      [R^T (M(p) q'' - Q(q, q', u; p));  Phi_q q'' + (Phi_q q')' q']   (nz + m = n,)

    the projection of eq 4 on the independent directions R (eq 13, [N m]) and the acceleration
    constraints (eq 3, [m^2/s^2]); together they are eq 6. Being linear in p, the factors that
    the smoother marginalises do not freeze a wrong linearisation point of p.
    """
    full = set_parameters(mech, names, params, p)
    z = mm.bar_angles(mech, q)
    r = mm.velocity_transform(mech, q, z)
    force = mm.mass_matrix(mech, full) @ a - mm.generalized_forces(mech, full, q, v, u)
    accel = mm.constraint_jacobian(mech, q) @ a + mm.constraint_bias(mech, q, v)
    return jnp.concatenate([r.T @ force, accel])


def marginal_covariance(graph, values, k) -> np.ndarray:
    """Marginal covariance of variable k: the dense QR of the whitened Jacobian with k ordered
    last, cov = (R_kk^T R_kk)^-1. For a fixed-lag window (a few hundred unknowns) this is cheap
    and, unlike `gtsam.Marginals` (Cholesky), robust to weak priors next to stiff constraints."""
    ordering = gtsam.Ordering()
    for other in values.keys():
        if other != k:
            ordering.push_back(other)
    ordering.push_back(k)
    jac, _ = graph.linearize(values).jacobian(ordering)
    dim = values.atVector(k).size
    r_kk = np.linalg.qr(jac, mode='r')[-dim:, -dim:]
    return np.linalg.inv(r_kk.T @ r_kk)


class IdentificationResult(NamedTuple):
    """Online estimates after each step.

    Attributes:
      names: (P,) parameter names.
      mean: (T + 1, P) estimate of p after step k [kg, N m s/rad].
      std: (T + 1, P) marginal standard deviation of p after step k.
      q: (T + 1, n) position estimates (each step's value when it left the window).
      cov: (P, P) marginal covariance of p after the last step.
      error: (T + 1,) error of step k's new factors (half their whitened squared residuals)
        after its update [-].
      wall_time: seconds in the smoother.
    """

    names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    q: np.ndarray
    cov: np.ndarray
    error: np.ndarray
    wall_time: float


def identify_online(mech, params, names, p_prior, p_sigma, q0, v0, u, encoder, dt, window,
                    encoder_sigma, gyro=None, gyro_bar=None, gyro_sigma=None,
                    state_sigma=1e-3, torque_sigma=1e-2, sigmas=IDENTIFICATION_SIGMAS,
                    max_iterations=15, covariance_every=1, progress=None,
                    smoother='incremental', relinearize_threshold=1e-3
                    ) -> IdentificationResult:
    """Estimates the parameters `names` online from torques and noisy sensors.

    Its length is its argument list; the body builds one smoother and steps it once per sample.

    Args:
      mech: the mechanism.
      params: nominal parameters (the entries not in `names` are taken as known).
      names: parameters to identify (see `parameter_names`).
      p_prior: (P,) prior mean of the parameters.
      p_sigma: (P,) prior standard deviations of the parameters or (P, P) prior covariance
        (e.g. the posterior of an earlier run).
      q0: (n,) approximate initial coordinates.
      v0: (n,) approximate initial velocities.
      u: (T, nz) applied torques [N m].
      encoder: (T + 1, nz) measured angle-bar angles [rad].
      dt: step [s].
      window: steps kept by the smoother.
      encoder_sigma: encoder noise [rad].
      gyro: (T + 1,) or (T + 1, G) measured angular velocities of the bars `gyro_bar` [rad/s]
        or None.
      gyro_bar: index of the bar the gyro is on, or G indices.
      gyro_sigma: gyro noise [rad/s].
      state_sigma: prior standard deviation of the initial state (q0, v0).
      torque_sigma: projected equation-of-motion residual [N m]: model and discretisation
        error (the acceleration constraints use sigmas.acceleration).
      sigmas: standard deviations of the kinematic factor residuals.
      max_iterations: see `smoother.make_smoother`.
      covariance_every: marginal covariance of p after every this many steps (and the last);
        std holds NaN in between.
      progress: called after every step as `progress(step, num_steps, error, elapsed_s)`.
      smoother: smoother kind, see `smoother.make_smoother`.
      relinearize_threshold: see `smoother.make_smoother`.
    """
    names = check_parameter_names(mech, names)
    u = np.asarray(u, dtype=float).reshape(-1, mech.num_independent)
    encoder = np.asarray(encoder, dtype=float).reshape(-1, mech.num_independent)
    if encoder.shape[0] != u.shape[0] + 1:
        raise mm.MechanismError(f'encoder: expected {u.shape[0] + 1} samples (one per step and '
                                f'the initial one), got {encoder.shape[0]}')
    if gyro is not None and len(gyro) != u.shape[0] + 1:
        raise mm.MechanismError(f'gyro: expected {u.shape[0] + 1} samples, got {len(gyro)}')
    lib = FactorLibrary(mech)
    residual = bind(parametric_dynamics_residual, mech, names)
    n, m, nz, num_p = mech.num_coords, mech.num_constraints, mech.num_independent, len(names)
    gyro_bars = () if gyro is None else tuple(int(b) for b in np.atleast_1d(gyro_bar))
    gyro_fn = bind(gyro_residual, mech, gyro_bars)
    step_sigmas = np.concatenate([
        np.full(m, sigmas.position), np.full(m, sigmas.velocity), np.full(nz, torque_sigma),
        np.full(m, sigmas.acceleration), np.full(nz, encoder_sigma),
        np.full(len(gyro_bars), gyro_sigma or 0.0)])
    lag = (window - 1) * dt * (1.0 + 1e-6)
    smoother = make_smoother(lag, smoother, max_iterations, relinearize_threshold)
    p_key = key('p', 0)
    state = {'q': np.asarray(q0, dtype=float), 'v': np.asarray(v0, dtype=float), 'a': np.zeros(n)}
    mean, std, errors, q_hist = [], [], [], [None] * (u.shape[0] + 1)

    start = time.perf_counter()
    for k in range(u.shape[0] + 1):
        graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        q, v, a = key('q', k), key('v', k), key('a', k)
        if k == 0:
            guess = state
            graph.add(lib.prior(q, state['q'], state_sigma))
            graph.add(lib.prior(v, state['v'], state_sigma))
            graph.add(lib.prior(p_key, p_prior, np.asarray(p_sigma, dtype=float)))
            values.insert(p_key, np.asarray(p_prior, dtype=float))
        else:
            guess = {'q': state['q'] + dt * state['v'] + 0.5 * dt**2 * state['a'],
                     'v': state['v'] + dt * state['a'], 'a': state['a']}
            for x, dx in (('q', 'v'), ('v', 'a')):
                graph.add(lib.trapezoidal(key(x, k - 1), key(x, k), key(dx, k - 1), key(dx, k),
                                          n, dt, sigmas.integrator))
        # The step's constraint, dynamics and sensor factors as one (one JAX call each time
        # the smoother relinearizes them): variables 0-3 are q, v, a, p.
        parts = [(bind(position_residual, mech), (0,), (), m),
                 (bind(velocity_residual, mech), (0, 1), (), m),
                 (residual, (0, 1, 2, 3), (params, u[min(k, u.shape[0] - 1)]), n),
                 (bind(encoder_residual, mech), (0,), (encoder[k],), nz)]
        if gyro is not None:
            parts.append((gyro_fn, (0, 1), (np.atleast_1d(gyro[k]),), len(gyro_bars)))
        graph.add(stacked_factor([q, v, a, p_key], [n] * 3 + [num_p], parts, step_sigmas))
        for kind in ('q', 'v', 'a'):
            values.insert(key(kind, k), guess[kind])
        stamps = {key(kind, k): k * dt for kind in ('q', 'v', 'a')}
        stamps[p_key] = k * dt
        smoother.update(graph, values, stamps)
        estimate = smoother.calculateEstimate()
        errors.append(graph.error(estimate))
        mean.append(np.asarray(estimate.atVector(p_key)))
        if k % covariance_every == 0 or k == u.shape[0]:
            cov = marginal_covariance(smoother.getFactors(), estimate, p_key)
            std.append(np.sqrt(np.diag(cov)))
        else:
            std.append(np.full(num_p, np.nan))
        for j in range(max(0, k - window + 1), k + 1):
            q_hist[j] = np.asarray(estimate.atVector(key('q', j)))
        state = {kind: np.asarray(estimate.atVector(key(kind, k))) for kind in ('q', 'v', 'a')}
        if progress is not None:
            progress(k + 1, u.shape[0] + 1, errors[-1], time.perf_counter() - start)
    return IdentificationResult(names=names, mean=np.stack(mean), std=np.stack(std),
                                q=np.stack(q_hist), cov=cov, error=np.asarray(errors),
                                wall_time=time.perf_counter() - start)


_simulate_rk4 = jax.jit(mm.simulate_independent_rk4, static_argnames='substeps')


def simulate_sensors(mech, params, q0, torque_fn, dt, num_steps, encoder_sigma, gyro_bar,
                     gyro_sigma, seed=0, substeps=20):
    """Simulated truth and noisy encoder and gyroscope readings.

    The truth is independent-coordinate RK4 at dt / substeps with the torque sampled at that
    rate (so that a zero-order hold over dt does not bias the parameters), read every dt.

    Args:
      torque_fn: t (K,) [s] -> torques (K, nz) [N m], a smooth excitation.

    Returns:
      (u (T, nz) torques at the steps, q (T + 1, n), qd (T + 1, n), encoder (T + 1, nz) [rad],
      gyro (T + 1,) [rad/s]).
    """
    rng = np.random.default_rng(seed)
    h = dt / substeps
    u_fine = np.asarray(torque_fn(np.arange(num_steps * substeps) * h), dtype=float)
    z0 = mm.bar_angles(mech, jnp.asarray(q0))
    q, qd, z, _ = _simulate_rk4(mech, params, jnp.asarray(q0), z0,
                                jnp.zeros_like(z0), jnp.asarray(u_fine), h)
    q, qd, z = (np.asarray(x)[::substeps] for x in (q, qd, z))
    omega = np.asarray(jax.vmap(lambda a, b: mm.bar_angular_velocities(mech, a, b))(q, qd)
                       )[:, gyro_bar]
    encoder = z + encoder_sigma * rng.standard_normal(z.shape)
    gyro = omega + gyro_sigma * rng.standard_normal(omega.shape)
    return u_fine[::substeps], q, qd, encoder, gyro
