"""Identification on real public data: IBM double pendulum, KUKA LWR4+, Franka Panda.

Datasets are read from `../shared/data` (see its README; `--data` to change) through
`sysid_ros.io.datasets`, never copied into the repository.

IBM double pendulum (seed 000, experiment 2 on real data): the 11 parameters of seed Table 1
(`bench/experiment_pendulum11.py`: TABLE1, model, likelihood settings, CSVGD settings and
metrics are reused from there) are identified by CSVGD (SVGD with 10 shooting windows) from
ONE training trajectory, the first 3 s of run 0, and scored on held-out trajectories, the
first 3 s of runs 1-10 (runs 11-20 are never read). Angles come from the markers as described
in `io.datasets` and are resampled from 400 Hz to the experiment's 100 Hz grid (dt 0.01 s,
300 steps). The likelihood and the posterior-predictive noise use experiment 2's sensor noise
(0.02 rad, 0.2 rad/s), larger than the pixel quantisation (~1e-3 rad) to absorb model error.
Metrics as in experiment 2: KL both ways (k = l = 3) and MMD^2 on the held-out set, each
dimension divided by the test data's std; printed beside the seed's CSVGD numbers on the same
dataset (the seed's exact windows, preprocessing and scaling are not known, so the values are
comparable in magnitude only).

IBM through the command line (`--only ibm_cli`), as a user would run it: `sysid convert` of
run 0 (training) and of runs 1-10 (held out) into bags, `sysid fit --bag` with
`config/ibm_double_pendulum.yaml` on the whole 44 s of run 0, `sysid evaluate` on runs 1-10:
every posterior particle simulates every 0.5 s segment (50 steps at 100 Hz) of the held-out
runs from its measured start state; KL and MMD^2 compare the real and simulated segments.
Half a second is the horizon of the seed's test set (TDS's `dpc_dataset_traintest_4_200`:
4 input frames, 200 target frames at 400 Hz); the seed's window scaling is not known.

KUKA LWR4+ (FloBaRoID): NEA (least squares on the joint-torque regressor, with the URDF's
kinematics) of all 7 link inertials plus viscous and Coulomb friction and a constant torque
offset per joint (`config/kuka_lwr4.yaml`) on runs 1-2; the joint torques of run 3 are
predicted by inverse dynamics from its recorded q, qd, qdd. Score: per joint
RMS(tau_pred - tau) / RMS(tau), then the mean over joints (nRMSE); beside it the pooled
relative error ||tau_pred - tau|| / ||tau|| over all joints and samples, which weighs the
joints by their torques. References: the same prediction with the URDFs' own values: the NEA
start, `kuka_lwr4.urdf` (CentroEPiaggio-based, its own friction values if any); literature
parameters (Gaz et al. 2016, `kuka_lwr4_gaz.urdf`) and FloBaRoID's identified parameters
(`kuka_lwr4_identified.urdf`), each with the friction written in that URDF (a URDF holds no
offset), and an independent cross-check: ordinary least squares on Pinocchio's joint-torque
regressor with the same friction and offset columns, minimum norm, WITHOUT physical
consistency (`unconstrained_ls`). NEA's raw solution on this data is inconsistent;
`pipeline.fit` then refines the projected solution and the nominal anchor by consistent least
squares (`estimators.make_consistent_ls`), so every link stays physically consistent, which
here also generalises better than OLS.

Franka Panda (Gaz et al. 2019 log, 21 s): the kinematics of example-robot-data's
`panda.urdf`; NEA of all 7 link inertials plus friction (`config/panda_gaz2019.yaml`) on the
first 14 s at 200 Hz (accelerations from a Savitzky-Golay filter), torque prediction on the
last 7 s, against the nominal example-robot-data inertials (no friction) as reference. The
paper's base coefficients (supplementary Table III) are only in the PDF, which we cannot
parse here (no PDF text tool installed); they are not compared.

Usage: python -m bench.real_data [--quick] [--only ibm,ibm_cli,kuka,panda] [--out DIR]
Ends with one line `RESULT real_data key=value ...`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from xml.etree import ElementTree

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin

from bench import experiment_pendulum11 as exp2

from sysid_ros.core.dynamics import actuators  # noqa: E402
from sysid_ros.core.likelihoods import likelihood as lik  # noqa: E402
from sysid_ros.io import datasets, estimator_data, model_io, pipeline, report  # noqa: E402
from sysid_ros.io import trajectory as trajectory_io  # noqa: E402
from sysid_ros.io.torque_prediction import torque_function, torque_scores  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, '..', 'shared', 'data')
CONFIG = os.path.join(ROOT, 'config')
IBM_TRAIN_RUN = 0
IBM_TEST_RUNS = tuple(range(1, 11))          # development range only; 11-20 stay untouched
SEED_CSVGD = {'kl_real_sim': 5204.5, 'kl_sim_real': 2773.2, 'mmd': 0.0366}
IBM_SIZES = {True: {'num_particles': 16, 'num_iterations': 300},
             False: {'num_particles': 32, 'num_iterations': 1000}}
KUKA_REFERENCES = {'gaz2016': 'kuka_lwr4_gaz.urdf', 'flobaroid': 'kuka_lwr4_identified.urdf'}
PANDA_SPLIT_S = 14.0                         # [s] fit before, predict after


# ------------------------------------------------------------------------------------------
# IBM double pendulum
# ------------------------------------------------------------------------------------------

def _ibm_window(traj) -> np.ndarray:
    """First NUM_STEPS + 1 samples at 1 / DT of a run -> (T + 1, 4) states [q; qd]."""
    traj = trajectory_io.resample(traj, 1.0 / exp2.DT)
    num = exp2.NUM_STEPS + 1
    if traj.num_samples < num:
        raise trajectory_io.DataError(f'{traj.source}: expected at least {num} samples at '
                                      f'{1.0 / exp2.DT:g} Hz, got {traj.num_samples}')
    return np.concatenate([traj.q[:num], traj.qd[:num]], axis=1)


def ibm_problem(source: str) -> exp2.Problem:
    """Experiment 2's Problem with the real training and held-out windows."""
    runs = datasets.load_dataset('ibm-double-pendulum', source,
                                 (IBM_TRAIN_RUN,) + IBM_TEST_RUNS)
    windows = np.stack([_ibm_window(t) for t in runs])             # (1 + N, T + 1, 4)
    model, base = exp2._base_model()
    settings = {
        'ss': lik.make_shooting_likelihood(model, exp2.DT, 1, 'product',
                                           integrator=exp2.INTEGRATOR, actuator=exp2.ACTUATOR),
        'ms': lik.make_shooting_likelihood(model, exp2.DT, exp2.NUM_WINDOWS, 'product',
                                           integrator=exp2.INTEGRATOR, actuator=exp2.ACTUATOR),
    }
    train = lik.make_trajectory_data(settings['ms'], windows[:1],
                                     np.zeros((1, exp2.NUM_STEPS, 2)), exp2.NOISE_STD)
    test = windows[1:]
    return exp2.Problem(model=model, base=base, spec=exp2.make_spec(model), settings=settings,
                        train=train, test_x0=test[:, 0], test_obs=test,
                        metric_scale=test.reshape(-1, 4).std(axis=0))


def print_seed_comparison(ours: dict) -> None:
    """Our KL both ways and MMD (keys of SEED_CSVGD) beside the seed's CSVGD figures."""
    print(f'{"metric":16}{"ours":>12}{"seed CSVGD":>12}')
    for key, label in (('kl_real_sim', 'KL(real||sim)'), ('kl_sim_real', 'KL(sim||real)'),
                       ('mmd', 'MMD')):
        print(f'{label:16}{ours[key]:12.4g}{SEED_CSVGD[key]:12.4g}')


def run_ibm(source: str, quick: bool, out: str) -> dict:
    start = time.perf_counter()
    problem = ibm_problem(source)
    row = exp2.run_method(problem, 'svgd', 'ms', progress=print, **IBM_SIZES[quick])
    print(f'\nIBM double pendulum, CSVGD ({row.theta.shape[0]} particles), train run '
          f'{IBM_TRAIN_RUN}, held-out runs {IBM_TEST_RUNS[0]}-{IBM_TEST_RUNS[-1]} (3 s each)')
    print_seed_comparison({key: getattr(row, key) for key in SEED_CSVGD})
    print(f'diverged held-out simulations: {row.num_diverged}')
    print(f'{"parameter":24}{"mean":>10}{"std":>10}   bounds')
    for (label, _, bounds), mean, std in zip(exp2.TABLE1, row.theta.mean(0), row.theta.std(0)):
        print(f'{label:24}{mean:10.4f}{std:10.4f}   {bounds}')
    sims, _ = exp2.predictive_trajectories(problem, row.theta)
    sims = sims.reshape(row.theta.shape[0], len(IBM_TEST_RUNS), *sims.shape[1:])
    t = np.arange(exp2.NUM_STEPS + 1) * exp2.DT
    report.plot_trajectory_density(
        os.path.join(out, 'ibm_density.png'), t, sims[:, 0], problem.test_obs[:1],
        ['q1 [rad]', 'q2 [rad]', 'qd1 [rad/s]', 'qd2 [rad/s]'],
        title=f'IBM run {IBM_TEST_RUNS[0]} (held out): CSVGD posterior rollouts vs measured')
    report.plot_posterior(os.path.join(out, 'ibm_posterior.png'), row.theta,
                          [label for label, _, _ in exp2.TABLE1],
                          bounds=[b for _, _, b in exp2.TABLE1],
                          title='IBM double pendulum: CSVGD posterior (seed Table 1)')
    return {'ibm_kl_real_sim': row.kl_real_sim, 'ibm_kl_sim_real': row.kl_sim_real,
            'ibm_mmd': row.mmd, 'ibm_diverged': row.num_diverged,
            'ibm_s': time.perf_counter() - start}


def run_ibm_cli(source: str, out: str) -> dict:
    """IBM through `sysid convert`, `sysid fit --bag` and `sysid evaluate` (module doc)."""
    start = time.perf_counter()
    sysid = str(pathlib.Path(sys.executable).with_name('sysid'))
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               FASTDDS_DEFAULT_PROFILES_FILE=os.path.join(CONFIG, 'fastdds_localhost.xml'))
    folder = os.path.join(out, 'ibm_cli')
    train, test, fit = (os.path.join(folder, name) for name in ('train_bag', 'test_bag', 'fit'))
    metrics = os.path.join(folder, 'heldout_metrics.json')
    for bag, runs in ((train, (IBM_TRAIN_RUN,)), (test, IBM_TEST_RUNS)):
        if not os.path.exists(bag):
            subprocess.run([sysid, 'convert', '--dataset', 'ibm-double-pendulum', '--source',
                            source, '--out', bag, '--runs', *map(str, runs)], env=env,
                           check=True)
    fit_start = time.perf_counter()
    code = subprocess.run([sysid, 'fit', '--config', os.path.join(CONFIG,
                                                                  'ibm_double_pendulum.yaml'),
                           '--bag', train, '--out', fit], env=env).returncode
    fit_s = time.perf_counter() - fit_start
    subprocess.run([sysid, 'evaluate', '--posterior', fit, '--bag', test, '--out', metrics],
                   env=env, check=True)
    with open(metrics, encoding='utf-8') as f:
        scores = json.load(f)
    print(f'\nIBM through the CLI: sysid fit exit {code} in {fit_s:.0f} s; held-out runs '
          f'{IBM_TEST_RUNS[0]}-{IBM_TEST_RUNS[-1]}, {scores["num_segments"]} segments of '
          f'{scores["horizon"]} steps')
    print_seed_comparison(scores)
    return {'ibm_cli_mmd': scores['mmd'], 'ibm_cli_kl_real_sim': scores['kl_real_sim'],
            'ibm_cli_kl_sim_real': scores['kl_sim_real'], 'ibm_cli_nmse': scores['nmse'],
            'ibm_cli_exit': code, 'ibm_cli_fit_s': fit_s,
            'ibm_cli_s': time.perf_counter() - start}


# ------------------------------------------------------------------------------------------
# Torque prediction (KUKA, Panda)
# ------------------------------------------------------------------------------------------

def _nea_fit(config: str, trajs, urdf: str | None = None):
    cfg = pipeline.config_io.load_yaml(config)
    if urdf is not None:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, urdf=urdf))
    problem = pipeline.build_problem(cfg)
    result = pipeline.fit(problem, trajs, method='nea')
    params = problem.spec.to_params(jnp.asarray(result.particles[0]), problem.base_params)
    return problem, params, result


def _print_torques(title, rows, joints):
    print(f'\n{title}')
    print(f'{"model":32}{"nRMSE":>8}{"pooled":>8} | '
          + ' '.join(f'{j[-8:]:>8}' for j in joints))
    for name, (mean, per_joint, pooled) in rows.items():
        print(f'{name:32}{mean:8.3f}{pooled:8.3f} | '
              + ' '.join(f'{v:8.3f}' for v in per_joint))


def _reference_model(path: str):
    """A reference KUKA URDF as (model, Params), keeping the signs of its Coulomb values.

    FloBaRoID's identified URDF has negative `friction` (Coulomb) values on some joints (an
    unconstrained least-squares result), which Pinocchio refuses; they are parsed as their
    magnitudes and the signs restored in the Params.
    """
    root = ElementTree.parse(path).getroot()
    signed = {}
    for joint in root.iter('joint'):
        dyn = joint.find('dynamics')
        if dyn is not None and 'friction' in dyn.attrib:
            signed[joint.get('name')] = float(dyn.get('friction'))
            dyn.set('friction', repr(abs(signed[joint.get('name')])))
    model, params = model_io.load_urdf(ElementTree.tostring(root, encoding='unicode'),
                                       keep_joints=list(datasets.KUKA_JOINTS))
    coulomb = np.array([signed.get(j, 0.0) for j in model.joint_names])
    return model, dataclasses.replace(params, coulomb=jnp.asarray(coulomb))


def _pinocchio_rows(pmodel, traj, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Independent regressor: Pinocchio's joint-torque regressor plus viscous, Coulomb
    (tanh(qd / eps)) and offset (ones) columns -> ((N nv, 10 nv + 3 nv) matrix, (N nv,)
    torques)."""
    data = pmodel.createData()
    ones = np.eye(pmodel.nv)
    rows = [np.hstack([pin.computeJointTorqueRegressor(pmodel, data, q, qd, qdd), np.diag(qd),
                       np.diag(np.tanh(qd / eps)), ones])
            for q, qd, qdd in zip(traj.q, traj.qd, traj.qdd)]
    return np.concatenate(rows), traj.tau.reshape(-1)


def unconstrained_ls(urdf: str, train, test) -> np.ndarray:
    """Ordinary least squares (minimum norm, no physical consistency) on Pinocchio's
    regressor: fit on `train`, return the (N, nv) predicted torques of `test`."""
    pmodel = pin.buildModelFromUrdf(urdf)
    eps = actuators.DEFAULT_EPS
    parts = [_pinocchio_rows(pmodel, t, eps) for t in train]
    matrix = np.concatenate([a for a, _ in parts])
    torques = np.concatenate([b for _, b in parts])
    solution = np.linalg.lstsq(matrix, torques, rcond=1e-10)[0]
    return (_pinocchio_rows(pmodel, test, eps)[0] @ solution).reshape(test.tau.shape)


def run_kuka(source: str, out: str) -> dict:
    del out
    start = time.perf_counter()
    train = datasets.load_dataset('kuka-lwr4', source, [1, 2])
    (test,) = datasets.load_dataset('kuka-lwr4', source, [3])
    problem, params, result = _nea_fit(os.path.join(CONFIG, 'kuka_lwr4.yaml'), train,
                                       os.path.join(source, 'model', 'kuka_lwr4.urdf'))
    torques = torque_function(problem.model, problem.config.model.actuator)
    q, qd, qdd = (jnp.asarray(a) for a in (test.q, test.qd, test.qdd))
    rows = {'ours (NEA, runs 1-2)': torque_scores(np.asarray(torques(params, q, qd, qdd)),
                                                  test.tau)}
    rows['nominal kuka_lwr4.urdf'] = torque_scores(
        np.asarray(torques(problem.base_params, q, qd, qdd)), test.tau)
    rows['OLS, unconstrained (Pinocchio)'] = torque_scores(
        unconstrained_ls(os.path.join(source, 'model', 'kuka_lwr4.urdf'), train, test), test.tau)
    for name, file in KUKA_REFERENCES.items():
        model, ref = _reference_model(os.path.join(source, 'model', file))
        assert model.joint_names == problem.model.joint_names, model.joint_names
        ref_torques = torque_function(model, 'coulomb_viscous')
        rows[f'{name} URDF'] = torque_scores(np.asarray(ref_torques(ref, q, qd, qdd)),
                                             test.tau)
    _print_torques('KUKA LWR4+: joint torques of run 3 (held out) from recorded q, qd, qdd',
                   rows, problem.model.joint_names)
    print(f'NEA: {result.iterations} Gauss-Newton steps, raw solution consistent: '
          f'{result.info.get("raw_consistent")}, refined by consistent least squares: '
          f'{result.info.get("refined", False)} (training loss {result.final_loss:.4g}, '
          f'projection only {result.info.get("loss_projected", result.final_loss):.4g}), '
          f'consistent: {bool(np.all(result.consistent))}, {result.wall_time:.1f} s')
    values = [mean for mean, _, _ in rows.values()]
    pooled = [error for _, _, error in rows.values()]
    return {'kuka_nrmse': values[0], 'kuka_pooled_rel_err': pooled[0],
            'kuka_nrmse_nominal': values[1], 'kuka_nrmse_ols': values[2],
            'kuka_nrmse_gaz2016': values[3], 'kuka_nrmse_flobaroid': values[4],
            'kuka_s': time.perf_counter() - start}


def run_panda(source: str, out: str) -> dict:
    del out
    start = time.perf_counter()
    (run,) = datasets.load_dataset('panda-gaz2019', source)
    split = int(round(PANDA_SPLIT_S / run.dt))
    problem, params, result = _nea_fit(os.path.join(CONFIG, 'panda_gaz2019.yaml'),
                                       [run.sample_range(0, split)])
    (test,) = pipeline.prepare_trajectories(problem, [run.sample_range(split, run.num_samples)])
    samples = estimator_data.nea_samples(test)
    q, qd, qdd = (jnp.asarray(samples[k]) for k in ('q', 'qd', 'qdd'))
    torques = torque_function(problem.model, problem.config.model.actuator)
    rigid = torque_function(problem.model, 'ideal')
    rows = {'ours (NEA, first 14 s)': torque_scores(np.asarray(torques(params, q, qd, qdd)),
                                                    samples['tau']),
            'example-robot-data URDF': torque_scores(
                np.asarray(rigid(problem.base_params, q, qd, qdd)), samples['tau'])}
    _print_torques(f'Franka Panda: joint torques of the last {run.duration - PANDA_SPLIT_S:.0f} '
                   's (held out)', rows, problem.model.joint_names)
    print(f'NEA: {result.iterations} Gauss-Newton steps, consistent: '
          f'{bool(np.all(result.consistent))}, {result.wall_time:.1f} s')
    values = list(rows.values())
    return {'panda_nrmse': values[0][0], 'panda_nrmse_erd': values[1][0],
            'panda_s': time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help=f'IBM: {IBM_SIZES[True]} instead of {IBM_SIZES[False]}')
    parser.add_argument('--data', default=DATA, help='folder holding the dataset folders')
    parser.add_argument('--only', default='ibm,kuka,panda')
    parser.add_argument('--out', default=os.path.join('out', 'real_data'),
                        help='folder for the report figures')
    args = parser.parse_args()
    jax.config.update('jax_enable_x64', True)
    os.makedirs(args.out, exist_ok=True)
    parts = args.only.split(',')
    summary = {}
    if 'kuka' in parts:
        summary.update(run_kuka(os.path.join(args.data, 'kuka-lwr4-flobaroid'), args.out))
    if 'panda' in parts:
        summary.update(run_panda(os.path.join(args.data, 'panda-gaz2019'), args.out))
    if 'ibm_cli' in parts:
        summary.update(run_ibm_cli(os.path.join(args.data, 'ibm-double-pendulum'), args.out))
    if 'ibm' in parts:
        summary.update(run_ibm(os.path.join(args.data, 'ibm-double-pendulum'), args.quick,
                               args.out))
    print('RESULT real_data ' + ' '.join(
        f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in summary.items()))


if __name__ == '__main__':
    main()
