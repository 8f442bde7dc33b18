"""Inference benchmark: CSVGD speed, experiment 2 (seed Table 2) and experiment 3 (mocap box).

Prints
  (a) the speed table: wall time of one jitted CSVGD iteration, after compilation, on the
      11-parameter double pendulum of experiment 2 (300 steps, 10 shooting windows, one
      trajectory) for 64 and 256 particles, and the compile time (first call). Goal: < 50 ms
      per iteration for 64 particles on 2 CPU cores. `--devices N` (default 1) splits the
      particles over N XLA host devices, one per core (XLA runs one computation mostly on one
      core); the load average is printed beside the times, since a busy machine slows them;
  (b) experiment 2 (`experiment_pendulum11.run_experiment2`): Emcee, CEM, SGLD, NUTS and
      (C)SVGD with single- and multiple-shooting likelihoods, scored on held-out trajectories,
      beside the seed's Table 2, and the time CSVGD takes to reach its final KL;
  (c) experiment 3 (`experiment_mocap_box.run_experiment3`), unless `--skip-mocap`.
The last line is `RESULT inference key=value ...`.

Usage:
  python -m bench.inference [--quick] [--skip-mocap] [--skip-exp2] [--devices N]
                            [--cache DIR]

`--quick`: experiment 2 with 32 particles and 1000 iterations, experiment 3 with 16 particles
and 150 iterations, 10 timed iterations per speed row (about half an hour on an idle
2-core machine); without it the seed's sizes (100 particles, 2000 iterations: hours).
`--cache DIR` turns on JAX's persistent compilation cache in DIR.
"""

import argparse
import os
import time


def _parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='smaller experiments (a few minutes in all)')
    parser.add_argument('--skip-mocap', action='store_true', help='leave out experiment 3')
    parser.add_argument('--skip-exp2', action='store_true', help='leave out experiment 2')
    parser.add_argument('--devices', type=int, default=1,
                        help='XLA host (CPU) devices to split the particles over')
    parser.add_argument('--cache', default=None,
                        help='directory of a persistent JAX compilation cache (optional)')
    return parser.parse_args(argv)


ARGS = _parse_args() if __name__ == '__main__' else None
# XLA reads its flags when the CPU backend starts: set the device count before importing jax.
if ARGS is not None and ARGS.devices > 1:
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                               + f' --xla_force_host_platform_device_count={ARGS.devices}')

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bench import experiment_pendulum11 as exp2  # noqa: E402
from sysid_ros.core.inference import registry  # noqa: E402
from sysid_ros.core.inference.methods import Options, Target  # noqa: E402
from sysid_ros.core.inference.particles import sobol_particles  # noqa: E402


def _say(message):
    print(message, flush=True)


def time_csvgd_iteration(problem, num_particles: int, repeats: int = 10) -> dict:
    """Compile time and median wall time of one jitted CSVGD iteration (MS, 10 windows)."""
    target = Target(model=problem.model, base_params=problem.base, spec=problem.spec,
                    likelihood=problem.settings['ms'], actuator=exp2.ACTUATOR)
    options = Options(num_particles=num_particles, learning_rate=5e-2, iterations=repeats + 1)
    estimator = registry.make_estimator('csvgd', target, options)
    state = estimator.init(jax.random.key(0),
                           sobol_particles(problem.spec, num_particles), problem.train)
    step = jax.jit(estimator.step)
    start = time.perf_counter()
    state, _ = step(state, problem.train, None)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        state, _ = step(state, problem.train, None)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - start)
    return {'particles': num_particles, 'compile_s': compile_s,
            'median_ms': 1e3 * float(np.median(times)), 'min_ms': 1e3 * float(np.min(times)),
            'load': os.getloadavg()[0]}


def speed_table(problem, quick: bool):
    """(a): rows for 64 and 256 particles."""
    rows = [time_csvgd_iteration(problem, p, repeats=10 if quick else 30) for p in (64, 256)]
    _say(f'\n(a) CSVGD iteration, 11-parameter double pendulum, {exp2.NUM_STEPS} steps, '
         f'{exp2.NUM_WINDOWS} windows, {len(jax.devices())} XLA CPU device(s), float64')
    _say(f'{"particles":>10}{"median ms":>11}{"min ms":>9}{"compile s":>11}{"load avg":>10}')
    for row in rows:
        _say(f'{row["particles"]:>10}{row["median_ms"]:>11.1f}{row["min_ms"]:>9.1f}'
             f'{row["compile_s"]:>11.1f}{row["load"]:>10.2f}')
    _say(f'goal: < 50 ms for 64 particles on 2 cores: '
         f'{"met" if rows[0]["median_ms"] < 50.0 else "NOT met"}')
    return rows


def experiment3(quick: bool):
    """(c): run experiment 3 if its module is present; returns its summary or None."""
    try:
        from bench import experiment_mocap_box as exp3
    except ImportError as error:
        _say(f'\n(c) experiment 3 skipped: bench/experiment_mocap_box.py could not be imported '
             f'({error})')
        return None
    run = getattr(exp3, 'run_experiment3', None)
    if run is None:
        _say('\n(c) experiment 3 skipped: bench/experiment_mocap_box.py has no '
             'run_experiment3()')
        return None
    sizes = {'num_particles': 16, 'num_iterations': 150} if quick else {}
    _say(f'\n(c) experiment 3 (mocap box, CSVGD) {sizes or "default sizes"}')
    _, summary = run(**sizes)
    _say(str(summary))
    return summary


def main(args):
    jax.config.update('jax_enable_x64', True)
    if args.cache:
        jax.config.update('jax_compilation_cache_dir', args.cache)
        jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
    start = time.perf_counter()
    result = {}
    problem = exp2.make_problem()

    speed = speed_table(problem, args.quick)
    result['csvgd_ms_iter_64'] = round(speed[0]['median_ms'], 1)
    result['csvgd_ms_iter_256'] = round(speed[1]['median_ms'], 1)
    result['csvgd_compile_s_64'] = round(speed[0]['compile_s'], 1)
    result['csvgd_compile_s_256'] = round(speed[1]['compile_s'], 1)
    result['devices'] = len(jax.devices())

    if not args.skip_exp2:
        _say(f'\n(b) experiment 2 ({"quick" if args.quick else "full"} size)')
        rows, summary = exp2.run_experiment2(args.quick, problem=problem, progress=_say)
        _say('')
        _say(exp2.format_table(rows))
        _say(f'CSVGD reached its final KL(real||sim) (within 5 % of its decrease) after '
             f'{summary["csvgd_iterations_to_final_kl"]} iterations, '
             f'{summary["csvgd_time_to_final_kl_s"]:.1f} s (run time, no compilation); '
             f'KL curve {summary["csvgd_kl_curve"]}')
        for key in ('kl_real_sim', 'kl_sim_real', 'mmd'):
            result[f'exp2_csvgd_{key}'] = round(summary[f'csvgd_{key}'], 4)
            result[f'exp2_best_baseline_{key}'] = round(summary[f'best_baseline_{key}'], 4)
            result[f'exp2_best_baseline_{key}_method'] = summary[f'best_baseline_{key}_method']
        result['csvgd_best_kl'] = str(summary['csvgd_best_kl']).lower()
        result['csvgd_best_mmd'] = str(summary['csvgd_best_mmd']).lower()
        result['csvgd_time_to_final_kl_s'] = round(summary['csvgd_time_to_final_kl_s'], 1)
        result['exp2_particles'] = summary['num_particles']
        result['exp2_iterations'] = summary['num_iterations']

    if not args.skip_mocap:
        summary3 = experiment3(args.quick)
        if summary3 is not None:
            for key in ('near_truth', 'near_swapped', 'elsewhere', 'iteration_ms'):
                if key in summary3:
                    result[f'exp3_{key}'] = summary3[key]
    result['total_s'] = round(time.perf_counter() - start, 1)
    print('RESULT inference ' + ' '.join(f'{k}={v}' for k, v in result.items()), flush=True)
    return result


if __name__ == '__main__':
    main(ARGS)
