"""Forward dynamics with a GTSAM fixed-lag smoother; batch inverse dynamics.

After Blanco-Claraco et al. 2021, sections 5 and 7.

Forward dynamics (the paper's Figs 2 and 3): each time step adds its variables and factors to a
fixed-lag smoother that keeps the last `window` steps and marginalises older ones: GTSAM's
`IncrementalFixedLagSmoother` (iSAM2, the default: 5-10x faster at the same accuracy) or its
`BatchFixedLagSmoother` (Levenberg-Marquardt over the window at every step, as in the paper).
Each step's constraint and dynamics factors are stacked into one custom factor: a JAX call costs
about the same for one residual as for four (dispatch and per-operation overhead dominate the
arithmetic of these tiny systems), so one call per relinearization instead of three or four.
Inverse dynamics (the paper's Fig 4) is solved in batch, building the graph in the paper's four
stages and running Levenberg-Marquardt after each.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import gtsam
import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.constrained import mechanisms as mm
from sysid_ros.graph import factors
from sysid_ros.graph.factors import bind, FactorLibrary, key, stacked_factor


class Sigmas(NamedTuple):
    """Standard deviations of the factor residuals (only their ratios matter; the paper's Table 2).

    Attributes:
      prior: initial-state and prescribed-trajectory priors [m, rad, m/s, rad/s].
      integrator: Euler/trapezoidal residuals [m, m/s].
      position: position constraints [m^2] (dependent) and link factors.
      velocity: velocity constraints [m^2/s].
      acceleration: acceleration link factor.
      dynamics: equations of motion [m/s^2 or rad/s^2].
      equality: soft equality between consecutive positions [m] (weak on purpose).
      torque: prior on unknown torques in inverse dynamics (weak) [N m].
    """

    prior: float = 1e-6
    integrator: float = 1e-6
    position: float = 1e-6
    velocity: float = 1e-6
    acceleration: float = 1e-6
    dynamics: float = 1e-6
    equality: float = 10.0
    torque: float = 1e3


class ForwardResult(NamedTuple):
    """Forward-dynamics trajectory from the fixed-lag smoother.

    Attributes:
      q, v, a: (T + 1, n) dependent positions [m], velocities [m/s], accelerations [m/s^2], each
        step's estimate when it left the window (or at the end).
      z: (T + 1, nz) independent angles [rad] (bar angles from q for the dependent graph).
      wall_time: seconds spent in the smoother (graph building and optimisation).
      iterations: (T,) LM iterations of each update.
    """

    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    z: np.ndarray
    wall_time: float
    iterations: np.ndarray


def lm_params(max_iterations=15, relative_tol=1e-5) -> gtsam.LevenbergMarquardtParams:
    """Levenberg-Marquardt settings used by every solve (the paper: at most 15 iterations)."""
    params = gtsam.LevenbergMarquardtParams()
    params.setMaxIterations(max_iterations)
    params.setRelativeErrorTol(relative_tol)
    params.setAbsoluteErrorTol(1e-9)
    params.setlambdaInitial(1e-6)
    return params


SMOOTHERS = ('incremental', 'batch')


def make_smoother(lag: float, kind: str = 'incremental', max_iterations: int = 15,
                  relinearize_threshold: float = 1e-3):
    """A GTSAM fixed-lag smoother that keeps the variables stamped within `lag` [s].

    Args:
      lag: time span of the variables kept [s].
      kind: 'incremental': `IncrementalFixedLagSmoother` (iSAM2, one Gauss-Newton step per
        update that relinearizes only the variables that moved more than
        `relinearize_threshold` since their last linearisation, QR factorisation); 'batch':
        `BatchFixedLagSmoother`, Levenberg-Marquardt on the whole window at every update (up
        to `max_iterations`, multifrontal QR). QR in both: weak parameter priors next to the
        stiff (1e-6) constraints make Cholesky report an indeterminate system.
      max_iterations: Levenberg-Marquardt iterations per update ('batch' only).
      relinearize_threshold: change of a variable that triggers its relinearisation
        ('incremental' only), in the variable's units.
    """
    if kind == 'batch':
        lm = lm_params(max_iterations)
        lm.setLinearSolverType('MULTIFRONTAL_QR')
        return gtsam.BatchFixedLagSmoother(lag, lm)
    if kind != 'incremental':
        raise ValueError(f"smoother: expected one of {', '.join(SMOOTHERS)}, got {kind!r}")
    params = gtsam.ISAM2Params()
    params.setFactorization('QR')
    params.setRelinearizeThreshold(relinearize_threshold)
    params.relinearizeSkip = 1
    return gtsam.IncrementalFixedLagSmoother(lag, params)


def _vec(values, k):
    return np.asarray(values.atVector(k))


def forward_dynamics(mech, params, q0, v0, u, dt, window, coordinates='dependent',
                     sigmas=Sigmas(), max_iterations=15, smoother='incremental',
                     relinearize_threshold=1e-3) -> ForwardResult:
    """Simulates a mechanism from (q0, v0) under torques u with a fixed-lag smoother.

    Args:
      mech, params: the mechanism and its parameters.
      q0, v0: (n,) initial state on the constraint manifold [m, m/s].
      u: (T, nz) angle-bar torques [N m] at each new step.
      dt: time step [s]; window: steps kept in the smoother (>= 2).
      coordinates: 'dependent' (the paper's Fig 2) or 'independent' (the paper's Fig 3).
      smoother, max_iterations, relinearize_threshold: see `make_smoother`.

    Returns:
      ForwardResult with T + 1 steps.
    """
    if coordinates not in ('dependent', 'independent'):
        raise ValueError(f"coordinates: expected 'dependent' or 'independent', got {coordinates}")
    if window < 2:
        raise ValueError(f'window: expected >= 2 steps, got {window}')
    u = np.asarray(u, dtype=float).reshape(-1, mech.num_independent)
    q0, v0 = np.asarray(q0, dtype=float), np.asarray(v0, dtype=float)
    z0 = np.asarray(mm.bar_angles(mech, jnp.asarray(q0)))
    mm.check_configuration(mech, q0, z0, v0)
    lib = FactorLibrary(mech)
    independent = coordinates == 'independent'
    kinds = ('q', 'v', 'a', 'z', 'w', 'b') if independent else ('q', 'v', 'a')
    num_steps = u.shape[0]
    lag = (window - 1) * dt * (1.0 + 1e-6)
    smoother = make_smoother(lag, smoother, max_iterations, relinearize_threshold)
    # Initial accelerations from the equations of motion give the first linearisation point.
    a0 = np.asarray(mm.forward_dynamics_dependent(mech, params, q0, v0, u[0]))
    w0 = np.asarray(mm.bar_angular_velocities(mech, jnp.asarray(q0), jnp.asarray(v0))
                    )[list(mech.angle_bars)]
    b0 = np.asarray(mm.forward_dynamics_independent(mech, params, q0, v0, z0, w0, u[0]))
    state = {'q': q0, 'v': v0, 'a': a0, 'z': z0, 'w': w0, 'b': b0}
    history = {kind: [None] * (num_steps + 1) for kind in kinds}
    iterations = np.zeros(num_steps, dtype=int)

    start = time.perf_counter()
    for k in range(num_steps + 1):
        graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        if k == 0:
            guess = state
            for kind in ('q', 'v') + (('z', 'w') if independent else ()):
                graph.add(lib.prior(key(kind, 0), state[kind], sigmas.prior))
        else:
            guess = {'q': state['q'] + dt * state['v'] + 0.5 * dt**2 * state['a'],
                     'v': state['v'] + dt * state['a'], 'a': state['a'],
                     'z': state['z'] + dt * state['w'] + 0.5 * dt**2 * state['b'],
                     'w': state['w'] + dt * state['b'], 'b': state['b']}
            _add_integrators(graph, lib, k, dt, sigmas, independent)
        _add_step_factors(graph, lib, k, params, u[min(k, num_steps - 1)], sigmas, independent)
        for kind in kinds:
            values.insert(key(kind, k), guess[kind])
        stamps = {key(kind, k): k * dt for kind in kinds}
        result = smoother.update(graph, values, stamps)
        if k > 0:
            iterations[k - 1] = result.getIterations()
        estimate = smoother.calculateEstimate()
        for j in range(max(0, k - window + 1), k + 1):
            for kind in kinds:
                history[kind][j] = _vec(estimate, key(kind, j))
        state = {kind: history[kind][k] for kind in kinds}
        state.update({kind: guess[kind] for kind in ('z', 'w', 'b') if kind not in kinds})
    wall = time.perf_counter() - start
    out = {kind: np.stack(history[kind]) for kind in kinds}
    z = out['z'] if independent else np.asarray(jax.vmap(lambda x: mm.bar_angles(mech, x))(
        jnp.asarray(out['q'])))
    return ForwardResult(q=out['q'], v=out['v'], a=out['a'], z=z, wall_time=wall,
                         iterations=iterations)


def _add_integrators(graph, lib, k, dt, sigmas, independent):
    pairs = (('z', 'w'), ('w', 'b')) if independent else (('q', 'v'), ('v', 'a'))
    for x, dx in pairs:
        dim = lib.nz if x in 'zwb' else lib.n
        graph.add(lib.trapezoidal(key(x, k - 1), key(x, k), key(dx, k - 1), key(dx, k), dim, dt,
                                  sigmas.integrator))
    if independent:
        graph.add(lib.equality(key('q', k - 1), key('q', k), lib.n, sigmas.equality))


def _add_step_factors(graph, lib, k, params, uk, sigmas, independent):
    """The step's constraint and dynamics factors (eqs 24-27, 30-32), stacked into one factor
    so that each relinearization is one JAX call (see `factors.stacked_factor`)."""
    mech, n, m, nz = lib.mech, lib.n, lib.m, lib.nz
    uk = np.asarray(uk, dtype=float)
    if independent:  # variables: q, v, a, z, w, b
        kinds, dims = 'qvazwb', [n] * 3 + [nz] * 3
        parts = [(bind(factors.link_position_residual, mech), (0, 3), (), m + nz),
                 (bind(factors.link_velocity_residual, mech), (0, 1, 3, 4), (), m + nz),
                 (bind(factors.link_acceleration_residual, mech), (0, 1, 2, 3, 4, 5), (),
                  m + nz),
                 (bind(factors.dynamics_independent_residual, mech), (0, 1, 3, 4, 5),
                  (params, uk), nz)]
        step_sigmas = [sigmas.position] * (m + nz) + [sigmas.velocity] * (m + nz) + [
            sigmas.acceleration] * (m + nz) + [sigmas.dynamics] * nz
    else:  # variables: q, v, a
        kinds, dims = 'qva', [n] * 3
        parts = [(bind(factors.position_residual, mech), (0,), (), m),
                 (bind(factors.velocity_residual, mech), (0, 1), (), m),
                 (bind(factors.dynamics_dependent_residual, mech), (0, 1, 2), (params, uk), n)]
        step_sigmas = [sigmas.position] * m + [sigmas.velocity] * m + [sigmas.dynamics] * n
    graph.add(stacked_factor([key(kind, k) for kind in kinds], dims, parts, step_sigmas))


class InverseResult(NamedTuple):
    """Batch inverse dynamics along a prescribed angle trajectory.

    Attributes:
      u: (T + 1, nz) torques [N m]; q, v, a: (T + 1, n) dependent state;
      z: (T + 1, nz) followed angles [rad] (bar angles of q);
      stage_errors: (4,) graph error after each of the paper's four stages.
    """

    u: np.ndarray
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    z: np.ndarray
    stage_errors: np.ndarray


def inverse_dynamics(mech, params, z_desired, q_guess, v0, dt, sigmas=Sigmas(),
                     max_iterations=50) -> InverseResult:
    """Torques that make the angle coordinates follow z_desired (the paper's Fig 4, staged init).

    Stage 1: q_k, z_k with priors on z_k, link-position factors and soft equalities q_k ~ q_k-1.
    Stage 2: v_k, a_k and trapezoidal integrators (plus a prior on v_0).
    Stage 3: velocity-constraint factors.
    Stage 4: torques u_k and inverse-dynamics factors (dependent coordinates, eq 28).

    Args:
      mech: the mechanism.
      params: its parameters.
      z_desired: (T + 1, nz) prescribed angles [rad].
      q_guess: (n,) coordinates on the wanted branch.
      v0: (n,) initial velocity [m/s].
      dt: step [s].
      sigmas: standard deviations of the factor residuals.
      max_iterations: Levenberg-Marquardt iterations per stage.
    """
    z_desired = np.asarray(z_desired, dtype=float).reshape(-1, mech.num_independent)
    steps = range(z_desired.shape[0])
    lib = FactorLibrary(mech)
    graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
    errors = []
    lm = lm_params(max_iterations)
    # Damping scaled by the Hessian's diagonal: the stiff (1e-6) factors next to the weak soft
    # equalities otherwise need a lambda beyond LM's bound and stage 1 stalls far from the optimum.
    lm.setDiagonalDamping(True)

    def solve():
        result = gtsam.LevenbergMarquardtOptimizer(graph, values, lm)
        errors.append(graph.error(result.optimize()))
        return result.values()

    q_guess = np.asarray(q_guess, dtype=float)
    for k in steps:  # stage 1: the position problem along the trajectory
        values.insert(key('q', k), q_guess)
        values.insert(key('z', k), z_desired[k])
        graph.add(lib.prior(key('z', k), z_desired[k], sigmas.prior))
        graph.add(lib.link_position(key('q', k), key('z', k), sigmas.position))
        if k > 0:
            graph.add(lib.equality(key('q', k - 1), key('q', k), lib.n, sigmas.equality))
    values = solve()
    graph.add(lib.prior(key('v', 0), v0, sigmas.prior))
    for k in steps:  # stage 2: velocities, accelerations and integrators
        values.insert(key('v', k), np.zeros(lib.n))
        values.insert(key('a', k), np.zeros(lib.n))
        if k > 0:
            for x, dx in (('q', 'v'), ('v', 'a')):
                graph.add(lib.trapezoidal(key(x, k - 1), key(x, k), key(dx, k - 1), key(dx, k),
                                          lib.n, dt, sigmas.integrator))
    values = solve()
    for k in steps:  # stage 3: velocity constraints
        graph.add(lib.velocity(key('q', k), key('v', k), sigmas.velocity))
    values = solve()
    for k in steps:  # stage 4: unknown torques and inverse dynamics
        values.insert(key('u', k), np.zeros(lib.nz))
        graph.add(lib.prior(key('u', k), np.zeros(lib.nz), sigmas.torque))
        graph.add(lib.inverse_dynamics_dependent(key('q', k), key('v', k), key('a', k),
                                                 key('u', k), params, sigmas.dynamics))
    values = solve()
    out = {kind: np.stack([_vec(values, key(kind, k)) for k in steps])
           for kind in ('u', 'q', 'v', 'a')}
    z = np.asarray(jax.vmap(lambda x: mm.bar_angles(mech, x))(jnp.asarray(out['q'])))
    return InverseResult(u=out['u'], q=out['q'], v=out['v'], a=out['a'], z=z,
                         stage_errors=np.asarray(errors))
