"""Result files of an identification, written atomically.

`write_results(out_dir, result)` produces, in `out_dir`:

  * `estimate.yaml`: `parameters: {NAME: {mean, std, min, max, initial, ci95}}` (`mean`:
    the estimate, a posterior mean or a point method's best start; `ci95`: the 95 %
    interval, absent for a point estimate without covariance) plus `converged`,
    `convergence` (how the fit stopped), `warnings` (symptoms of a failed fit), `method`,
    `iterations`, `final_loss`, `wall_time_s`, `consistent`, `interrupted` and the
    method's diagnostics (the identifiability report among them);
  * `posterior.npz`: `particles` (P, M) in physical units, `names` (M,), `initial` (P, M),
    `lower`, `upper` (M,), `loss_history` (K,), `converged` and `convergence` (as in
    `estimate.yaml`), and `covariance` (M, M) where the result has one (lm's Laplace
    covariance, the factor graph's);
  * `history.csv`: `iteration,loss`;
  * `convergence.png`: loss per iteration (log scale), drawn with matplotlib's Agg backend;
  * `report.html`: the page a person reads (`io.html_report`): parameters with units and
    intervals, identifiability, convergence, held-out predictions and metrics, posterior;
  * with `result.marginals` (online methods: factor_graph): `marginals.csv`
    (`t,mean_<name>...,std_<name>...`) and `marginals.png` (estimate +- 2 std over time);
  * with `metrics`: `metrics.json` (held-out scores, see `io.segments.posterior_metrics`);
  * with `figures`: the PNGs that `figures(folder)` draws (`FIGURES`: `sysid fit --bag` draws
    posterior.png only for a result with a posterior sample or covariance);
  * with `controller`: `controller_parameters.yaml`, the estimates under the parameter names
    of `online.push_parameters` as a ROS 2 parameters file (`controller_parameters_file`),
    which the controller `online.push_node` loads with `--ros-args --params-file`: the same
    mapping the live estimator pushes (`pushed_values`);
  * with `descriptions`: each description-package file it names (franka_description's
    `inertials.yaml` for `data.driver: franka`, ur_description's `physical_parameters.yaml`
    for `ur`; `io.description_files`).

A result that did not converge (interrupted, or with warnings) says so in every file it
writes: `converged: false` and the warnings in `estimate.yaml` and `report.html`, `converged`
in `posterior.npz`, and a first comment line in `robot_identified.urdf`,
`controller_parameters.yaml` and the description files (`unconverged_note`), where a file
copied on would lose the rest.

Atomicity: everything is first written into a fresh temporary folder beside `out_dir` (in its
parent, so on the same file system), then that folder replaces `out_dir` by renames. A run that
fails while writing leaves any previous `out_dir` untouched; an interrupted swap leaves the
previous results under `<out_dir>.old-*`, never a half-written `out_dir`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Callable, Mapping

import numpy as np
import yaml

from sysid_ros.io.errors import InputError

__all__ = [
    'BASE_FILES',
    'EVALUATION_FILES',
    'FILES',
    'FIGURES',
    'ResultsError',
    'write_results',
    'read_estimate',
    'estimate_dict',
    'plot_convergence',
    'plot_marginals',
    'CONTROLLER_FILE',
    'EVALUATION_REPORT',
    'pushed_values',
    'unconverged_note',
    'controller_parameters_file',
    'text_table',
]

FIGURES = ('trajectory_density.png', 'posterior.png')
# Written by every fit / only by fits that are evaluated on trajectories (`sysid fit --bag`).
BASE_FILES = ('estimate.yaml', 'posterior.npz', 'history.csv', 'convergence.png',
              'report.html', 'robot_identified.urdf')
EVALUATION_FILES = ('metrics.json',) + FIGURES
MARGINAL_FILES = ('marginals.csv', 'marginals.png')   # written with `result.marginals`
CONTROLLER_FILE = 'controller_parameters.yaml'          # written with `controller`
# `sysid evaluate`'s page beside a fit's results: a new fit drops it with the old posterior.
EVALUATION_REPORT = 'evaluation.html'
FILES = BASE_FILES + EVALUATION_FILES + MARGINAL_FILES + (CONTROLLER_FILE, EVALUATION_REPORT)
# Node key of a parameters file that applies to every node.
_ANY_NODE = '/**'


class ResultsError(InputError):
    """The output location cannot be written."""


def text_table(headers, rows) -> str:
    """Plain-text table, first column left-aligned, others right-aligned."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append('  '.join(parts))
        if k == 0:
            lines.append('  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def _plain(value: Any) -> Any:
    """NumPy scalars/arrays -> plain Python for YAML."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value)                     # YAML writes inf / nan as .inf / .nan
    return value


def estimate_dict(result) -> dict[str, Any]:
    """The content of `estimate.yaml` for a `pipeline.FitResult`."""
    parameters = {}
    interval = result.interval()
    for k, name in enumerate(result.names):
        parameters[name] = {
            'mean': float(result.estimate[k]),
            'std': float(result.std[k]),
            'min': _plain(result.lower[k]),
            'max': _plain(result.upper[k]),
            'initial': float(np.mean(result.initial[:, k])),
        }
        if interval is not None:
            parameters[name]['ci95'] = [float(interval[0, k]), float(interval[1, k])]
    return {
        'converged': bool(result.converged),
        'convergence': result.convergence,
        'warnings': list(result.warnings),
        'method': result.method,
        'iterations': int(result.iterations),
        'final_loss': _plain(result.final_loss),
        'wall_time_s': round(float(result.wall_time), 3),
        'num_particles': int(result.particles.shape[0]),
        'consistent': bool(np.all(result.consistent)),
        'interrupted': bool(result.interrupted),
        'diagnostics': _plain(dict(result.info)),
        'parameters': parameters,
    }


def pushed_values(names, mean, mapping: Mapping[str, str]) -> dict[str, float]:
    """{controller parameter: estimate} for `mapping` (estimate name -> controller parameter
    name, `online.push_parameters`), `names` (M,) and `mean` (M,) the estimate."""
    values = dict(zip(names, np.asarray(mean, dtype=float).tolist()))
    return {target: values[source] for source, target in mapping.items()}


def controller_parameters_file(values: Mapping[str, float], node: str | None) -> dict:
    """A ROS 2 parameters file (as a dict for YAML) that sets `values` on `node` (None: on
    every node). Dotted parameter names are nested, as rcl reads them back (it joins nested
    keys with dots and would mangle a key that holds one)."""
    tree: dict[str, Any] = {}
    for name, value in values.items():
        *groups, leaf = name.split('.')
        branch = tree
        for group in groups:
            branch = branch.setdefault(group, {})
        branch[leaf] = float(value)
    return {node or _ANY_NODE: {'ros__parameters': tree}}


def plot_convergence(path: str, history: np.ndarray, title: str = '') -> None:
    """Loss per iteration on a log scale (`report.convergence_figure`), saved as PNG."""
    from sysid_ros.io import report

    report.save_figure(report.convergence_figure(history, title), path)


def plot_marginals(path: str, t: np.ndarray, mean: np.ndarray, std: np.ndarray,
                   names) -> None:
    """Each parameter's estimate with its +-2 std band over time (t (K,) [s], mean and std
    (K, M)), one panel per parameter. PNG, Agg backend."""
    import matplotlib
    matplotlib.use('Agg', force=True)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 2.2 * len(names) + 0.6), dpi=100)
    for k, name in enumerate(names):
        ax = fig.add_subplot(len(names), 1, k + 1)
        ax.fill_between(t, mean[:, k] - 2 * std[:, k], mean[:, k] + 2 * std[:, k],
                        alpha=0.3, label='+-2 std')
        ax.plot(t, mean[:, k], lw=1.5, label='estimate')
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    ax.set_xlabel('t [s]')
    ax.legend(loc='best', fontsize='small')
    fig.tight_layout()
    fig.savefig(path, format='png')


def _write_all(folder: str, result, extra: Mapping[str, Any] | None,
               urdf: str | None, metrics: Mapping[str, Any] | None = None,
               figures: Callable[[str], None] | None = None,
               controller: Mapping[str, Any] | None = None, report=None,
               descriptions: Mapping[str, Any] | None = None) -> None:
    content = estimate_dict(result)
    if extra:
        content.update(_plain(dict(extra)))
    with open(os.path.join(folder, 'estimate.yaml'), 'w', encoding='utf-8') as f:
        yaml.safe_dump(content, f, sort_keys=False, default_flow_style=False)
    covariance = {} if result.covariance is None else {'covariance': result.covariance}
    np.savez(os.path.join(folder, 'posterior.npz'), particles=result.particles,
             names=np.asarray(result.names, dtype=str), initial=result.initial,
             lower=result.lower, upper=result.upper, loss_history=result.loss_history,
             converged=np.asarray(bool(result.converged)),
             convergence=np.asarray(result.convergence, dtype=str), **covariance)
    note = unconverged_note(result)
    history = np.column_stack([np.arange(1, result.loss_history.size + 1),
                               result.loss_history])
    np.savetxt(os.path.join(folder, 'history.csv'), history, delimiter=',',
               header='iteration,loss', comments='', fmt=['%d', '%.10g'])
    plot_convergence(os.path.join(folder, 'convergence.png'), result.loss_history,
                     f'{result.method}: final loss {result.final_loss:.3g}')
    marginals = getattr(result, 'marginals', None)
    if marginals is not None:
        t, mean, std = (np.asarray(marginals[k]) for k in ('t', 'mean', 'std'))
        header = ','.join(['t'] + [f'mean_{n}' for n in result.names]
                          + [f'std_{n}' for n in result.names])
        np.savetxt(os.path.join(folder, 'marginals.csv'), np.column_stack([t, mean, std]),
                   delimiter=',', header=header, comments='', fmt='%.10g')
        plot_marginals(os.path.join(folder, 'marginals.png'), t, mean, std, result.names)
    if urdf is not None:
        with open(os.path.join(folder, 'robot_identified.urdf'), 'w', encoding='utf-8') as f:
            f.write(urdf if note is None else _urdf_with_comment(urdf, note))
    if metrics is not None:
        with open(os.path.join(folder, 'metrics.json'), 'w', encoding='utf-8') as f:
            json.dump(_plain(dict(metrics)), f, indent=2)   # NaN is written as NaN
    if figures is not None:
        figures(folder)
    from sysid_ros.io import html_report        # jinja2, corner: only when results are written

    html_report.write_report(os.path.join(folder, html_report.REPORT_FILE), content,
                             result.particles, result.loss_history, result.covariance,
                             metrics, report)
    files = dict(descriptions or {})
    if controller is not None:
        files[CONTROLLER_FILE] = controller
    for name, tree in files.items():
        with open(os.path.join(folder, name), 'w', encoding='utf-8') as f:
            if note is not None:
                f.write(f'# {note}\n')
            yaml.safe_dump(_plain(dict(tree)), f, sort_keys=False, default_flow_style=False)


def unconverged_note(result) -> str | None:
    """One line that says a result did not converge and where to read why (None for a
    converged one): what `robot_identified.urdf` and `controller_parameters.yaml` begin
    with."""
    if result.converged:
        return None
    return (f'NOT CONVERGED ({result.convergence or "see the warnings"}): {result.method} '
            'gave these values without converging; estimate.yaml lists the warnings')


def _urdf_with_comment(urdf: str, note: str) -> str:
    """`urdf` with an XML comment of `note` (no '--' in it) after the XML declaration."""
    comment = f'<!-- {note.replace("--", "-")} -->\n'
    text = urdf.lstrip()
    if text.startswith('<?xml'):
        end = text.index('?>') + 2
        return f'{text[:end]}\n{comment}{text[end:].lstrip()}'
    return comment + text


def write_results(out_dir: str | os.PathLike, result, extra: Mapping[str, Any] | None = None,
                  urdf: str | None = None, metrics: Mapping[str, Any] | None = None,
                  figures: Callable[[str], None] | None = None,
                  controller: Mapping[str, Any] | None = None, report=None,
                  descriptions: Mapping[str, Any] | None = None) -> str:
    """Write all result files of `result` (a `pipeline.FitResult`) into `out_dir`, atomically.

    Files already in `out_dir` that this function does not write are carried over into the
    new folder, so only the result files are replaced.

    Args:
      out_dir: output folder (created, with its parents).
      result: the fit result.
      extra: more top-level entries for `estimate.yaml` (e.g. the config and data paths).
      urdf: text of `robot_identified.urdf` (the model with the estimate written in).
      metrics: content of `metrics.json`.
      figures: draws more PNGs into the folder it is given (before the swap, so a failing
        plot leaves the previous results in place).
      controller: content of `controller_parameters.yaml` (`controller_parameters_file`).
      report: units and held-out segments for `report.html` (`html_report.ReportData`);
        None: a page without units or predictions.
      descriptions: {file name: content} of description-package files written as YAML
        (`description_files.description_files`), marked like `controller_parameters.yaml`
        when the result did not converge.

    Returns:
      The absolute path of `out_dir`.

    Raises:
      ResultsError: the parent of `out_dir` cannot be created or written, or `out_dir` is a
        file.
    """
    out_dir = os.path.abspath(os.fspath(out_dir))
    parent = os.path.dirname(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ResultsError(f'{out_dir}: --out: exists and is not a folder')
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(out_dir)}.tmp-', dir=parent)
    except OSError as exc:
        raise ResultsError(f'{out_dir}: --out: cannot write here: {exc.strerror}') from exc
    old = None
    try:
        _write_all(tmp, result, extra, urdf, metrics, figures, controller, report,
                   descriptions)
        if os.path.isdir(out_dir):
            for name in os.listdir(out_dir):
                if name not in FILES:
                    source = os.path.join(out_dir, name)
                    target = os.path.join(tmp, name)
                    if os.path.isdir(source):
                        shutil.copytree(source, target, symlinks=True)
                    else:
                        shutil.copy2(source, target)
            old = tempfile.mkdtemp(prefix=f'.{os.path.basename(out_dir)}.old-', dir=parent)
            os.rmdir(old)
            os.rename(out_dir, old)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if old is not None:                 # put the previous results back
                os.rename(old, out_dir)
                old = None
            raise
        tmp = None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out_dir


def read_estimate(out_dir: str | os.PathLike) -> dict[str, Any]:
    """Read `estimate.yaml` back (a plain dict)."""
    with open(os.path.join(os.fspath(out_dir), 'estimate.yaml'), encoding='utf-8') as f:
        return yaml.safe_load(f)
