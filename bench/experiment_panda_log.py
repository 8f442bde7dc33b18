"""The real Panda log (Gaz et al. 2019) through the live estimator node, against the offline
fit of the same samples.

The log (`../shared/data/panda-gaz2019`, read in place through `io.datasets`: 21 s, resampled
to 1 kHz) is split once: the training part is the first TRAIN_S seconds, the held-out part
everything from HELD_OUT_S on; neither estimate sees a held-out sample.

  * Offline: `config/panda_gaz2019.yaml` as shipped (NEA of all 7 link inertials plus viscous
    and Coulomb friction per joint) through `pipeline`, as `sysid fit` runs it, on the
    training part.
  * Live: the training part written as a rosbag2 (`io.bag_writer`, as `sysid convert` does) on
    `/franka/joint_states`, played by `bag_player` (with /clock) into the `estimator`
    lifecycle node on sim time, once the node is active, at RATE times real time: a pace
    at which the node estimates on every window but the one the slow first window passes
    over (2-14 s of wall time per 1 s hop of 84 parameters on 2 shared cores; at real time
    it drops most of them). Its configuration is the
    shipped one with `data.driver: franka` (the topic is the profile's) and the live
    settings of `config/panda_live.yaml` (its `estimator` and `online` sections and its data
    noise and torque-sample keys): CSVGD on the equation error, 2 s windows every 1 s. The
    worker takes the newest window, so windows that arrive while it is busy are dropped: the
    result counts the windows it estimated on and the windows the buffer emitted.
  * Score (`io.torque_prediction`): the joint torques predicted by RNEA plus friction at the
    held-out q, qd and Savitzky-Golay qdd (the offline problem's preparation, one set of
    samples for both), per joint RMS(error) / RMS(measured), their mean over joints (nRMSE)
    and the pooled relative error. The live score is that of the last estimate published on
    `~/estimate`.
  * Converged: the last STEADY_WINDOWS live estimates' means all lie within one std of the
    latest (`io.payload_handoff.SteadyMean`, the estimator's own test).

Every ROS participant stays on loopback (`config/fastdds_localhost.xml`) in a domain derived
from this process id unless ROS_DOMAIN_ID is set.
"""

from __future__ import annotations

import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from sysid_ros.io import bag_writer, config as config_io, datasets, estimator_data, pipeline
from sysid_ros.io.payload_handoff import SteadyMean
from sysid_ros.io.torque_prediction import torque_function, torque_scores

__all__ = ['SOURCE', 'CONFIG', 'LIVE_STYLE', 'HELD_OUT_S', 'TRAIN_S', 'RATE', 'STEADY_WINDOWS',
           'live_config_tree', 'panda_log_case']

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, '..', 'shared', 'data', 'panda-gaz2019')
CONFIG = os.path.join(ROOT, 'config', 'panda_gaz2019.yaml')
LIVE_STYLE = os.path.join(ROOT, 'config', 'panda_live.yaml')
HELD_OUT_S = 14.0                               # [s] held out from here to the end
TRAIN_S = {True: 8.0, False: 14.0}              # [s] training part, by `quick`
RATE = 0.1                                      # [-] playback speed, of real time
STEADY_WINDOWS = 3
START_TIMEOUT = 600.0                           # [s, wall] imports and compilation
LIVE_DATA_KEYS = ('torque_samples', 'noise_std', 'torque_noise_std')


def live_config_tree(save_path: str) -> dict:
    """The shipped offline configuration made live: `data.driver: franka` and the live
    settings of LIVE_STYLE (module doc); the posterior is saved to `save_path` (a stem)."""
    tree = config_io.read_tree(CONFIG)
    style = config_io.read_tree(LIVE_STYLE)
    data = {k: v for k, v in tree['data'].items() if k != 'joint_states_topic'}
    data.update({k: style['data'][k] for k in LIVE_DATA_KEYS}, driver='franka')
    online = dict(style['online'], save_path=save_path)
    return dict(tree, data=data, estimator=dict(style['estimator']), online=online)


def _split(quick: bool):
    """(training, held-out) Trajectories of the log (module doc)."""
    (run,) = datasets.load_dataset('panda-gaz2019', SOURCE)
    train = run.sample_range(0, int(round(TRAIN_S[quick] / run.dt)))
    held_out = run.sample_range(int(round(HELD_OUT_S / run.dt)), run.num_samples)
    return train, held_out


def _held_out_scorer(problem, held_out):
    """`score(theta) -> TorqueScores` of (M,) parameters [physical] on the held-out part."""
    (prepared,) = pipeline.prepare_trajectories(problem, [held_out])
    samples = estimator_data.nea_samples(prepared)
    q, qd, qdd = (jnp.asarray(samples[k]) for k in ('q', 'qd', 'qdd'))
    torques = torque_function(problem.model, problem.config.model.actuator)

    def score(theta):
        params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
        return torque_scores(np.asarray(torques(params, q, qd, qdd)), samples['tau'])

    return score


def _ros_environment() -> dict:
    """This process's environment with DDS on loopback, in its own domain, for the nodes."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('FASTDDS_DEFAULT_PROFILES_FILE',
                          os.path.join(ROOT, 'config', 'fastdds_localhost.xml'))
    os.environ.setdefault('ROS_DOMAIN_ID', str(100 + os.getpid() % 100))
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get('PYTHONPATH')]))
    return dict(os.environ, PYTHONUNBUFFERED='1', PYTHONPATH=path)


def _finished(status: dict) -> bool:
    """Whether the estimator's diagnostics `status` show no window pending or in progress."""
    node, buffer = status.get('estimator', {}), status.get('window buffer', {})
    return ('windows' in node and node['windows'] == buffer.get('windows_emitted')
            and float(buffer.get('fill', 1.0)) < 1.0)


def _run_live(folder: str, bag: str, config: str, names, rate: float) -> dict:
    """Play `bag` at `rate` into an estimator on `config`; the estimates (list of {name:
    (mean, std)} in arrival order), the last diagnostics values and the wall times."""
    env = _ros_environment()
    from diagnostic_msgs.msg import DiagnosticArray

    from sysid_ros.ros.estimate_client import EstimateClient
    from sysid_ros.ros.node_process import NodeProcess
    from sysid_ros.ros.probe import ProbeNode

    started = time.monotonic()
    estimates, status = [], {}

    def on_diagnostics(msg):
        for item in msg.status:
            status[item.name.partition(': ')[2]] = {kv.key: kv.value for kv in item.values}

    def on_estimate(estimate):
        if all(name in estimate for name in names):
            estimates.append(estimate)

    probe = ProbeNode('sysid_panda_log')
    probe.node.create_subscription(DiagnosticArray, '/diagnostics', on_diagnostics, 10)
    EstimateClient(probe.node, '/estimator/estimate', callback=on_estimate)
    # The Pinocchio check is skipped: the model is example-robot-data's, checked by its tests.
    estimator = NodeProcess('sysid_ros.ros.estimator', [
        '-p', f'config:={config}', '-p', 'use_sim_time:=true', '-p', 'verify_samples:=0'],
        os.path.join(folder, 'estimator.log'), env=env, cwd=ROOT)
    player = None
    try:
        # Play once the node is active: before that its subscription drops what arrives.
        if not probe.spin_until(lambda: status.get('estimator', {}).get('active') == 'True'
                                or not estimator.running(), START_TIMEOUT):
            raise RuntimeError(f'estimator not active after {START_TIMEOUT:g} s:\n'
                               + estimator.output()[-3000:])
        if not estimator.running():
            raise RuntimeError('estimator exited:\n' + estimator.output()[-3000:])
        active_s = time.monotonic() - started
        player = NodeProcess('sysid_ros.ros.bag_player', [
            '-p', f'bag:={bag}', '-p', f'rate:={rate!r}', '-p', 'wait_for_subscribers:=1'],
            os.path.join(folder, 'bag_player.log'), env=env, cwd=ROOT)
        play_start = time.monotonic()
        probe.spin_until(lambda: not player.running() or not estimator.running(),
                         START_TIMEOUT)
        play_s = time.monotonic() - play_start
        if player.wait(10.0) != 0:
            raise RuntimeError('bag_player failed:\n' + player.output()[-3000:])
        # Finished: fresh diagnostics say every emitted window was estimated on and none is
        # ready (the worker pops a window, then updates: `windows` lags while it works).
        status.clear()
        if not probe.spin_until(lambda: _finished(status) or not estimator.running(),
                                START_TIMEOUT):
            raise RuntimeError(f'estimator still busy {START_TIMEOUT:g} s after the replay')
        probe.spin_until(lambda: len(estimates) >= int(status['estimator']['windows']), 10.0)
        if not estimator.running():
            raise RuntimeError('estimator exited:\n' + estimator.output()[-3000:])
        estimator.interrupt()
    finally:
        for process in (player, estimator):
            if process is not None:
                process.kill()
        probe.close()
    return {'estimates': estimates, 'status': status, 'active_s': active_s, 'play_s': play_s}


def panda_log_case(quick: bool, rate: float = RATE, out: str | None = None) -> dict:
    """Run the case of the module doc; an entry point (it enables float64 JAX).

    Args:
      quick: train on TRAIN_S[True] seconds instead of TRAIN_S[False] (the held-out part is
        the same).
      rate: playback speed (1: real time; below 1 slower, so that an estimator that needs
        more than `online.hop` of wall time per window sees every window).
      out: folder, new or without a `train_bag`, that keeps the bag, the live
        configuration, the node logs and the saved posterior (default: a temporary folder,
        removed at the end).

    Returns:
      nrmse_live, nrmse_offline: held-out torque nRMSE [-] (mean over joints) of the last
        live estimate and of the offline fit; ratio: live / offline; per_joint_live,
        per_joint_offline: (nv,) lists; pooled_live, pooled_offline: pooled relative errors;
        nrmse_history: the held-out nRMSE of each live estimate, in arrival order;
        windows: live windows estimated on; windows_emitted: windows the buffer emitted
        (the rest dropped while the worker was busy); converged: the live means stopped
        moving (module doc); divergences; train_s, held_out_s: seconds of each part;
        active_s: wall seconds until the node was active; play_s: wall seconds of the
        replay; offline_s: wall seconds of the offline fit; wall_s: the whole case;
        iteration_s: wall seconds of the last window's update; buffer: the window buffer's
        last diagnostics values (received, rejected, dropped).
    """
    jax.config.update('jax_enable_x64', True)
    started = time.monotonic()
    train, held_out = _split(quick)
    problem = pipeline.build_problem(CONFIG)
    score = _held_out_scorer(problem, held_out)
    offline_start = time.monotonic()
    result = pipeline.fit(problem, pipeline.prepare_trajectories(problem, [train]))
    offline_s = time.monotonic() - offline_start
    offline = score(result.estimate)

    with tempfile.TemporaryDirectory(prefix='panda_log_') as scratch:
        folder = out or scratch
        os.makedirs(folder, exist_ok=True)
        bag = os.path.join(folder, 'train_bag')
        bag_writer.write_trajectory_bag(bag, [train], joint_states_topic='/franka/joint_states',
                                        custom_data={'sysid_convert.dataset': 'panda-gaz2019'})
        config = os.path.join(folder, 'panda_gaz2019_live.yaml')
        tree = live_config_tree(os.path.join(folder, 'posterior'))
        live_problem = pipeline.build_problem(config_io.from_dict(tree, config))
        if live_problem.names != problem.names:
            raise AssertionError(f'live parameters {live_problem.names} differ from the '
                                 f'offline ones {problem.names}')
        with open(config, 'w', encoding='utf-8') as f:
            yaml.safe_dump({'/**': {'ros__parameters': tree}}, f, sort_keys=False)
        live = _run_live(folder, bag, config, problem.names, rate)
    if not live['estimates']:
        raise RuntimeError('the estimator published no estimate')
    steady, converged, history = SteadyMean(STEADY_WINDOWS), False, []
    for estimate in live['estimates']:
        mean, std = (np.array([estimate[n][i] for n in problem.names]) for i in (0, 1))
        converged = steady.update(mean, std)
        history.append(score(mean).nrmse)
    online = score(mean)
    buffer, node = live['status'].get('window buffer', {}), live['status'].get('estimator', {})
    return {'nrmse_live': online.nrmse, 'nrmse_offline': offline.nrmse,
            'ratio': online.nrmse / offline.nrmse,
            'per_joint_live': online.per_joint.tolist(),
            'per_joint_offline': offline.per_joint.tolist(),
            'pooled_live': online.pooled, 'pooled_offline': offline.pooled,
            'nrmse_history': history, 'windows': len(live['estimates']),
            'windows_emitted': int(buffer.get('windows_emitted', -1)),
            'converged': bool(converged), 'divergences': int(node.get('divergences', -1)),
            'iteration_s': float(node.get('iteration_time_s', 'nan')), 'buffer': buffer,
            'train_s': train.duration, 'held_out_s': held_out.duration,
            'active_s': live['active_s'], 'play_s': live['play_s'], 'offline_s': offline_s,
            'wall_s': time.monotonic() - started}
