"""The live demo: `sim_robot` and `estimator` as separate processes talking over real DDS.

    sysid demo                                  # about a minute on the double pendulum
    sysid demo --duration 120 --config my_problem.yaml

Starts both nodes (their logs go to OUT/sim_robot.log and OUT/estimator.log), reads the hidden
truth from `/sim_robot/ground_truth`, follows `/sysid/estimator/estimate` through
`ros.estimate_client`, and once `duration` seconds of estimates have come in stops both nodes
(SIGINT: the estimator writes its posterior to OUT/posterior.npz + .yaml) and prints true vs
estimated parameters (mean and standard deviation) with the convergence time.

Converged: every parameter's mean within `tolerance` (a fraction of the width of its
configured bounds) of the truth. The convergence time is the wall time [s] from the first
measurement published by `sim_robot` to the first estimate from which every later estimate
was converged; the demo fails (exit status 1) if the last estimate is not converged.

The demo is a local program: unless the caller set them, it keeps DDS on the loopback
interface (`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST` and the given Fast DDS profile) for
itself and both nodes.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
import time
from typing import Mapping, NamedTuple, Sequence

EXIT_CONVERGED = 0
EXIT_NOT_CONVERGED = 1
EXIT_NODE_FAILED = 3
EXIT_INTERRUPTED = 130

SIM_NODE = 'sim_robot'
ESTIMATOR_NODE = 'estimator'
ESTIMATOR_NAMESPACE = '/sysid'                  # as the launch files run it

__all__ = ['DemoSettings', 'Convergence', 'convergence', 'run', 'EXIT_CONVERGED',
           'EXIT_NOT_CONVERGED', 'EXIT_NODE_FAILED', 'EXIT_INTERRUPTED']


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    """What the demo runs.

    Attributes:
      config: problem YAML shared by both nodes (it also sets the estimator's `online.*`).
      out_dir: folder for the node logs and the saved posterior.
      duration: seconds of estimates to collect after the first one [s, wall].
      tolerance: converged when |mean - truth| <= tolerance * (max - min) for every parameter.
      seed: seed of the simulated robot's hidden truth, excitation and noise.
      startup_timeout: longest wait for the first estimate (JAX compiles first) [s, wall].
      fastdds_profile: Fast DDS profile XML used unless FASTDDS_DEFAULT_PROFILES_FILE is set.
    """

    config: str
    out_dir: str
    duration: float = 60.0
    tolerance: float = 0.1
    seed: int = 0
    startup_timeout: float = 300.0
    fastdds_profile: str | None = None


class Convergence(NamedTuple):
    """Convergence of a history of estimates against the truth.

    Attributes:
      converged: the last estimate has every parameter within tolerance.
      time: seconds from the first measurement to the first estimate from which all later
        ones are converged (None if the last one is not).
      errors: {name: |mean - truth| / (max - min)} of the last estimate [-].
    """

    converged: bool
    time: float | None
    errors: dict[str, float]


def convergence(history: Sequence[tuple[float, Mapping[str, tuple[float, float]]]],
                truth: Mapping[str, float], bounds: Mapping[str, tuple[float, float]],
                tolerance: float) -> Convergence:
    """Score a history [(t [s], {name: (mean, std)})] in time order against `truth`."""
    def errors(estimate):
        return {name: abs(estimate[name][0] - truth[name]) / (hi - lo)
                for name, (lo, hi) in bounds.items()}

    if not history:
        return Convergence(False, None, {})
    within = [max(errors(estimate).values()) <= tolerance for _, estimate in history]
    last_errors = errors(history[-1][1])
    if not within[-1]:
        return Convergence(False, None, last_errors)
    first = len(within)
    while first > 0 and within[first - 1]:
        first -= 1
    return Convergence(True, history[first][0], last_errors)


def _truth_from(msg, names: Sequence[str]) -> dict[str, float] | None:
    """{name: value} of the configured parameters in a sim_robot ground-truth message."""
    for status in msg.status:
        values = {kv.key: kv.value for kv in status.values}
        if all(name in values for name in names):
            return {name: float(values[name]) for name in names}
    return None


def _table(names, truth, estimate, bounds, tolerance) -> str:
    rows = [('parameter', 'true', 'estimated', 'std', 'error/width', '')]
    for name in names:
        mean, std = estimate[name]
        lo, hi = bounds[name]
        error = abs(mean - truth[name]) / (hi - lo)
        rows.append((name, f'{truth[name]:.4g}', f'{mean:.4g}', f'{std:.2g}', f'{error:.3f}',
                     'ok' if error <= tolerance else 'OFF'))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)


def _local_dds(profile: str | None) -> None:
    """Keep DDS on this machine unless the caller chose otherwise (inherited by the nodes)."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if profile:
        os.environ.setdefault('FASTDDS_DEFAULT_PROFILES_FILE', profile)


def run(settings: DemoSettings, names: Sequence[str],
        bounds: Mapping[str, tuple[float, float]], out=sys.stdout) -> int:
    """Run the demo; returns the exit status (EXIT_*). `names`, `bounds`: the configured
    parameters and their bounds (the caller validated the configuration)."""
    _local_dds(settings.fastdds_profile)
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sysid_ros.ros.estimate_client import EstimateClient
    from sysid_ros.ros.node_process import NodeProcess
    from sysid_ros.ros.probe import ProbeNode

    out_dir = pathlib.Path(settings.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = os.path.abspath(settings.config)
    sim = NodeProcess('sysid_ros.ros.sim_robot', [
        '-r', f'__node:={SIM_NODE}', '-p', f'config:={config}', '-p', f'seed:={settings.seed}'],
        out_dir / f'{SIM_NODE}.log')
    estimator = NodeProcess('sysid_ros.ros.estimator', [
        '-r', f'__node:={ESTIMATOR_NODE}', '-r', f'__ns:={ESTIMATOR_NAMESPACE}',
        '--params-file', config, '-p', f'config:={config}',
        '-p', f'online.save_path:={out_dir / "posterior"}'], out_dir / f'{ESTIMATOR_NODE}.log')
    print(f'sysid demo: sim_robot (pid {sim.proc.pid}) and estimator (pid '
          f'{estimator.proc.pid}) started on {config}; logs in {out_dir}', file=out, flush=True)

    probe = ProbeNode('sysid_demo')
    node = probe.node
    truth: dict[str, float] = {}
    history: list[tuple[float, dict]] = []
    start = time.monotonic()
    first_measurement: list[float] = []

    def on_truth(msg):
        values = _truth_from(msg, names)
        if values is not None:
            if not first_measurement:
                first_measurement.append(time.monotonic())
            truth.update(values)

    def on_estimate(estimate):
        if all(name in estimate for name in names):
            history.append((time.monotonic(), estimate))

    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(DiagnosticArray, f'/{SIM_NODE}/ground_truth', on_truth, latched)
    EstimateClient(node, callback=on_estimate)

    status = EXIT_CONVERGED
    last_report = 0.0
    try:
        while True:
            probe.executor.spin_once(timeout_sec=0.05)
            now = time.monotonic()
            for process in (sim, estimator):
                if not process.running():
                    print(f'sysid demo: {process.module} exited with status '
                          f'{process.proc.returncode}; its log ({process.log_path}) ends:\n'
                          + '\n'.join(process.output().splitlines()[-15:]), file=out)
                    return _finish(EXIT_NODE_FAILED, sim, estimator, probe)
            if not history:
                if now - start > settings.startup_timeout:
                    print(f'sysid demo: no estimate within {settings.startup_timeout:g} s; see '
                          f'{estimator.log_path}', file=out)
                    return _finish(EXIT_NODE_FAILED, sim, estimator, probe)
                continue
            if now - last_report >= 5.0 and truth:
                last_report = now
                t0 = first_measurement[0] if first_measurement else start
                mean_text = '  '.join(
                    f'{n} {history[-1][1][n][0]:.3g}±{history[-1][1][n][1]:.2g} '
                    f'(true {truth[n]:.3g})' for n in names)
                print(f'  t = {history[-1][0] - t0:5.1f} s  {mean_text}', file=out, flush=True)
            if now - history[0][0] >= settings.duration:
                break
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    saved_status = _finish(status, sim, estimator, probe)
    if not truth or not history:
        print('sysid demo: interrupted before the first estimate', file=out)
        return saved_status
    t0 = first_measurement[0] if first_measurement else start
    result = convergence([(t - t0, e) for t, e in history], truth, bounds, settings.tolerance)
    print(_table(names, truth, history[-1][1], bounds, settings.tolerance), file=out)
    print(f'{len(history)} estimates in {history[-1][0] - history[0][0]:.0f} s; first after '
          f'{history[0][0] - t0:.1f} s of data (including compilation); tolerance '
          f'{settings.tolerance:g} of each bounds width', file=out)
    if result.converged:
        print(f'converged after {result.time:.1f} s; posterior in {out_dir}/posterior.npz',
              file=out)
    else:
        worst = max(result.errors, key=result.errors.get)
        print(f'NOT converged: {worst} is off by {result.errors[worst]:.3f} of its bounds width',
              file=out)
    if saved_status != EXIT_CONVERGED:
        return saved_status
    return EXIT_CONVERGED if result.converged else EXIT_NOT_CONVERGED


def _finish(status: int, sim, estimator, probe) -> int:
    """Stop both nodes as Ctrl-C would (the estimator saves its posterior) and ROS here."""
    for process in (estimator, sim):
        try:
            process.interrupt(timeout=20.0)
        except Exception:                       # killed after the timeout: nothing to save
            pass
        process.kill()
    probe.close()
    return status
