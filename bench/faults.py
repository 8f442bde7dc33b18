"""Faults bench: the live estimator under wire faults, a SIGKILL and restart, its guards, a
soak, and an hour-long bag.

  (a) Wire faults (loopback DDS): `sim_robot` (config/double_pendulum_live.yaml) publishes
      on `/raw/joint_states`; this process relays every message to the estimator's
      `/joint_states`, with one fault at a time for `--phase` seconds and as long clean
      between them: the driver dies and comes back (nothing relayed), a burst (half a
      second held back, then sent at once: far above 10x the rate), pairs swapped (out of
      order), every message twice (duplicated), every tenth message also sent stamped 100 s
      ahead with wrong positions (future stamped), the joint order reversed, the clock
      jumping back 100 s (a bag loop) and then forward again. A fault is survived when the
      node still runs, estimates come again after it, and the diagnostic that names it
      moved (below, `EXPECTED`). An estimate is poisoned when a mean is not finite, or a
      link mass is further than max(5 std, 0.15 kg) from sim_robot's truth.
  (b) Restart: the estimator (saving every 2 s, `online.save_interval`) is killed with
      SIGKILL and started again on the same `online.save_path`; `restart_std_ratio` is the
      largest ratio of a parameter's std 3 windows after the restart to its std before the
      kill (1: nothing lost; a start from the bounds is about 10-100).
  (c) Guards (no ROS): every refusal of the push gate (`parameter_push.held_reason`) and of
      the payload gate (`payload_handoff.refusals`) on a case built to trip it alone, and the
      case that passes both; `guards_refused=K/N` counts the refusals that held.
  (d) Soak (in this process, no DDS): the double pendulum's `SimulatedRobot` streams into a
      `WindowBuffer` and `OnlineSession` (the node's own state) as fast as they run, one
      window (`online.window_length`, 1 s) every `SOAK_HOP` (10 s) of robot time, so that it
      runs faster than real time (a window takes 2-3 s here); resident memory and window
      time are fitted by a robust line (Theil-Sen, with its 95 % interval) in robot time
      after the first third: `mem_growth_pct_per_hour` and `latency_trend_ms_per_hour` per
      robot hour.
  (e) Bag: a 7-joint JointState bag at 1 kHz (mcap) read by `bags.read_bag` at
      `data.rate` 100 Hz in a fresh process: `bag_peak_mb` is its peak resident memory above
      the same process after its imports (JAX, Pinocchio, rosbags: about 400 MB), for an
      hour of recording (quick: measured at 6 and 12 minutes and extrapolated linearly; the
      output alone grows 6 MB per recorded hour at 100 Hz: see the table).

The last line is `RESULT faults survived=K tried=N poisoned=P restart_std_ratio=R
mem_growth_pct_per_hour=M latency_trend_ms_per_hour=L guards_refused=K/N bag_peak_mb=B`.

Usage:
  python -m bench.faults [--quick] [--phase SECONDS]

`--quick`: 4 s phases, a 70-window soak (0.19 robot hours), bags of 6 and 12 minutes;
without it 8 s phases, 1800 windows (5 robot hours) and a 60-minute bag. Two estimator
compiles come first (a few minutes on a loaded 2-core machine).
"""

import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile
import time

from bench.live import Diagnostics, node_env, REPO_ROOT, start_node, wait_compiled

from diagnostic_msgs.msg import DiagnosticStatus  # noqa: I100
import jax
import numpy as np
from scipy import stats
from sensor_msgs.msg import JointState

from sysid_ros.io import config as config_io
from sysid_ros.io import payload_handoff, pipeline
from sysid_ros.ros import messages, parameter_push, qos

CONFIG = 'config/double_pendulum_live.yaml'
SIM = 'sysid_ros.ros.sim_robot'
ESTIMATOR = 'sysid_ros.ros.estimator'
SIM_ARGS = ('-p', f'config:={CONFIG}', '-p', 'noise:=0.002', '-p', 'seed:=3',
            '-p', 'publish_rate:=200.0', '-p', 'payload_mass:=0.0',
            '-r', 'joint_states:=raw/joint_states')
FAULTS = ('driver_restart', 'burst', 'out_of_order', 'duplicated', 'future_stamped',
          'joint_order', 'clock_back', 'clock_forward')
# The diagnostic that must move for each fault: ('counter', status suffix, key) grows, or
# ('level', status suffix) leaves OK during the fault; None: only the estimates must go on.
EXPECTED = {
    'driver_restart': ('level', 'input /joint_states'),
    'burst': None,
    'out_of_order': ('counter', 'window buffer', 'rejected.out_of_order'),
    'duplicated': ('counter', 'window buffer', 'rejected.duplicate_stamp'),
    'future_stamped': ('counter', 'window buffer', 'rejected.future_stamp'),
    'joint_order': None,
    'clock_back': ('counter', 'window buffer', 'time_jumps'),
    'clock_forward': ('counter', 'window buffer', 'time_jumps'),
}
JUMP = 100.0                     # [s] clock jumps and future stamps
POISON_FLOOR = 0.15              # [kg]
POISON_STDS = 5.0
AFTER_FAULT_TIMEOUT = 120.0      # [s] for estimates to come again after a fault
MASSES = ('link1.mass', 'link2.mass')
SOAK_HOP = 10.0                  # [s] of robot time between the soak's windows
BAG_JOINTS = tuple(f'joint{i}' for i in range(1, 8))
OK = DiagnosticStatus.OK if isinstance(DiagnosticStatus.OK, int) else ord(DiagnosticStatus.OK)


class FaultBench(Diagnostics):
    """`Diagnostics` plus every estimate received (`estimates`: (receipt time, {name: (mean,
    std)})), the levels seen per status (`levels`), and the relay with its current fault."""

    def __init__(self):
        super().__init__()
        self.estimates: list[tuple[float, dict]] = []
        self.levels: dict[str, list[tuple[float, int]]] = {}
        self.fault: str | None = None
        self.shift = 0.0                          # [s] added to every relayed stamp
        self._held: list[JointState] = []
        self._pair: JointState | None = None
        self._count = 0
        self.relayed = 0
        self._out = self.node.create_publisher(JointState, '/joint_states', 50)
        self.node.create_subscription(JointState, '/raw/joint_states', self._relay,
                                      qos.SENSOR_INPUT)
        self.node.create_subscription(JointState, '/estimator/estimate', self._on_each,
                                      qos.LATCHED)

    def _on_each(self, msg: JointState) -> None:
        self.estimates.append((time.monotonic(),
                               dict(zip(msg.name, zip(msg.position, msg.velocity)))))

    def _on_diagnostics(self, msg) -> None:
        super()._on_diagnostics(msg)
        for status in msg.status:
            level = status.level if isinstance(status.level, int) else ord(status.level)
            self.levels.setdefault(status.name.split(': ', 1)[-1], []).append(
                (time.monotonic(), level))

    def _send(self, msg: JointState) -> None:
        self._out.publish(msg)
        self.relayed += 1

    def _relay(self, msg: JointState) -> None:
        t = messages.stamp_to_seconds(msg.header.stamp) + self.shift
        msg.header.stamp = messages.seconds_to_stamp(t)
        fault, self._count = self.fault, self._count + 1
        if fault == 'driver_restart':
            return
        if fault == 'burst':
            self._held.append(msg)
            if len(self._held) >= 100:            # 0.5 s at 200 Hz, sent at once
                for held in self._held:
                    self._send(held)
                self._held = []
            return
        if self._held:                            # what a burst still holds goes first
            for held in self._held:
                self._send(held)
            self._held = []
        if fault == 'out_of_order':
            if self._pair is None:
                self._pair = msg
                return
            self._send(msg)
            msg, self._pair = self._pair, None
        elif self._pair is not None:
            self._send(self._pair)
            self._pair = None
        if fault == 'duplicated':
            self._send(msg)
        elif fault == 'future_stamped' and self._count % 10 == 0:
            self._send(messages.arrays_to_joint_state(
                t + JUMP, msg.name, np.asarray(msg.position) + 1.0, msg.velocity, msg.effort))
        elif fault == 'joint_order':
            msg = messages.arrays_to_joint_state(t, msg.name[::-1], msg.position[::-1],
                                                 msg.velocity[::-1], msg.effort[::-1])
        self._send(msg)

    def moved(self, expected, since: float, before: dict) -> bool:
        """Whether the diagnostic `expected` (an `EXPECTED` entry) moved since `since`."""
        if expected is None:
            return True
        if expected[0] == 'level':
            return any(t >= since and level != OK
                       for t, level in self.levels.get(expected[1], []))
        _, suffix, key = expected
        return int(self.status(suffix).get(key, 0)) > int(before.get(key, 0))


def _poisoned(estimate: dict, truth: dict) -> bool:
    values = [v for pair in estimate.values() for v in pair]
    if not all(math.isfinite(v) for v in values):
        return True
    return any(abs(estimate[n][0] - truth[n]) > max(POISON_STDS * estimate[n][1], POISON_FLOOR)
               for n in MASSES)


def _estimator(folder: pathlib.Path, name: str, save: pathlib.Path):
    return start_node(ESTIMATOR, ['--params-file', CONFIG, '-p', f'online.save_path:={save}',
                                  '-p', 'online.save_interval:=2.0'], folder / f'{name}.log')


def wire(bench: FaultBench, folder: pathlib.Path, phase: float) -> dict:
    """(a) and (b): the faults one after another, then the kill and restart."""
    save = folder / 'posterior'
    sim = start_node(SIM, SIM_ARGS, folder / 'sim.log')
    est = _estimator(folder, 'estimator', save)
    rows, poisoned, judged = [], 0, 0
    try:
        compile_s = wait_compiled(bench, est)
        if not bench.spin_until(lambda: len(bench.estimates) >= 6 or not est.running(), 300.0):
            raise RuntimeError('no estimates:\n' + est.output()[-2000:])
        truth = {n: float(bench.truth[n]) for n in MASSES}
        for fault in FAULTS:
            before = dict(bench.status('window buffer'))
            count, start = len(bench.estimates), time.monotonic()
            bench.fault = fault
            if fault == 'clock_back':
                bench.shift -= JUMP
            elif fault == 'clock_forward':
                bench.shift += JUMP
            bench.spin_for(phase)
            bench.fault = None
            went_on = bench.spin_until(
                lambda: len(bench.estimates) >= count + 2 or not est.running(),
                AFTER_FAULT_TIMEOUT) and est.running()
            bench.spin_for(phase)                 # clean, and the diagnostics catch up
            moved = bench.moved(EXPECTED[fault], start, before)
            seen = bench.estimates[count:]
            bad = sum(_poisoned(e, truth) for _, e in seen)
            poisoned, judged = poisoned + bad, judged + len(seen)
            rows.append((fault, went_on, moved, len(seen), bad))
        std_before = dict(bench.estimates[-1][1])
        bench.spin_for(2.5)                       # one interval save after it
        est.proc.kill()
        est.proc.wait(10)
        resumed_est = _estimator(folder, 'restarted', save)
        count = len(bench.estimates)
        bench.latest.clear()                      # the killed node's statuses
        restart_compile_s = wait_compiled(bench, resumed_est)
        bench.spin_until(lambda: len(bench.estimates) >= count + 3, 300.0)
        after = bench.estimates[-1][1] if len(bench.estimates) >= count + 3 else None
        ratio = (max(after[n][1] / std_before[n][1] for n in std_before) if after
                 else math.inf)
        resumed = 'resuming from' in resumed_est.output()
        resumed_est.interrupt()
    finally:
        est.kill()
        sim.kill()
    return {'rows': rows, 'poisoned': poisoned, 'judged': judged, 'compile_s': compile_s,
            'restart_compile_s': restart_compile_s, 'restart_std_ratio': ratio,
            'resumed': resumed, 'std_before': std_before, 'std_after': after}


def guards() -> list[tuple[str, bool]]:
    """(c): (case, refused as it should be) for every gate refusal; the passing cases come
    first and count as held when they pass."""
    std, limit = np.array([0.01]), np.array([0.05])
    mean, bounds = np.array([1.0]), [(0.5, 2.0)]

    def push(**changes):
        args = {'std': std, 'max_std': limit, 'diverged': False, 'paused': False,
                'steady': True, 'mean': mean, 'bounds': bounds}
        args.update(changes)
        return parameter_push.held_reason(**args)

    cases = [('push passes', push() is None),
             ('push paused', push(paused=True) == 'paused'),
             ('push diverged', push(diverged=True) == 'diverged'),
             ('push unconverged', push(steady=False) == 'unconverged'),
             ('push wide', push(std=np.array([0.06])) == 'uncertain'),
             ('push nan std', push(std=np.array([math.nan])) == 'uncertain'),
             ('push outside', push(mean=np.array([2.5])) == 'outside'),
             ('push on bound', push(mean=np.array([0.501])) == 'outside')]
    limits = payload_handoff.GateLimits(0.05, 0.01, 3)
    good = payload_handoff.HeldPayload('tool0', 1.0, 0.01, np.array([0.0, 0.0, 0.05]),
                                       np.full(3, 0.002), 1e-3 * np.eye(3))
    pbounds = {'payload.mass': (0.0, 5.0)}

    def payload(estimate=good, steady=True, change=0, previous=0.0):
        return payload_handoff.refusals(estimate, steady, limits, pbounds, previous, change)

    flat = good._replace(inertia=np.diag([1e-3, 1e-3, 5e-3]))      # triangle broken
    cases += [('payload passes', not payload()),
              ('payload unconverged', bool(payload(steady=False))),
              ('payload mass std', bool(payload(good._replace(mass_std=0.2)))),
              ('payload com std', bool(payload(good._replace(com_std=np.full(3, 0.05))))),
              ('payload inertia', bool(payload(flat))),
              ('payload on bound', bool(payload(good._replace(mass=4.99)))),
              ('payload no pick-up', bool(payload(change=1, previous=1.0)))]
    return cases


def soak(windows: int) -> dict:
    """(d): `windows` windows of the simulated robot through the buffer and the session.
    The trends are fitted over the windows after the session last changed its integration
    step (each change compiles new programs, which take memory and time once), and at least
    after the first third; each is (slope, 95 % low, 95 % high) per robot hour."""
    from sysid_ros.io import online
    from sysid_ros.io.simulated_robot import SimulatedRobot, SimulatedRobotSettings
    from sysid_ros.io.window_buffer import WindowBuffer

    cfg = config_io.load_yaml(CONFIG)
    problem = pipeline.build_problem(cfg)
    session = online.OnlineSession(problem)
    robot = SimulatedRobot(problem, SimulatedRobotSettings(noise=0.002, seed=3), batch=100)
    buffer = WindowBuffer(problem.joint_names, cfg.data.rate, cfg.online.window_length,
                          SOAK_HOP)
    page = 4096 / 2**20
    t_robot, rss, took, steps = [], [], [], []
    wall = time.perf_counter()
    while len(took) < windows:
        tick = robot.step()
        for k, t in enumerate(tick.t):
            buffer.add_joint_state(t, problem.joint_names, tick.q[k], tick.qd[k],
                                   tick.effort[k])
        window = buffer.pop_window()
        while window is not None and len(took) < windows:
            start = time.perf_counter()
            session.update(window)
            took.append(time.perf_counter() - start)
            t_robot.append(float(window.t[-1]))
            rss.append(int(pathlib.Path('/proc/self/statm').read_text().split()[1]) * page)
            steps.append(session.integration.substeps if session.integration else 0)
            if len(took) % 25 == 0:
                print(f'soak: {len(took)} windows, last {1e3 * took[-1]:.0f} ms, resident '
                      f'{rss[-1]:.0f} MB, {steps[-1]} steps per sample', flush=True)
            window = buffer.pop_window()
    changed = max((k for k in range(1, windows) if steps[k] != steps[k - 1]), default=0)
    first = max(changed + 1, windows // 3)
    hours = np.array(t_robot[first:]) / 3600.0
    memory = _trend(hours, np.array(rss[first:]))
    latency = _trend(hours, 1e3 * np.array(took[first:]))
    return {'windows': windows, 'robot_s': t_robot[-1] - t_robot[0], 'first': first,
            'real_time': (t_robot[-1] - t_robot[0]) / (time.perf_counter() - wall),
            'steps': sorted(set(steps)), 'rss_first': rss[first - 1], 'rss_last': rss[-1],
            'memory': tuple(100.0 * v / rss[first - 1] for v in memory),
            'window_ms': 1e3 * float(np.median(took[first:])), 'latency': latency}


def _trend(hours: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
    """Theil-Sen slope of `values` in robot hours with its 95 % interval (NaN below 10
    points)."""
    if len(hours) < 10:
        return (math.nan,) * 3
    slope, _, low, high = stats.theilslopes(values, hours, alpha=0.95)
    return float(slope), float(low), float(high)


def write_bag(path: str, minutes: float) -> None:
    """A 7-joint JointState mcap bag of `minutes` at 1 kHz at `path` (a subprocess of `bag`)."""
    from sysid_ros.io import bag_writer
    from sysid_ros.io.trajectory import Trajectory

    t = np.arange(int(minutes * 60 * 1000)) / 1000.0
    phase = np.random.default_rng(0).uniform(0, 6, 7)
    q = np.sin(0.5 * t[:, None] + phase)
    bag_writer.write_trajectory_bag(path, [Trajectory(
        t=t, q=q, qd=0.5 * np.cos(0.5 * t[:, None] + phase), tau=np.sin(t[:, None] + q),
        joint_names=BAG_JOINTS)], storage='mcap')


def read_bag(path: str) -> None:
    """Print (JSON) the peak resident memory of reading `path` at 100 Hz and before it [MB]
    (a subprocess of `bag`)."""
    import resource

    from sysid_ros.io import bags
    from sysid_ros.io.config_sections import DataConfig

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    base = peak()
    traj = bags.read_bag(path, BAG_JOINTS, DataConfig(rate=100.0))[0].trajectory
    print(json.dumps({'base_mb': base, 'peak_mb': peak(), 'samples': len(traj.t),
                      'output_mb': sum(a.nbytes for a in (traj.t, traj.q, traj.qd, traj.tau))
                      / 2**20}))


def bag(folder: pathlib.Path, minutes) -> list[dict]:
    """(e): peak memory of reading a 1 kHz bag of each length in `minutes`."""
    rows = []
    for length in minutes:
        path = folder / f'bag_{length}'
        subprocess.run([sys.executable, '-m', 'bench.faults', '--write-bag', str(path),
                        str(length)], check=True, cwd=REPO_ROOT, env=node_env())
        start = time.perf_counter()
        out = subprocess.run([sys.executable, '-m', 'bench.faults', '--read-bag', str(path)],
                             check=True, cwd=REPO_ROOT, env=node_env(),
                             capture_output=True, text=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row.update(minutes=length, read_s=time.perf_counter() - start,
                   bag_mb=sum(f.stat().st_size for f in path.rglob('*')) / 2**20)
        rows.append(row)
    return rows


def _hour_peak(rows: list[dict]) -> float:
    """Peak above the imports for 60 minutes: measured, or the line through two lengths."""
    above = [(r['minutes'], r['peak_mb'] - r['base_mb']) for r in rows]
    if above[-1][0] >= 60:
        return above[-1][1]
    (m0, p0), (m1, p1) = above[0], above[-1]
    return p0 + (p1 - p0) * (60 - m0) / (m1 - m0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--phase', type=float, default=None, help='seconds per fault')
    parser.add_argument('--write-bag', nargs=2, metavar=('PATH', 'MINUTES'),
                        help=argparse.SUPPRESS)
    parser.add_argument('--read-bag', metavar='PATH', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    jax.config.update('jax_enable_x64', True)
    if args.write_bag:
        write_bag(args.write_bag[0], float(args.write_bag[1]))
        return 0
    if args.read_bag:
        read_bag(args.read_bag)
        return 0
    phase = args.phase or (4.0 if args.quick else 8.0)
    cases = guards()
    refused = sum(ok for _, ok in cases)
    print('guards:', ', '.join(f'{name}: {"ok" if ok else "FAILED"}' for name, ok in cases))
    with tempfile.TemporaryDirectory(prefix='sysid_faults_') as tmp:
        folder = pathlib.Path(tmp)
        bags_rows = bag(folder, (6, 12) if args.quick else (60,))
        print('\nbag (1 kHz, 7 joints, mcap; read at 100 Hz in a fresh process)')
        print('minutes  bag MB  samples  output MB  imports MB  peak MB  above imports  read s')
        for r in bags_rows:
            print(f'{r["minutes"]:7g}  {r["bag_mb"]:6.0f}  {r["samples"]:7d}  '
                  f'{r["output_mb"]:9.1f}  {r["base_mb"]:10.0f}  {r["peak_mb"]:7.0f}  '
                  f'{r["peak_mb"] - r["base_mb"]:13.0f}  {r["read_s"]:6.1f}')
        hour = _hour_peak(bags_rows)
        bench = FaultBench()
        try:
            run = wire(bench, folder, phase)
        finally:
            bench.close()
    print(f'\nwire faults ({phase:g} s each; compile {run["compile_s"]:.0f} s)')
    print('fault            estimates went on  diagnostic moved  estimates  poisoned')
    for fault, went_on, moved, seen, bad in run['rows']:
        print(f'{fault:16s} {str(went_on):17s}  {str(moved):16s}  {seen:9d}  {bad:8d}')
    print(f'restart: resumed={run["resumed"]} compile {run["restart_compile_s"]:.0f} s; std '
          f'before kill {_fmt(run["std_before"])}; 3 windows after {_fmt(run["std_after"])}')
    s = soak(70 if args.quick else 1800)
    print(f'\nsoak: {s["windows"]} windows, {s["robot_s"] / 3600:.2f} h of robot time at '
          f'{s["real_time"]:.1f}x real time, integration steps per sample {s["steps"]}; '
          f'trends from window {s["first"] + 1}: resident {s["rss_first"]:.0f} -> '
          f'{s["rss_last"]:.0f} MB ({s["memory"][0]:+.2f} %/h, 95 % {s["memory"][1]:+.2f} to '
          f'{s["memory"][2]:+.2f}); window {s["window_ms"]:.0f} ms median '
          f'({s["latency"][0]:+.1f} ms/h, 95 % {s["latency"][1]:+.1f} to '
          f'{s["latency"][2]:+.1f})')
    survived = sum(went_on and moved for _, went_on, moved, _, _ in run['rows'])
    print(f'RESULT faults survived={survived} tried={len(FAULTS)} poisoned={run["poisoned"]} '
          f'restart_std_ratio={run["restart_std_ratio"]:.2f} '
          f'mem_growth_pct_per_hour={s["memory"][0]:.2f} '
          f'latency_trend_ms_per_hour={s["latency"][0]:.2f} '
          f'guards_refused={refused}/{len(cases)} bag_peak_mb={hour:.0f}')
    return 0


def _fmt(estimate) -> str:
    if estimate is None:
        return 'none'
    return ', '.join(f'{n} {std:.3g}' for n, (_, std) in estimate.items())


if __name__ == '__main__':
    sys.exit(main())
