"""Live benchmark (issue 7, "Speed"): `sim_robot` and `estimator` as separate processes.

  (a) Ingestion: a 7-DOF Panda (`config/panda.yaml`) published at 1 kHz to an estimator
      that has compiled. Its windows are longer than the measurement, so it only buffers: joint_states published
      (the `sim_robot` summary) vs received and rejected by the estimator (its
      `/diagnostics`), and the estimator's CPU use while ingesting (from /proc, in % of one
      core): its main thread, which runs the callbacks (beside it: the same with no data,
      and the whole process).
  (b) Inference: the double pendulum of `config/double_pendulum_live.yaml` with 64 particles
      (sim_robot at its 200 Hz default), the estimator with one XLA CPU device per core
      (`XLA_FLAGS`, see `ros.estimator`) so that the particles are sharded over the cores: per window, the inference time (update + prediction,
      `iteration_time_s`) against the hop, and the lag from window end to publish (`lag_s`,
      node clock), from the estimator's diagnostics.

Every process binds to loopback only (`config/fastdds_localhost.xml`,
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) on a domain derived from this process id, as the ROS
tests do. The last line is `RESULT live key=value ...`.

Usage:
  python bench/live.py [--quick]

`--quick`: 10 s of 1 kHz data and 4 windows (about 2 minutes with compilation); without it
30 s and 15 windows.
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
sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402

from sysid_ros.ros.node_process import NodeProcess  # noqa: E402
from sysid_ros.ros.probe import ProbeNode  # noqa: E402

SIM = 'sysid_ros.ros.sim_robot'
ESTIMATOR = 'sysid_ros.ros.estimator'
# Longest wait for the estimator to compile [s].
COMPILE_TIMEOUT = 600.0
CLOCK_TICK = os.sysconf('SC_CLK_TCK')
SPLIT_FLAG = '--xla_force_host_platform_device_count'


def _env() -> dict:
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
    """Subscribes to `/diagnostics`; `latest` maps status name -> values."""

    def __init__(self):
        super().__init__('sysid_bench_live')
        self.latest: dict[str, dict[str, str]] = {}
        self.windows: dict[str, tuple[float, float]] = {}   # window_end -> (time, lag)
        self.node.create_subscription(DiagnosticArray, '/diagnostics',
                                      self._on_diagnostics, 10)

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
    return diag.status('estimator').get('ready') == 'True'


def _panda_config(folder: pathlib.Path, window: float) -> pathlib.Path:
    """config/panda.yaml with a cheap estimator and windows of `window` seconds (longer than
    the measurement: the estimator only ingests)."""
    tree = yaml.safe_load((REPO_ROOT / 'config' / 'panda.yaml').read_text())
    params = tree['/**']['ros__parameters']
    params['estimator'].update(particles=2, shooting_windows=1)
    params['online'] = dict(params.get('online') or {}, window_length=window, hop=1.0,
                            iterations_per_window=1, diagnostics_rate=2.0,
                            save_path=str(folder / 'posterior'))
    path = folder / 'panda_ingest.yaml'
    path.write_text(yaml.safe_dump(tree))
    return path


def _start(module: str, args, log: pathlib.Path, env: dict | None = None) -> NodeProcess:
    return NodeProcess(module, [str(a) for a in args], log, env=env or _env(), cwd=REPO_ROOT)


def _split_cores_env() -> dict:
    """The environment with one XLA CPU device per core (unless XLA_FLAGS sets a count), so
    that the estimator shards its 64 particles over the cores."""
    env = _env()
    if SPLIT_FLAG not in env.get('XLA_FLAGS', ''):
        env['XLA_FLAGS'] = (f'{env.get("XLA_FLAGS", "")} {SPLIT_FLAG}='
                            f'{len(os.sched_getaffinity(0))}').strip()
    return env


def _wait_compiled(diag: Diagnostics, estimator: NodeProcess) -> float:
    start = time.monotonic()
    def failed():
        return not estimator.running() or 'worker stopped' in estimator.output()

    if not diag.spin_until(lambda: _ready(diag) or failed(), COMPILE_TIMEOUT) or failed():
        raise RuntimeError(f'estimator not ready (or failed) after {COMPILE_TIMEOUT:g} s:\n'
                           + estimator.output()[-2000:])
    return time.monotonic() - start


def _published(sim: NodeProcess) -> int:
    for line in sim.output().splitlines():
        if 'published' in line and 'joint_states' in line:
            return int(line.split('published', 1)[1].split()[0])
    raise RuntimeError('no sim_robot summary:\n' + sim.output()[-2000:])


def ingestion(diag: Diagnostics, folder: pathlib.Path, seconds: float) -> dict:
    """(a): 7-DOF joint_states at 1 kHz into the estimator (module doc)."""
    config = _panda_config(folder, window=seconds + 5.0)
    estimator = _start(ESTIMATOR, ['-p', f'config:={config}', '-p', 'verify_samples:=0'],
                       folder / 'estimator_a.log')
    sim = None
    pid = estimator.proc.pid
    try:
        # Wait until the worker has compiled: tracing holds the GIL for seconds at a time,
        # which starves the callbacks (main thread, tid = pid) of a node that is starting.
        _wait_compiled(diag, estimator)
        idle0, t0 = _cpu_seconds(pid, pid), time.monotonic()
        diag.spin_for(3.0)
        idle = (_cpu_seconds(pid, pid) - idle0) / (time.monotonic() - t0)
        sim = _start(SIM, ['-p', f'config:={config}', '-p', 'publish_rate:=1000.0'],
                     folder / 'sim_a.log')
        # Measure from the first received message on.
        topic = 'input /joint_states'
        if not diag.spin_until(lambda: int(diag.status(topic).get('received', 0)) > 0,
                                COMPILE_TIMEOUT):
            raise RuntimeError('no joint_states reached the estimator:\n'
                               + sim.output()[-2000:])
        cpu0, main0, t0 = _cpu_seconds(pid), _cpu_seconds(pid, pid), time.monotonic()
        diag.spin_for(seconds)
        elapsed = time.monotonic() - t0
        busy = (_cpu_seconds(pid, pid) - main0) / elapsed
        process = (_cpu_seconds(pid) - cpu0) / elapsed
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
                cpu_idle=100.0 * idle, cpu_process=100.0 * process, seconds=seconds)


def inference(diag: Diagnostics, folder: pathlib.Path, windows: int) -> dict:
    """(b): the double pendulum with 64 particles (module doc)."""
    config = REPO_ROOT / 'config' / 'double_pendulum_live.yaml'
    estimator = _start(ESTIMATOR, ['--params-file', config, '-p', 'estimator.particles:=64',
                                   '-p', 'verify_samples:=0',
                                   '-p', f'online.save_path:={folder / "posterior"}'],
                       folder / 'estimator_b.log', env=_split_cores_env())
    sim = None
    try:
        compile_s = _wait_compiled(diag, estimator)
        hop = float(yaml.safe_load(config.read_text())['/**']['ros__parameters']['online']['hop'])
        diag.windows.clear()
        sim = _start(SIM, ['-p', f'config:={config}'], folder / 'sim_b.log')
        timeout = 60.0 + 5.0 * windows * hop
        if not diag.spin_until(lambda: len(diag.windows) >= windows, timeout):
            print(f'warning: {len(diag.windows)} of {windows} windows in {timeout:g} s',
                  file=sys.stderr)
        est = diag.status('estimator')
        drops = {k: v for k, v in diag.status('window buffer').items()
                 if k.startswith('windows_dropped')}
    finally:
        if sim is not None:
            sim.kill()
        estimator.kill()
    times = np.array([v[0] for v in diag.windows.values()])
    lags = np.array([v[1] for v in diag.windows.values()])
    return dict(compile_s=compile_s, hop=hop, windows=len(times), times=times, lags=lags,
                processed=int(est.get('windows', 0)), divergences=int(est.get('divergences', 0)),
                dropped=sum(int(v) for v in drops.values()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='short variant (~2 min)')
    args = parser.parse_args(argv)
    seconds, windows = (10.0, 4) if args.quick else (30.0, 15)
    diag = Diagnostics()
    try:
        with tempfile.TemporaryDirectory(prefix='sysid_bench_live_') as tmp:
            folder = pathlib.Path(tmp)
            a = ingestion(diag, folder, seconds)
            diag.latest.clear()
            b = inference(diag, folder, windows)
    finally:
        diag.close()

    print(f'(a) ingestion: 7-DOF Panda joint_states at 1 kHz for {a["seconds"]:g} s')
    print(f'  {"published":>10s} {"received":>10s} {"rejected":>9s} {"buffered %":>10s} '
          f'{"CPU ingest %":>12s} {"CPU idle %":>10s} {"CPU process %":>13s}')
    share = 100.0 * a['buffered'] / max(a['published'], 1)
    print(f'  {a["published"]:10d} {a["received"]:10d} {a["rejected"]:9d} {share:10.2f} '
          f'{a["cpu_ingest"]:12.1f} {a["cpu_idle"]:10.1f} {a["cpu_process"]:13.1f}')
    print('  CPU in % of one core: ingest/idle = the callback (main) thread with/without data; '
          'process = all threads')
    print(f'(b) inference: double pendulum, 64 particles, hop {b["hop"]:g} s, '
          f'compiled in {b["compile_s"]:.1f} s')
    print(f'  {"window":>6s} {"inference s":>11s} {"lag s":>8s}')
    for k, (t, lag) in enumerate(zip(b['times'], b['lags'])):
        print(f'  {k:6d} {t:11.3f} {lag:8.3f}')
    t_mean = float(np.mean(b['times'])) if b['windows'] else float('nan')
    t_max = float(np.max(b['times'])) if b['windows'] else float('nan')
    lag_mean = float(np.mean(b['lags'])) if b['windows'] else float('nan')
    lag_max = float(np.max(b['lags'])) if b['windows'] else float('nan')
    print(f'  windows processed {b["processed"]}, dropped {b["dropped"]}, divergences '
          f'{b["divergences"]}; load average {os.getloadavg()[0]:.2f}')
    print(f'RESULT live published={a["published"]} buffered={a["buffered"]} '
          f'buffered_pct={share:.2f} cpu_ingest_pct={a["cpu_ingest"]:.1f} '
          f'cpu_idle_pct={a["cpu_idle"]:.1f} hop_s={b["hop"]:g} '
          f'inference_mean_s={t_mean:.3f} inference_max_s={t_max:.3f} '
          f'lag_mean_s={lag_mean:.3f} lag_max_s={lag_max:.3f} windows={b["windows"]} '
          f'dropped={b["dropped"]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
