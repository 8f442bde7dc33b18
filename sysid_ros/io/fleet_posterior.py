"""The fleet posterior and report of a fleet run, from the fits' own results.

For each robot model, every robot's latest fit (its `estimate.yaml`: posterior mean and std
of each parameter) enters `core.inference.population`: the robots that lie outside their
siblings (leave-one-out, at `population.OUTLIER_LEVEL` for the whole fleet), the fleet
distribution (mean and spread) of each parameter from the robots not flagged in it, and
each robot's posterior under that fleet prior. Nothing is refitted. `fleet_summary` returns
it as a plain dict (`fleet.yaml`); `write_report` writes one page, `fleet.html`: the fleet
distribution per parameter, the per-robot table with own and fleet intervals and flags, each
robot's fits over dates, each linking to its own `report.html`.
"""

from __future__ import annotations

import html
import os
import pathlib
from typing import Sequence

import numpy as np

from sysid_ros.core.inference import population
from sysid_ros.io import results
from sysid_ros.io.fleet_manifest import FleetFit

__all__ = ['fleet_summary', 'write_report', 'Z90']

Z90 = 1.6448536269514722                 # half-width of a central 90 % interval [std]


def _fits_by_model(root: pathlib.Path, fits: Sequence[FleetFit]) -> dict:
    """{model: {robot: [(date, estimate dict, folder)] in date order}} of complete fits."""
    found: dict = {}
    for fit in fits:
        folder = root / fit.key
        if not (folder / 'estimate.yaml').exists():
            continue
        estimate = results.read_estimate(folder)
        found.setdefault(fit.model, {}).setdefault(fit.robot, []).append(
            (fit.date, estimate, folder))
    for robots in found.values():
        for runs in robots.values():
            runs.sort(key=lambda run: run[0])
    return found


def _model_summary(robots: dict, root: pathlib.Path) -> dict:
    names = list(next(iter(robots.values()))[-1][1]['parameters'])
    ids = sorted(robots)
    latest = {r: robots[r][-1] for r in ids}
    mean = np.array([[latest[r][1]['parameters'][n]['mean'] for n in names] for r in ids])
    std = np.array([[latest[r][1]['parameters'][n]['std'] for n in names] for r in ids])
    summary = {'parameters': names, 'robots': {}}
    usable = np.all(std > 0.0, axis=1) & np.all(np.isfinite(mean), axis=1)
    fleet = None
    if usable.sum() >= 3:
        z_usable, flagged_usable = population.outliers(mean[usable], std[usable])
        # A flagged robot is no sample of the fleet: it would widen the prior of the others.
        fleet = population.fleet_distribution(mean[usable], std[usable], ~flagged_usable)
        shrunk_mean, shrunk_std = population.shrunk(mean, np.where(std > 0, std, np.inf),
                                                    fleet)
        summary['fleet'] = {n: {'mean': float(fleet.mean[j]), 'spread': float(fleet.spread[j]),
                                'mean_std': float(fleet.mean_std[j])}
                            for j, n in enumerate(names)}
        z = np.full(mean.shape, np.nan)
        flagged = np.zeros(mean.shape, bool)
        z[usable], flagged[usable] = z_usable, flagged_usable
    else:
        summary['fleet'] = None
    for i, robot in enumerate(ids):
        date, estimate, folder = latest[robot]
        row = {'date': date, 'folder': os.path.relpath(folder, root),
               'converged': bool(estimate.get('converged', False)),
               'own': {n: [float(mean[i, j]), float(std[i, j])] for j, n in enumerate(names)},
               'history': {n: [[d, float(e['parameters'][n]['mean']),
                                float(e['parameters'][n]['std'])] for d, e, _ in robots[robot]]
                           for n in names}}
        if fleet is not None:
            row['fleet'] = {n: [float(shrunk_mean[i, j]), float(shrunk_std[i, j])]
                            for j, n in enumerate(names)}
            row['z'] = {n: float(z[i, j]) for j, n in enumerate(names)}
            row['flagged'] = [n for j, n in enumerate(names) if flagged[i, j]]
        summary['robots'][robot] = row
    return summary


def fleet_summary(root: str | os.PathLike, fits: Sequence[FleetFit]) -> dict:
    """The fleet posterior of every robot model with complete fits (module doc): {model:
    {'parameters', 'fleet': {name: {mean, spread, mean_std}} or None (fewer than 3 robots),
    'robots': {robot: {'date', 'folder', 'converged', 'own', 'fleet': {name: [mean, std]},
    'z', 'flagged', 'history': {name: [[date, mean, std], ...]}}}}}."""
    root = pathlib.Path(root)
    return {model: _model_summary(robots, root)
            for model, robots in sorted(_fits_by_model(root, fits).items())}


def _interval(mean: float, std: float) -> str:
    return f'{mean:.5g} ± {Z90 * std:.2g}'


def write_report(root: str | os.PathLike, summary: dict, status: dict) -> str:
    """Write `<root>/fleet.html` (module doc) and return its path.

    Args:
      root: the fleet's results folder.
      summary: `fleet_summary`'s.
      status: {fit key: outcome} of the run ('done', 'skipped', 'failed: …').
    """
    e = html.escape
    parts = ['<!doctype html><html><head><meta charset="utf-8"><title>sysid fleet</title>'
             '<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;'
             'margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;'
             'text-align:right}.flag{background:#fdd}</style></head><body>',
             '<h1>Fleet identification</h1>',
             f'<p>{sum(v in ("done", "skipped") for v in status.values())} of {len(status)} '
             f'fits complete; 90 % intervals (mean ± {Z90:.3f} std).</p>']
    failed = {k: v for k, v in status.items() if v.startswith('failed')}
    if failed:
        parts.append('<h2>Failed fits</h2><ul>' + ''.join(
            f'<li>{e(k)}: {e(v)}</li>' for k, v in sorted(failed.items())) + '</ul>')
    for model, content in summary.items():
        names = content['parameters']
        parts.append(f'<h2>{e(model)}: {len(content["robots"])} robots</h2>')
        fleet = content['fleet']
        if fleet is None:
            parts.append('<p>Fewer than 3 robots with finite fits: no fleet distribution.</p>')
        else:
            parts.append('<table><tr><th>parameter</th><th>fleet mean</th><th>spread (std)'
                         '</th><th>std of the mean</th></tr>' + ''.join(
                             f'<tr><td>{e(n)}</td><td>{fleet[n]["mean"]:.5g}</td>'
                             f'<td>{fleet[n]["spread"]:.3g}</td><td>{fleet[n]["mean_std"]:.2g}'
                             '</td></tr>' for n in names) + '</table>')
        header = ''.join(f'<th>{e(n)}<br>own</th><th>{e(n)}<br>with the fleet</th>'
                         for n in names)
        rows = []
        for robot, row in content['robots'].items():
            cells = []
            for n in names:
                flag = n in row.get('flagged', [])
                own = _interval(*row['own'][n])
                shrunk = _interval(*row['fleet'][n]) if 'fleet' in row else '–'
                z = f' (z {row["z"][n]:+.1f})' if flag else ''
                cls = ' class="flag"' if flag else ''
                cells.append(f'<td{cls}>{own}{z}</td><td>{shrunk}</td>')
            report = pathlib.Path(row['folder']) / 'report.html'
            link = (f'<a href="{e(str(report))}">{e(robot)}</a>'
                    if (pathlib.Path(root) / report).exists() else e(robot))
            rows.append(f'<tr><td>{link}</td><td>{e(str(row["date"]))}</td>'
                        f'{"".join(cells)}</tr>')
        parts.append(f'<table><tr><th>robot</th><th>date</th>{header}</tr>{"".join(rows)}'
                     '</table>')
        flagged = [(r, row['flagged']) for r, row in content['robots'].items()
                   if row.get('flagged')]
        parts.append('<h3>Outliers</h3>' + ('<ul>' + ''.join(
            f'<li>{e(r)}: {e(", ".join(f))}</li>' for r, f in flagged) + '</ul>'
            if flagged else '<p>none</p>'))
        drift = [(r, row) for r, row in content['robots'].items()
                 if len(next(iter(row['history'].values()))) > 1]
        if drift:
            parts.append('<h3>Over dates</h3><table><tr><th>robot</th><th>date</th>'
                         + ''.join(f'<th>{e(n)}</th>' for n in names) + '</tr>')
            for robot, row in drift:
                for k, (date, _, _) in enumerate(row['history'][names[0]]):
                    parts.append(f'<tr><td>{e(robot)}</td><td>{e(str(date))}</td>' + ''.join(
                        f'<td>{_interval(*row["history"][n][k][1:])}</td>' for n in names)
                        + '</tr>')
            parts.append('</table>')
    parts.append('</body></html>')
    path = pathlib.Path(root) / 'fleet.html'
    path.write_text('\n'.join(parts), encoding='utf-8')
    return str(path)
