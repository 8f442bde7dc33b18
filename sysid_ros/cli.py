"""The `sysid` command line: `sysid verify`, `sysid fit`, `sysid evaluate`, `sysid record`,
`sysid simulate`, `sysid demo`, `sysid convert`, `sysid fleet`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from sysid_ros import cli_demo, cli_fleet

# Exit status of `sysid fit` when the fit did not converge or shows a symptom of failure (a
# WARNING line names each; the results are written all the same). 130: Ctrl-C; 2: bad input.
FIT_NOT_CONVERGED = 3

# Subcommand modules import JAX lazily so `sysid --help` stays fast; float64 is switched on
# here, at the entry point, never inside the core.


def _enable_x64():
    import jax
    jax.config.update('jax_enable_x64', True)
    # Compiled programs are cached on disk, so a second `sysid fit` / `sysid demo` of the same
    # problem starts at once. JAX_COMPILATION_CACHE_DIR (or an empty value to disable) and
    # JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS win.
    cache = os.environ.get('JAX_COMPILATION_CACHE_DIR',
                           os.path.join(os.path.expanduser('~'), '.cache', 'sysid_ros', 'jax'))
    if cache:
        jax.config.update('jax_compilation_cache_dir', cache)
        jax.config.update('jax_persistent_cache_min_compile_time_secs', float(
            os.environ.get('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', 0.0)))


def _cmd_verify(args) -> int:
    from sysid_ros.core.model import builders
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

def _estimate_table(result) -> str:
    from sysid_ros.io import results

    rows = [(name, f'{result.initial[:, k].mean():.6g}', f'{result.estimate[k]:.6g}',
             f'{result.std[k]:.3g}', f'[{result.lower[k]:g}, {result.upper[k]:g}]')
            for k, name in enumerate(result.names)]
    return results.text_table(('parameter', 'initial', 'estimate', 'std', 'bounds'), rows)


def _cmd_fit(args) -> int:
    from sysid_ros.io import config as config_io
    from sysid_ros.io import (compile_clock, description_files, html_report, pipeline,
                              progress, results, units)

    cfg = config_io.load_yaml(args.config)
    if args.particles:
        cfg = dataclasses.replace(cfg, estimator=dataclasses.replace(
            cfg.estimator, particles=args.particles))
    problem = pipeline.build_problem(cfg)
    if args.bag:
        fit_data, held_out = _read_bag_split(problem, args.bag)
    else:
        fit_data, held_out = args.data, None
    trajectories = pipeline.prepare_trajectories(problem, fit_data)   # bad data: fail early
    method = args.method or cfg.estimator.method
    prior = None
    if args.prior:
        prior = _read_prior(args.prior, problem)
    with compile_clock.CompileClock() as clock:
        with progress.progress_bar(f'sysid fit [{method}]') as report:
            result = pipeline.fit(problem, trajectories, progress=report, method=method,
                                  iterations=args.iterations, log=_log_line, prior=prior)
        extra = {'config': os.path.abspath(args.config)}
        if args.prior:
            extra['prior'] = os.path.abspath(args.prior)
        scores = figures = held = None
        if args.bag:
            extra['bag'] = os.path.abspath(args.bag)
            if isinstance(problem, pipeline.Problem):    # mechanisms: no rollout metrics yet
                evaluated_on = 'held-out' if held_out else 'training'
                scores, held = _held_out(problem, result.particles, held_out or trajectories,
                                         evaluated_on)
                figures = _figures(problem, held, evaluated_on, *html_report.posterior_sample(
                    result.method, result.estimate, result.particles, result.covariance))
        else:
            extra['data'] = [os.path.abspath(p) for p in args.data]
    result.info.update(clock.summary())
    urdf = problem.identified_urdf(result.estimate)
    controller = None
    if cfg.online.push_parameters:              # what the live estimator would push
        controller = results.controller_parameters_file(
            results.pushed_values(result.names, result.estimate, cfg.online.push_parameters),
            cfg.online.push_node)
    report_data = html_report.ReportData(units.parameter_units(problem),
                                         units.state_labels(problem), held)
    descriptions = (description_files.description_files(problem, result.estimate)
                    if isinstance(problem, pipeline.Problem) else None)
    out = results.write_results(args.out, result, extra=extra, urdf=urdf,
                                metrics=scores, figures=figures, controller=controller,
                                report=report_data, descriptions=descriptions)
    print(_estimate_table(result))
    if scores is not None:
        print(_metrics_line(scores))
    print(f'{method}: {result.iterations} iterations, final loss {result.final_loss:.4e}, '
          f'{result.wall_time:.1f} s; consistent: {bool(result.consistent.all())}; '
          f'results in {out}')
    if result.interrupted:
        print(f'sysid fit: interrupted; wrote the best result so far to {out}',
              file=sys.stderr)
        return 130
    for line in result.warnings:
        print(f'WARNING {line}', file=sys.stderr)
    return FIT_NOT_CONVERGED if result.warnings else 0


def _read_prior(path: str, problem):
    """The GaussianPrior of `sysid fit --prior` (`earlier_estimate.read_prior`), its source
    logged."""
    from sysid_ros.io import earlier_estimate, pipeline

    if not isinstance(problem, pipeline.Problem):
        from sysid_ros.io.errors import InputError
        raise InputError(f'{path}: --prior: factor_graph (mechanisms) takes no prior')
    spec = problem.spec
    earlier = earlier_estimate.read_prior(path, spec.names,
                                          spec.initial_theta(problem.base_params))
    _log_line(f'prior from {earlier_estimate.estimate_path(path)} ({earlier.source}): '
              f'{", ".join(earlier.names)}')
    return earlier.prior


def _log_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _read_bag_split(problem, bag: str):
    """Trajectories of a bag, split into (fit, held out) by `data.holdout`."""
    from sysid_ros.io import bags

    segments = bags.read_bag(bag, problem.joint_names, problem.config.data)
    fit_part, held = bags.split_holdout(segments, problem.config.data.holdout)
    print(f'{bag}: {len(segments)} trajectories ({len(fit_part)} fitted, {len(held)} held '
          f'out), {sum(s.trajectory.duration for s in segments):.1f} s at '
          f'{problem.config.data.rate:g} Hz', file=sys.stderr)
    return [s.trajectory for s in fit_part], [s.trajectory for s in held]


def _held_out(problem, particles, trajectories, evaluated_on: str):
    """(metrics.json content, `segments.HeldOutRollouts`) of posterior `particles` on
    `trajectories`."""
    from sysid_ros.io import progress, segments

    with progress.progress_bar(f'{evaluated_on} rollouts', unit='particles') as report:
        held = segments.rollouts(problem, particles, trajectories, progress=report)
    return dict(segments.posterior_metrics(problem, held), evaluated_on=evaluated_on), held


def _figures(problem, held, evaluated_on: str, sample, source: str):
    """Writer of the held-out figures into a folder: the rollouts' density and, where the
    fit has a posterior `sample` (S, M) (`html_report.posterior_sample`, drawn from
    `source`), its corner plot."""
    from sysid_ros.io import report, units

    def figures(folder: str) -> None:
        labels = units.state_labels(problem)
        report.plot_trajectory_density(
            os.path.join(folder, 'trajectory_density.png'), held.t, held.sim[:, 0],
            held.real[:1], labels=labels,
            title=f'posterior rollouts vs {evaluated_on} segment 1')
        if sample is not None:
            report.plot_posterior(os.path.join(folder, 'posterior.png'), sample,
                                  units.labelled(problem.names, units.parameter_units(problem)),
                                  title=source)
    return figures


def _metrics_line(scores) -> str:
    return (f'{scores["evaluated_on"]} ({scores["num_segments"]} segments of '
            f'{scores["horizon"]} steps): KL(real||sim) {scores["kl_real_sim"]:.4g}  '
            f'KL(sim||real) {scores["kl_sim_real"]:.4g}  MMD {scores["mmd"]:.4g}  '
            f'log-lik {scores["log_likelihood"]:.6g}  NMSE {scores["nmse"]:.4g}')


# ------------------------------------------------------------------------------------------
# evaluate
# ------------------------------------------------------------------------------------------

def _cmd_evaluate(args) -> int:
    import numpy as np

    from sysid_ros.io import html_report, results, units
    from sysid_ros.io.trajectory import DataError

    problem, estimate, posterior = _fitted_problem(args.posterior, args.config)
    with np.load(posterior, allow_pickle=False) as saved:
        particles, names = saved['particles'], tuple(str(n) for n in saved['names'])
        history = saved['loss_history']
        covariance = saved['covariance'] if 'covariance' in saved else None
    if names != problem.names:
        raise DataError(f'{posterior}: parameters {list(names)} do not match those of '
                        f'the configuration: {list(problem.names)}')
    trajectories = _bag_trajectories(problem, args.bag)
    scores, held = _held_out(problem, particles, trajectories, 'evaluation bag')
    scores.update(bag=os.path.abspath(args.bag), posterior=os.path.abspath(args.posterior))
    print(_metrics_line(scores))
    if args.out:
        _write_json(args.out, scores)
    page = args.report or os.path.join(args.posterior, results.EVALUATION_REPORT)
    html_report.write_report(
        page, estimate, particles, history, covariance, scores,
        html_report.ReportData(units.parameter_units(problem), units.state_labels(problem),
                               held), title=f'sysid evaluate on {os.path.basename(args.bag)}')
    print(f'report: {os.path.abspath(page)}')
    return 0


def _bag_trajectories(problem, bag: str) -> list:
    """Every trajectory of a bag (`bags.read_bag`), for `evaluate` and `predict`."""
    from sysid_ros.io import bags

    return [s.trajectory for s in bags.read_bag(bag, problem.joint_names, problem.config.data)]


def _write_json(path: str, content: dict) -> None:
    """`content` as indented JSON at `path`, written beside it and renamed into place."""
    import json

    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(content, f, indent=2)
    os.replace(tmp, path)


def _fitted_problem(folder: str, config: str | None):
    """(Problem, estimate.yaml content, posterior.npz path) of a `sysid fit` results folder,
    the problem built from `config` or else the configuration the fit names."""
    from sysid_ros.io import config as config_io
    from sysid_ros.io import pipeline, results
    from sysid_ros.io.trajectory import DataError

    posterior = os.path.join(folder, 'posterior.npz')
    if not os.path.isfile(posterior):
        raise DataError(f'{posterior}: --posterior: no saved posterior (run sysid fit first)')
    estimate = results.read_estimate(folder)
    config = config or estimate.get('config')
    if not config:
        raise DataError(f'{folder}: estimate.yaml names no config; pass --config')
    return pipeline.build_problem(config_io.load_yaml(config)), estimate, posterior


def _cmd_predict(args) -> int:
    from sysid_ros.io import pipeline, results, torque_prediction
    from sysid_ros.io.trajectory import DataError

    problem, estimate, _ = _fitted_problem(args.posterior, args.config)
    if not isinstance(problem, pipeline.Problem):
        raise DataError(f'{args.posterior}: sysid predict needs a robot model, not a mechanism')
    entries = estimate.get('parameters') or {}
    missing = [n for n in problem.names if n not in entries]
    if missing:
        raise DataError(f'{args.posterior}: estimate.yaml has no {missing[0]!r} of the '
                        'configuration')
    theta = [float(entries[n]['mean']) for n in problem.names]
    if args.bag:
        trajectories = _bag_trajectories(problem, args.bag)
    else:
        trajectories = pipeline.prepare_trajectories(problem, args.data)
    prediction = torque_prediction.predict_torques(problem, theta, trajectories)
    rows = [(joint, f'{nominal:.4f}', f'{fitted:.4f}') for joint, nominal, fitted in zip(
        problem.joint_names, prediction.nominal.per_joint, prediction.fitted.per_joint)]
    rows += [('mean', f'{prediction.nominal.nrmse:.4f}', f'{prediction.fitted.nrmse:.4f}'),
             ('pooled', f'{prediction.nominal.pooled:.4f}', f'{prediction.fitted.pooled:.4f}')]
    print(f'torque nRMSE on {prediction.num_samples} samples (RMS error / RMS torque per joint)')
    print(results.text_table(('joint', 'nominal', 'fitted'), rows))
    if args.out:
        scores = {'num_samples': prediction.num_samples, 'joints': list(problem.joint_names)}
        for which in ('nominal', 'fitted'):
            s = getattr(prediction, which)
            scores[which] = {'nrmse': s.nrmse, 'per_joint': s.per_joint.tolist(),
                             'pooled': s.pooled}
        _write_json(args.out, scores)
    return 0


def _cmd_record(args) -> int:
    from sysid_ros.io import config as config_io
    from sysid_ros.io.trajectory import DataError

    data = config_io.load_yaml(args.config).data
    if os.path.lexists(args.out):
        raise DataError(f'{args.out}: --out: exists already; a bag is never overwritten')
    from sysid_ros.ros import recorder

    print(f'sysid record: recording into {args.out}; Ctrl-C stops', file=sys.stderr)
    counts = recorder.record(data, args.out, storage=args.storage, duration=args.duration)
    print(f'{args.out}: ' + ', '.join(f'{topic} {n}' for topic, n in counts.items()))
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
    name = problem.config.model.mechanism or problem.model.name
    print(f'{args.out}: {traj.num_samples} samples at {1.0 / problem.dt:g} Hz of '
          f'{name} ({", ".join(problem.joint_names)}), noise std '
          f'{args.noise:g}, seed {args.seed}')
    return 0


def _cmd_excite(args) -> int:
    from sysid_ros.io import config as config_io
    from sysid_ros.io import excitation, pipeline, results

    problem = pipeline.build_problem(config_io.load_yaml(args.config))
    start = time.perf_counter()
    designed = excitation.design(problem, prior=args.prior, duration=args.duration,
                                 log=_log_line)
    paths = excitation.write_excitation(args.out, designed)
    rows = [(name, f'{designed.prior_std[k]:.4g}', f'{designed.predicted_std[k]:.4g}')
            for k, name in enumerate(problem.spec.names)]
    print(results.text_table(('parameter', 'prior std', 'predicted std'), rows))
    print(f'{designed.design.duration:g} s motion of {problem.model.name}: log det '
          f'{designed.result.start_log_det:.4g} (random start) -> {designed.result.log_det:.4g}'
          f' in {designed.result.iterations} L-BFGS iterations, condition number '
          f'{designed.condition_number:.3g}, largest use of a limit '
          f'{100 * designed.largest_use:.1f} %, '
          f'{time.perf_counter() - start:.1f} s; wrote {", ".join(paths)}')
    if not designed.passed:
        print(f'sysid excite: error: the motion breaks a limit even at rest; see '
              f'{paths[2]} (peak_use)', file=sys.stderr)
        return 1
    return 0


def _cmd_convert(args) -> int:
    from sysid_ros.io import bag_writer, datasets, progress
    from sysid_ros.io.errors import InputError

    with progress.progress_bar(f'sysid convert [{args.dataset}]', unit='runs') as report:
        trajs = datasets.load_dataset(args.dataset, args.source, args.runs, progress=report)
    runs = args.runs or datasets.list_runs(args.dataset, args.source)
    provenance = {'sysid_convert.dataset': args.dataset,
                  'sysid_convert.source': os.path.abspath(args.source),
                  'sysid_convert.runs': ','.join(str(r) for r in runs),
                  'sysid_convert.preprocessing': datasets.describe(args.dataset)}
    try:
        bag_writer.write_trajectory_bag(args.out, trajs, storage=args.storage,
                                        custom_data=provenance)
    except FileExistsError as exc:
        raise InputError(str(exc)) from None
    print(f'{args.out}: {len(trajs)} run(s) of {args.dataset} '
          f'({sum(t.num_samples for t in trajs)} samples, joints '
          f'{", ".join(trajs[0].joint_names)})')
    return 0


# ------------------------------------------------------------------------------------------
# Parser
# ------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The `sysid` argument parser, one subparser per command; a flat list of declarations
    kept in one function so that the whole command line reads in one place."""
    parser = argparse.ArgumentParser(
        prog='sysid', description='Identify dynamic parameters of robots (sysid_ros).')
    sub = parser.add_subparsers(dest='command', required=True)

    p = sub.add_parser('verify', help='check the JAX dynamics of a model against Pinocchio')
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--urdf', help='URDF file (or example-robot-data:NAME, e.g. '
                     'example-robot-data:panda)')
    from sysid_ros.core.model.builders import BUILDERS
    src.add_argument('--builder', choices=sorted(BUILDERS) + ['all'],
                     help='a built-in model of the seeds (or all of them)')
    p.add_argument('--joints', nargs='+', help='keep only these joints (lock the others)')
    p.add_argument('--samples', type=int, default=20, help='random states (default 20)')
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser('fit', help='identify parameters from recorded trajectories (exit '
                       f'status {FIT_NOT_CONVERGED}: not converged, see the WARNING lines)')
    p.add_argument('--config', required=True, help='problem configuration (YAML)')
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument('--data', nargs='+', metavar='PATH',
                        help='trajectories (.npz or .csv; see sysid_ros.io.trajectory)')
    source.add_argument('--bag', metavar='PATH', help='a rosbag (rosbag2 folder, sqlite3 or '
                        'mcap, or ROS 1 .bag), cut and held out as data.gap, data.segments '
                        'and data.holdout say; also writes metrics.json and report figures')
    p.add_argument('--out', required=True, metavar='DIR', help='output folder')
    from sysid_ros.io.config_sections import METHODS
    p.add_argument('--method', choices=METHODS,
                   help='estimator (default: estimator.method of the config); csvgd, svgd, '
                   'sgld, nuts, emcee and cem write their posterior particles')
    p.add_argument('--iterations', type=_positive_int, metavar='K',
                   help='optimiser steps (default: estimator.iterations)')
    p.add_argument('--particles', type=_positive_int, metavar='N',
                   help='particles (default: estimator.particles)')
    p.add_argument('--prior', metavar='ESTIMATE', help='an earlier fit (its results folder or '
                   'estimate.yaml) as the prior of the parameters both name, e.g. the robot '
                   'without its load before a fit of the load')
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser('evaluate', help='score a saved posterior on another recording')
    p.add_argument('--posterior', required=True, metavar='DIR', help='output folder of '
                   'sysid fit (posterior.npz, estimate.yaml)')
    p.add_argument('--bag', required=True, metavar='PATH', help='the recording to score on')
    p.add_argument('--config', help='problem configuration (default: the one of the fit)')
    p.add_argument('--out', metavar='FILE', help='also write the metrics as JSON here')
    p.add_argument('--report', metavar='FILE', help='the HTML report (default: '
                   'evaluation.html in the --posterior folder)')
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser('predict', help="a fit's joint torques on any recording (inverse "
                       'dynamics at the recorded motion), per-joint nRMSE beside the nominal '
                       "model's")
    p.add_argument('--posterior', required=True, metavar='DIR', help='output folder of '
                   'sysid fit (estimate.yaml)')
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument('--data', nargs='+', metavar='PATH',
                        help='recordings (.npz or .csv trajectories)')
    source.add_argument('--bag', metavar='PATH', help='a rosbag')
    p.add_argument('--config', help='problem configuration (default: the one of the fit)')
    p.add_argument('--out', metavar='FILE', help='also write the scores as JSON here')
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser('record', help='record the configured topics into a rosbag2 (Ctrl-C '
                       'stops and closes it)')
    p.add_argument('--config', required=True, help='problem configuration (YAML): its data '
                   'section names the topics')
    p.add_argument('--out', required=True, metavar='BAG', help='rosbag2 folder to create')
    p.add_argument('--storage', choices=('sqlite3', 'mcap'), default='mcap')
    p.add_argument('--duration', type=_positive_float, metavar='S',
                   help='stop after S seconds (default: at Ctrl-C)')
    p.set_defaults(func=_cmd_record)

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

    p = sub.add_parser('excite', help='design an exciting trajectory for the configured '
                       'parameters within the joint limits (D-optimal Fourier series)')
    p.add_argument('--config', required=True, help='problem configuration (YAML); its '
                   'excitation section sets duration, harmonics, limits and start')
    p.add_argument('--out', required=True, metavar='DIR', help='output folder: '
                   'trajectory.yaml (JointTrajectory), trajectory.csv, excitation.yaml, '
                   'excitation.png')
    p.add_argument('--prior', metavar='ESTIMATE', help='a saved estimate.yaml: design for '
                   'what is still uncertain (its means and stds as the prior)')
    p.add_argument('--duration', type=_positive_float, metavar='S',
                   help='motion length [s] (default: excitation.duration)')
    p.set_defaults(func=_cmd_excite)

    p = sub.add_parser('convert', help='convert a public robot dataset into a rosbag2 of '
                       'joint states')
    p.add_argument('--dataset', required=True,
                   choices=('ibm-double-pendulum', 'kuka-lwr4', 'panda-gaz2019'))
    p.add_argument('--source', required=True, metavar='DIR', help='the dataset folder')
    p.add_argument('--out', required=True, metavar='BAG', help='rosbag2 folder to create')
    p.add_argument('--runs', nargs='+', metavar='RUN', help='runs to convert (default all)')
    p.add_argument('--storage', choices=('sqlite3', 'mcap'), default='sqlite3')
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser('demo', help='the live demo: sim_robot and estimator nodes over DDS, '
                       'true vs estimated parameters')
    p.add_argument('--out', default=os.path.join('out', 'live_demo'), metavar='DIR',
                   help='node logs and the saved posterior (default out/live_demo)')
    p.add_argument('--robot', choices=('panda', 'double_pendulum', 'ur', 'franka'),
                   default='panda',
                   help='the simulated robot: the Panda arm picking up a 1 kg payload 20 s in '
                   '(default), or the double pendulum; ur, franka: a stand-in driver whose '
                   'held payload is identified and handed to it (ros.payload_demo)')
    p.add_argument('--config', help='problem configuration of both nodes (default: the '
                   "robot's packaged configuration, ros.demo_robots)")
    p.add_argument('--duration', type=_positive_float, metavar='S',
                   help='seconds of live estimates to collect (default 50 for the Panda, '
                   '60 for the double pendulum)')
    p.add_argument('--tolerance', type=_positive_float, default=0.1, metavar='F',
                   help='converged: every mean within F times its bounds width of the truth '
                   '(default 0.1)')
    p.add_argument('--seed', type=int, default=0, metavar='N',
                   help='seed of the hidden truth, excitation and noise')
    p.set_defaults(func=cli_demo.cmd_live_demo)

    p = sub.add_parser('demo-offline', help='offline identification demo on a simulated double '
                       'pendulum (NEA and DiffNEA)')
    p.add_argument('--out', default=os.path.join('out', 'demo'), metavar='DIR',
                   help='output folder (default out/demo)')
    p.add_argument('--config', help=f'problem configuration (default: the packaged '
                   f'{cli_demo.DEMO_CONFIG})')
    p.add_argument('--iterations', type=_positive_int, metavar='K',
                   help='DiffNEA steps (default: estimator.iterations)')
    p.add_argument('--duration', type=_positive_float, default=10.0, metavar='S',
                   help='seconds of training (and of held-out) data (default 10)')
    p.add_argument('--noise', type=_nonnegative_float, default=1e-3, metavar='STD',
                   help='sensor noise std (default 0.001)')
    p.add_argument('--seed', type=int, default=0, metavar='N')
    p.set_defaults(func=cli_demo.cmd_demo)

    cli_fleet.add_parser(sub, _cmd_fleet)
    return parser


def _cmd_fleet(args) -> int:
    return cli_fleet.cmd_fleet(args, main)


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
