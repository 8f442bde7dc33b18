"""Equation error vs output error on the simulated Panda.

The robot: example-robot-data's Panda (fingers locked) with config/panda.yaml's free
parameters (link 6 mass; link 7 mass, COM and full inertia; viscous and Coulomb friction of
every joint, `coulomb_viscous`). Hidden truth: a payload of PAYLOAD_MASS kg at PAYLOAD_COM
in the panda_link7 frame with inertia PAYLOAD_INERTIA about its COM added to link 7
(`edits.add_rigid_body`), and each joint's damping and Coulomb torque drawn U[0.05, 1.0].
Recording: this package's simulator (rk4, --substeps steps per 200 Hz sample; default 1,
the estimators' own simulator, which favours output error) under a computed-torque law of
the nominal model (`control.track`, 10 Hz, URDF effort limits) tracking random
multi-sine references (0.1-0.6 Hz) around `heldout.PANDA_POSE`; heldout's noise (N(0, 1e-4
rad) on q, N(0, 1e-3 rad/s) on qd, exact torques), `data.noise_std` set to it.

Each likelihood (`estimator.residual`) is fitted from the nominal model by
  lm     the point estimator, at most --lm-iterations steps: estimate, Laplace std, wall
         time per fit and per step (compilation included in the fit, not in the step);
  csvgd  P particles started around the lm estimate (its Laplace covariance) for --steps
         steps: wall time per step after the first, and the particles' spread.
Reported per parameter: truth, estimate +- std and |error| / std of both.

Usage:
  .venv/bin/python -m bench.equation_error [--duration 20] [--particles 32] [--steps 20]
      [--lm-iterations 100] [--residuals ee oe] [--substeps 1] [--seed 0] [--quick]
(--quick: 10 s, 8 particles, 5 csvgd steps, 30 lm steps.) Last line: `RESULT equation_error
key=value ...` with per likelihood (ee, oe): lm_wall_s, lm_step_s, lm_iterations,
csvgd_step_s, the median and largest |error| / std of lm, the payload (link-7 mass) error
[kg], and the median ratio of the lm stds (ee / oe) when both ran.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from bench import heldout
from sysid_ros.core.dynamics import control
from sysid_ros.core.inference import particles
from sysid_ros.core.model import edits
from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline
from sysid_ros.io.trajectory import Trajectory

CONFIG = pathlib.Path(__file__).resolve().parent.parent / 'config' / 'panda.yaml'
PAYLOAD_MASS = 1.0                                   # [kg]
PAYLOAD_COM = np.array([0.01, -0.02, 0.06])          # [m] in panda_link7
PAYLOAD_INERTIA = np.diag([2e-3, 2e-3, 1e-3])        # [kg m^2] about its COM
FRICTION_RANGE = (0.05, 1.0)                         # [N m s/rad], [N m]
PANDA_EFFORT = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])     # [N m] URDF
TRACKING_FREQUENCY = 2.0 * np.pi * 10.0              # [rad/s] of the computed-torque law
RESIDUALS = {'ee': 'equation_error', 'oe': 'output_error'}

_TRACK = jax.jit(control.track, static_argnames=('integrator', 'actuator', 'substeps'))


def build(residual: str, particles_count: int):
    """The Problem of config/panda.yaml with heldout's noise and `estimator.residual`."""
    cfg = config_io.load_yaml(CONFIG)
    nv = 7
    cfg = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, noise_std=(heldout.Q_NOISE,) * nv
                                      + (heldout.QD_NOISE,) * nv),
        estimator=dataclasses.replace(cfg.estimator, residual=residual, shooting_windows=1,
                                      particles=particles_count))
    return pipeline.build_problem(cfg)


def truth(problem, rng: np.random.Generator):
    """The hidden truth's Params and theta (module doc)."""
    base = problem.base_params
    link7 = problem.model.link_names.index('panda_link7')
    params = edits.add_rigid_body(base, link7, PAYLOAD_MASS, PAYLOAD_COM, PAYLOAD_INERTIA)
    params = dataclasses.replace(
        params, damping=jnp.asarray(rng.uniform(*FRICTION_RANGE, problem.model.nv)),
        coulomb=jnp.asarray(rng.uniform(*FRICTION_RANGE, problem.model.nv)))
    return params, np.asarray(problem.spec.from_params(params))


def record(problem, params, duration: float, rng: np.random.Generator,
           substeps: int) -> Trajectory:
    """The noisy tracked recording (module doc), simulated with `substeps` rk4 steps per
    sample."""
    num = int(round(duration / problem.dt)) + 1
    t = np.arange(num) * problem.dt
    wave, rate = heldout.multisine(t, heldout.PANDA_AMPLITUDE, rng, f_min=0.1, f_max=0.6)
    ramp = np.clip(t / 1.0, 0.0, 1.0)[:, None]
    q_ref = heldout.PANDA_POSE + ramp * (wave - wave[0])
    qd_ref = ramp * rate + (t[:, None] < 1.0) * (wave - wave[0])
    qdd_ref = np.gradient(qd_ref, t, axis=0)
    x0 = np.concatenate([heldout.PANDA_POSE, np.zeros(7)])
    cfg = problem.config.model
    states, u = _TRACK(problem.model, params, problem.base_params, x0, q_ref, qd_ref, qdd_ref,
                       problem.dt, jnp.asarray(PANDA_EFFORT), TRACKING_FREQUENCY,
                       integrator=cfg.integrator, actuator=cfg.actuator, substeps=substeps)
    states, u = np.asarray(states), np.asarray(u)
    q, qd = heldout.add_noise(states[:, :7], states[:, 7:], rng)
    return Trajectory(t=t, q=q, qd=qd, tau=u, joint_names=problem.model.joint_names,
                      source='bench/equation_error.py')


def timed_fit(problem, traj, method: str, **kwargs):
    """(FitResult, seconds per step after the first) of `pipeline.fit`."""
    elapsed = []
    result = pipeline.fit(problem, [traj], method=method, log=lambda _: None,
                          progress=lambda k, total, loss, s: elapsed.append(s), **kwargs)
    step = (elapsed[-1] - elapsed[0]) / (len(elapsed) - 1) if len(elapsed) > 1 else np.nan
    return result, step


def run(residual: str, traj, theta_true, args) -> dict:
    problem = build(residual, args.particles)
    lm, lm_step = timed_fit(problem, traj, 'lm', iterations=args.lm_iterations)
    print(f'{residual}: lm {lm.wall_time:.1f} s, {lm.iterations} steps, {lm_step:.3f} s per '
          f'step, loss {lm.final_loss:.4g}, {lm.convergence}', flush=True)
    theta0 = particles.gaussian_particles(problem.spec, lm.estimate, lm.covariance,
                                          args.particles, args.seed)
    csvgd, csvgd_step = timed_fit(problem, traj, 'csvgd', iterations=args.steps,
                                  theta0=theta0)
    print(f'{residual}: csvgd {csvgd.wall_time:.1f} s, {csvgd_step:.3f} s per step',
          flush=True)
    z = np.abs(lm.estimate - theta_true) / lm.std
    k = problem.spec.index('panda_link7.mass')
    return {'names': problem.names, 'lm': lm, 'csvgd': csvgd, 'z': z,
            'lm_wall_s': lm.wall_time, 'lm_step_s': lm_step, 'lm_iterations': lm.iterations,
            'csvgd_step_s': csvgd_step, 'z_median': float(np.median(z)),
            'z_max': float(np.max(z)), 'payload_err_kg': float(lm.estimate[k] - theta_true[k]),
            'noise': lm.info.get('noise_std')}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=20.0)
    parser.add_argument('--particles', type=int, default=32)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--lm-iterations', type=int, default=100)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--residuals', nargs='+', choices=tuple(RESIDUALS),
                        default=list(RESIDUALS))
    parser.add_argument('--substeps', type=int, default=1)
    parser.add_argument('--quick', action='store_true')
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.particles, args.steps, args.lm_iterations = 10.0, 8, 5, 30
    jax.config.update('jax_enable_x64', True)
    rng = np.random.default_rng([args.seed, 14])
    problem = build('output_error', args.particles)
    params, theta_true = truth(problem, rng)
    start = time.perf_counter()
    traj = record(problem, params, args.duration, rng, args.substeps)
    print(f'recording: {args.duration:g} s at {problem.config.data.rate:g} Hz '
          f'({time.perf_counter() - start:.1f} s to simulate)')
    results = {key: run(RESIDUALS[key], traj, theta_true, args) for key in args.residuals}
    print(f'{"parameter":24s} {"truth":>9s}' + ''.join(
        f' {RESIDUALS[key] + " (lm)":>30s}' for key in results) + '  (|error| / std)')
    for i, name in enumerate(problem.names):
        cells = [f'{r["lm"].estimate[i]:9.4f} +- {r["lm"].std[i]:8.4f} {r["z"][i]:7.2f}'
                 for r in results.values()]
        print(f'{name:24s} {theta_true[i]:9.4f}' + ''.join(f' {c:>30s}' for c in cells))
    for key, r in results.items():
        spread = np.asarray(r['csvgd'].std)
        print(f'{RESIDUALS[key]}: lm {r["lm_wall_s"]:.1f} s per fit ({r["lm_iterations"]} '
              f'steps, {r["lm_step_s"]:.3f} s per step, converged {r["lm"].converged}), '
              f'csvgd {r["csvgd_step_s"]:.3f} s per step ({args.particles} particles, median '
              f'particle std / lm std {np.median(spread / r["lm"].std):.2f}), noise '
              f'{np.round(r["noise"], 4).tolist()}')
    fields = {'duration_s': args.duration, 'particles': args.particles}
    if len(results) == 2:
        ratio = results['ee']['lm'].std / results['oe']['lm'].std
        fields['std_ratio'] = float(np.median(ratio))
    for key, r in results.items():
        for name in ('lm_wall_s', 'lm_step_s', 'lm_iterations', 'csvgd_step_s', 'z_median',
                     'z_max', 'payload_err_kg'):
            fields[f'{key}_{name}'] = r[name]
    print('RESULT equation_error ' + ' '.join(
        f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in fields.items()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
