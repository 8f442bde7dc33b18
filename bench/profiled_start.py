"""What the profiled start costs the live session, and what carrying it changes.

The live session of `config/double_pendulum_live.yaml` (csvgd, 16 particles, 1 s windows, 30
steps per window; held torques as in `bench/calibration.py --online`) on one recording of a
random truth, three sessions side by side, window by window in the same process:

  measured  `estimator.start: measured`: every window starts at its noisy measured state.
  full      `estimator.start: profiled`, the start fitted in every step (PROFILE_ITERATIONS
            Gauss-Newton steps from the measured start,
            `kernels.csvgd.build_kernel(carry_start=False)`).
  carried   `estimator.start: profiled` as shipped: each particle's start profile carried
            from step to step (`profiled_start.StartProfile`: refreshed every PROFILE_REFRESH
            steps, one Gauss-Newton step with the frozen Jacobian inside the likelihood's
            own simulation).

Per window (compilation excluded: each session is warmed up first): the update's wall time
and, within it, the time of the jitted steps (each step waited for). After the last window:
how far the carried session's posterior mean lies from the full one's, in posterior stds
(both sessions see the same jitter draws), and the ratio of their stds. How far the carried
start lies from the converged profile was measured by replaying a live session's particle
paths (docs/design/core.md).

Usage:
  .venv/bin/python -m bench.profiled_start [--windows 8] [--seed 1]
Last line: `RESULT profiled_start key=value ...` (seconds per window, medians).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import jax
import numpy as np

from bench import calibration
from sysid_ros.core.inference import methods
from sysid_ros.core.inference.kernels import csvgd
from sysid_ros.io import compile_cache, online, pipeline, simulation
from sysid_ros.io.window_buffer import Window

VARIANTS = ('measured', 'full', 'carried')


def timed(step, seconds: list):
    """`step` that waits for its result and adds its wall time to `seconds[-1]`."""
    def run(*args):
        start = time.perf_counter()
        out = jax.block_until_ready(step(*args))
        seconds[-1] += time.perf_counter() - start
        return out
    return run


def session(variant: str, step_seconds: list) -> online.OnlineSession:
    """An OnlineSession of the live configuration for `variant` (module doc), its steps
    timed into `step_seconds`."""
    start = 'measured' if variant == 'measured' else 'profiled'
    problem = pipeline.build_problem(calibration.live_config([('estimator.start', start)]))
    live = online.OnlineSession(problem)
    if variant == 'full':
        # The estimator the session would build, with a kernel that fits the start afresh in
        # every step.
        original = csvgd.build_kernel
        csvgd.build_kernel = functools.partial(original, carry_start=False)
        try:
            options = compile_cache.method_options(problem,
                                                   problem.config.online.iterations_per_window)
            data = live._window_data(first_trajectory(problem))
            est = methods.make_csvgd(data.target, options)
        finally:
            csvgd.build_kernel = original
        live._estimator = est._replace(step=jax.jit(est.step), posterior=jax.jit(est.posterior))
    else:
        live._start(live.particles, live._window_data(first_trajectory(problem)))
    live._estimator = live._estimator._replace(step=timed(live._estimator.step, step_seconds))
    return live


@functools.cache
def recording(windows: int, seed: int):
    """(truth (M,), Trajectory) of `windows` live windows and one more for the warm-up."""
    problem = pipeline.build_problem(calibration.live_config())
    rng = np.random.default_rng(seed)
    truth = rng.uniform(problem.spec.lower, problem.spec.upper)
    n = int(round(problem.config.online.window_length * problem.config.data.rate))
    traj = simulation.simulate(
        problem, problem.spec.to_params(truth, problem.base_params),
        duration=(windows + 1) * n / problem.config.data.rate,
        noise=problem.config.data.noise_std[0], seed=int(rng.integers(2**31)),
        torque_scale=calibration.TORQUE_SCALE)
    return truth, traj


def first_trajectory(problem):
    """The warm-up window (the recording's last) as a window Trajectory."""
    _, traj = recording(ARGS.windows, ARGS.seed)
    return online.window_trajectory(problem, window(traj, ARGS.windows))


def window(traj, w: int, n: int = 100) -> Window:
    part = slice(w * n, (w + 1) * n)
    return Window(t=traj.t[part], q=traj.q[part], qd=traj.qd[part], tau=traj.tau[part])


def main(argv=None) -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--windows', type=int, default=8)
    parser.add_argument('--seed', type=int, default=1)
    ARGS = parser.parse_args(argv)
    jax.config.update('jax_enable_x64', True)
    truth, traj = recording(ARGS.windows, ARGS.seed)
    steps = {v: [0.0] for v in VARIANTS}
    sessions = {}
    for v in VARIANTS:
        start = time.perf_counter()
        sessions[v] = session(v, steps[v])
        sessions[v].warm_up(online.window_trajectory(sessions[v].problem, window(traj, 0)))
        print(f'{v}: compiled in {time.perf_counter() - start:.1f} s', flush=True)
    update = {v: [] for v in VARIANTS}
    step = {v: [] for v in VARIANTS}
    print(f'{"window":>6}' + ''.join(f'{v + " [s]":>16}' for v in VARIANTS)
          + '   (update; jitted steps)')
    for w in range(ARGS.windows):
        row = f'{w:6d}'
        for v in VARIANTS:
            steps[v].append(0.0)
            result = sessions[v].update(window(traj, w))
            update[v].append(result.iteration_time)
            step[v].append(steps[v][-1])
            row += f'{result.iteration_time:9.3f};{steps[v][-1]:6.3f}'
        print(row, flush=True)
    summary = {}
    later = slice(1, None) if ARGS.windows > 1 else slice(None)
    for v in VARIANTS:
        summary[f'{v}_window_s'] = float(np.median(update[v][later]))
        summary[f'{v}_steps_s'] = float(np.median(step[v][later]))
    print('\nmedian over windows 1..: ' + ', '.join(
        f'{v} {summary[f"{v}_window_s"]:.3f} s ({summary[f"{v}_steps_s"]:.3f} s in steps)'
        for v in VARIANTS))
    full, carried = sessions['full'].particles, sessions['carried'].particles
    std = full.std(axis=0)
    gap = np.abs(carried.mean(axis=0) - full.mean(axis=0)) / std
    names = sessions['full'].names
    print(f'after {ARGS.windows} windows, |mean carried - mean full| / std full: '
          + ', '.join(f'{n} {g:.2f}' for n, g in zip(names, gap)))
    print('std carried / std full: ' + ', '.join(
        f'{n} {r:.2f}' for n, r in zip(names, carried.std(axis=0) / std)))
    print('truth: ' + ', '.join(f'{n} {t:.4f}' for n, t in zip(names, truth)))
    summary['mean_gap'] = float(np.max(gap))
    print('RESULT profiled_start ' + ' '.join(f'{k}={v:.4g}' for k, v in summary.items()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
