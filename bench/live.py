"""Live benchmark: `sim_robot` and `estimator` as separate processes.

  (a) The arm: the 7-DOF Panda of `config/panda_live.yaml` (`sim_robot` at 1 kHz, joint-space
      sines inside the limits, hidden viscous + Coulomb friction and a rigid 1 kg payload
      held by link 7 from the start, effort noise) into the live estimator of that file,
      started first and measured once it has compiled and activated:
      - ingestion: joint_states published (the `sim_robot` summary) vs received and
        rejected by the estimator (its `/diagnostics`), and the estimator's CPU use (from
        /proc, in % of one core): its main thread, which runs the callbacks (beside it: the
        same with no data, and the whole process);
      - inference, per window: the inference time (update + prediction,
        `iteration_time_s`) against the hop and the lag from window end to publish
        (`lag_s`, node clock);
      - the last estimate at the end of the measurement against sim_robot's ground truth
        (payload mass and centre of mass, each joint's damping and Coulomb friction);
      - put-down: then `~/drop_payload`, and the seconds until the payload mass estimate
        falls below a tenth of the payload (the windows of this phase count above too).
  (b) The double pendulum of `config/double_pendulum_live.yaml` with 64 particles
      (sim_robot at its 200 Hz default) and the likelihood of `--dp-residual` (default
      `equation_error`; the file's own is `output_error`): inference time and lag per
      window.
  Both estimators run with one XLA CPU device per core (`XLA_FLAGS`, see `ros.estimator`),
  so that their particles are sharded over the cores.

Every process binds to loopback only (`config/fastdds_localhost.xml`,
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) on a domain derived from this process id, as the ROS
tests do. The last line is `RESULT live key=value ...`.

Usage:
  python -m bench.live [--quick] [--dp-residual output_error|equation_error]

`--quick`: 15 s of the arm and 4 double-pendulum windows; without it 60 s and 15 windows.
Compilation comes first: a few minutes per estimator on a loaded 2-core machine.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ['FASTDDS_DEFAULT_PROFILES_FILE'] = str(REPO_ROOT / 'config' / 'fastdds_localhost.xml')
os.environ['ROS_DOMAIN_ID'] = str(100 + (os.getpid() + 37) % 100)

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
import numpy as np  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
import yaml  # noqa: E402

from sysid_ros.ros import demo_robots, qos  # noqa: E402
from sysid_ros.ros.node_process import NodeProcess  # noqa: E402
from sysid_ros.ros.probe import ProbeNode  # noqa: E402

SIM = 'sysid_ros.ros.sim_robot'
ESTIMATOR = 'sysid_ros.ros.estimator'
# Longest wait for the estimator to compile [s].
COMPILE_TIMEOUT = 900.0
# Particles of the double pendulum's estimator.
DP_PARTICLES = 64
# After the measurement the payload is put down; followed once the payload mass estimate is
# below this [kg], within this long [s].
DROP_FOLLOWED = 0.1 * demo_robots.PAYLOAD_MASS
FOLLOW_TIMEOUT = 30.0
# The arm at 4 kHz with its payload held from the start (`ros.demo_robots`).
ARM_SIM_ARGS = demo_robots.arm_sim_args(payload_time=0.0)
CLOCK_TICK = os.sysconf('SC_CLK_TCK')
SPLIT_FLAG = '--xla_force_host_platform_device_count'


def node_env() -> dict:
    """This process's environment with unbuffered output and the source tree on the path."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                      os.environ.get('PYTHONPATH')]))
    return env


def _cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time of a process (or of one of its threads) so far [s], from
    /proc/<pid>[/task/<thread>]/stat."""
    path = f'/proc/{pid}/stat' if thread is None else f'/proc/{pid}/task/{thread}/stat'
    fields = pathlib.Path(path).read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


class Diagnostics(ProbeNode):
    """Subscribes to `/diagnostics` (`latest` maps status name -> values), the estimate
    (`estimate`: parameter name -> (posterior mean, std)) and sim_robot's ground truth
    (`truth`: name -> value, for the parameters and `payload_held`)."""

    def __init__(self):
        super().__init__('sysid_bench_live')
        self.latest: dict[str, dict[str, str]] = {}
        self.windows: dict[str, tuple[float, float]] = {}   # window_end -> (time, lag)
        self.estimate: dict[str, tuple[float, float]] = {}
        self.truth: dict[str, str] = {}
        self.node.create_subscription(DiagnosticArray, '/diagnostics',
                                      self._on_diagnostics, 10)
        self.node.create_subscription(JointState, '/estimator/estimate', self._on_estimate,
                                      qos.LATCHED)
        self.node.create_subscription(DiagnosticArray, '/sim_robot/ground_truth',
                                      self._on_truth, qos.LATCHED)

    def _on_estimate(self, msg: JointState) -> None:
        self.estimate = dict(zip(msg.name, zip(msg.position, msg.velocity)))

    def _on_truth(self, msg: DiagnosticArray) -> None:
        self.truth = {kv.key: kv.value for kv in msg.status[0].values}

    def drop_payload(self, timeout: float) -> bool:
        """Call sim_robot's `~/drop_payload`; returns whether it dropped the payload."""
        client = self.node.create_client(Trigger, '/sim_robot/drop_payload')
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                return False
            future = client.call_async(Trigger.Request())
            return self.spin_until(future.done, timeout) and future.result().success
        finally:
            self.node.destroy_client(client)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            name = status.name.split(': ', 1)[-1]
            values = {kv.key: kv.value for kv in status.values}
            self.latest[name] = values
            if 'window_end' in values:
                self.windows[values['window_end']] = (float(values['iteration_time_s']),
                                                      float(values['lag_s']))

    def status(self, suffix: str) -> dict[str, str]:
        for name, values in self.latest.items():
            if name.endswith(suffix):
                return values
        return {}


def _ready(diag: Diagnostics) -> bool:
    """The estimator has configured (compiled: its diagnostics start then) and activated."""
    return diag.status('estimator').get('active') == 'True'


def start_node(module: str, args, log: pathlib.Path, env: dict | None = None) -> NodeProcess:
    """A node process from the repository root, in `env` (default `node_env()`)."""
    return NodeProcess(module, [str(a) for a in args], log, env=env or node_env(),
                       cwd=REPO_ROOT)


def _split_cores_env() -> dict:
    """The environment with one XLA CPU device per core (unless XLA_FLAGS sets a count), so
    that the estimator shards its 64 particles over the cores."""
    env = node_env()
    if SPLIT_FLAG not in env.get('XLA_FLAGS', ''):
        env['XLA_FLAGS'] = (f'{env.get("XLA_FLAGS", "")} {SPLIT_FLAG}='
                            f'{len(os.sched_getaffinity(0))}').strip()
    return env


def wait_compiled(diag: Diagnostics, estimator: NodeProcess) -> float:
    """Seconds until `estimator` is active (compiled); raises if it fails first."""
    start = time.monotonic()

    def failed():
        return not estimator.running() or 'worker stopped' in estimator.output()

    if not diag.spin_until(lambda: _ready(diag) or failed(), COMPILE_TIMEOUT) or failed():
        raise RuntimeError(f'estimator failed, or not ready after {COMPILE_TIMEOUT:g} s:\n'
                           + estimator.output()[-2000:])
    return time.monotonic() - start


def _published(sim: NodeProcess) -> int:
    for line in sim.output().splitlines():
        if 'published' in line and 'joint_states' in line:
            return int(line.split('published', 1)[1].split()[0])
    raise RuntimeError('no sim_robot summary:\n' + sim.output()[-2000:])


def _window_stats(diag: Diagnostics) -> dict:
    """Inference times and lags [s] of the windows in `diag.windows`, mean and max."""
    times = np.array([v[0] for v in diag.windows.values()])
    lags = np.array([v[1] for v in diag.windows.values()])

    def stat(f, a):
        return float(f(a)) if len(a) else float('nan')

    return {'windows': len(times), 'times': times, 'lags': lags,
            'inference_mean': stat(np.mean, times), 'inference_max': stat(np.max, times),
            'lag_mean': stat(np.mean, lags), 'lag_max': stat(np.max, lags)}


def _estimator_counts(diag: Diagnostics) -> dict:
    """Windows processed, dropped and diverged, from the latest diagnostics."""
    est = diag.status('estimator')
    drops = [int(v) for k, v in diag.status('window buffer').items()
             if k.startswith('windows_dropped')]
    return {'processed': int(est.get('windows', 0)), 'divergences': int(est.get('divergences', 0)),
            'dropped': sum(drops)}


def arm(diag: Diagnostics, folder: pathlib.Path, seconds: float) -> dict:
    """(a): the Panda at 1 kHz into its live estimator (module doc)."""
    config = REPO_ROOT / 'config' / 'panda_live.yaml'
    params = yaml.safe_load(config.read_text())['/**']['ros__parameters']
    estimator = start_node(ESTIMATOR, ['--params-file', config, '-p', 'verify_samples:=0',
                                       '-p', f'online.save_path:={folder / "arm"}'],
                           folder / 'estimator_arm.log', env=_split_cores_env())
    sim = None
    pid = estimator.proc.pid
    try:
        # Start the robot once the estimator has compiled: tracing holds the GIL for seconds
        # at a time, which starves the callbacks (main thread, tid = pid).
        compile_s = wait_compiled(diag, estimator)
        idle0, t0 = _cpu_seconds(pid, pid), time.monotonic()
        diag.spin_for(3.0)
        idle = (_cpu_seconds(pid, pid) - idle0) / (time.monotonic() - t0)
        diag.windows.clear()
        sim = start_node(SIM, ['-p', f'config:={config}']
                         + [a for arg in ARM_SIM_ARGS for a in ('-p', arg)],
                         folder / 'sim_arm.log')
        # Measure from the first received message on.
        topic = f'input {params["data"]["joint_states_topic"]}'
        if not diag.spin_until(lambda: int(diag.status(topic).get('received', 0)) > 0,
                               COMPILE_TIMEOUT):
            raise RuntimeError('no joint_states reached the estimator:\n'
                               + sim.output()[-2000:])
        cpu0, main0, t0 = _cpu_seconds(pid), _cpu_seconds(pid, pid), time.monotonic()
        diag.spin_for(seconds)
        elapsed = time.monotonic() - t0
        busy = (_cpu_seconds(pid, pid) - main0) / elapsed
        process = (_cpu_seconds(pid) - cpu0) / elapsed
        estimate, truth = dict(diag.estimate), dict(diag.truth)
        if not diag.drop_payload(10.0):
            raise RuntimeError('sim_robot did not drop the payload:\n' + sim.output()[-2000:])
        dropped = time.monotonic()
        followed = diag.spin_until(
            lambda: diag.estimate['payload.mass'][0] < DROP_FOLLOWED, FOLLOW_TIMEOUT)
        follow_s = time.monotonic() - dropped if followed else float('nan')
        sim.interrupt()
        diag.spin_for(3.0)                       # the last messages and diagnostics
        received = int(diag.status(topic)['received'])
        rejected = int(diag.status('window buffer')['rejected'])
        published = _published(sim)
    finally:
        if sim is not None:
            sim.kill()
        estimator.kill()
    return dict(published=published, received=received, rejected=rejected,
                buffered=received - rejected, cpu_ingest=100.0 * busy,
                cpu_idle=100.0 * idle, cpu_process=100.0 * process, seconds=seconds,
                compile_s=compile_s, hop=float(params['online']['hop']),
                particles=int(params['estimator']['particles']),
                residual=params['estimator'].get('residual', 'output_error'),
                payload_held=truth.get('payload_held'), follow_s=follow_s,
                table={n: (float(truth[n]), *estimate[n]) for n in estimate if n in truth},
                **_window_stats(diag), **_estimator_counts(diag))


def double_pendulum(diag: Diagnostics, folder: pathlib.Path, windows: int,
                    residual: str) -> dict:
    """(b): the double pendulum with DP_PARTICLES particles and the likelihood `residual`
    (module doc)."""
    config = REPO_ROOT / 'config' / 'double_pendulum_live.yaml'
    online = yaml.safe_load(config.read_text())['/**']['ros__parameters']['online']
    # One equation-error piece per live window.
    window = [] if residual == 'output_error' else [
        '-p', f'estimator.window:={float(online["window_length"])}']
    estimator = start_node(ESTIMATOR, ['--params-file', config,
                                       '-p', f'estimator.particles:={DP_PARTICLES}',
                                       '-p', f'estimator.residual:={residual}', *window,
                                       '-p', 'verify_samples:=0',
                                       '-p', f'online.save_path:={folder / "dp"}'],
                           folder / 'estimator_dp.log', env=_split_cores_env())
    sim = None
    hop = float(online['hop'])
    try:
        compile_s = wait_compiled(diag, estimator)
        diag.windows.clear()
        sim = start_node(SIM, ['-p', f'config:={config}'], folder / 'sim_dp.log')
        timeout = 60.0 + 5.0 * windows * hop
        if not diag.spin_until(lambda: len(diag.windows) >= windows, timeout):
            print(f'warning: {len(diag.windows)} of {windows} windows in {timeout:g} s',
                  file=sys.stderr)
        counts = _estimator_counts(diag)
    finally:
        if sim is not None:
            sim.kill()
        estimator.kill()
    return dict(compile_s=compile_s, hop=hop, particles=DP_PARTICLES, residual=residual,
                **_window_stats(diag), **counts)


def _print_windows(run: dict) -> None:
    """The per-window table and the counts of one run."""
    print(f'  {"window":>6s} {"inference s":>11s} {"lag s":>8s}')
    for k, (t, lag) in enumerate(zip(run['times'], run['lags'])):
        print(f'  {k:6d} {t:11.3f} {lag:8.3f}')
    print(f'  windows processed {run["processed"]}, dropped {run["dropped"]}, divergences '
          f'{run["divergences"]}; inference mean {run["inference_mean"]:.3f} s (max '
          f'{run["inference_max"]:.3f}), lag mean {run["lag_mean"]:.3f} s (max '
          f'{run["lag_max"]:.3f}) per hop of {run["hop"]:g} s')


def _arm_errors(table: dict) -> dict:
    """Absolute errors of the arm's last estimate (`table`: name -> (truth, mean, std)): the
    payload mass [kg], the distance of its centre of mass [m], the largest damping
    [N m s/rad] and Coulomb [N m] errors."""
    errors = {name: abs(mean - truth) for name, (truth, mean, _) in table.items()}

    def largest(suffix):
        return max((e for n, e in errors.items() if n.endswith(suffix)), default=np.nan)

    return {'mass': errors.get('payload.mass', np.nan),
            'com': float(np.linalg.norm([errors.get(f'payload.com.{c}', np.nan)
                                         for c in 'xyz'])),
            'damping': largest('.damping'), 'coulomb': largest('.coulomb')}


def _print_arm(a: dict) -> None:
    """The arm's tables: ingestion, windows, payload mass."""
    print(f'(a) arm: 7-DOF Panda joint_states at 1 kHz for {a["seconds"]:g} s, '
          f'{a["particles"]} particles, {a["residual"]}, compiled in {a["compile_s"]:.1f} s')
    print(f'  {"published":>10s} {"received":>10s} {"rejected":>9s} {"buffered %":>10s} '
          f'{"CPU ingest %":>12s} {"CPU idle %":>10s} {"CPU process %":>13s}')
    share = 100.0 * a['buffered'] / max(a['published'], 1)
    print(f'  {a["published"]:10d} {a["received"]:10d} {a["rejected"]:9d} {share:10.2f} '
          f'{a["cpu_ingest"]:12.1f} {a["cpu_idle"]:10.1f} {a["cpu_process"]:13.1f}')
    print('  CPU in % of one core: ingest/idle = the callback (main) thread with/without data; '
          'process = all threads (inference included)')
    _print_windows(a)
    print(f'  last estimate vs the ground truth (payload held: {a["payload_held"]}):')
    print(f'  {"parameter":>22s} {"truth":>8s} {"mean":>8s} {"std":>8s} {"error":>8s}')
    for name, (truth, mean, std) in a['table'].items():
        print(f'  {name:>22s} {truth:8.3f} {mean:8.3f} {std:8.3f} {mean - truth:8.3f}')
    print(f'  put down: payload mass estimate below {DROP_FOLLOWED:g} kg '
          f'{a["follow_s"]:.1f} s after the drop (nan: not within {FOLLOW_TIMEOUT:g} s); '
          f'load average {os.getloadavg()[0]:.2f}', flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='short variant')
    parser.add_argument('--dp-residual', choices=('output_error', 'equation_error'),
                        default='equation_error', help="the double pendulum's likelihood")
    args = parser.parse_args(argv)
    seconds, windows = (15.0, 4) if args.quick else (60.0, 15)
    diag = Diagnostics()
    try:
        with tempfile.TemporaryDirectory(prefix='sysid_bench_live_') as tmp:
            folder = pathlib.Path(tmp)
            a = arm(diag, folder, seconds)
            _print_arm(a)
            diag.latest.clear()
            b = double_pendulum(diag, folder, windows, args.dp_residual)
    finally:
        diag.close()
    print(f'(b) double pendulum, {b["particles"]} particles, {b["residual"]}, compiled in '
          f'{b["compile_s"]:.1f} s')
    _print_windows(b)
    print(f'  load average {os.getloadavg()[0]:.2f}')
    share = 100.0 * a['buffered'] / max(a['published'], 1)
    err = _arm_errors(a['table'])
    print(f'RESULT live published={a["published"]} buffered={a["buffered"]} '
          f'buffered_pct={share:.2f} cpu_ingest_pct={a["cpu_ingest"]:.1f} '
          f'cpu_idle_pct={a["cpu_idle"]:.1f} arm_particles={a["particles"]} '
          f'arm_residual={a["residual"]} '
          f'arm_hop_s={a["hop"]:g} arm_inference_mean_s={a["inference_mean"]:.3f} '
          f'arm_inference_max_s={a["inference_max"]:.3f} arm_lag_mean_s={a["lag_mean"]:.3f} '
          f'arm_lag_max_s={a["lag_max"]:.3f} arm_windows={a["windows"]} '
          f'arm_dropped={a["dropped"]} '
          f'arm_payload_mass_err={err["mass"]:.3f} arm_payload_com_err_m={err["com"]:.3f} '
          f'arm_damping_err_max={err["damping"]:.3f} '
          f'arm_coulomb_err_max={err["coulomb"]:.3f} arm_drop_follow_s={a["follow_s"]:.1f} '
          f'dp_particles={b["particles"]} dp_residual={b["residual"]} dp_hop_s={b["hop"]:g} '
          f'dp_inference_mean_s={b["inference_mean"]:.3f} '
          f'dp_inference_max_s={b["inference_max"]:.3f} dp_lag_mean_s={b["lag_mean"]:.3f} '
          f'dp_lag_max_s={b["lag_max"]:.3f} dp_windows={b["windows"]} '
          f'dp_dropped={b["dropped"]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
