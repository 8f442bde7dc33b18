"""Offline speed: bag read + resample throughput, and an end-to-end `sysid fit --bag`.

Prints
  (a) bag reading: a generated recording of a 7-DOF arm's joint states at 1 kHz (one hour,
      about 3.6 M messages, as 60 one-minute runs; `--quick`: 3 minutes) in a temporary
      folder, written with `io.bag_writer.write_trajectory_bag`, then read and resampled to 1 kHz
      by `io.bags.read_bag` in a child process: wall time, messages per second and the child's
      peak resident memory (goal: under 2 minutes and 2 GB on 2 cores), per storage;
  (b) the wall time of `sysid fit --bag` with CSVGD (256 particles, the iterations of
      `config/double_pendulum_csvgd.yaml`; `--quick`: 32 particles, 50 iterations) on a
      simulated double-pendulum recording (three 2 s runs, one held out), compilation and
      result files included.
The last line is `RESULT offline key=value ...`.

Usage:
  python -m bench.offline [--quick] [--storage sqlite3|mcap|both] [--skip-fit] [--skip-read]
"""

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

JOINTS = tuple(f'panda_joint{i}' for i in range(1, 8))
RATE = 1000.0
RUN_SECONDS = 60


class _Runs:
    """One-minute runs of smooth joint motion, generated on access (bounded memory)."""

    def __init__(self, num: int):
        self.num = num

    def __len__(self):
        return self.num

    def __getitem__(self, k):
        from sysid_ros.io.trajectory import Trajectory
        if not 0 <= k < self.num:
            raise IndexError(k)
        rng = np.random.default_rng(k)
        t = k * (RUN_SECONDS + 3.0) + np.arange(int(RUN_SECONDS * RATE)) / RATE
        phase = rng.uniform(0.0, 2.0 * np.pi, len(JOINTS))
        arg = 0.7 * t[:, None] + phase
        return Trajectory(t=t, q=np.sin(arg), qd=0.7 * np.cos(arg), tau=5.0 * np.sin(2 * arg),
                          joint_names=JOINTS)


def _read_child(path: str) -> None:
    """Child process: read the bag, print JSON with the figures."""
    from sysid_ros.io import bags
    from sysid_ros.io.config import DataConfig

    start = time.perf_counter()
    segments = bags.read_bag(path, JOINTS, DataConfig(rate=RATE))
    wall = time.perf_counter() - start
    print(json.dumps({'wall_s': wall, 'trajectories': len(segments),
                      'samples': sum(s.trajectory.num_samples for s in segments)}))


def bag_throughput(root: pathlib.Path, storage: str, minutes: int) -> dict:
    from sysid_ros.io import bag_writer

    path = root / f'arm_{storage}'
    start = time.perf_counter()
    bag_writer.write_trajectory_bag(path, _Runs(minutes), storage=storage)
    write_s = time.perf_counter() - start
    messages = int(minutes * RUN_SECONDS * RATE)
    size = sum(f.stat().st_size for f in path.iterdir())
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([sys.executable, __file__, '--read-child', str(path)], check=True,
                          capture_output=True, text=True)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return {'storage': storage, 'messages': messages, 'size_mb': size / 1e6, 'write_s': write_s,
            'read_s': figures['wall_s'], 'msgs_per_s': messages / figures['wall_s'],
            'peak_mb': max(peak_kb, before) / 1024.0, 'trajectories': figures['trajectories'],
            'samples': figures['samples']}


def fit_wall_time(root: pathlib.Path, quick: bool) -> dict:
    import jax
    jax.config.update('jax_enable_x64', True)
    import yaml

    from sysid_ros import cli
    from sysid_ros.io import bag_writer, config as config_io, pipeline

    cfg = yaml.safe_load((REPO / 'config' / 'double_pendulum_csvgd.yaml').read_text())
    params = cfg['/**']['ros__parameters']
    params['data']['holdout'] = 0.34
    config = root / 'dp.yaml'
    config.write_text(yaml.safe_dump(cfg))
    problem = pipeline.build_problem(config_io.load_yaml(config))
    runs = [pipeline.simulate(problem, duration=2.0, noise=0.002, seed=s) for s in range(3)]
    bag_writer.write_trajectory_bag(root / 'dp_bag', runs, storage='mcap')
    particles = 32 if quick else 256
    iterations = 50 if quick else params['estimator']['iterations']
    start = time.perf_counter()
    code = cli.main(['fit', '--config', str(config), '--bag', str(root / 'dp_bag'),
                     '--out', str(root / 'fit'), '--particles', str(particles),
                     '--iterations', str(iterations)])
    wall = time.perf_counter() - start
    metrics = json.loads((root / 'fit' / 'metrics.json').read_text())
    return {'particles': particles, 'iterations': iterations, 'fit_s': wall, 'exit_code': code,
            'heldout_nmse': metrics['nmse']}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='3-minute bag, smaller fit')
    parser.add_argument('--storage', choices=('sqlite3', 'mcap', 'both'), default='both')
    parser.add_argument('--skip-fit', action='store_true', help='leave out (b)')
    parser.add_argument('--skip-read', action='store_true', help='leave out (a)')
    parser.add_argument('--read-child', metavar='BAG', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.read_child:
        _read_child(args.read_child)
        return 0
    minutes = 3 if args.quick else 60
    storages = ('sqlite3', 'mcap') if args.storage == 'both' else (args.storage,)
    result = {}
    with tempfile.TemporaryDirectory(prefix='sysid_offline_') as tmp:
        root = pathlib.Path(tmp)
        if not args.skip_read:
            print(f'(a) {minutes} min of 7-DOF joint states at {RATE:g} Hz, read and resampled '
                  f'to {RATE:g} Hz (load average {os.getloadavg()[0]:.1f})', flush=True)
            header = (f'{"storage":8s} {"messages":>9s} {"MB":>6s} {"write s":>8s} '
                      f'{"read s":>7s} {"msgs/s":>9s} {"peak MB":>8s} {"runs":>5s}')
            print(header)
            for storage in storages:
                row = bag_throughput(root, storage, minutes)
                print(f'{storage:8s} {row["messages"]:9d} {row["size_mb"]:6.0f} '
                      f'{row["write_s"]:8.1f} {row["read_s"]:7.1f} {row["msgs_per_s"]:9.0f} '
                      f'{row["peak_mb"]:8.0f} {row["trajectories"]:5d}', flush=True)
                result[f'{storage}_read_s'] = round(row['read_s'], 1)
                result[f'{storage}_msgs_per_s'] = int(row['msgs_per_s'])
                result[f'{storage}_peak_mb'] = int(row['peak_mb'])
                shutil.rmtree(root / f'arm_{storage}')     # free the disk for the next one
            result['messages'] = int(minutes * RUN_SECONDS * RATE)
        if not args.skip_fit:
            print('\n(b) sysid fit --bag, CSVGD, double pendulum (3 runs of 2 s, 1 held out)',
                  flush=True)
            fit = fit_wall_time(root, args.quick)
            print(f'particles {fit["particles"]}  iterations {fit["iterations"]}  wall '
                  f'{fit["fit_s"]:.1f} s  held-out NMSE {fit["heldout_nmse"]:.3g}')
            result.update(fit_particles=fit['particles'], fit_iterations=fit['iterations'],
                          fit_s=round(fit['fit_s'], 1))
    print('RESULT offline ' + ' '.join(f'{k}={v}' for k, v in result.items()), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
