"""Midpoint variational integrator with holonomic constraints (Caldwell et al. 2014, §II).

A mechanical system is a Lagrangian L(q, qd, rho) = KE - V, a generalized force
Fc(q, qd, u, rho) and holonomic constraints h(q) = 0 (nh,). The midpoint discrete Lagrangian
(eq. 13) and discrete forces are

  Ld(q0, q1) = dt L((q0 + q1) / 2, (q1 - q0) / dt),
  Fd^-(q0, q1) = Fd^+(q0, q1) = dt/2 Fc((q0 + q1) / 2, (q1 - q0) / dt, u),

(the symmetric split keeps the forced integrator second order in the forcing), and one
step in the position-momentum state x_k = [q_k; p_k] (eqs. 3-5) solves

  p_k + D1 Ld(q_k, q_k+1) + Fd^-(q_k, q_k+1) - Dh(q_k)^T lam_k = 0,   h(q_k+1) = 0

for (q_k+1, lam_k) by Newton's method and sets p_k+1 = D2 Ld(q_k, q_k+1) + Fd^+.

Newton runs a fixed number of iterations (static), so the solver unrolls and JAX can
differentiate through it; every step reports its final residual norm. Traced code never
raises: `check_rollout` and `check_initial_configuration` turn the reported residuals and the
constraint Jacobian into a `VariationalError` that names the step and the residual.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.model import spatial
from sysid_ros.core.model.types import Params, RobotModel


class VariationalError(ValueError):
    """A variational rollout or its initial configuration is unusable (names step, residual)."""


class MechanicalSystem(NamedTuple):
    """A Lagrangian system with forcing and holonomic constraints (hashable: pass as static).

    Attributes:
      lagrangian: (q (nq,), qd (nq,), rho (np,)) -> L = KE - V [J].
      force: (q, qd, u, rho) -> (nq,) generalized force [N m, N]; `u` is the per-step input
        pytree of `rollout` (measured torques, reference angles, ...).
      constraint: q -> (nh,) holonomic constraint values, zero on the admissible set.
      nq: number of configuration variables.
      nh: number of constraints (0 for none).
      mass_matrix: q -> (nq, nq) M(q) = d^2 L / dqd^2 (Newton matrix only).
      stiffness: (q, rho) -> (nq, nq) approximate Hessian of the potential (Newton matrix
        only; an approximation slows Newton's convergence but does not change the solution).
    """

    lagrangian: Callable
    force: Callable
    constraint: Callable
    nq: int
    nh: int
    mass_matrix: Callable
    stiffness: Callable


class VariationalInfo(NamedTuple):
    """Per-step diagnostics of the Newton solve.

    Attributes:
      multiplier: (nh,) Lagrange multipliers lam_k [N m or N] (constraint forces times dt).
      residual: () infinity norm of the step equations at the returned solution.
    """

    multiplier: jax.Array
    residual: jax.Array


def no_force(q, qd, u, rho):
    """Zero generalized force (an unforced system)."""
    return jnp.zeros_like(q)


def no_constraint(q):
    """The empty constraint set, (0,)."""
    return jnp.zeros((0,), q.dtype)


def kinetic_energy(model: RobotModel, params: Params, q, qd):
    """Kinetic energy 0.5 qd^T M(q) qd [J], summed body by body from the body velocities.

    Each body's spatial velocity [v; w] in its own frame comes from differentiating forward
    kinematics along qd; its energy is 0.5 [v; w]^T I_i [v; w] with the spatial inertia about
    the body origin. Equal to 0.5 qd^T crba(q) qd without armature (rotor armature adds
    0.5 armature qd^2).
    """
    fk = functools.partial(kinematics.forward_kinematics, model, params)
    (R, p), (R_dot, p_dot) = jax.jvp(fk, (q,), (qd,))
    energy = 0.5 * jnp.sum(params.armature * qd**2)
    for i in range(model.num_bodies):
        v = R[i].T @ p_dot[i]
        w_hat = R[i].T @ R_dot[i]
        w = jnp.stack([w_hat[2, 1], w_hat[0, 2], w_hat[1, 0]])
        twist = jnp.concatenate([v, w])
        energy = energy + 0.5 * twist @ spatial.inertia_apply(params.inertial[i], twist)
    return energy


def gravity_potential(model: RobotModel, params: Params, q):
    """Gravitational potential energy -sum_i m_i g . c_i [J] (c_i: world centre of mass)."""
    R, p = kinematics.forward_kinematics(model, params, q)
    g = jnp.asarray(model.gravity, p.dtype)
    first_moment = params.inertial[:, 0:1] * p + jnp.einsum('bij,bj->bi', R,
                                                            params.inertial[:, 1:4])
    return -jnp.sum(first_moment @ g)


def model_system(model: RobotModel, params: Params, stiffness: Callable,
                 force: Callable = no_force, constraint: Callable = no_constraint,
                 nh: int = 0) -> MechanicalSystem:
    """Mechanical system of a kinematic tree with torsional/linear springs at its joints.

    L(q, qd, rho) = KE(q, qd) - V_gravity(q) - 0.5 sum_i stiffness(rho)_i q_i^2 (springs at
    rest at q = 0).

    Args:
      model: static tree.
      params: its (fixed) physical parameters.
      stiffness: rho (np,) -> (nv,) joint spring stiffness [N m/rad, N/m].
      force: generalized force (q, qd, u, rho) -> (nv,) (see `MechanicalSystem`).
      constraint: q -> (nh,) holonomic constraints.
      nh: the number of constraints.
    """
    def lagrangian(q, qd, rho):
        springs = 0.5 * jnp.sum(stiffness(rho) * q**2)
        return (kinetic_energy(model, params, q, qd) - gravity_potential(model, params, q)
                - springs)

    def mass_matrix(q):
        return rigid_body.crba(model, params, q)

    def spring_matrix(q, rho):
        return jnp.diag(stiffness(rho))

    return MechanicalSystem(lagrangian, force, constraint, model.nv, nh, mass_matrix,
                            spring_matrix)


def energy(system: MechanicalSystem, q, qd, rho):
    """Total energy KE + V = qd . dL/dqd - L [J] of the continuous system at (q, qd)."""
    L, dL = jax.jvp(lambda v: system.lagrangian(q, v, rho), (qd,), (qd,))
    return dL - L


def constrained_acceleration(system: MechanicalSystem, q, qd, u, rho):
    """Continuous constrained Euler-Lagrange accelerations (Caldwell et al. 2014, eq. 1), (nq,).

    Solves [M, -Dh^T; Dh, 0] [qdd; lam] = [L_q - L_qd,q qd + Fc; -(d/dq (Dh qd)) qd] with all
    derivatives of the Lagrangian by autodiff: the reference for explicit integrators (RK4).
    """
    grad_v = jax.grad(system.lagrangian, argnums=1)
    M = jax.jacfwd(grad_v, argnums=1)(q, qd, rho)
    _, mixed = jax.jvp(lambda q_: grad_v(q_, qd, rho), (q,), (qd,))
    rhs = (jax.grad(system.lagrangian)(q, qd, rho) - mixed
           + system.force(q, qd, u, rho))
    if system.nh == 0:
        return jnp.linalg.solve(M, rhs)
    J = jax.jacfwd(system.constraint)(q)
    _, curvature = jax.jvp(lambda q_: jax.jacfwd(system.constraint)(q_) @ qd, (q,), (qd,))
    nh = system.nh
    kkt = jnp.concatenate([jnp.concatenate([M, -J.T], axis=1),
                           jnp.concatenate([J, jnp.zeros((nh, nh), q.dtype)], axis=1)])
    return jnp.linalg.solve(kkt, jnp.concatenate([rhs, -curvature]))[:system.nq]


def discrete_lagrangian(system: MechanicalSystem, q0, q1, rho, dt):
    """Midpoint discrete Lagrangian Ld(q0, q1) = dt L((q0+q1)/2, (q1-q0)/dt) [J s]."""
    return dt * system.lagrangian(0.5 * (q0 + q1), (q1 - q0) / dt, rho)


def left_force(system: MechanicalSystem, q0, q1, u, rho, dt):
    """Discrete force Fd^- = Fd^+ = dt/2 Fc(midpoint, (q1-q0)/dt, u) (nq,)."""
    return 0.5 * dt * system.force(0.5 * (q0 + q1), (q1 - q0) / dt, u, rho)


def momentum(system: MechanicalSystem, q0, q1, u, rho, dt):
    """Discrete momentum p1 = D2 Ld(q0, q1) + Fd^+(q0, q1) (nq,) (Caldwell et al. 2014, eq. 4)."""
    return (jax.grad(discrete_lagrangian, argnums=2)(system, q0, q1, rho, dt)
            + left_force(system, q0, q1, u, rho, dt))


def step_residual(system: MechanicalSystem, q0, p0, q1, lam, u, rho, dt):
    """Residual (nq + nh,) of the constrained forced discrete Euler-Lagrange step (eq. 5)."""
    d1_ld = jax.grad(discrete_lagrangian, argnums=1)(system, q0, q1, rho, dt)
    _, constraint_vjp = jax.vjp(system.constraint, q0)
    (constraint_force,) = constraint_vjp(lam)
    dynamics = p0 + d1_ld + left_force(system, q0, q1, u, rho, dt) - constraint_force
    return jnp.concatenate([dynamics, system.constraint(q1)])


def newton_matrix(system: MechanicalSystem, q0, q1, u, rho, dt):
    """Approximate Jacobian (nq + nh, nq + nh) of `step_residual` in (q1, lam).

    D2 D1 Ld = -M(q_m)/dt + (dt/4) L_qq + antisymmetric O(|qd| dM/dq) terms; we keep
    -M(q_m)/dt - (dt/4) K(q_m) (K: the potential's stiffness from `system.stiffness`), the
    exact derivative of Fd^- and the exact constraint Jacobians, and drop the velocity terms.
    The error is O(dt |qd| |dM/dq| / |M|), so Newton converges linearly at that rate.
    """
    q_m = 0.5 * (q0 + q1)
    block = (-system.mass_matrix(q_m) / dt - 0.25 * dt * system.stiffness(q_m, rho)
             + jax.jacfwd(left_force, argnums=2)(system, q0, q1, u, rho, dt))
    nh = system.nh
    if nh == 0:
        return block
    top = jnp.concatenate([block, -jax.jacfwd(system.constraint)(q0).T], axis=1)
    bottom = jnp.concatenate([jax.jacfwd(system.constraint)(q1),
                              jnp.zeros((nh, nh), q0.dtype)], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def newton_solve(system: MechanicalSystem, q0, p0, u, rho, dt, iterations: int,
                 exact_jacobian: bool = False, guess=None, tol: float | None = None):
    """Solve the step equations for (q1, lam) by chord (quasi-)Newton iterations.

    The iteration matrix is `newton_matrix` at q1 = q0, computed once per step; every
    iteration evaluates only the residual. The iterations start from `guess` (nq + nh,)
    = (q1, lam) (default (q0, 0), where the first iteration is the linearised momentum
    predictor). With `exact_jacobian` (static), the matrix is instead the exact Jacobian
    (autodiff) after one chord step: dearer, but robust for stiff, fast systems.

    With `tol` (static) the iterations stop early once the residual's infinity norm is at
    most tol, and a step whose chord iterations stall goes on by Newton's method with the
    exact Jacobian, from the guess or the chord's iterate, whichever is closer (while loops:
    cheaper on average and robust, but not reverse-differentiable; use `adjoint` for
    gradients). Without it, exactly `iterations` run (a differentiable loop).

    Returns:
      q1 (nq,), lam (nh,), residual () infinity norm of the equations at (q1, lam).
    """
    nq = system.nq

    def residual(z):
        return step_residual(system, q0, p0, z[:nq], z[nq:], u, rho, dt)

    z0 = jnp.concatenate([q0, jnp.zeros((system.nh,), q0.dtype)]) if guess is None else guess
    W = newton_matrix(system, q0, q0, u, rho, dt)
    if exact_jacobian:
        z0 = z0 - jnp.linalg.solve(W, residual(z0))
        W = jax.jacfwd(residual)(z0)
    lu = jax.scipy.linalg.lu_factor(W)

    if tol is None:
        z = jax.lax.fori_loop(0, iterations,
                              lambda _, z: z - jax.scipy.linalg.lu_solve(lu, residual(z)), z0)
        return z[:nq], z[nq:], jnp.max(jnp.abs(residual(z)))

    def iterate(solve, z, r):
        def unconverged(carry):
            i, _, r = carry
            return (i < iterations) & (jnp.max(jnp.abs(r)) > tol)

        def newton(carry):
            i, z, r = carry
            z = z - solve(z, r)
            return i + 1, z, residual(z)

        return jax.lax.while_loop(unconverged, newton, (0, z, r))[1:]

    r0 = residual(z0)
    z, r = iterate(lambda _, r: jax.scipy.linalg.lu_solve(lu, r), z0, r0)

    def exact_newton(_):     # the chord stalled (fast motion): Newton, from the better start
        better = jnp.max(jnp.abs(r)) < jnp.max(jnp.abs(r0))
        start = (jnp.where(better, z, z0), jnp.where(better, r, r0))
        return iterate(lambda z, r: jnp.linalg.solve(jax.jacfwd(residual)(z), r), *start)

    z, r = jax.lax.cond(jnp.max(jnp.abs(r)) <= tol, lambda _: (z, r), exact_newton, None)
    return z[:nq], z[nq:], jnp.max(jnp.abs(r))


def step(system: MechanicalSystem, x, u, rho, dt, iterations: int = 4,
         exact_jacobian: bool = False, guess=None, tol: float | None = None):
    """One variational step x_k = [q_k; p_k] (2 nq,) -> (x_k+1, VariationalInfo); `guess`
    (nq + nh,) starts Newton at (q_k+1, lam_k), `tol` stops it early (see `newton_solve`)."""
    nq = system.nq
    q0, p0 = x[:nq], x[nq:]
    q1, lam, res = newton_solve(system, q0, p0, u, rho, dt, iterations, exact_jacobian,
                                guess, tol)
    p1 = momentum(system, q0, q1, u, rho, dt)
    return jnp.concatenate([q1, p1]), VariationalInfo(lam, res)


def initial_state(system: MechanicalSystem, q0, qd0, rho):
    """x_0 = [q0; dL/dqd(q0, qd0)] (2 nq,): the continuous Legendre transform of (q0, qd0)."""
    p0 = jax.grad(system.lagrangian, argnums=1)(q0, qd0, rho)
    return jnp.concatenate([q0, p0])


def rollout(system: MechanicalSystem, x0, inputs, rho, dt, iterations: int = 4,
            exact_jacobian: bool = False, tol: float | None = None):
    """Run T variational steps from x0 (2 nq,) with per-step inputs (pytree, leading axis T).

    Pass `inputs=jnp.zeros((T, 0))` for an unforced system. `system`, `iterations`,
    `exact_jacobian` and `tol` (see `newton_solve`) are static when jitting. Newton starts from the
    linear extrapolation q_k+1 ~ 2 q_k - q_k-1 and the previous step's multipliers, which
    leaves it an O(dt^2) error to remove instead of O(dt). The scan body is checkpointed, so
    reverse-mode autodiff stores one state per step.

    Returns:
      states (T + 1, 2 nq) with x0 first, and VariationalInfo with (T, nh) multipliers and (T,)
      residuals.
    """
    nq = system.nq

    @functools.partial(jax.checkpoint, prevent_cse=False)
    def body(carry, u):
        x, q_previous, lam = carry
        guess = jnp.concatenate([2.0 * x[:nq] - q_previous, lam])
        x1, info = step(system, x, u, rho, dt, iterations, exact_jacobian, guess, tol)
        return (x1, x[:nq], info.multiplier), (x1, info)

    start = (x0, x0[:nq], jnp.zeros((system.nh,), x0.dtype))
    _, (states, info) = jax.lax.scan(body, start, inputs)
    return jnp.concatenate([x0[None], states]), info


def midpoint_energies(system: MechanicalSystem, states, rho, dt):
    """(T,) energy [J] at each step's midpoint, velocity (q_k+1 - q_k)/dt (states (T+1, 2nq))."""
    q = states[:, :system.nq]
    q_mid, qd = 0.5 * (q[1:] + q[:-1]), (q[1:] - q[:-1]) / dt
    return jax.vmap(energy, in_axes=(None, 0, 0, None))(system, q_mid, qd, rho)


def check_rollout(info: VariationalInfo, tol: float = 1e-8):
    """Raise VariationalError at the first step whose Newton residual is non-finite or > tol.

    Call outside traced code on `rollout`'s VariationalInfo (host values).
    """
    residual = np.asarray(info.residual)
    bad = ~np.isfinite(residual) | (residual > tol)
    if bad.any():
        k = int(np.argmax(bad))
        raise VariationalError(
            f'variational step {k}: Newton did not converge, residual {residual[k]:.3e} '
            f'(expected <= {tol:.1e}); reduce dt, raise iterations or check the forcing')


def project_configuration(system: MechanicalSystem, q, iterations: int = 20):
    """Gauss-Newton projection of q onto h(q) = 0: q <- q - Dh^T (Dh Dh^T)^-1 h."""
    def body(_, q):
        J = jax.jacfwd(system.constraint)(q)
        return q - J.T @ jnp.linalg.solve(J @ J.T, system.constraint(q))
    return jax.lax.fori_loop(0, iterations, body, q)


def check_initial_configuration(system: MechanicalSystem, q0, tol: float = 1e-8,
                                rank_tol: float = 1e-9):
    """Check that the constraints are independent at q0 and that q0 satisfies them.

    Raises:
      VariationalError: when Dh(q0) is rank deficient (names the smallest singular value),
        or |h(q0)| > tol (names the worst constraint and its residual: the loop does not close
        with these lengths/angles; `project_configuration` may repair a nearby guess).
    """
    if system.nh == 0:
        return
    J = np.asarray(jax.jacfwd(system.constraint)(jnp.asarray(q0)))
    sv = np.linalg.svd(J, compute_uv=False)
    if sv.size < system.nh or sv[-1] < rank_tol * max(sv[0], 1.0):
        raise VariationalError(
            f'constraint Jacobian at the initial configuration is singular: smallest singular '
            f'value {sv[-1]:.3e} of {system.nh} constraints (expected independent constraints)')
    h = np.asarray(system.constraint(jnp.asarray(q0)))
    worst = int(np.argmax(np.abs(h)))
    if not np.isfinite(h).all() or abs(h[worst]) > tol:
        raise VariationalError(
            f'initial configuration violates constraint {worst}: residual {h[worst]:.3e} '
            f'(expected <= {tol:.1e}); the loop does not close')


def closed_configuration(system: MechanicalSystem, q_guess, tol: float = 1e-8,
                         iterations: int = 30):
    """Project a guess onto h(q) = 0 and check the result (`check_initial_configuration`).

    Raises:
      VariationalError: when the projection does not reach |h| <= tol (the mechanism cannot
        close with these lengths: names the worst constraint and its residual), or the
        constraint Jacobian is singular there.
    """
    q = project_configuration(system, jnp.asarray(q_guess), iterations)
    h = np.asarray(system.constraint(q))
    worst = int(np.argmax(np.abs(np.nan_to_num(h, nan=np.inf))))
    if not np.isfinite(h).all() or abs(h[worst]) > tol:
        raise VariationalError(
            f'the constraints cannot be satisfied near the initial guess: constraint {worst} '
            f'residual {h[worst]:.3e} after {iterations} Gauss-Newton steps (expected <= '
            f'{tol:.1e}); the loop does not close with these lengths')
    check_initial_configuration(system, q, tol)
    return q


def midpoint_step(model: RobotModel, params: Params, x, u, dt, actuator='viscous',
                  iterations: int = 4):
    """The midpoint variational integrator as an `integrators` step on x = [q; qd] (2 nv,).

    An unconstrained system without springs, forced by the actuator torque evaluated at the
    midpoint. The velocity is carried through the momentum: p = M(q) qd in, one variational
    step, qd1 = M(q1)^-1 p1 out (p1 = D2 Ld is the discrete momentum). Newton starts from the
    explicit predictor q1 ~ q + dt qd, an O(dt^2) error instead of the default start's O(dt).
    """
    actuator_fn = actuators.get_actuator(actuator)

    def force(q, qd, u, rho):
        return actuator_fn(model, params, q, qd, u)

    system = model_system(model, params, lambda rho: jnp.zeros(model.nv, x.dtype), force)
    nv = model.nv
    q, qd = x[:nv], x[nv:]
    rho = jnp.zeros((0,), x.dtype)
    state = jnp.concatenate([q, system.mass_matrix(q) @ qd])
    guess = (q + dt * qd).astype(state.dtype)
    next_state, _ = step(system, state, u, rho, dt, iterations, guess=guess)
    q1, p1 = next_state[:nv], next_state[nv:]
    return jnp.concatenate([q1, jnp.linalg.solve(system.mass_matrix(q1), p1)])
