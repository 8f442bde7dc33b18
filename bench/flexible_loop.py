"""Seed 002 section IV: identify the stiffness [k1, k2] of a flexible loop held by an arm.

The arm is a 7-joint serial revolute chain standing in for Baxter's arm (`constraints.
flexible_loop`: NOT Baxter's geometry or inertia); the loop is a ring of n rods with two-axis
joints (in-plane bending k1, out-of-plane bending k2), clamped at its far end (12
constraints). The data are SIMULATED with the variational integrator at hidden true
stiffness: the arm tracks a smooth reference with a stiff PD controller, and we record the
arm's joint angles b_meas and the torques it applied T_meas at 100 Hz. Identification
simulates with Fc = T_meas - Kp (b - b_meas) - Kd (bd - bd_meas) (the seed's proportional
feedback filter, plus a derivative term), costs the squared end-effector position error
(running + terminal) and runs projected steepest descent with an Armijo line search
(alpha = beta = 0.4) from [5, 5], the seed's start, using the discrete adjoint gradient.

Seed anchors (real Baxter data, trep, a MacBook Air): 12 links (31 configuration variables),
2000 samples: 219.05 min, 75 iterations, cost 2.135 -> 1.107; 6 links (19 variables): 61.01
min. Run: python bench/flexible_loop.py [--quick] [--links 12 6] [--samples 2000]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core import adjoint, constraints, variational

DT = 0.01
RHO_TRUE = np.array([4.45, 0.97])  # the seed's identified values, used as hidden truth
RHO_START = np.array([5.0, 5.0])
LOWER, UPPER = np.array([0.05, 0.05]), np.array([50.0, 50.0])
LOOP_DAMPING = 0.01  # N m s/rad on every loop joint (known)
TRUTH_GAINS = (60.0, 3.0)  # PD of the simulated robot's controller
FILTER_GAINS = (20.0, 1.0)  # Kp, Kd of the identification feedback filter
NEWTON_ITERATIONS = 8


def make_problem(num_links, samples):
    """Loop system, simulated measurements and jitted cost / gradient functions."""
    loop = constraints.flexible_loop(num_links)
    nq = loop.model.nv
    na = len(loop.arm)
    arm = np.zeros((nq, na))
    arm[np.arange(na), np.arange(na)] = 1.0
    arm = jnp.asarray(arm)
    loop_joint = jnp.asarray(np.r_[np.zeros(na), np.ones(nq - na)])

    def force(q, qd, u, rho):
        """Arm torque tau_ff + kp (b_target - b) + kd (bd_target - bd); loop damping."""
        tau_ff, b_target, bd_target, gains = u
        b, bd = q[:na], qd[:na]
        tau = tau_ff + gains[0] * (b_target - b) + gains[1] * (bd_target - bd)
        return arm @ tau - LOOP_DAMPING * loop_joint * qd

    system = constraints.loop_system(loop, force)
    t = np.arange(samples) * DT
    freq = np.array([0.3, 0.4, 0.5, 0.35, 0.45, 0.25, 0.55])[:na]
    b_ref = 0.25 * np.sin(2 * np.pi * np.outer(t + 0.5 * DT, freq)) * (1 - np.exp(-t))[:, None]
    bd_ref = np.gradient(b_ref, DT, axis=0)
    q0 = jnp.zeros(nq)
    variational.check_initial_configuration(system, q0)
    x0 = variational.initial_state(system, q0, jnp.zeros(nq), jnp.asarray(RHO_TRUE))
    truth_inputs = (jnp.zeros((samples, na)), jnp.asarray(b_ref), jnp.asarray(bd_ref),
                    jnp.tile(jnp.asarray(TRUTH_GAINS), (samples, 1)))
    roll = jax.jit(lambda inputs, rho: variational.rollout(
        system, x0, inputs, rho, DT, NEWTON_ITERATIONS, exact_jacobian=True))
    states, info = roll(truth_inputs, jnp.asarray(RHO_TRUE))
    variational.check_rollout(info, tol=1e-6)
    q = np.asarray(states[:, :nq])
    b = q[:, :na]
    b_mid, bd = 0.5 * (b[1:] + b[:-1]), (b[1:] - b[:-1]) / DT
    t_meas = TRUTH_GAINS[0] * (b_ref - b_mid) + TRUTH_GAINS[1] * (bd_ref - bd)
    fit_inputs = (jnp.asarray(t_meas), jnp.asarray(b_mid), jnp.asarray(bd),
                  jnp.tile(jnp.asarray(FILTER_GAINS), (samples, 1)))

    def ee(x):
        (R_arm, p_arm), _ = constraints.loop_kinematics(loop, x[:nq])
        return p_arm[-1] + R_arm[-1] @ jnp.asarray(loop.ee_offset, x.dtype)

    targets = jax.vmap(ee)(states)

    def ee_cost(x, target, rho):
        return jnp.sum((ee(x) - target) ** 2)

    @jax.jit
    def cost(rho):
        states, _ = roll(fit_inputs, rho)
        return adjoint.trajectory_cost(ee_cost, ee_cost, states, targets, rho)

    @jax.jit
    def value_and_grad(rho):
        states, info = roll(fit_inputs, rho)
        value = adjoint.trajectory_cost(ee_cost, ee_cost, states, targets, rho)
        return value, adjoint.adjoint_gradient(system, ee_cost, ee_cost, states, info,
                                               fit_inputs, targets, rho, DT)

    autodiff_grad = jax.jit(jax.grad(cost))
    return loop, cost, value_and_grad, autodiff_grad


def timed(f, *args):
    start = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    return out, time.perf_counter() - start


def run(num_links, samples, max_iterations):
    start = time.perf_counter()
    loop, cost, value_and_grad, autodiff_grad = make_problem(num_links, samples)
    rho0 = jnp.asarray(RHO_START)
    (_, g_adj), compile_adj = timed(value_and_grad, rho0)
    _, run_adj = timed(value_and_grad, rho0)
    g_ad, compile_ad = timed(autodiff_grad, rho0)
    _, run_ad = timed(autodiff_grad, rho0)
    cost0, _ = timed(cost, rho0)
    setup = time.perf_counter() - start
    fit_start = time.perf_counter()
    result = adjoint.projected_armijo_descent(value_and_grad, cost, RHO_START, LOWER, UPPER,
                                              max_iterations=max_iterations, grad_tol=1e-9)
    fit = time.perf_counter() - fit_start
    return dict(links=num_links, nq=loop.model.nv, samples=samples,
                iterations=result.iterations, cost0=float(cost0), cost=result.cost,
                k1=result.rho[0], k2=result.rho[1], grad_norm=result.gradient_norm,
                fit_s=fit, setup_s=setup, adjoint_s=run_adj, autodiff_s=run_ad,
                compile_adjoint_s=compile_adj, compile_autodiff_s=compile_ad,
                grad_rel_diff=float(np.max(np.abs(g_adj - g_ad)) /
                                    max(np.max(np.abs(g_ad)), 1e-300)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help='6 links, 200 samples, 15 descent iterations')
    parser.add_argument('--links', type=int, nargs='+', default=[12, 6])
    parser.add_argument('--samples', type=int, default=2000)
    parser.add_argument('--iterations', type=int, default=75)
    args = parser.parse_args()
    jax.config.update('jax_enable_x64', True)
    if args.quick:
        args.links, args.samples, args.iterations = [6], 200, 15
    rows = [run(n, args.samples, args.iterations) for n in args.links]
    print(f'true k1={RHO_TRUE[0]} k2={RHO_TRUE[1]}, start {RHO_START.tolist()}, dt={DT} s')
    header = ('links', 'nq', 'samples', 'iter', 'cost0', 'cost', 'k1', 'k2', '|g|',
              'fit[s]', 'setup[s]', 'adj[s]', 'AD[s]', 'adj-AD')
    print(' '.join(f'{h:>10}' for h in header))
    for r in rows:
        print(' '.join(f'{v:>10.4g}' if isinstance(v, float) else f'{v:>10}' for v in (
            r['links'], r['nq'], r['samples'], r['iterations'], r['cost0'], r['cost'], r['k1'],
            r['k2'], r['grad_norm'], r['fit_s'], r['setup_s'], r['adjoint_s'],
            r['autodiff_s'], r['grad_rel_diff'])))
    print('seed (real data, trep, laptop): 12 links 219.05 min, 6 links 61.01 min')
    head = rows[0]
    print(f"RESULT flexible_loop links={head['links']} nq={head['nq']} "
          f"samples={head['samples']} iterations={head['iterations']} "
          f"cost_before={head['cost0']:.4g} cost_after={head['cost']:.4g} "
          f"k1={head['k1']:.4f} k2={head['k2']:.4f} k1_true={RHO_TRUE[0]} "
          f"k2_true={RHO_TRUE[1]} fit_s={head['fit_s']:.1f} setup_s={head['setup_s']:.1f} "
          f"adjoint_grad_s={head['adjoint_s']:.3f} autodiff_grad_s={head['autodiff_s']:.3f}")


if __name__ == '__main__':
    main()
