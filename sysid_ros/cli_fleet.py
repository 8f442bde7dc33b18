"""`sysid fleet`: every fit of a manifest (`io.fleet_manifest`) as a task on Ray, then the
fleet posterior and report (`io.fleet_posterior`).

Each task is `sysid fit` itself (`cli.main`, handed in by `cli`) in a Ray worker process,
writing `<out>/<model>/<robot>/<date>` (`results.write_results` swaps the folder in whole), then
`fleet_task.json` into it (the inputs' hash and stamp, taken by the task before it fits, the
exit status, the wall time): a killed or failed task never leaves a half-written results
folder, and a second run skips every fit whose results were written from the same inputs
(`fleet_manifest.is_done`: by the files' sizes and times, reading them only where those
changed). Ray retries a task whose worker died
(`--retries`). Ray runs locally by default, with one worker per core (`--workers`) on
127.0.0.1 only; `--address` (or `RAY_ADDRESS`) joins a cluster. Workers share one persistent
compilation cache (`JAX_COMPILATION_CACHE_DIR`, default `<out>/.jax_cache`: on a cluster, a
shared folder), so the fits of one robot model compile once, and a worker keeps the programs
of its last fit in memory for the next. Ray's usage statistics are switched off.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import sys
import time
from typing import Callable

__all__ = ['run_task', 'cmd_fleet', 'add_parser']

# A fit's exit status that still wrote results: 0 converged, 3 not converged (cli).
_WROTE_RESULTS = (0, 3)


def _driver_alive(driver: tuple[str, int]) -> bool:
    """Whether the `sysid fleet` process (host name, pid) still runs; True on another host,
    where it cannot be seen."""
    host, pid = driver
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def run_task(fit_main: Callable[[list[str]], int], fit, extra: list[str], out: str,
             driver: tuple[str, int]) -> dict:
    """One fleet task: the inputs' hash and stamp of `fit` (a `FleetFit`), then
    `fit_main([*fit.arguments(), *extra, '--out', out])` (`sysid fit`, which swaps its results
    folder in whole), then `fleet_task.json` written into it (atomically) when the fit wrote
    results; returns its record. A task of a `sysid fleet` that is gone (`driver`: its host
    name and pid; killed, its workers left behind) does not start."""
    from sysid_ros.io import fleet_manifest
    from sysid_ros.io.posterior_files import write_atomic

    if not _driver_alive(driver):
        return {'exit': None, 'skipped': 'sysid fleet is gone'}
    record = fleet_manifest.input_record(fit, extra)
    start = time.perf_counter()
    arguments = [*fit.arguments(), *extra]
    code = fit_main([*arguments, '--out', out])
    record.update({'exit': code, 'wall_s': round(time.perf_counter() - start, 3),
                   'worker_pid': os.getpid(), 'arguments': arguments})
    if code in _WROTE_RESULTS:
        text = json.dumps(record, indent=1).encode()
        write_atomic(os.path.join(out, fleet_manifest.TASK_FILE), lambda f: f.write(text))
    return record


def _start_ray(workers: int | None, address: str | None, cache: str):
    os.environ.setdefault('RAY_USAGE_STATS_ENABLED', '0')
    try:
        import ray
    except ImportError:
        from sysid_ros.io.errors import InputError
        raise InputError("sysid fleet runs its fits on Ray: pip install 'ray>=2.40' (or "
                         "this package's [fleet] extra)") from None

    env = {'JAX_COMPILATION_CACHE_DIR': cache, 'RAY_USAGE_STATS_ENABLED': '0',
           'PYTHONPATH': os.pathsep.join(filter(None, [
               str(pathlib.Path(__file__).resolve().parents[1]), os.environ.get('PYTHONPATH')]))}
    for key in ('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', 'XLA_FLAGS'):
        if key in os.environ:
            env[key] = os.environ[key]
    address = address or os.environ.get('RAY_ADDRESS')
    if address:
        ray.init(address=address, runtime_env={'env_vars': env}, log_to_driver=False)
    else:
        ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False,
                 _node_ip_address='127.0.0.1', runtime_env={'env_vars': env},
                 log_to_driver=False)
    return ray


def _progress(done: int, running: int, failed: int, total: int, started: float) -> str:
    elapsed = time.monotonic() - started
    finished = done + failed
    eta = (f'{elapsed / finished * (total - finished):.0f} s' if finished else '?')
    return (f'sysid fleet: {done} done, {running} running, {failed} failed of {total}; '
            f'{elapsed:.0f} s, ETA {eta}')


def cmd_fleet(args, fit_main: Callable[[list[str]], int]) -> int:
    """Run the manifest's fits (module doc) with `fit_main` (`cli.main`: each fit is `sysid
    fit`); exit 0 when every fit ran and converged, 3 when one did not converge, 1 when a fit
    failed, 2 for manifest entries that could not run."""
    import yaml

    from sysid_ros.io import fleet_manifest, fleet_posterior, posterior_files
    from sysid_ros.io.errors import InputError

    if args.workers is not None and args.workers < 1:
        raise InputError(f'--workers: expected at least 1, got {args.workers}')
    if args.retries < 0 or args.gpus_per_task < 0:
        raise InputError('--retries and --gpus-per-task: expected numbers >= 0')
    manifest = fleet_manifest.read_manifest(args.manifest)
    for line in manifest.problems:
        print(f'sysid fleet: skipped: {line}', file=sys.stderr)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    extra = ['--method', args.method] if args.method else []
    status: dict[str, str] = {}
    todo = []
    for fit in manifest.fits:
        folder = out / fit.key
        if not args.force and fleet_manifest.is_done(folder, fit, extra):
            status[fit.key] = 'skipped'
        else:
            folder.parent.mkdir(parents=True, exist_ok=True)
            todo.append((fit, str(folder)))
    print(f'sysid fleet: {len(manifest.fits)} fits, {len(status)} already done from the same '
          f'inputs, {len(todo)} to run', flush=True)
    codes = {}
    if todo:
        cache = os.environ.get('JAX_COMPILATION_CACHE_DIR') or str(out / '.jax_cache')
        ray = _start_ray(args.workers, args.address, cache)
        try:
            task = ray.remote(num_cpus=1, num_gpus=args.gpus_per_task,
                              max_retries=args.retries)(run_task)
            driver = (socket.gethostname(), os.getpid())
            pending = {task.remote(fit_main, fit, extra, folder, driver): fit
                       for fit, folder in todo}
            started, failed = time.monotonic(), 0
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=10.0)
                for ref in ready:
                    fit = pending.pop(ref)
                    try:
                        record = ray.get(ref)
                        codes[fit.key] = record['exit']
                        status[fit.key] = ('done' if record['exit'] in _WROTE_RESULTS
                                           else f'failed: sysid fit exit {record["exit"]}')
                    except ray.exceptions.RayError as exc:
                        status[fit.key] = f'failed: {type(exc).__name__}'
                    failed += status[fit.key].startswith('failed')
                done = len(todo) - len(pending) - failed
                print(_progress(done, min(len(pending), args.workers or os.cpu_count()),
                                failed, len(todo), started), flush=True)
        finally:
            ray.shutdown()
    summary = fleet_posterior.fleet_summary(out, manifest.fits)
    text = yaml.safe_dump({'fits': status, 'models': summary}, sort_keys=False).encode()
    posterior_files.write_atomic(str(out / 'fleet.yaml'), lambda f: f.write(text))
    report = fleet_posterior.write_report(out, summary, status)
    for model, content in summary.items():
        for robot, row in content['robots'].items():
            if row.get('flagged'):
                print(f'sysid fleet: {model}/{robot} lies outside its siblings in '
                      f'{", ".join(row["flagged"])}', file=sys.stderr)
    print(f'sysid fleet: results in {out}, report {report}')
    if any(v.startswith('failed') for v in status.values()):
        return 1
    if manifest.problems:
        return 2
    return 3 if any(c == 3 for c in codes.values()) else 0


def add_parser(sub, func: Callable) -> None:
    """The `fleet` subcommand of `sysid`, run by `func(args)`."""
    p = sub.add_parser('fleet', help='run every fit of a manifest on Ray (local or a '
                       'cluster), resumable, then the fleet posterior and report')
    p.add_argument('--manifest', required=True, help='fleet manifest (YAML or CSV; see '
                   'sysid_ros.io.fleet_manifest)')
    p.add_argument('--out', required=True, metavar='DIR', help='results folder of the fleet')
    p.add_argument('--workers', type=int, default=None,
                   help='local Ray workers (default: one per core)')
    p.add_argument('--address', default=None, help='a Ray cluster (default: RAY_ADDRESS, '
                   'else a local one)')
    p.add_argument('--gpus-per-task', type=float, default=0.0,
                   help='GPUs each fit asks Ray for (default 0)')
    p.add_argument('--retries', type=int, default=2,
                   help='reruns of a task whose worker died (default 2)')
    p.add_argument('--method', default=None, help="every fit's estimator (default: each "
                   "config's estimator.method)")
    p.add_argument('--force', action='store_true', help='refit fits whose results exist')
    p.set_defaults(func=func)
