"""A fleet's fits: the manifest that names them, their inputs' hashes and results folders.

A manifest (YAML) names the robot models, each with its problem configuration, and the fits:

    models:
      panda: config/panda.yaml            # relative paths: from the manifest's folder
    fits:
      - {robot: arm01, model: panda, date: 2026-11-30, bag: bags/arm01_1130}
      - {robot: arm02, model: panda, date: 2026-11-30, data: [arm02.npz]}
      - {robot: arm03, model: panda, bags: bags/arm03}   # one fit per bag, dated by its name

or a CSV file with the columns `robot, model, config, date` and `bag` or `data` (several data
files separated by `;`), one row per fit. Each fit is `sysid fit --config <its model's config>
--bag|--data ... --out <out>/<model>/<robot>/<date>` (`sysid fleet`, `cli_fleet`).

`read_manifest` checks every entry and returns the fits it can run with one message for each
it cannot (a missing bag, config or data file, an unknown model, a duplicate robot and date):
a bad entry does not stop the rest. `input_hash` is the content hash of what a fit reads
(its configuration, data and the `sysid fit` arguments) and `input_stamp` each input file's
size and modification time, so a fleet run skips a fit whose results were written from the
same inputs (`is_done`: unchanged stamps, checked by `stat` alone, or else the same content).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Sequence

import yaml

from sysid_ros.io.errors import InputError

__all__ = ['FleetFit', 'Manifest', 'read_manifest', 'input_hash', 'input_stamp',
           'input_record', 'TASK_FILE', 'is_done', 'task_record']

# Written into a fit's results folder once it is complete: its inputs' hash and outcome.
TASK_FILE = 'fleet_task.json'
_KEYS = {'robot', 'model', 'date', 'bag', 'bags', 'data', 'config'}


@dataclasses.dataclass(frozen=True)
class FleetFit:
    """One fit of a fleet.

    Attributes:
      robot: the robot's id.
      model: the robot model (robots of one model share a fleet posterior).
      date: the recording's date or name (the results subfolder).
      config: the problem configuration (YAML) path.
      bag: a rosbag path, or None.
      data: trajectory files (.npz/.csv), or empty.
    """

    robot: str
    model: str
    date: str
    config: str
    bag: str | None = None
    data: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """`model/robot/date`: the results subfolder and the fit's name in messages."""
        return f'{self.model}/{self.robot}/{self.date}'

    def arguments(self) -> list[str]:
        """`sysid fit` arguments but `--out`."""
        source = ['--bag', self.bag] if self.bag else ['--data', *self.data]
        return ['fit', '--config', self.config, *source]


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The fits that can run and one message per entry that cannot."""

    fits: tuple[FleetFit, ...]
    problems: tuple[str, ...]


def _is_bag(path: pathlib.Path) -> bool:
    return path.is_file() and path.suffix in ('.bag', '.mcap', '.db3') or (
        path.is_dir() and (path / 'metadata.yaml').exists())


def _entries(path: pathlib.Path) -> tuple[dict, list[dict]]:
    """(models, fit entries) of a YAML or CSV manifest."""
    if path.suffix == '.csv':
        with open(path, newline='', encoding='utf-8') as f:
            rows = [{k.strip(): (v or '').strip() for k, v in row.items() if k}
                    for row in csv.DictReader(f)]
        for row in rows:
            if row.get('data'):
                row['data'] = [p for p in row['data'].split(';') if p]
            for key in [k for k, v in row.items() if v in ('', [])]:
                del row[key]
        return {}, rows
    try:
        content = yaml.safe_load(path.read_text(encoding='utf-8')) or {}
    except yaml.YAMLError as exc:
        raise InputError(f'{path}: not YAML ({exc})') from None
    if not isinstance(content, dict) or not isinstance(content.get('fits'), list):
        raise InputError(f'{path}: expected a map with a list `fits` (and `models`: model '
                         'name -> config)')
    models = content.get('models') or {}
    if not isinstance(models, dict):
        raise InputError(f'{path}: models: expected a map of model name -> config path')
    return models, content['fits']


def read_manifest(path: str | os.PathLike) -> Manifest:
    """The fits of a manifest (module doc), relative paths resolved from its folder.

    Raises:
      InputError: the manifest itself is unreadable (not one of its entries).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise InputError(f'{path}: manifest not found')
    models, entries = _entries(path)
    base = path.parent

    def resolve(p) -> pathlib.Path:
        p = pathlib.Path(str(p)).expanduser()
        return p if p.is_absolute() else base / p

    fits, problems, seen = [], [], {}
    for k, entry in enumerate(entries):
        where = f'{path}: fits[{k}]'
        if not isinstance(entry, dict):
            problems.append(f'{where}: expected a map, got {entry!r}')
            continue
        unknown = sorted(set(entry) - _KEYS)
        robot, model = str(entry.get('robot', '')), str(entry.get('model', ''))
        where += f' ({robot or "?"})'
        if unknown:
            problems.append(f'{where}: unknown key {unknown[0]!r}; expected some of '
                            f'{", ".join(sorted(_KEYS))}')
            continue
        if not robot or not model:
            problems.append(f'{where}: expected a robot and a model')
            continue
        config = entry.get('config') or models.get(model)
        if config is None:
            problems.append(f'{where}: unknown robot model {model!r}; the manifest names '
                            f'{", ".join(sorted(models)) or "none"}')
            continue
        config = resolve(config)
        if not config.is_file():
            problems.append(f'{where}: config {config} not found')
            continue
        sources = [key for key in ('bag', 'bags', 'data') if entry.get(key)]
        if len(sources) != 1:
            problems.append(f'{where}: expected one of bag, bags or data')
            continue
        runs = []
        if sources[0] == 'bags':
            folder = resolve(entry['bags'])
            found = sorted(p for p in folder.iterdir() if _is_bag(p)) if folder.is_dir() else []
            if not found:
                problems.append(f'{where}: no bags in {folder}')
                continue
            runs = [(str(entry.get('date', p.stem)) if len(found) == 1 else p.stem, p, ())
                    for p in found]
        elif sources[0] == 'bag':
            bag = resolve(entry['bag'])
            if not bag.exists():
                problems.append(f'{where}: bag {bag} not found')
                continue
            runs = [(str(entry.get('date', bag.stem)), bag, ())]
        else:
            data = entry['data'] if isinstance(entry['data'], list) else [entry['data']]
            files = [resolve(p) for p in data]
            missing = [str(p) for p in files if not p.is_file()]
            if missing:
                problems.append(f'{where}: data {missing[0]} not found')
                continue
            runs = [(str(entry.get('date', 'data')), None, tuple(str(p) for p in files))]
        for date, bag, data in runs:
            fit = FleetFit(robot, model, date, str(config), str(bag) if bag else None, data)
            if fit.key in seen:
                problems.append(f'{where}: duplicate of fits[{seen[fit.key]}] ({fit.key})')
                continue
            seen[fit.key] = k
            fits.append(fit)
    return Manifest(tuple(fits), tuple(problems))


def _input_files(fit: FleetFit) -> list[tuple[str, pathlib.Path]]:
    """(name, path) of every file the fit reads, in a fixed order: a bag folder's files by
    their names inside it."""
    files = []
    for path in map(pathlib.Path, [fit.config, *([fit.bag] if fit.bag else []), *fit.data]):
        if path.is_dir():
            files += [(str(p.relative_to(path)), p) for p in sorted(path.rglob('*'))
                      if p.is_file()]
        else:
            files.append((path.name, path))
    return files


def input_hash(fit: FleetFit, extra: Sequence[str] = ()) -> str:
    """SHA-256 of the fit's configuration, its data (every file of a bag folder) and the
    further `sysid fit` arguments `extra`."""
    digest = hashlib.sha256()
    for name, file in _input_files(fit):
        digest.update(name.encode())
        with open(file, 'rb') as f:
            for block in iter(lambda: f.read(1 << 20), b''):
                digest.update(block)
    digest.update(json.dumps(list(extra)).encode())
    return digest.hexdigest()


def input_stamp(fit: FleetFit, extra: Sequence[str] = ()) -> list:
    """[[path, size [bytes], modification time [ns]] of each input file, ..., extra]: what a
    second run compares before it reads any content (JSON-serialisable)."""
    stamp: list = []
    for _, file in _input_files(fit):
        stat = file.stat()
        stamp.append([str(file), stat.st_size, stat.st_mtime_ns])
    return [*stamp, list(extra)]


def input_record(fit: FleetFit, extra: Sequence[str] = ()) -> dict:
    """{'input_hash', 'input_stamp'} of the fit's inputs: what a `TASK_FILE` holds for
    `is_done`."""
    return {'input_hash': input_hash(fit, extra), 'input_stamp': input_stamp(fit, extra)}


def task_record(out: str | os.PathLike) -> dict | None:
    """The `TASK_FILE` of a results folder, or None (no complete fit there)."""
    try:
        with open(pathlib.Path(out) / TASK_FILE, encoding='utf-8') as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_done(out: str | os.PathLike, fit: FleetFit, extra: Sequence[str] = ()) -> bool:
    """Whether `out` holds a complete fit of `fit`'s inputs with the arguments `extra`: its
    record's `input_stamp` is today's (no file read), or else its `input_hash` is (files
    touched but not changed)."""
    record = task_record(out)
    if record is None or not (pathlib.Path(out) / 'estimate.yaml').exists():
        return False
    return (record.get('input_stamp') == input_stamp(fit, extra)
            or record.get('input_hash') == input_hash(fit, extra))
