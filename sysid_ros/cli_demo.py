"""`sysid demo` (a simulated robot identified live; with `--robot ur|franka` a stand-in
driver's payload identified and handed to it), `sysid demo-offline` (NEA and DiffNEA on a
simulated double pendulum with a hidden truth), and the configs the package ships.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

__all__ = ['DEMO_CONFIG', 'DEMO_TRUTH', 'cmd_demo', 'cmd_live_demo', 'packaged_config']

DEMO_CONFIG = 'double_pendulum.yaml'
# Hidden truth of the demo: the nominal double pendulum with these changes.
DEMO_TRUTH = {'link2.com.x': 0.04, 'joint1.damping': 0.15, 'joint2.damping': 0.08}
# Initial guess: the truth times these factors, the inverse factor for every second parameter
# of the same attribute (plus offsets, for values that may be 0).
DEMO_SCALE = {'mass': 1.3, 'inertia.iyy': 1.25, 'damping': 2.0}
DEMO_OFFSET = {'com.x': -0.06}


def cmd_live_demo(args) -> int:
    from sysid_ros.io import config as config_io
    from sysid_ros.io import pipeline
    from sysid_ros.ros import demo_robots, live_demo

    if args.robot in demo_robots.STAND_INS:
        from sysid_ros.ros import payload_demo
        stand_in = demo_robots.STAND_INS[args.robot]
        config_path = args.config or packaged_config(stand_in.config)
        pipeline.build_problem(config_io.load_yaml(config_path))       # bad config: stop here
        return payload_demo.run(stand_in, config_path, args.out, seed=args.seed,
                                fastdds_profile=packaged_config('fastdds_localhost.xml'))
    robot = demo_robots.ROBOTS[args.robot]
    config_path = args.config or packaged_config(robot.config)
    spec = pipeline.build_problem(config_io.load_yaml(config_path)).spec   # bad config: stop here
    bounds = {name: (float(lo), float(hi))
              for name, lo, hi in zip(spec.names, spec.lower_bounds, spec.upper_bounds)}
    settings = live_demo.DemoSettings(
        config=config_path, out_dir=args.out, duration=args.duration or robot.duration,
        tolerance=args.tolerance, seed=args.seed, sim_args=robot.sim_args,
        fastdds_profile=packaged_config('fastdds_localhost.xml'))
    return live_demo.run(settings, spec.names, bounds)


def packaged_config(name: str) -> str:
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


def cmd_demo(args) -> int:
    import dataclasses

    import jax.numpy as jnp
    import numpy as np

    from sysid_ros.io import config as config_io
    from sysid_ros.io import html_report, pipeline, progress, results, trajectory, units

    started = time.perf_counter()
    config_path = args.config or packaged_config(DEMO_CONFIG)
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
    report_data = html_report.ReportData(units.parameter_units(problem))
    for method in ('nea', 'diffnea'):
        with progress.progress_bar(method) as report:
            result = pipeline.fit(guessed, [train], progress=report, method=method,
                                  theta0=theta_guess)
        results.write_results(os.path.join(out_dir, method), result, report=report_data)
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
            value = fits[method].estimate[k]
            row.append(f'{value:.5g}')
            row.append(_error_text(value, theta_true[k], spec.attributes[k])
                       if identifiable[k] else '')
        rows.append(row)
    table = results.text_table(
        ('parameter', 'true', 'initial', 'NEA', 'err', 'DiffNEA', 'err'), rows)
    scores = {'true': theta_true, 'initial': theta_guess,
              **{m: fits[m].estimate for m in fits}}
    horizon = int(round(0.5 / problem.dt))
    errors = {label: pipeline.prediction_error(problem, theta, held_out, horizon=horizon)
              for label, theta in scores.items()}
    prediction = results.text_table(
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
