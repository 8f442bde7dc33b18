"""Logs in the user's own column layout (`data.layout`): a plain CSV or NPZ file read into a
`Trajectory` without a conversion script.

A layout names where each signal is and in which unit:

    data:
      torque_gains: [13.1, 13.1, 9.8, 4.5, 4.5, 4.5]   # the efforts are currents [A]
      layout:
        time: stamp_ms         # a column (CSV with a header), a column index (0 first) or
        time_unit: ms          #   an NPZ key; s, ms, us or ns
        position: 'pos_{joint}'  # a template: {joint} is the model joint's name, {index}
        velocity: 'vel{index}'   #   its place in model.joints from 1; or a list of one
        effort: [7, 8, 9, 10, 11, 12]  # column (or index) per joint; or an NPZ key of a
        angle_unit: deg        #   (T, nv) array in model joint order
        header: true           # CSV: the first row names the columns
        delimiter: ','

`velocity` may be left out: it is then the central difference of the positions at the
stamps (np.gradient, no filter). `angle_unit: deg` converts the positions and velocities of
revolute joints (prismatic joints stay in m, m/s). The efforts are scaled by
`data.torque_gains` where the caller applies them (`io.problem.prepare_trajectories`).
"""

from __future__ import annotations

import csv
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

from sysid_ros.io.config_schema import error
from sysid_ros.io.trajectory import DataError, Trajectory, validate_trajectory

__all__ = ['KEYS', 'SIGNALS', 'TIME_UNITS', 'ANGLE_UNITS', 'parse_layout', 'read_log']

SIGNALS = ('position', 'velocity', 'effort')
TIME_UNITS = {'s': 1.0, 'ms': 1e-3, 'us': 1e-6, 'ns': 1e-9}
ANGLE_UNITS = {'rad': 1.0, 'deg': math.pi / 180.0}
KEYS = ('time', 'time_unit') + SIGNALS + ('angle_unit', 'header', 'delimiter')
_KEY = 'data.layout'


def parse_layout(d: Mapping[str, Any], path: str | None = None) -> dict[str, Any]:
    """Validate a `data.layout` map (module doc); returns it with every default filled in.

    Raises:
      ConfigError: an unknown key, a missing `time`, `position` or `effort`, a unit not
        in TIME_UNITS or ANGLE_UNITS, a signal that is neither a name, a template nor a
        list of columns.
    """
    unknown = [k for k in d if k not in KEYS]
    if unknown:
        raise error(path, f'{_KEY}.{unknown[0]}', f'unknown key; expected one of '
                    f'{", ".join(KEYS)}')
    out = {'time_unit': 's', 'velocity': None, 'angle_unit': 'rad', 'header': True,
           'delimiter': ','}
    out.update(d)
    for key in ('time', 'position', 'effort'):
        if out.get(key) in (None, '', []):
            raise error(path, f'{_KEY}.{key}', 'missing: expected a column, a column index '
                        'or an NPZ key' + ('' if key == 'time' else ', a template or a list'))
    for key, units in (('time_unit', TIME_UNITS), ('angle_unit', ANGLE_UNITS)):
        if out[key] not in units:
            raise error(path, f'{_KEY}.{key}', f'expected one of {", ".join(units)}, got '
                        f'{out[key]!r}')
    if not _is_column(out['time']):
        raise error(path, f'{_KEY}.time', f'expected a column name or index, got '
                    f'{out["time"]!r}')
    for key in SIGNALS:
        value = out[key]
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            if not value or not all(_is_column(v) for v in value):
                raise error(path, f'{_KEY}.{key}', f'expected one column name or index per '
                            f'joint, got {value!r}')
            out[key] = list(value)
        elif not (isinstance(value, str) and value):
            raise error(path, f'{_KEY}.{key}', f'expected a column template, an NPZ key or a '
                        f'list of columns, got {value!r}')
        elif '{' in value:
            try:
                value.format(joint='joint', index=1)
            except (KeyError, IndexError, ValueError) as exc:
                raise error(path, f'{_KEY}.{key}', f'a template takes {{joint}} and {{index}} '
                            f'only, got {value!r} ({exc!r})') from None
    if not isinstance(out['header'], bool):
        raise error(path, f'{_KEY}.header', f'expected true or false, got {out["header"]!r}')
    if not (isinstance(out['delimiter'], str) and len(out['delimiter']) == 1):
        raise error(path, f'{_KEY}.delimiter', f'expected one character, got '
                    f'{out["delimiter"]!r}')
    return out


def _is_column(value) -> bool:
    return (isinstance(value, str) and bool(value)) or (
        isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def read_log(path: str | os.PathLike, layout: Mapping[str, Any], joint_names: Sequence[str],
             revolute: Sequence[bool]) -> Trajectory:
    """Read a `.csv` or `.npz` log described by `layout` (validated by `parse_layout`).

    Args:
      path: the log.
      layout: the `data.layout` map.
      joint_names: (nv,) the model's joints: the column order of the result.
      revolute: (nv,) whether each joint is revolute (converted by `angle_unit`).

    Returns:
      A validated Trajectory (t [s] from the first row, q, qd, tau = the raw efforts).

    Raises:
      DataError: an unreadable file, a column or key that is not in it, a signal of the
        wrong width, non-finite values, time that does not increase.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f'{path}: file not found')
    ext = os.path.splitext(path)[1].lower()
    if ext == '.csv':
        table = _CsvTable(path, layout)
    elif ext == '.npz':
        table = _NpzTable(path)
    else:
        raise DataError(f'{path}: unknown log format {ext!r}; expected .csv or .npz')
    t = table.column(layout['time'], 'time').astype(float) * TIME_UNITS[layout['time_unit']]
    scale = np.where(np.asarray(revolute, bool), ANGLE_UNITS[layout['angle_unit']], 1.0)
    signals = {}
    for key in SIGNALS:
        if layout[key] is not None:
            signals[key] = table.signal(layout[key], key, joint_names)
    q = signals['position'] * scale
    if 'velocity' in signals:
        qd = signals['velocity'] * scale
    else:
        qd = np.gradient(q, t, axis=0) if len(t) > 1 else np.zeros_like(q)
    return validate_trajectory(Trajectory(t=t - t[0] if len(t) else t, q=q, qd=qd,
                                          tau=signals['effort'],
                                          joint_names=tuple(joint_names), source=path))


class _CsvTable:
    """A CSV file's columns, by header name or by index."""

    def __init__(self, path: str, layout: Mapping[str, Any]):
        self.path = path
        try:
            with open(path, newline='', encoding='utf-8') as f:
                rows = list(csv.reader(f, delimiter=layout['delimiter']))
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f'{path}: cannot read: {exc}') from exc
        self.names = [h.strip() for h in rows[0]] if layout['header'] and rows else []
        body = rows[1:] if layout['header'] else rows
        body = [r for r in body if any(cell.strip() for cell in r)]
        width = len(self.names) if self.names else (len(body[0]) if body else 0)
        try:
            self.values = np.array([[float(cell) for cell in r] for r in body],
                                   dtype=float).reshape(len(body), width)
        except ValueError as exc:
            raise DataError(f'{path}: cannot parse numbers (rows of {width} columns): '
                            f'{exc}') from exc

    def column(self, column, what: str) -> np.ndarray:
        if isinstance(column, int):
            if column >= self.values.shape[1]:
                raise DataError(f'{self.path}: data.layout.{what}: column {column}, but rows '
                                f'have {self.values.shape[1]} columns')
            return self.values[:, column]
        if column not in self.names:
            shown = ', '.join(self.names[:12]) + (', ...' if len(self.names) > 12 else '')
            raise DataError(f'{self.path}: data.layout.{what}: no column {column!r}; the '
                            f'header has {shown or "no names (data.layout.header: false)"}')
        return self.values[:, self.names.index(column)]

    def signal(self, spec, what: str, joint_names: Sequence[str]) -> np.ndarray:
        return np.stack([self.column(c, what) for c in _columns(spec, what, joint_names)],
                        axis=1)


class _NpzTable:
    """An NPZ file's arrays: 1-D columns, or a 2-D (T, nv) array for a whole signal."""

    def __init__(self, path: str):
        self.path = path
        try:
            with np.load(path, allow_pickle=False) as data:
                self.arrays = {k: np.asarray(data[k]) for k in data.files}
        except (OSError, ValueError) as exc:
            raise DataError(f'{path}: cannot read as .npz: {exc}') from exc

    def column(self, key, what: str) -> np.ndarray:
        if key not in self.arrays:
            raise DataError(f'{self.path}: data.layout.{what}: no key {key!r}; the file has '
                            f'{sorted(self.arrays)}')
        return self.arrays[key]

    def signal(self, spec, what: str, joint_names: Sequence[str]) -> np.ndarray:
        if isinstance(spec, str) and spec in self.arrays:
            value = self.arrays[spec]
            if value.ndim != 2 or value.shape[1] != len(joint_names):
                raise DataError(f'{self.path}: data.layout.{what}: {spec!r} has shape '
                                f'{value.shape}; expected (samples, {len(joint_names)}) in '
                                f'the order of model.joints {list(joint_names)}')
            return value.astype(float)
        return np.stack([self.column(c, what).astype(float)
                         for c in _columns(spec, what, joint_names)], axis=1)


def _columns(spec, what: str, joint_names: Sequence[str]) -> list:
    """One column (name or index) per joint from a template or a list."""
    if isinstance(spec, list):
        if len(spec) != len(joint_names):
            raise DataError(f'data.layout.{what}: {len(spec)} columns for the '
                            f'{len(joint_names)} joints {list(joint_names)}')
        return spec
    if '{' not in spec:
        raise DataError(f'data.layout.{what}: {spec!r} names one column; expected a template '
                        'with {joint} or {index}, a list of columns, or an NPZ key')
    return [spec.format(joint=name, index=i + 1) for i, name in enumerate(joint_names)]
