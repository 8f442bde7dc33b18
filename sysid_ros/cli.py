"""The `sysid` command line: `sysid verify`, `sysid fit`, `sysid simulate`, `sysid demo`."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

# Subcommand modules import JAX lazily so `sysid --help` stays fast; float64 is switched on
# here, at the entry point, never inside the core.


def _enable_x64():
    import jax
    jax.config.update('jax_enable_x64', True)
    # Compiled programs are cached on disk, so a second `sysid fit` / `sysid demo` of the same
    # problem starts at once. JAX_COMPILATION_CACHE_DIR (or an empty value to disable) wins.
    cache = os.environ.get('JAX_COMPILATION_CACHE_DIR',
                           os.path.join(os.path.expanduser('~'), '.cache', 'sysid_ros', 'jax'))
    if cache:
        jax.config.update('jax_compilation_cache_dir', cache)
        jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)


def _cmd_verify(args) -> int:
    from sysid_ros.core import builders
    from sysid_ros.io import model_io, verify

    if args.urdf:
        pmodel = model_io.load_pinocchio(args.urdf, keep_joints=args.joints)
        model, params = model_io.from_pinocchio(pmodel)
        targets = [(model, params, pmodel)]
    else:
        names = sorted(builders.BUILDERS) if args.builder == 'all' else [args.builder]
        targets = [(*builders.BUILDERS[n](**({'num_links': 4} if n == 'chain' else {})), None)
                   for n in names]
    ok = True
    for model, params, pmodel in targets:
        report = verify.verify(model, params, pmodel, num_samples=args.samples, seed=args.seed)
        print(report.table())
        ok &= report.passed
    print('PASSED' if ok else f'FAILED: an error exceeds {verify.TOLERANCE:g}')
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------
# fit
# ------------------------------------------------------------------------------------------

class _Progress:
    """Progress line on stderr: iteration, loss, elapsed time and ETA.

    On a terminal the line is redrawn in place (at most every `interval` seconds); otherwise
    a line is printed about every 10 % of the iterations. The ETA leaves out the first step,
    which includes compilation.
    """

    def __init__(self, label: str, stream=None, interval: float = 0.2):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.tty = bool(getattr(self.stream, 'isatty', lambda: False)())
        self.first = None
        self.last_draw = -1.0
        self.last_decile = -1
        self.drawn = False

    def __call__(self, iteration: int, total: int, loss: float, elapsed: float) -> None:
        if self.first is None or iteration == 1:
            self.first = (iteration, elapsed)
        done, t0 = self.first
        eta = ((elapsed - t0) / (iteration - done) * (total - iteration)
               if iteration > done else float('nan'))
        line = (f'{self.label}: iteration {iteration}/{total}  loss {loss:.4e}  '
                f'elapsed {elapsed:6.1f} s  ETA {eta:6.1f} s')
        if self.tty:
            now = time.monotonic()
            if now - self.last_draw >= self.interval or iteration == total:
                self.stream.write('\r' + line + '\033[K')
                self.stream.flush()
                self.last_draw = now
                self.drawn = True
        else:
            decile = (10 * iteration) // max(total, 1)
            if decile != self.last_decile or iteration == total:
                self.stream.write(line + '\n')
                self.stream.flush()
                self.last_decile = decile

    def close(self) -> None:
        if self.tty and self.drawn:
            self.stream.write('\n')
            self.stream.flush()
            self.drawn = False


def _format_table(headers, rows) -> str:
    """Plain-text table, first column left-aligned, others right-aligned."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append('  '.join(parts))
        if k == 0:
            lines.append('  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def _estimate_table(result) -> str:
    rows = [(name, f'{result.initial[:, k].mean():.6g}', f'{result.mean[k]:.6g}',
             f'{result.std[k]:.3g}', f'[{result.lower[k]:g}, {result.upper[k]:g}]')
            for k, name in enumerate(result.names)]
    return _format_table(('parameter', 'initial', 'estimate', 'std', 'bounds'), rows)


def _cmd_fit(args) -> int:
    from sysid_ros.io import config as config_io
    from sysid_ros.io import pipeline, results

    cfg = config_io.load_yaml(args.config)
    problem = pipeline.build_problem(cfg)
    trajectories = pipeline.prepare_trajectories(problem, args.data)   # bad data: fail early
    method = args.method or cfg.estimator.method
    progress = _Progress(f'sysid fit [{method}]')
    try:
        result = pipeline.fit(problem, trajectories, progress=progress, method=method,
                              iterations=args.iterations)
    finally:
        progress.close()
    extra = {'config': os.path.abspath(args.config),
             'data': [os.path.abspath(p) for p in args.data]}
    out = results.write_results(args.out, result, extra=extra,
                                urdf=pipeline.identified_urdf(problem, result.mean))
    print(_estimate_table(result))
    print(f'{method}: {result.iterations} iterations, final loss {result.final_loss:.4e}, '
          f'{result.wall_time:.1f} s; consistent: {bool(result.consistent.all())}; '
          f'results in {out}')
    if result.interrupted:
        print(f'sysid fit: interrupted; wrote the best result so far to {out}',
              file=sys.stderr)
        return 130
    return 0


# ------------------------------------------------------------------------------------------
# simulate
# ------------------------------------------------------------------------------------------

def _cmd_simulate(args) -> int:
    from sysid_ros.io import config as config_io
    from sysid_ros.io import pipeline, trajectory

    problem = pipeline.build_problem(config_io.load_yaml(args.config))
    traj = pipeline.simulate(problem, duration=args.duration, noise=args.noise, seed=args.seed)
    if os.path.dirname(os.path.abspath(args.out)):
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    trajectory.save_trajectory(args.out, traj)
    print(f'{args.out}: {traj.num_samples} samples at {1.0 / problem.dt:g} Hz of '
          f'{problem.model.name} ({", ".join(problem.model.joint_names)}), noise std '
          f'{args.noise:g}, seed {args.seed}')
    return 0


# ------------------------------------------------------------------------------------------
# demo
# ------------------------------------------------------------------------------------------

DEMO_CONFIG = 'double_pendulum.yaml'
# Hidden truth of the demo: the nominal double pendulum with these changes.
DEMO_TRUTH = {'link2.com.x': 0.04, 'joint1.damping': 0.15, 'joint2.damping': 0.08}
# Initial guess: the truth times these factors, the inverse factor for every second parameter
# of the same attribute (plus offsets, for values that may be 0).
DEMO_SCALE = {'mass': 1.3, 'inertia.iyy': 1.25, 'damping': 2.0}
DEMO_OFFSET = {'com.x': -0.06}


def _packaged_config(name: str) -> str:
    """Path of a config file shipped with the package (source checkout or install)."""
    candidates = [pathlib.Path(__file__).resolve().parent.parent / 'config' / name,
                  pathlib.Path(sys.prefix) / 'share' / 'sysid_ros' / 'config' / name]
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.append(pathlib.Path(get_package_share_directory('sysid_ros')) / 'config'
                          / name)
    except Exception:           # no ROS install: the other candidates
        pass
    for path in candidates:
        if path.is_file():
            return str(path)
    from sysid_ros.io.errors import InputError
    raise InputError(f'{name}: packaged config not found (looked in '
                     f'{", ".join(str(p) for p in candidates)})')


def _demo_guess(spec, theta_true):
    """The perturbed initial guess of the demo, clipped into the bounds."""
    import numpy as np

    guess = np.array(theta_true, dtype=float)
    seen: dict = {}
    for k, attribute in enumerate(spec.attributes):
        scale = DEMO_SCALE.get(attribute, 1.0)
        count = seen[attribute] = seen.get(attribute, -1) + 1
        guess[k] = guess[k] * (scale if count % 2 == 0 else 1.0 / scale)
        guess[k] += DEMO_OFFSET.get(attribute, 0.0)
    return np.clip(guess, spec.lower_bounds, spec.upper_bounds)


def _cmd_demo(args) -> int:
    import dataclasses

    import jax.numpy as jnp
    import numpy as np

    from sysid_ros.io import config as config_io
    from sysid_ros.io import pipeline, results, trajectory

    started = time.perf_counter()
    config_path = args.config or _packaged_config(DEMO_CONFIG)
    cfg = config_io.load_yaml(config_path)
    if args.iterations is not None:
        cfg = dataclasses.replace(cfg, estimator=dataclasses.replace(
            cfg.estimator, iterations=args.iterations))
    problem = pipeline.build_problem(cfg)
    spec = problem.spec
    nominal = np.asarray(spec.from_params(problem.base_params))
    theta_true = nominal.copy()
    for name, value in DEMO_TRUTH.items():
        if name in spec.names:
            theta_true[spec.index(name)] = value
    true_params = spec.to_params(jnp.asarray(theta_true), problem.base_params)
    theta_guess = _demo_guess(spec, theta_true)
    # The estimators only see the guess: the base model of the fit is the guessed model.
    guessed = dataclasses.replace(
        problem, base_params=spec.to_params(jnp.asarray(theta_guess), true_params))

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    print(f'sysid demo: {problem.model.name} from {config_path}; hidden true parameters, '
          f'{len(spec.names)} to identify; results in {out_dir}', flush=True)
    train = pipeline.simulate(problem, true_params, duration=args.duration, noise=args.noise,
                              seed=args.seed)
    held_out = pipeline.simulate(problem, true_params, duration=args.duration,
                                 noise=args.noise, seed=args.seed + 1)
    trajectory.save_trajectory(os.path.join(out_dir, 'train.npz'), train)
    trajectory.save_trajectory(os.path.join(out_dir, 'held_out.npz'), held_out)
    print(f'simulated {train.num_samples} training and {held_out.num_samples} held-out '
          f'samples at {1.0 / problem.dt:g} Hz, sensor noise std {args.noise:g} '
          f'({time.perf_counter() - started:.1f} s)', flush=True)

    fits = {}
    for method in ('nea', 'diffnea'):
        progress = _Progress(f'{method}')
        try:
            result = pipeline.fit(guessed, [train], progress=progress, method=method,
                                  theta0=theta_guess)
        finally:
            progress.close()
        results.write_results(os.path.join(out_dir, method), result)
        fits[method] = result
        print(f'{method}: {result.iterations} iterations, final loss '
              f'{result.final_loss:.3e}, {result.wall_time:.1f} s, consistent: '
              f'{bool(result.consistent.all())}', flush=True)
        if result.interrupted:
            print('sysid demo: interrupted', file=sys.stderr)
            return 130

    identifiable = _identifiable(spec)
    rows = []
    for k, name in enumerate(spec.names):
        row = [name + ('' if identifiable[k] else ' (-)'), f'{theta_true[k]:.5g}',
               f'{theta_guess[k]:.5g}']
        for method in fits:
            value = fits[method].mean[k]
            row.append(f'{value:.5g}')
            row.append(_error_text(value, theta_true[k], spec.attributes[k])
                       if identifiable[k] else '')
        rows.append(row)
    table = _format_table(('parameter', 'true', 'initial', 'NEA', 'err', 'DiffNEA', 'err'),
                          rows)
    scores = {'true': theta_true, 'initial': theta_guess,
              **{m: fits[m].mean for m in fits}}
    horizon = int(round(0.5 / problem.dt))
    errors = {label: pipeline.prediction_error(problem, theta, held_out, horizon=horizon)
              for label, theta in scores.items()}
    prediction = _format_table(
        ('parameters', 'rmse q [rad]', 'rmse qd [rad/s]', 'nmse'),
        [(label, f'{e["rmse_q"]:.3e}', f'{e["rmse_qd"]:.3e}', f'{e["nmse"]:.3e}')
         for label, e in errors.items()])
    wall = time.perf_counter() - started
    text = (f'{table}\n(-): not identifiable from planar motion (kept physically consistent, '
            'not scored); err: relative error, absolute [m] for COM coordinates\n\n'
            f'held-out prediction ({horizon}-step = {horizon * problem.dt:g} s simulations '
            f'from measured states):\n{prediction}\n\nwall time {wall:.1f} s')
    print()
    print(text)
    with open(os.path.join(out_dir, 'summary.txt'), 'w', encoding='utf-8') as f:
        f.write(text + '\n')
    return 0


def _identifiable(spec):
    """Parameters a planar pendulum's data determine: all but the inertia entries other than
    the one about the joint axis (iyy for the builders' y axes)."""
    return [not (a.startswith('inertia.') and a != 'inertia.iyy') for a in spec.attributes]


def _error_text(value: float, truth: float, attribute: str) -> str:
    if attribute.startswith('com.') or attribute.startswith('origin.') or truth == 0.0:
        return f'{value - truth:+.2e}'
    return f'{(value - truth) / abs(truth):+.2%}'


# ------------------------------------------------------------------------------------------
# Parser
# ------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='sysid', description='Identify dynamic parameters of robots (sysid_ros).')
    sub = parser.add_subparsers(dest='command', required=True)

    p = sub.add_parser('verify', help='check the JAX dynamics of a model against Pinocchio')
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--urdf', help='URDF file (or example-robot-data:NAME, e.g. '
                     'example-robot-data:panda)')
    from sysid_ros.core.builders import BUILDERS
    src.add_argument('--builder', choices=sorted(BUILDERS) + ['all'],
                     help='a built-in model of the seeds (or all of them)')
    p.add_argument('--joints', nargs='+', help='keep only these joints (lock the others)')
    p.add_argument('--samples', type=int, default=20, help='random states (default 20)')
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser('fit', help='identify parameters from recorded trajectories')
    p.add_argument('--config', required=True, help='problem configuration (YAML)')
    p.add_argument('--data', required=True, nargs='+', metavar='PATH',
                   help='trajectories (.npz or .csv; see sysid_ros.io.trajectory)')
    p.add_argument('--out', required=True, metavar='DIR', help='output folder')
    from sysid_ros.io.config import METHODS
    p.add_argument('--method', choices=METHODS,
                   help='estimator (default: estimator.method of the config); csvgd, svgd, '
                   'sgld, nuts, emcee and cem write their posterior particles')
    p.add_argument('--iterations', type=_positive_int, metavar='K',
                   help='optimiser steps (default: estimator.iterations)')
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser('simulate', help='simulate the configured model (nominal parameters) '
                       'under a random excitation')
    p.add_argument('--config', required=True, help='problem configuration (YAML)')
    p.add_argument('--out', required=True, metavar='FILE', help='output .npz or .csv')
    p.add_argument('--duration', type=_positive_float, default=10.0, metavar='S',
                   help='seconds (default 10)')
    p.add_argument('--noise', type=_nonnegative_float, default=0.0, metavar='STD',
                   help='sensor noise std on q [rad] and qd [rad/s] (default 0)')
    p.add_argument('--seed', type=int, default=0, metavar='N')
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser('demo', help='offline identification demo on a simulated double '
                       'pendulum (NEA and DiffNEA)')
    p.add_argument('--out', default=os.path.join('out', 'demo'), metavar='DIR',
                   help='output folder (default out/demo)')
    p.add_argument('--config', help=f'problem configuration (default: the packaged '
                   f'{DEMO_CONFIG})')
    p.add_argument('--iterations', type=_positive_int, metavar='K',
                   help='DiffNEA steps (default: estimator.iterations)')
    p.add_argument('--duration', type=_positive_float, default=10.0, metavar='S',
                   help='seconds of training (and of held-out) data (default 10)')
    p.add_argument('--noise', type=_nonnegative_float, default=1e-3, metavar='STD',
                   help='sensor noise std (default 0.001)')
    p.add_argument('--seed', type=int, default=0, metavar='N')
    p.set_defaults(func=_cmd_demo)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'expected an integer >= 1, got {text}')
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f'expected a number > 0, got {text}')
    return value


def _nonnegative_float(text: str) -> float:
    value = float(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f'expected a number >= 0, got {text}')
    return value


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _enable_x64()
    from sysid_ros.io.errors import InputError
    try:
        return args.func(args)
    except InputError as exc:
        print(f'sysid {args.command}: error: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f'sysid {args.command}: interrupted', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
