"""`report.html`: one self-contained page on a fit that a person opens in a browser.

The page (jinja2 template `templates/report.html.j2`, figures by `io.report` embedded as
base64 PNG; no scripts, no fetches) shows:

  * the summary: method, whether and how the fit converged, its warnings, the inputs;
  * the parameter table: unit, initial value, estimate, std, 95 % interval and bounds;
  * the identifiability analysis of the fit, where the method made one (lm);
  * the convergence trace (loss per iteration);
  * measured vs predicted held-out segments and their metrics, where given;
  * a corner plot of the posterior: a Bayesian method's particles, or draws from the
    Gaussian (Laplace) approximation of a point estimate with a covariance.

It is built from the content of the result files (`estimate.yaml`, `posterior.npz`), so that
`sysid fit` and `sysid evaluate` (which reads them back) write the same page.
"""

from __future__ import annotations

import base64
import io
import math
import os
from typing import Any, Mapping, NamedTuple, Sequence

import jinja2
import numpy as np
import yaml

from sysid_ros.io import report
from sysid_ros.io.config_sections import BAYESIAN_METHODS
from sysid_ros.io.units import labelled

__all__ = ['LAPLACE_DRAWS', 'REPORT_FILE', 'ReportData', 'posterior_sample', 'render_report',
           'write_report']

REPORT_FILE = 'report.html'
# Draws from a point estimate's Gaussian approximation for its corner plot.
LAPLACE_DRAWS = 4000
# Metrics of `io.segments.posterior_metrics`: (label with unit, meaning).
_METRICS = {
    'kl_real_sim': ('KL(real || sim) [nats]', 'measured segments under the rollouts'),
    'kl_sim_real': ('KL(sim || real) [nats]', 'rollouts under the measured segments'),
    'mmd': ('MMD^2 [-]', 'maximum mean discrepancy, RBF kernel'),
    'log_likelihood': ('log-likelihood [nats]', 'posterior predictive, summed over segments'),
    'nmse': ('NMSE [-]', 'normalised mean squared error of the mean prediction'),
    'num_segments': ('segments', ''),
    'horizon': ('horizon [steps]', 'steps per segment'),
    'num_trajectories': ('trajectories', ''),
    'num_particles': ('particles', ''),
    'num_diverged': ('diverged particles', 'left out of the metrics'),
}
_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader('sysid_ros.io', 'templates'),
    autoescape=jinja2.select_autoescape(default=True), undefined=jinja2.StrictUndefined,
    trim_blocks=True, lstrip_blocks=True)


class ReportData(NamedTuple):
    """What the page shows beside the result files' content.

    Attributes:
      units: (M,) unit of each parameter (`io.units.parameter_units`).
      state_labels: (D,) state axis labels with units (`io.units.state_labels`).
      held: measured and predicted segments (`io.segments.HeldOutRollouts`: t (H,) [s],
        real (N, H, D), sim (P, N, H, D)), or None without held-out data.
    """

    units: Sequence[str]
    state_labels: Sequence[str] = ()
    held: Any = None


def _number(value, spec: str = '.4g') -> str:
    """A table cell: numbers formatted with `spec`, None as a dash."""
    if value is None:
        return '\u2013'
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return str(value)
    return format(value, spec) if math.isfinite(value) else str(value)


def _png(fig, dpi: float = 90) -> str:
    """A figure as the base64 text of a PNG (for a data: URL)."""
    buffer = io.BytesIO()
    report.save_figure(fig, buffer, dpi=dpi)
    return base64.b64encode(buffer.getvalue()).decode('ascii')


def posterior_sample(method: str, estimate, particles, covariance=None, seed: int = 0
                     ) -> tuple[np.ndarray | None, str]:
    """(S, M) samples of the posterior for a corner plot, and where they come from.

    A Bayesian method's finite particles (P, M) (`method` in BAYESIAN_METHODS; None when
    P <= M, too few for a corner plot); else LAPLACE_DRAWS draws of N(estimate (M,),
    covariance (M, M)) where a finite covariance is given (lm's Laplace approximation, the
    factor graph's marginal); else None (a point estimate without uncertainty).
    """
    if method in BAYESIAN_METHODS:
        particles = np.asarray(particles, dtype=float)
        particles = particles[np.all(np.isfinite(particles), axis=1)]
        source = f'{particles.shape[0]} finite posterior particles of {method}'
        if particles.shape[0] <= particles.shape[1]:
            return None, f'{source}: too few for a corner plot of {particles.shape[1]}'
        return particles, source
    if covariance is None or not np.all(np.isfinite(covariance)):
        return None, f'{method} gives a point estimate without a covariance'
    draws = np.random.default_rng(seed).multivariate_normal(
        np.asarray(estimate, dtype=float), np.asarray(covariance, dtype=float), LAPLACE_DRAWS,
        method='eigh')
    return draws, (f'{LAPLACE_DRAWS} draws from N(estimate, covariance), the Gaussian '
                   f'approximation of the {method} posterior')


def _parameter_rows(estimate: Mapping, units: Sequence[str]) -> list[dict[str, str]]:
    """Cells of the parameter table, from `estimate.yaml`'s parameters."""
    rows = []
    for (name, entry), unit in zip(estimate['parameters'].items(), units):
        interval = entry.get('ci95')
        rows.append({
            'name': name, 'unit': unit, 'initial': _number(entry['initial']),
            'estimate': _number(entry['mean']), 'std': _number(entry['std'], '.3g'),
            'interval': (f'[{_number(interval[0])}, {_number(interval[1])}]'
                         if interval else '\u2013'),
            'bounds': f'[{_number(entry["min"])}, {_number(entry["max"])}]'})
    return rows


def _identifiability(diagnostics: Mapping, names: Sequence[str], units: Sequence[str]
                     ) -> dict[str, Any] | None:
    """The identifiability report of the diagnostics for the page (None without one)."""
    ident = diagnostics.get('identifiability')
    if not ident:
        return None
    poor = set(ident['poorly_determined'])
    rows = [{'name': name, 'unit': unit, 'std': _number(ident['predicted_std'][name], '.3g'),
             'poor': name in poor} for name, unit in zip(names, units)]
    return {'condition_number': _number(ident['condition_number'], '.3g'),
            'singular_values': ', '.join(_number(v, '.3g') for v in ident['singular_values']),
            'weakest': ident['weakest_combination'], 'warnings': ident['warnings'],
            'rows': rows}


def _metric_rows(metrics: Mapping) -> list[dict[str, str]]:
    """Cells of the metrics table: label with unit, value, meaning."""
    rows = []
    for key, value in metrics.items():
        label, meaning = _METRICS.get(key, (key, ''))
        rows.append({'label': label, 'value': _number(value), 'meaning': meaning})
    return rows


def render_report(estimate: Mapping, particles, loss_history, covariance=None,
                  metrics: Mapping | None = None, data: ReportData | None = None,
                  title: str = 'sysid fit') -> str:
    """The page (HTML text) of one fit.

    Args:
      estimate: the content of `estimate.yaml` (`results.estimate_dict` and its extras).
      particles: (P, M) the result's particles [physical units].
      loss_history: (K,) loss per iteration [-].
      covariance: (M, M) a point estimate's covariance, or None.
      metrics: held-out scores (`io.segments.posterior_metrics` and their sources), or None.
      data: units and held-out segments (ReportData); None: no units, no predictions.
      title: the page's heading.
    """
    names = list(estimate['parameters'])
    data = data if data is not None else ReportData(units=('',) * len(names))
    if len(data.units) != len(names):
        raise ValueError(f'units: expected {len(names)}, got {len(data.units)}')
    labels = labelled(names, data.units)
    diagnostics = dict(estimate.get('diagnostics') or {})
    state = 'converged' if estimate['converged'] else 'NOT converged'
    convergence = _png(report.convergence_figure(
        loss_history, f'{estimate["method"]}: {state} ({estimate["convergence"]})'))
    sample, sample_source = posterior_sample(
        estimate['method'], [entry['mean'] for entry in estimate['parameters'].values()],
        particles, covariance)
    corner = None
    if sample is not None:
        fig = report.posterior_figure(sample, labels)
        corner = _png(fig, dpi=min(80.0, 1400.0 / fig.get_figwidth()))
    prediction = None
    if data.held is not None:
        held = data.held
        prediction = _png(report.prediction_figure(held.t, held.real, held.sim,
                                                   data.state_labels))
    inputs = {key: estimate[key] for key in ('config', 'data', 'bag') if key in estimate}
    summary = {key: _number(estimate[key]) for key in (
        'method', 'iterations', 'final_loss', 'wall_time_s', 'num_particles', 'consistent',
        'interrupted') if key in estimate}
    others = {k: v for k, v in diagnostics.items() if k != 'identifiability'}
    return _ENVIRONMENT.get_template('report.html.j2').render(
        title=title, state=state, estimate=estimate, summary=summary, inputs=inputs,
        parameters=_parameter_rows(estimate, data.units),
        identifiability=_identifiability(diagnostics, names, data.units),
        convergence=convergence, corner=corner, sample_source=sample_source,
        prediction=prediction, metrics=_metric_rows(metrics) if metrics else None,
        evaluated_on=(metrics or {}).get('evaluated_on', ''),
        diagnostics=yaml.safe_dump(others, sort_keys=False) if others else '')


def write_report(path: str | os.PathLike, estimate: Mapping, particles, loss_history,
                 covariance=None, metrics: Mapping | None = None,
                 data: ReportData | None = None, title: str = 'sysid fit') -> None:
    """`render_report` written to `path` (through a temporary file and a rename)."""
    path = os.fspath(path)
    text = render_report(estimate, particles, loss_history, covariance, metrics, data, title)
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)
