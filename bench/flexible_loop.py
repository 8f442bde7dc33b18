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
(alpha = beta = 0.4) from [5, 2] ([5, 5], the seed's start, with --quick; from there the
12-link rollout fails) using the discrete adjoint gradient
(armijo-SD), then the same search along the Gauss-Newton direction from the tangent-linear
sensitivities dx_k/drho (armijo-GN), then scipy's L-BFGS-B on the adjoint gradient.

Rollouts run chord-Newton to a residual of 1e-10 (while loop, at most 30 iterations); the
adjoint and tangent passes are matrix-free (`adjoint.step_cotangent`/`step_tangent`); a
line search's accepted rollout is reused by the next gradient. The autodiff comparison
differentiates a rollout with a fixed 12 Newton iterations.

Seed anchors (real Baxter data, trep, a MacBook Air): 12 links (31 configuration variables),
2000 samples: 219.05 min, 75 iterations, cost 2.135 -> 1.107; 6 links (19 variables): 61.01
min. Run: python -m bench.flexible_loop [--quick] [--links 12 6] [--samples 2000]
[--no-autodiff]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from sysid_ros.core.constrained import adjoint
from sysid_ros.core.constrained import constraints
from sysid_ros.core.dynamics import variational

DT = 0.01
RHO_TRUE = np.array([4.45, 0.97])  # the seed's identified values, used as hidden truth
SEED_START = np.array([5.0, 5.0])
RHO_START = np.array([5.0, 2.0])  # from [5, 5] the 12-link rollout fails (step 481)
LOWER, UPPER = np.array([0.05, 0.05]), np.array([50.0, 50.0])
LOOP_DAMPING = 0.05  # N m s/rad on every loop joint (known; at 0.01 the 12-link truth diverges)
SETTLE_STEPS, SETTLE_DAMPING = 800, 2.0  # before the recording: 8 s at 2 N m s/rad
AMPLITUDE = 0.15  # rad, of each arm joint's reference (at 0.25 many rollouts fail near 19.5 s)
TRUTH_GAINS = (60.0, 3.0)  # PD of the simulated robot's controller
FILTER_GAINS = (20.0, 1.0)  # Kp, Kd of the identification feedback filter
NEWTON_ITERATIONS = 30  # at most, per step; Newton stops at a residual of NEWTON_TOL
NEWTON_TOL = 1e-10
UNROLLED_ITERATIONS = 12  # fixed, for the autodiff comparison through the unrolled solver


def make_problem(num_links, samples):
    """Loop system, simulated measurements and jitted cost / gradient functions."""
    loop = constraints.flexible_loop(num_links)
    rho_true = jnp.asarray(RHO_TRUE)
    nq = loop.model.nv
    na = len(loop.arm)
    arm = np.zeros((nq, na))
    arm[np.arange(na), np.arange(na)] = 1.0
    arm = jnp.asarray(arm)
    loop_joint = jnp.asarray(np.r_[np.zeros(na), np.ones(nq - na)])

    def force(q, qd, u, rho):
        """Arm torque tau_ff + kp (b_target - b) + kd (bd_target - bd); loop damping."""
        tau_ff, b_target, bd_target, gains, damping = u
        b, bd = q[:na], qd[:na]
        tau = tau_ff + gains[0] * (b_target - b) + gains[1] * (bd_target - bd)
        return arm @ tau - damping * loop_joint * qd

    system = constraints.loop_system(loop, force)
    t = np.arange(samples) * DT
    freq = np.array([0.3, 0.4, 0.5, 0.35, 0.45, 0.25, 0.55])[:na]
    ramp = (1 - np.exp(-t))[:, None]
    b_ref = AMPLITUDE * np.sin(2 * np.pi * np.outer(t + 0.5 * DT, freq)) * ramp
    bd_ref = np.gradient(b_ref, DT, axis=0)
    q_rest = jnp.zeros(nq)                  # the springs' rest shape, not an equilibrium
    variational.check_initial_configuration(system, q_rest)

    def held(steps, b_target, bd_target, damping):
        """Inputs of the true robot: its PD tracking b_target, loop damping per step."""
        return (jnp.zeros((steps, na)), jnp.asarray(b_target), jnp.asarray(bd_target),
                jnp.tile(jnp.asarray(TRUTH_GAINS), (steps, 1)), jnp.full(steps, damping))

    roll = jax.jit(lambda x0, inputs, rho: variational.rollout(
        system, x0, inputs, rho, DT, NEWTON_ITERATIONS, tol=NEWTON_TOL))
    # The loop is let go from its rest shape with the arm held at zero and settles under
    # gravity, heavily damped; the recording starts from that measured rest state.
    rest = np.zeros((SETTLE_STEPS, na))
    settling, info = roll(variational.initial_state(system, q_rest, jnp.zeros(nq), rho_true),
                          held(SETTLE_STEPS, rest, rest, SETTLE_DAMPING), rho_true)
    variational.check_rollout(info, tol=1e-8)
    x0 = settling[-1]
    states, info = roll(x0, held(samples, b_ref, bd_ref, LOOP_DAMPING), rho_true)
    variational.check_rollout(info, tol=1e-8)
    q = np.asarray(states[:, :nq])
    b = q[:, :na]
    b_mid, bd = 0.5 * (b[1:] + b[:-1]), (b[1:] - b[:-1]) / DT
    t_meas = TRUTH_GAINS[0] * (b_ref - b_mid) + TRUTH_GAINS[1] * (bd_ref - bd)
    fit_inputs = (jnp.asarray(t_meas), jnp.asarray(b_mid), jnp.asarray(bd),
                  jnp.tile(jnp.asarray(FILTER_GAINS), (samples, 1)),
                  jnp.full(samples, LOOP_DAMPING))

    def ee(x):
        (R_arm, p_arm), _ = constraints.loop_kinematics(loop, x[:nq])
        return p_arm[-1] + R_arm[-1] @ jnp.asarray(loop.ee_offset, x.dtype)

    targets = jax.vmap(ee)(states)

    def ee_cost(x, target, rho):
        return jnp.sum((ee(x) - target) ** 2)

    fit_roll = jax.jit(lambda rho: roll(x0, fit_inputs, rho))
    trajectory_cost = jax.jit(lambda states, rho: adjoint.trajectory_cost(
        ee_cost, ee_cost, states, targets, rho))
    adjoint_grad = jax.jit(lambda states, info, rho: adjoint.adjoint_gradient(
        system, ee_cost, ee_cost, states, info, fit_inputs, targets, rho, DT))
    gauss_newton_system = jax.jit(lambda states, info, rho: adjoint.gauss_newton_system(
        ee, states, targets,
        adjoint.forward_sensitivities(system, states, info, fit_inputs, rho, DT)))
    rollouts = {}      # the line search's last rollout, reused when its step is accepted

    def rollout_at(rho):
        key = np.asarray(rho, float).tobytes()
        if key not in rollouts:
            rollouts.clear()
            rollouts[key] = fit_roll(jnp.asarray(rho))
        return rollouts[key]

    def cost(rho):
        """J(rho), or inf where the rollout failed (a Newton step did not converge)."""
        states, info = rollout_at(rho)
        if not np.all(np.asarray(info.residual) <= 1e-8):
            return np.inf
        return trajectory_cost(states, jnp.asarray(rho))

    def value_and_grad(rho):
        states, info = rollout_at(rho)
        return cost(rho), adjoint_grad(states, info, jnp.asarray(rho))

    def gauss_newton(rho):
        states, info = rollout_at(rho)
        return (cost(rho), *gauss_newton_system(states, info, jnp.asarray(rho)))

    @jax.grad
    def autodiff_grad(rho):
        states, _ = variational.rollout(system, x0, fit_inputs, rho, DT, UNROLLED_ITERATIONS)
        return adjoint.trajectory_cost(ee_cost, ee_cost, states, targets, rho)

    return loop, {'cost': cost, 'adjoint': value_and_grad, 'autodiff': jax.jit(autodiff_grad),
                  'gauss_newton': gauss_newton, 'rollouts': rollouts}


def timed(f, *args, rollouts=None):
    """(output, first call [s] (compile + run), second call [s]); clears the cached
    rollouts before each call so that both calls include theirs."""
    times = []
    for _ in range(2):
        if rollouts is not None:
            rollouts.clear()
        start = time.perf_counter()
        out = jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return out, times[0], times[1]


def run(num_links, samples, iterations, rho_start, autodiff=True):
    """Rows of the table for one loop: steepest descent (seed) and Gauss-Newton."""
    start = time.perf_counter()
    loop, fns = make_problem(num_links, samples)
    rho0 = jnp.asarray(rho_start)
    cache = fns['rollouts']
    cost0, _, rollout_s = timed(fns['cost'], rho0, rollouts=cache)
    if not np.isfinite(cost0):
        raise SystemExit(f'{num_links} links: the rollout at the start {rho_start} fails (a '
                         f'Newton step does not converge); choose another --start')
    (_, g_adj), compile_adj, run_adj = timed(fns['adjoint'], rho0, rollouts=cache)
    _, compile_gn, run_gn = timed(fns['gauss_newton'], rho0, rollouts=cache)
    if autodiff:
        g_ad, compile_ad, run_ad = timed(fns['autodiff'], rho0)
        grad_diff = float(np.max(np.abs(g_adj - g_ad)) / max(np.max(np.abs(g_ad)), 1e-300))
    else:
        compile_ad = run_ad = grad_diff = float('nan')
    common = {'links': num_links, 'nq': loop.model.nv, 'samples': samples, 'cost0': float(cost0),
              'setup_s': time.perf_counter() - start, 'rollout_s': rollout_s,
              'adjoint_s': run_adj, 'autodiff_s': run_ad, 'gauss_newton_s': run_gn,
              'compile_adjoint_s': compile_adj - run_adj,
              'compile_autodiff_s': compile_ad - run_ad, 'grad_rel_diff': grad_diff}
    rows = []
    for method, gn in (('armijo-SD', False), ('armijo-GN', True)):
        fit_start = time.perf_counter()
        result = adjoint.projected_armijo_descent(
            fns['gauss_newton'] if gn else fns['adjoint'], fns['cost'], rho_start, LOWER,
            UPPER, max_iterations=iterations[method], grad_tol=1e-9, gauss_newton=gn)
        rows.append(dict(common, method=method, iterations=result.iterations,
                         cost=result.cost, k1=result.rho[0], k2=result.rho[1],
                         grad_norm=result.gradient_norm, history=result.history,
                         fit_s=time.perf_counter() - fit_start))
    rows.append(dict(common, **lbfgs_fit(fns['adjoint'], rho_start, iterations['L-BFGS-B'])))
    return rows


def lbfgs_fit(value_and_grad, rho_start, max_iterations):
    """scipy's bounded quasi-Newton (L-BFGS-B) on the adjoint gradient: a table row."""
    history = []
    start = time.perf_counter()

    def fun(rho):
        value, grad = value_and_grad(rho)
        if not np.isfinite(value):          # a failed rollout: no gradient either
            return np.inf, np.zeros_like(rho)
        return float(value), np.asarray(grad, float)

    result = scipy.optimize.minimize(
        fun, np.asarray(rho_start, float), jac=True, method='L-BFGS-B',
        bounds=list(zip(LOWER, UPPER)),
        options={'maxiter': max_iterations, 'gtol': 1e-9},
        callback=lambda intermediate_result: history.append(
            (float(intermediate_result.fun), intermediate_result.x.copy())))
    projected = result.x - np.clip(result.x - result.jac, LOWER, UPPER)
    return {'method': 'L-BFGS-B', 'iterations': int(result.nit), 'cost': float(result.fun),
            'k1': result.x[0], 'k2': result.x[1], 'grad_norm': float(np.linalg.norm(projected)),
            'history': history, 'fit_s': time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help='6 links, 200 samples, 10 steepest-descent iterations')
    parser.add_argument('--links', type=int, nargs='+', default=[12, 6])
    parser.add_argument('--samples', type=int, default=2000)
    parser.add_argument('--iterations', type=int, default=75,
                        help='steepest-descent iterations (the seed ran 75)')
    parser.add_argument('--gn-iterations', type=int, default=15)
    parser.add_argument('--lbfgs-iterations', type=int, default=30)
    parser.add_argument('--start', type=float, nargs=2, default=None,
                        help="initial [k1, k2] (default [5, 2]; --quick: the seed's [5, 5])")
    parser.add_argument('--no-autodiff', action='store_true',
                        help='skip the autodiff gradient (its compile is the slowest)')
    parser.add_argument('--cache', default='',
                        help='persistent compilation cache directory (compiles take minutes)')
    args = parser.parse_args()
    jax.config.update('jax_enable_x64', True)
    if args.cache:
        jax.config.update('jax_compilation_cache_dir', args.cache)
        jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
    if args.quick:
        args.links, args.samples, args.iterations = [6], 200, 10
    if args.start is None:
        args.start = (SEED_START if args.quick else RHO_START).tolist()
    iterations = {'armijo-SD': args.iterations, 'armijo-GN': args.gn_iterations,
                  'L-BFGS-B': args.lbfgs_iterations}
    rows = [row for n in args.links
            for row in run(n, args.samples, iterations, args.start, not args.no_autodiff)]
    print(f'true k1={RHO_TRUE[0]} k2={RHO_TRUE[1]}, start {args.start}, dt={DT} s, '
          f'bounds [{LOWER[0]}, {UPPER[0]}]; times in s')
    keys = ('links', 'nq', 'samples', 'method', 'iterations', 'cost0', 'cost', 'k1', 'k2',
            'grad_norm', 'fit_s', 'setup_s', 'rollout_s', 'adjoint_s', 'autodiff_s',
            'gauss_newton_s', 'compile_adjoint_s', 'compile_autodiff_s', 'grad_rel_diff')
    print(' '.join(f'{k[:11]:>11}' for k in keys))
    for r in rows:
        print(' '.join(f'{r[k]:>11.4g}' if isinstance(r[k], float) else f'{r[k]:>11}'
                       for k in keys))
    print('seed (real Baxter data, trep, laptop): 12 links 219.05 min, 75 iterations, cost '
          '2.135 -> 1.107; 6 links 61.01 min, cost -> 1.546')
    for r in rows:
        path = ' '.join(f'{c:.3g}@({k[0]:.3f},{k[1]:.3f})' for c, k in r['history'])
        print(f"{r['links']} links {r['method']} cost@(k1,k2): {path}")
    sd, gn, lbfgs = rows[0], rows[1], rows[2]
    print(f"RESULT flexible_loop links={sd['links']} nq={sd['nq']} samples={sd['samples']} "
          f"sd_iterations={sd['iterations']} cost_before={sd['cost0']:.4g} "
          f"sd_cost_after={sd['cost']:.4g} sd_k1={sd['k1']:.4f} sd_k2={sd['k2']:.4f} "
          f"sd_fit_s={sd['fit_s']:.1f} gn_iterations={gn['iterations']} "
          f"gn_cost_after={gn['cost']:.4g} gn_k1={gn['k1']:.4f} gn_k2={gn['k2']:.4f} "
          f"gn_fit_s={gn['fit_s']:.1f} lbfgs_iterations={lbfgs['iterations']} "
          f"lbfgs_cost_after={lbfgs['cost']:.4g} lbfgs_k1={lbfgs['k1']:.4f} "
          f"lbfgs_k2={lbfgs['k2']:.4f} lbfgs_fit_s={lbfgs['fit_s']:.1f} "
          f'k1_true={RHO_TRUE[0]} k2_true={RHO_TRUE[1]} '
          f"adjoint_grad_s={sd['adjoint_s']:.3f} autodiff_grad_s={sd['autodiff_s']:.3f} "
          f"rollout_s={sd['rollout_s']:.3f}")


if __name__ == '__main__':
    main()
