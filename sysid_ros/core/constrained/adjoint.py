"""Discrete adjoint gradient of a variational rollout (Caldwell et al. 2014, eqs. 6-10, Lemma 1).

The variational step x_k+1 = f(x_k, rho) (`variational.step`) is implicit: z = (q_k+1, lam_k)
solves G(z; x_k, rho) = 0 (`variational.step_residual`) and p_k+1 = D2 Ld + Fd^+.
Its linearisation dx_k+1 = A_k dx_k + B_k drho (eq. 6) follows from the implicit function
theorem, dz = -G_z^-1 (G_x dx + G_rho drho), which is eqs. 7-8 with the multiplier
derivative d lam / d q_k of eq. 7a included; B_k is the partial derivative at fixed x_k,
which is what Lemma 1 needs. For a cost

  J(rho) = sum_{k=1}^{kf} l(x_k, rho) + m(x_kf, rho),

Lemma 1 gives DJ = sum_k mu_k B_{k-1} + sum_k D2 l(x_k) + D2 m, with the costate recursion
mu_k = mu_{k+1} A_k + D1 l(x_k) from mu_kf = D1 l(x_kf) + D1 m(x_kf) (eqs. 9-10; the paper
calls the costate lambda; here mu, to keep lambda for the constraint multipliers).

`projected_armijo_descent` is the paper's optimiser: steepest descent with an Armijo line
search, projected onto box bounds; with `gauss_newton` it searches along the Gauss-Newton
direction built from `forward_sensitivities` (the tangent-linear model of eq. 6) instead.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np

from sysid_ros.core.dynamics import variational
from sysid_ros.core.dynamics.variational import MechanicalSystem


def _at(tree, k):
    """Entry k of every leaf of a pytree with a leading time axis."""
    return jax.tree_util.tree_map(lambda t: t[k], tree)


def _step_functions(system: MechanicalSystem, x_next, multiplier, u, dt):
    """The step's solution z = (q_k+1, lam_k) (nq + nh,) and, at its input u, the step
    equations G(z, x, rho) (`variational.step_residual`) and the momentum
    p_k+1(q_k, q_k+1, rho) (`variational.momentum`), for derivatives in their arguments."""
    nq = system.nq

    def residual(z, x, rho):
        return variational.step_residual(system, x[:nq], x[nq:], z[:nq], z[nq:], u, rho, dt)

    def momentum(q0, q1, rho):
        return variational.momentum(system, q0, q1, u, rho, dt)

    return jnp.concatenate([x_next[:nq], multiplier]), residual, momentum


def linearize_step(system: MechanicalSystem, x, x_next, multiplier, u, rho, dt):
    """A_k (2nq, 2nq) and B_k (2nq, np) of one variational step (eqs. 6-8).

    Args:
      system: the mechanical system (static).
      x: (2 nq,) state [q; p] at k (from `variational.rollout`).
      x_next: (2 nq,) state at k + 1.
      multiplier: (nh,) lam_k of the step.
      u: the step's input.
      rho: (np,) parameters.
      dt: time step [s].
    """
    nq = system.nq
    z, residual, momentum = _step_functions(system, x_next, multiplier, u, dt)
    G_z, G_x, G_rho = jax.jacfwd(residual, argnums=(0, 1, 2))(z, x, rho)
    dz = -jnp.linalg.solve(G_z, jnp.concatenate([G_x, G_rho], axis=1))
    dq1_dx, dq1_drho = dz[:nq, :2 * nq], dz[:nq, 2 * nq:]
    P_q0, P_q1, P_rho = jax.jacfwd(momentum, argnums=(0, 1, 2))(x[:nq], x_next[:nq], rho)
    dp1_dx = P_q1 @ dq1_dx + jnp.concatenate([P_q0, jnp.zeros_like(P_q0)], axis=1)
    dp1_drho = P_q1 @ dq1_drho + P_rho
    A = jnp.concatenate([dq1_dx, dp1_dx], axis=0)
    B = jnp.concatenate([dq1_drho, dp1_drho], axis=0)
    return A, B


REFINE_TOL = 1e-13       # relative residual of the linear solves in `step_tangent`/`cotangent`
REFINE_ITERATIONS = 20


def _step_equations(system: MechanicalSystem, x, x_next, multiplier, u, rho, dt):
    """`_step_functions` (z, G, p_k+1) and a solver of G_z v = b (or G_z^T v = b with
    `transpose`) at (z, x, rho) that never forms G_z.

    The solver refines the chord matrix's solution (`variational.newton_matrix`, the forward
    Newton's own matrix) with products G_z v by JVP (G_z^T v by VJP) until the residual is
    below REFINE_TOL relative to b: a few products per step instead of the nq + nh columns
    of the exact Jacobian, which it falls back on when the refinement does not converge in
    REFINE_ITERATIONS (fast motion, where the chord matrix's dropped velocity terms matter).
    """
    z, residual, momentum = _step_functions(system, x_next, multiplier, u, dt)
    q0 = x[:system.nq]
    lu = jax.scipy.linalg.lu_factor(variational.newton_matrix(system, q0, q0, u, rho, dt))

    def solve(b, transpose=False):
        if transpose:
            _, vjp = jax.vjp(lambda z_: residual(z_, x, rho), z)
            product = lambda v: vjp(v)[0]  # noqa: E731
        else:
            _, product = jax.linearize(lambda z_: residual(z_, x, rho), z)
        if b.ndim == 2:                           # columns
            product = jax.vmap(product, in_axes=1, out_axes=1)
        trans = 1 if transpose else 0
        bound = REFINE_TOL * jnp.max(jnp.abs(b))

        def unconverged(carry):
            i, _, r = carry
            return (i < REFINE_ITERATIONS) & (jnp.max(jnp.abs(r)) > bound)

        def refine(carry):
            i, v, r = carry
            v = v + jax.scipy.linalg.lu_solve(lu, r, trans=trans)
            return i + 1, v, b - product(v)

        def exact(_):                            # the chord matrix is too far off
            G_z = jax.jacfwd(residual)(z, x, rho)
            return jax.scipy.linalg.lu_solve(jax.scipy.linalg.lu_factor(G_z), b, trans=trans)

        _, v, r = jax.lax.while_loop(unconverged, refine, (0, jnp.zeros_like(b), b))
        return jax.lax.cond(jnp.max(jnp.abs(r)) <= bound, lambda _: v, exact, None)

    return z, residual, momentum, solve


def step_tangent(system: MechanicalSystem, x, x_next, multiplier, u, rho, dt, dx, drho):
    """dx_k+1 = A_k dx + B_k drho (2nq,) without forming A_k, B_k: one JVP of the step
    equations, one (matrix-free) solve with their Jacobian in z and one JVP of the momentum
    (eqs. 6-8).

    Args:
      system: the mechanical system (static).
      x: (2 nq,) state [q; p] at k (from `variational.rollout`).
      x_next: (2 nq,) state at k + 1.
      multiplier: (nh,) lam_k of the step.
      u: the step's input.
      rho: (np,) parameters.
      dt: time step [s].
      dx: (2nq,) state tangent, or (2nq, k) for k columns at once (one linearisation, one
        solve).
      drho: (np,) parameter tangent, or (np, k).
    """
    nq = system.nq
    z, residual, momentum, solve = _step_equations(system, x, x_next, multiplier, u, rho, dt)
    columns = functools.partial(jax.vmap, in_axes=1, out_axes=1) if dx.ndim == 2 else (
        lambda f: f)
    _, residual_lin = jax.linearize(lambda x_, rho_: residual(z, x_, rho_), x, rho)
    dq1 = -solve(columns(residual_lin)(dx, drho))[:nq]
    _, momentum_lin = jax.linearize(momentum, x[:nq], x_next[:nq], rho)
    return jnp.concatenate([dq1, columns(momentum_lin)(dx[:nq], dq1, drho)])


def step_cotangent(system: MechanicalSystem, x, x_next, multiplier, u, rho, dt, costate):
    """(costate A_k (2nq,), costate B_k (np,)) for a row costate (2nq,) on x_k+1 without
    forming A_k, B_k: one VJP of the momentum, one transposed solve with the step Jacobian
    in z and one VJP of the step equations (the transpose of `step_tangent`)."""
    nq = system.nq
    z, residual, momentum, solve = _step_equations(system, x, x_next, multiplier, u, rho, dt)
    _, momentum_vjp = jax.vjp(momentum, x[:nq], x_next[:nq], rho)
    from_q0, from_q1, from_rho = momentum_vjp(costate[nq:])
    w = jnp.concatenate([costate[:nq] + from_q1, jnp.zeros_like(multiplier)])
    nu = solve(w, transpose=True)
    _, residual_vjp = jax.vjp(lambda x_, rho_: residual(z, x_, rho_), x, rho)
    through_x, through_rho = residual_vjp(-nu)
    return through_x.at[:nq].add(from_q0), through_rho + from_rho


def trajectory_cost(running_cost: Callable, terminal_cost: Callable, states, targets, rho):
    """J = sum_{k=1}^{kf} l(x_k, target_k, rho) + m(x_kf, target_kf, rho).

    Args:
      running_cost: (x (2nq,), target (pytree), rho) -> () l.
      terminal_cost: (x (2nq,), target (pytree), rho) -> () m.
      states: (kf + 1, 2 nq) rollout states.
      targets: pytree with leading axis kf + 1.
      rho: (np,) parameters.
    """
    last = jax.tree_util.tree_map(lambda t: t[-1], targets)
    rest = jax.tree_util.tree_map(lambda t: t[1:], targets)
    running = jax.vmap(running_cost, in_axes=(0, 0, None))(states[1:], rest, rho)
    return jnp.sum(running) + terminal_cost(states[-1], last, rho)


def adjoint_gradient(system: MechanicalSystem, running_cost: Callable, terminal_cost: Callable,
                     states, info: variational.VariationalInfo, inputs, targets, rho, dt):
    """DJ/drho (np,) by the discrete adjoint of Lemma 1, backwards over a finished rollout
    (mu_k A_k and mu_k B_k by `step_cotangent`, matrix-free).

    Args:
      system: the mechanical system (static).
      running_cost: as in `trajectory_cost`.
      terminal_cost: as in `trajectory_cost`.
      states: (kf + 1, 2nq) `variational.rollout` states for (inputs, rho).
      info: the rollout's `VariationalInfo`.
      inputs: the rollout's per-step inputs (leading axis kf).
      targets: as in `trajectory_cost`.
      rho: (np,) parameters.
      dt: time step [s].
    """
    kf = states.shape[0] - 1
    d_running = jax.grad(running_cost, argnums=(0, 2))
    d_terminal = jax.grad(terminal_cost, argnums=(0, 2))
    dl_x, dl_rho = d_running(states[kf], _at(targets, kf), rho)
    dm_x, dm_rho = d_terminal(states[kf], _at(targets, kf), rho)
    costate = dl_x + dm_x
    grad = dl_rho + dm_rho

    def backward(carry, k):
        costate, grad = carry
        costate_A, costate_B = step_cotangent(system, states[k], states[k + 1],
                                              _at(info.multiplier, k), _at(inputs, k), rho,
                                              dt, costate)
        dl_x, dl_rho = d_running(states[k], _at(targets, k), rho)
        keep = (k >= 1).astype(states.dtype)
        return (costate_A + keep * dl_x, grad + costate_B + keep * dl_rho), None

    (_, grad), _ = jax.lax.scan(backward, (costate, grad), jnp.arange(kf - 1, -1, -1))
    return grad


def forward_sensitivities(system: MechanicalSystem, states, info: variational.VariationalInfo,
                          inputs, rho, dt):
    """S_k = dx_k/drho (kf + 1, 2nq, np) by the tangent-linear recursion of eq. 6,
    S_k+1 = A_k S_k + B_k from S_0 = 0 (x_0 does not depend on rho).

    One pass costs what the adjoint pass costs (np `step_tangent`s per step; A_k, B_k are
    never formed) and gives the Jacobian of every output, which Gauss-Newton needs when
    there are few parameters.

    Args:
      system: the mechanical system (static).
      states: (kf + 1, 2nq) `variational.rollout` states for (inputs, rho).
      info: the rollout's `VariationalInfo`.
      inputs: the rollout's per-step inputs (leading axis kf).
      rho: (np,) parameters.
      dt: time step [s].
    """
    eye = jnp.eye(rho.shape[0], dtype=states.dtype)

    def forward(S, k):
        S = step_tangent(system, states[k], states[k + 1], _at(info.multiplier, k),
                         _at(inputs, k), rho, dt, S, eye)
        return S, S

    S0 = jnp.zeros((states.shape[1], rho.shape[0]), states.dtype)
    _, S = jax.lax.scan(forward, S0, jnp.arange(states.shape[0] - 1))
    return jnp.concatenate([S0[None], S])


def gauss_newton_system(output: Callable, states, targets, sensitivities,
                        terminal: bool = True):
    """Gradient g (np,) and Gauss-Newton matrix H (np, np) of the least-squares cost
    J = sum_{k=1}^{kf} |output(x_k) - target_k|^2 (+ the same terminal term when `terminal`).

    With r_k = output(x_k) - target_k and J_k = D output(x_k) S_k: g = 2 sum_k J_k^T r_k,
    H = 2 sum_k J_k^T J_k (the terminal step counted once more).

    Args:
      output: x (2nq,) -> (m,) the fitted output (end-effector position, joint angles, ...).
      states: (kf + 1, 2nq) rollout states.
      targets: (kf + 1, m) targets of the output.
      sensitivities: (kf + 1, 2nq, np) from `forward_sensitivities`.
      terminal: count the last step once more (the terminal term).
    """
    r = jax.vmap(output)(states[1:]) - targets[1:]
    J = jax.vmap(lambda x, S: jax.jacfwd(output)(x) @ S)(states[1:], sensitivities[1:])
    weight = jnp.ones(r.shape[0], r.dtype)
    if terminal:
        weight = weight.at[-1].add(1.0)
    g = 2.0 * jnp.einsum('k,kmi,km->i', weight, J, r)
    H = 2.0 * jnp.einsum('k,kmi,kmj->ij', weight, J, J)
    return g, H


class DescentResult(NamedTuple):
    """Outcome of `projected_armijo_descent`.

    Attributes:
      rho: (np,) final parameters; cost: final cost; iterations: steps taken;
      gradient_norm: norm of the projected gradient at rho; history: list of (cost, rho).
    """

    rho: np.ndarray
    cost: float
    iterations: int
    gradient_norm: float
    history: list


def projected_armijo_descent(value_and_grad: Callable, cost: Callable, rho0, lower, upper,
                             alpha: float = 0.4, beta: float = 0.4, step0: float = 1.0,
                             max_iterations: int = 50, grad_tol: float = 1e-6,
                             max_backtracks: int = 30,
                             gauss_newton: bool = False) -> DescentResult:
    """Descent with an Armijo line search under box bounds (Caldwell et al. 2014, §IV-E).

    rho_new = clip(rho - s d, lower, upper) along d = g (steepest descent, the paper's
    method) or, with `gauss_newton`, d = H^-1 g where `value_and_grad` also returns the
    Gauss-Newton matrix H (np, np) (2 J_r^T J_r for J = |r|^2). Accept the first s in
    step0 beta^j with J(rho_new) <= J(rho) - alpha g . (rho - rho_new) (alpha = beta = 0.4
    in the paper). Runs on the host around jitted `value_and_grad` (rho -> (J, g) or
    (J, g, H)) and `cost` (rho -> J); a non-finite cost (a failed rollout) counts as no
    decrease.

    Stops when the projected gradient norm falls below grad_tol, when no step decreases the
    cost, or after max_iterations.
    """
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)

    def evaluate(rho):
        out = [np.asarray(a) for a in value_and_grad(rho)]
        direction = np.linalg.solve(out[2], out[1]) if gauss_newton else out[1]
        return float(out[0]), out[1], direction

    rho = np.clip(np.asarray(rho0, float), lower, upper)
    value, grad, direction = evaluate(rho)
    history = [(value, rho.copy())]
    step = step0
    iterations = 0
    for iterations in range(1, max_iterations + 1):
        projected = rho - np.clip(rho - grad, lower, upper)
        if np.linalg.norm(projected) < grad_tol:
            iterations -= 1
            break
        for _ in range(max_backtracks):
            candidate = np.clip(rho - step * direction, lower, upper)
            candidate_value = float(cost(candidate))
            if candidate_value <= value - alpha * grad @ (rho - candidate):
                break
            step *= beta
        else:
            iterations -= 1
            break
        rho = candidate
        value, grad, direction = evaluate(rho)
        history.append((value, rho.copy()))
        step = min(step / beta, step0)
    projected = rho - np.clip(rho - grad, lower, upper)
    return DescentResult(rho, value, iterations, float(np.linalg.norm(projected)), history)
