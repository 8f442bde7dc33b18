"""The live demo: `sim_robot` and `estimator` as separate processes talking over real DDS.

    sysid demo                                  # the Panda arm, about 3 minutes
    sysid demo --robot double_pendulum          # the double pendulum, about 2 minutes
    sysid demo --duration 120 --config my_problem.yaml

Starts the estimator (its log goes to OUT/estimator.log) and, once it has compiled and
activated (its `/diagnostics`), `sim_robot` (OUT/sim_robot.log) with the robot's settings
(`ros.demo_robots`); reads the hidden truth from `/sim_robot/ground_truth`, follows
`/sysid/estimator/estimate` through `ros.estimate_client`, and once `duration` seconds of
estimates have come in stops both nodes (SIGINT: the estimator writes its posterior to
OUT/posterior.npz + .yaml) and prints, for each phase of the truth (the arm picks up its
payload 20 s in), true vs estimated parameters (mean and standard deviation) and the time
the estimate took to converge to it.

Converged: every scored parameter's mean within `tolerance` (a fraction of the width of its
configured bounds) of the truth of its phase; a payload's centre of mass is not scored while
none is held (it has no effect then). The convergence time is the wall time [s] from the
start of the phase (the first measurement, or the change of the truth: a pick-up) to the
first estimate from which every later estimate of the phase was converged; the demo fails
(exit status 1) if the last estimate is not converged.

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
      sim_args: further `sim_robot` parameters (name:=value), e.g. its payload and friction.
      startup_timeout: longest wait for the estimator to compile and activate [s, wall].
      fastdds_profile: Fast DDS profile XML used unless FASTDDS_DEFAULT_PROFILES_FILE is set.
    """

    config: str
    out_dir: str
    duration: float = 60.0
    tolerance: float = 0.1
    seed: int = 0
    sim_args: tuple[str, ...] = ()
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


def _scored(names: Sequence[str], truth: Mapping[str, float]) -> list[str]:
    """The names scored against `truth`: not a payload's centre of mass while none is held."""
    return [n for n in names
            if not (n.startswith('payload.com.') and truth.get('payload.mass', 1.0) == 0.0)]


def _table(names, truth, estimate, bounds, tolerance) -> str:
    scored = _scored(names, truth)
    # error/std: the error in posterior stds, |.| below 2 about 95 % of the time where the
    # stds are honest.
    rows = [('parameter', 'true', 'estimated', 'std', 'error/std', 'error/width', '')]
    for name in names:
        mean, std = estimate[name]
        lo, hi = bounds[name]
        error = abs(mean - truth[name]) / (hi - lo)
        z = f'{(mean - truth[name]) / std:+.1f}' if std > 0.0 else '-'
        verdict = 'not scored' if name not in scored else 'ok' if error <= tolerance else 'OFF'
        rows.append((name, f'{truth[name]:.4g}', f'{mean:.4g}', f'{std:.2g}', z,
                     f'{error:.3f}', verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)


def _phases(history, truths):
    """Split `history` [(t, estimate)] at the times of `truths` [(t, truth)]: one
    (start, truth, estimates) per truth, estimates published from its start on."""
    ends = [t for t, _ in truths[1:]] + [float('inf')]
    return [(start, truth, [(t, e) for t, e in history if start <= t < end])
            for (start, truth), end in zip(truths, ends)]


def _local_dds(profile: str | None) -> None:
    """Keep DDS on this machine unless the caller chose otherwise (inherited by the nodes)."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if profile:
        os.environ.setdefault('FASTDDS_DEFAULT_PROFILES_FILE', profile)


def run(settings: DemoSettings, names: Sequence[str],
        bounds: Mapping[str, tuple[float, float]], out=sys.stdout) -> int:
    """Run the demo; returns the exit status (EXIT_*). `names`, `bounds`: the configured
    parameters and their bounds (the caller validated the configuration).

    One function because the subscription callbacks fill the lists its supervision loop reads.
    """
    _local_dds(settings.fastdds_profile)
    from diagnostic_msgs.msg import DiagnosticArray
    from sysid_ros.ros import qos
    from sysid_ros.ros.estimate_client import EstimateClient
    from sysid_ros.ros.node_process import NodeProcess
    from sysid_ros.ros.probe import ProbeNode

    started = time.monotonic()
    out_dir = pathlib.Path(settings.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = os.path.abspath(settings.config)
    # The Pinocchio check is skipped: both nodes build the model from the same file.
    estimator = NodeProcess('sysid_ros.ros.estimator', [
        '-r', f'__node:={ESTIMATOR_NODE}', '-r', f'__ns:={ESTIMATOR_NAMESPACE}',
        '--params-file', config, '-p', f'config:={config}', '-p', 'verify_samples:=0',
        '-p', f'online.save_path:={out_dir / "posterior"}'], out_dir / f'{ESTIMATOR_NODE}.log')
    sim = None
    print(f'sysid demo: estimator (pid {estimator.proc.pid}) compiling for {config}; logs in '
          f'{out_dir}', file=out, flush=True)

    probe = ProbeNode('sysid_demo')
    node = probe.node
    active: list[bool] = []
    truths: list[tuple[float, dict[str, float]]] = []      # (receipt time, truth) on change
    history: list[tuple[float, dict]] = []

    def on_diagnostics(msg):
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.name == f'{ESTIMATOR_NODE}: estimator' and values.get('active') == 'True':
                active.append(True)

    def on_truth(msg):
        values = _truth_from(msg, names)
        if values is not None and (not truths or values != truths[-1][1]):
            truths.append((time.monotonic(), values))

    def on_estimate(estimate):
        if all(name in estimate for name in names):
            history.append((time.monotonic(), estimate))

    node.create_subscription(DiagnosticArray, '/diagnostics', on_diagnostics, 10)
    node.create_subscription(DiagnosticArray, f'/{SIM_NODE}/ground_truth', on_truth, qos.LATCHED)
    EstimateClient(node, callback=on_estimate)

    status = EXIT_CONVERGED
    last_report = 0.0
    try:
        # Start the robot once the estimator has compiled: tracing holds the GIL for seconds
        # at a time, which would starve its subscriptions (and a timed pick-up would pass).
        while sim is None:
            probe.executor.spin_once(timeout_sec=0.05)
            if not estimator.running():
                return _failed(estimator, sim, estimator, probe, out)
            if active:
                compiled = time.monotonic() - started
                sim = NodeProcess('sysid_ros.ros.sim_robot', [
                    '-r', f'__node:={SIM_NODE}', '-p', f'config:={config}',
                    '-p', f'seed:={settings.seed}',
                    *(a for arg in settings.sim_args for a in ('-p', arg))],
                    out_dir / f'{SIM_NODE}.log')
                print(f'sysid demo: estimator active after {compiled:.0f} s; sim_robot (pid '
                      f'{sim.proc.pid}) started', file=out, flush=True)
            elif time.monotonic() - started > settings.startup_timeout:
                print(f'sysid demo: estimator not active within {settings.startup_timeout:g} '
                      f's; see {estimator.log_path}', file=out)
                return _finish(EXIT_NODE_FAILED, sim, estimator, probe)
        while not history or time.monotonic() - history[0][0] < settings.duration:
            probe.executor.spin_once(timeout_sec=0.05)
            now = time.monotonic()
            for process in (sim, estimator):
                if not process.running():
                    return _failed(process, sim, estimator, probe, out)
            if not history and now - started > 2.0 * settings.startup_timeout:
                print(f'sysid demo: no estimate; see {estimator.log_path}', file=out)
                return _finish(EXIT_NODE_FAILED, sim, estimator, probe)
            if history and truths and now - last_report >= 5.0:
                last_report = now
                _progress(history[-1], truths, names, bounds, settings.tolerance, out)
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    saved_status = _finish(status, sim, estimator, probe)
    if not truths or not history:
        print('sysid demo: interrupted before the first estimate', file=out)
        return saved_status
    t0 = truths[0][0]
    print(f'{len(history)} estimates in {history[-1][0] - history[0][0]:.0f} s; first after '
          f'{history[0][0] - t0:.1f} s of data; tolerance {settings.tolerance:g} of each '
          f'bounds width', file=out)
    result = _report_phases(history, truths, names, bounds, settings.tolerance, out)
    converged = result is not None and result.converged
    print(f'\n{"converged" if converged else "NOT converged"}: the last estimate against the '
          f'truth; wall time {time.monotonic() - started:.0f} s (the estimator active after '
          f'{compiled:.0f} s); posterior in {out_dir}/posterior.npz', file=out)
    if saved_status != EXIT_CONVERGED:
        return saved_status
    return EXIT_CONVERGED if converged else EXIT_NOT_CONVERGED


def _report_phases(history, truths, names, bounds, tolerance, out) -> Convergence | None:
    """Print each phase of the truth: true vs estimated parameters, whether the estimate
    followed the change and converged; returns the last phase's convergence (None: none)."""
    t0 = truths[0][0]
    result = None
    for k, (start, truth, estimates) in enumerate(_phases(history, truths)):
        what = 'from the first measurement' if k == 0 else _change(truths[k - 1][1], truth)
        print(f'\nphase {k + 1}, t = {start - t0:.1f} s: {what}', file=out)
        if not estimates:
            print('  no estimate', file=out)
            continue
        print(_table(names, truth, estimates[-1][1], bounds, tolerance), file=out)
        if k > 0:
            changed = {n: bounds[n] for n in names if truth[n] != truths[k - 1][1][n]}
            followed = convergence([(t - start, e) for t, e in estimates], truth, changed,
                                   tolerance)
            print(f'followed ({", ".join(changed)} within tolerance) ' + (
                f'{followed.time:.1f} s after the change' if followed.converged
                else 'NOT within the phase'), file=out)
        result = convergence([(t - start, e) for t, e in estimates], truth,
                             {n: bounds[n] for n in _scored(names, truth)}, tolerance)
        if result.converged:
            print(f'converged {result.time:.1f} s after the start of the phase', file=out)
        else:
            worst = max(result.errors, key=result.errors.get)
            print(f'NOT converged: {worst} is off by {result.errors[worst]:.3f} of its '
                  f'bounds width', file=out)
    return result


def _progress(latest, truths, names, bounds, tolerance, out) -> None:
    """One line on the latest estimate: the first parameter, how many are within tolerance
    of the current truth and the worst."""
    (t, estimate), truth = latest, truths[-1][1]
    scored = _scored(names, truth)
    errors = {n: abs(estimate[n][0] - truth[n]) / (bounds[n][1] - bounds[n][0]) for n in scored}
    worst = max(errors, key=errors.get)
    first = names[0]
    print(f'  t = {t - truths[0][0]:5.1f} s  {first} {estimate[first][0]:.3g}'
          f'±{estimate[first][1]:.2g} (true {truth[first]:.3g}); '
          f'{sum(e <= tolerance for e in errors.values())} of {len(scored)} within tolerance, '
          f'worst {worst} {errors[worst]:.2f} of its bounds width', file=out, flush=True)


def _change(before: Mapping[str, float], after: Mapping[str, float]) -> str:
    """What changed in the truth, e.g. 'payload.mass 0 -> 1'."""
    return ', '.join(f'{n} {before[n]:.4g} -> {after[n]:.4g}' for n in after
                     if before.get(n) != after[n])


def _failed(process, sim, estimator, probe, out) -> int:
    """Report a node that exited early, with the end of its log, and stop the other."""
    print(f'sysid demo: {process.module} exited with status {process.proc.returncode}; its '
          f'log ({process.log_path}) ends:\n' + '\n'.join(process.output().splitlines()[-15:]),
          file=out)
    return _finish(EXIT_NODE_FAILED, sim, estimator, probe)


def _finish(status: int, sim, estimator, probe) -> int:
    """Stop both nodes as Ctrl-C would (the estimator saves its posterior) and ROS here."""
    for process in (p for p in (estimator, sim) if p is not None):
        try:
            process.interrupt(timeout=20.0)
        except Exception:                       # killed after the timeout: nothing to save
            pass
        process.kill()
    probe.close()
    return status
