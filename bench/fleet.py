"""Fleet bench: `sysid fleet` on a simulated fleet of double pendulums, on 1 and 2 local Ray
workers, and the fleet posterior against the robots' known truths.

The fleet: ROBOTS robots x DATES dates of one model (`config/double_pendulum.yaml`'s
double pendulum, link masses and joint dampings identified by lm on the equation error).
Each robot's truth is drawn around the nominal model (masses +-3 %, dampings +-10 %, one std)
and set as the fit's parameters (a link's mass with its inertia about its centre kept);
robot 0's link2 mass is 20 % heavier (the planted outlier). Half the robots record 5 s a day,
the other half 30 s, all with the same noise.

  * speed: the same fits with `--force` on 1 worker, then on 2, sharing one compilation cache
    warmed by a first fit: `speedup_2w` is the ratio of the two walls; `overhead_pct` is what
    the 1-worker run took beyond its fits' own walls (`fleet_task.json`), Ray's start and the
    command's fixed cost (the wall of the resume run, which fits nothing), in % of the fits'
    walls: Ray's cost per task;
  * resume: the 2-worker run again without `--force`: `resumed_ok=1` when it refits nothing;
  * fleet posterior (`fleet.yaml`, each robot's latest date): `short_err_ratio` is the short
    robots' mean absolute error with the fleet prior over that without it, `short_cov90` the
    coverage of their 90 % intervals with it, `outlier_flagged` whether robot 0's link2 mass
    is flagged and `false_flags` the flags on every other robot and parameter.

The last line is `RESULT fleet speedup_2w=… overhead_pct=… short_err_ratio=… short_cov90=…
outlier_flagged=0|1 false_flags=… resumed_ok=0|1`.

Usage:
  python -m bench.fleet [--quick] [--robots N] [--dates D]

`--quick`: 16 robots x 2 dates (32 fits per run); without it 32 x 3.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOMINAL = {'m1': 1.0, 'm2': 1.0, 'damping': [0.15, 0.08]}
NAMES = ('link1.mass', 'link2.mass', 'joint1.damping', 'joint2.damping')
SPREAD = {'mass': 0.03, 'damping': 0.10}        # fleet spread, relative [-]
OUTLIER = 1.2                                   # robot 0's link2 mass, times its draw
SHORT, LONG = 5.0, 30.0                         # [s] recording per date
NOISE = 0.002
Z90 = 1.6448536269514722
FIT_CONFIG = {'/**': {'ros__parameters': {
    'model': {'builder': 'double_pendulum', 'builder_args': NOMINAL,
              'joints': ['joint1', 'joint2'], 'actuator': 'viscous'},
    'parameters': {'link1': {'mass': {'min': 0.5, 'max': 2.0}},
                   'link2': {'mass': {'min': 0.5, 'max': 2.0}},
                   'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
                   'joint2': {'damping': {'min': 0.0, 'max': 0.5}}},
    'data': {'rate': 100.0},
    'estimator': {'residual': 'equation_error'},
}}}


def truths(robots: int, seed: int = 0) -> np.ndarray:
    """(robots, 4) true link masses [kg] and dampings [N m s/rad] in `NAMES` order."""
    rng = np.random.default_rng(seed)
    base = np.array([NOMINAL['m1'], NOMINAL['m2'], *NOMINAL['damping']])
    spread = np.array([SPREAD['mass']] * 2 + [SPREAD['damping']] * 2)
    values = base * (1.0 + spread * rng.normal(size=(robots, 4)))
    values[0, 1] *= OUTLIER
    return values


def make_fleet(folder: pathlib.Path, robots: int, dates: int) -> tuple[pathlib.Path, np.ndarray]:
    """Simulated recordings, the model's config and the manifest; returns (manifest, truths).
    Each truth is written into the fitted model as its parameters mean it
    (`ParameterSpec.to_params`: a link's mass with its centre and inertia about it kept), so
    that every truth lies inside the family the fits search."""
    from sysid_ros.io import config as config_io
    from sysid_ros.io import pipeline, trajectory

    truth = truths(robots)
    config = folder / 'double_pendulum_fleet.yaml'
    config.write_text(yaml.safe_dump(FIT_CONFIG))
    problem = pipeline.build_problem(config_io.load_yaml(str(config)))
    order = [problem.spec.index(name) for name in NAMES]
    fits = []
    for i in range(robots):
        robot = f'dp{i:02d}'
        theta = np.empty(len(NAMES))
        theta[order] = truth[i]
        params = problem.spec.to_params(theta, problem.base_params)
        for d in range(dates):
            data = folder / f'{robot}_day{d}.npz'
            trajectory.save_trajectory(str(data), pipeline.simulate(
                problem, params, duration=SHORT if i % 2 else LONG, noise=NOISE,
                seed=1000 * i + d))
            fits.append({'robot': robot, 'model': 'dp', 'date': f'day{d}', 'data': [data.name]})
    manifest = folder / 'fleet.yaml'
    manifest.write_text(yaml.safe_dump({'models': {'dp': config.name}, 'fits': fits}))
    return manifest, truth


def run_fleet(manifest, out, workers: int, cache, force: bool) -> tuple[float, str]:
    """(wall [s], output) of one `sysid fleet` process."""
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache), RAY_USAGE_STATS_ENABLED='0',
               PYTHONPATH=str(REPO_ROOT))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, '-m', 'sysid_ros.cli', 'fleet', '--manifest',
                           str(manifest), '--out', str(out), '--workers', str(workers),
                           *(['--force'] if force else [])], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):
        raise RuntimeError(f'sysid fleet exit {done.returncode}:\n{done.stdout[-3000:]}'
                           f'{done.stderr[-3000:]}')
    return wall, done.stdout + done.stderr


def _task_walls(out: pathlib.Path) -> list[float]:
    return [json.loads(p.read_text())['wall_s'] for p in out.rglob('fleet_task.json')]


def ray_start_s() -> float:
    """Wall of starting and stopping a local 1-worker Ray instance [s]."""
    code = ('import os, time; os.environ["RAY_USAGE_STATS_ENABLED"] = "0"; import ray; '
            't = time.perf_counter(); ray.init(num_cpus=1, include_dashboard=False, '
            '_node_ip_address="127.0.0.1", log_to_driver=False); '
            'ray.get(ray.remote(lambda: 1).remote()); ray.shutdown(); '
            'print(time.perf_counter() - t)')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          check=True, env=dict(os.environ, RAY_USAGE_STATS_ENABLED='0'))
    return float(done.stdout.strip().splitlines()[-1])


def score(out: pathlib.Path, truth: np.ndarray) -> dict:
    """The fleet posterior against the truths (module doc)."""
    model = yaml.safe_load((out / 'fleet.yaml').read_text())['models']['dp']
    robots = sorted(model['robots'])
    own = np.array([[model['robots'][r]['own'][n] for n in NAMES] for r in robots])
    with_fleet = np.array([[model['robots'][r]['fleet'][n] for n in NAMES] for r in robots])
    short = np.arange(len(robots)) % 2 == 1
    own_err = np.abs(own[short, :, 0] - truth[short])
    fleet_err = np.abs(with_fleet[short, :, 0] - truth[short])
    inside = fleet_err <= Z90 * with_fleet[short, :, 1]
    own_inside = own_err <= Z90 * own[short, :, 1]
    flags = {(r, n) for r in robots for n in model['robots'][r]['flagged']}
    return {'short_err_ratio': float(fleet_err.mean() / own_err.mean()),
            'short_cov90': float(inside.mean()), 'short_own_cov90': float(own_inside.mean()),
            'outlier_flagged': int((robots[0], 'link2.mass') in flags),
            'false_flags': len(flags - {(robots[0], 'link2.mass')}),
            'spread': {n: model['fleet'][n]['spread'] for n in NAMES},
            'per_param_ratio': (fleet_err.mean(0) / own_err.mean(0)).round(3).tolist()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--robots', type=int, default=None)
    parser.add_argument('--dates', type=int, default=None)
    args = parser.parse_args(argv)
    jax.config.update('jax_enable_x64', True)
    robots = args.robots or (16 if args.quick else 32)
    dates = args.dates or (2 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix='sysid_fleet_') as tmp:
        folder = pathlib.Path(tmp)
        manifest, truth = make_fleet(folder, robots, dates)
        cache = folder / 'jax_cache'
        print(f'{robots} robots x {dates} dates: {robots * dates} fits per run')
        warm, _ = run_fleet(_single(manifest), folder / 'warm', 1, cache, True)
        print(f'cache warm-up (1 fit): {warm:.1f} s')
        start_s = ray_start_s()
        one, _ = run_fleet(manifest, folder / 'w1', 1, cache, True)
        fits_one = _task_walls(folder / 'w1')
        two, _ = run_fleet(manifest, folder / 'w2', 2, cache, True)
        fits_two = _task_walls(folder / 'w2')
        again, output = run_fleet(manifest, folder / 'w2', 2, cache, False)
        resumed = int(f'{robots * dates} already done from the same inputs' in output)
        # Beyond the fits: Ray's start, and the command's own fixed cost (imports, hashing the
        # inputs, the fleet posterior and report), which the resume run is made of.
        overhead = (one - start_s - again - sum(fits_one)) / sum(fits_one) * 100.0
        s = score(folder / 'w2', truth)
    print('\nworkers  wall s  fits  mean fit s  sum of fits s')
    print(f'{1:7d}  {one:6.1f}  {len(fits_one):4d}  {np.mean(fits_one):10.2f}  '
          f'{sum(fits_one):13.1f}')
    print(f'{2:7d}  {two:6.1f}  {len(fits_two):4d}  {np.mean(fits_two):10.2f}  '
          f'{sum(fits_two):13.1f}')
    print(f'Ray start and stop: {start_s:.1f} s; resume run (nothing to fit): {again:.1f} s')
    print('fleet spread: ' + ', '.join(f'{n} {v:.3g}' for n, v in s['spread'].items()))
    print(f'short robots: error ratio per parameter {s["per_param_ratio"]}; 90 % coverage '
          f'own {s["short_own_cov90"]:.2f}, with the fleet {s["short_cov90"]:.2f}')
    print(f'RESULT fleet speedup_2w={one / two:.2f} overhead_pct={overhead:.1f} '
          f'short_err_ratio={s["short_err_ratio"]:.2f} short_cov90={s["short_cov90"]:.2f} '
          f'outlier_flagged={s["outlier_flagged"]} false_flags={s["false_flags"]} '
          f'resumed_ok={resumed}')
    return 0


def _single(manifest: pathlib.Path) -> pathlib.Path:
    """A manifest of the first fit only (the compilation cache's warm-up)."""
    content = yaml.safe_load(manifest.read_text())
    path = manifest.with_name('warm.yaml')
    path.write_text(yaml.safe_dump({**content, 'fits': content['fits'][:1]}))
    return path


if __name__ == '__main__':
    sys.exit(main())
