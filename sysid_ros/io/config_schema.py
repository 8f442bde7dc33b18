"""The field schema of the configuration: typed options with units and checks, validated once.

A section is a frozen dataclass whose fields are made by `option(default, kind, unit, doc,
**checks)`; `parse_section` builds one from a plain map, rejecting unknown keys, and every
failure is a `ConfigError` naming the file, the dotted key and what was expected.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from sysid_ros.io.errors import InputError, located

__all__ = ['ConfigError', 'ROS_NAME', 'error', 'option', 'as_number', 'one_or_each',
           'parse_section']

ROS_NAME = re.compile(r'^(~/?|/)?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$')
_SCIENTIFIC = re.compile(r'^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$')  # '1e-3': a str in YAML 1.1


class ConfigError(InputError):
    """Invalid configuration; the message names the file, the dotted key and the expectation."""


def error(path: str | None, key: str, message: str) -> ConfigError:
    """A ConfigError naming the file `path` (if any) and the dotted `key`."""
    return ConfigError(located(path, key, message))


def option(default: Any, kind: str, unit: str = '', doc: str = '', **checks):
    """Make a dataclass field with validation metadata (kind, unit, choices, gt, ge, ...)."""
    meta = dict(kind=kind, unit=unit, doc=doc, **checks)
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def one_or_each(given: Sequence[float], count: int, path: str | None, key: str,
                each: str) -> np.ndarray | None:
    """A configured list as (count,) values, one value standing for all; None where it is
    empty. ConfigError naming the file `path`, the dotted `key` and `each` (what the count
    values are, e.g. 'one per joint') for another length."""
    if not given:
        return None
    if len(given) not in (1, count):
        raise error(path, key, f'expected 1 value or {count} ({each}), got {len(given)}')
    return np.broadcast_to(np.asarray(given, dtype=float), (count,)).copy()


# ------------------------------------------------------------------------------------------
# Scalar validation
# ------------------------------------------------------------------------------------------

def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_number(value, path, key, what='number'):
    if isinstance(value, str) and _SCIENTIFIC.match(value.strip()):
        value = float(value)
    if not _is_number(value) or math.isnan(value):
        raise error(path, key, f'expected {what}, got {value!r}')
    return float(value)


def _range(meta: Mapping[str, Any]) -> str:
    """' > 0', ' >= 1' or '' from the field metadata."""
    if meta.get('gt') is not None:
        return f' > {meta["gt"]:g}'
    if meta.get('ge') is not None:
        return f' >= {meta["ge"]:g}'
    return ''


def _describe(kind: str, meta: Mapping[str, Any]) -> str:
    what = {'float': 'number', 'int': 'int', 'str': 'non-empty string', 'topic': 'topic name',
            'str_list': 'list of non-empty strings', 'topic_list': 'list of topic names',
            'float_list': 'number or list of numbers', 'map': 'map'}[kind]
    words = ''.join(f' or {w}' for w in meta.get('words', ()))
    return what + _range(meta) + words


def _check_range(value, meta, path, key, what):
    gt, ge = meta.get('gt'), meta.get('ge')
    if (gt is not None and not value > gt) or (ge is not None and not value >= ge):
        raise error(path, key, f'expected {what}, got {value!r}')


def _check_topic(value, path, key):
    if not isinstance(value, str) or not ROS_NAME.match(value):
        raise error(path, key, f'expected a ROS topic name such as /joint_states, got {value!r}')
    return value


def _list(value, path, key, what):
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise error(path, key, f'expected {what}, got {value!r}')
    return list(value)


def _validate(value, meta: Mapping[str, Any], path, key):
    """Check one option against its field metadata; returns the normalised value."""
    kind = meta['kind']
    if value is None and meta.get('optional'):
        return None
    words = meta.get('words', ())
    if isinstance(value, str) and value in words:
        return value
    choices = meta.get('choices')
    if choices is not None:
        if value not in choices:
            raise error(path, key, f'expected one of {" | ".join(choices)}, got {value!r}')
        return value
    what = _describe(kind, meta)
    if kind == 'float':
        value = as_number(value, path, key, what)
        if math.isinf(value):
            raise error(path, key, f'expected a finite {what}, got {value!r}')
        _check_range(value, meta, path, key, what)
    elif kind == 'int':
        if not isinstance(value, int) or isinstance(value, bool):
            raise error(path, key, f'expected {what}, got {value!r}')
        _check_range(value, meta, path, key, what)
    elif kind == 'str':
        if not isinstance(value, str) or not value.strip():
            raise error(path, key, f'expected {what}, got {value!r}')
    elif kind == 'topic':
        value = _check_topic(value, path, key)
    elif kind in ('str_list', 'topic_list'):
        items = _list(value, path, key, what)
        for i, item in enumerate(items):
            if kind == 'topic_list':
                _check_topic(item, path, f'{key}[{i}]')
            elif not isinstance(item, str) or not item.strip():
                raise error(path, f'{key}[{i}]', f'expected a non-empty string, got {item!r}')
        duplicates = sorted({i for i in items if items.count(i) > 1})
        if duplicates:
            raise error(path, key, f'expected unique entries, got duplicates {duplicates}')
        value = tuple(items)
    elif kind == 'float_list':
        items = [value] if _is_number(value) or isinstance(value, str) else _list(
            value, path, key, what)
        value = tuple(as_number(v, path, f'{key}[{i}]') for i, v in enumerate(items))
        for i, v in enumerate(value):
            _check_range(v, meta, path, f'{key}[{i}]', 'number' + _range(meta))
    elif kind == 'map':
        if not isinstance(value, Mapping):
            raise error(path, key, f'expected {what}, got {value!r}')
        value = dict(value)
    return value


def parse_section(cls, d, path, name):
    """Build the dataclass `cls` of section `name` from the map `d`, rejecting unknown keys."""
    if d is None:
        d = {}
    if not isinstance(d, Mapping):
        raise error(path, name, f'expected a map, got {d!r}')
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in d:
        if key not in fields:
            raise error(path, f'{name}.{key}', 'unknown key; expected one of '
                        + ', '.join(fields))
    return cls(**{k: _validate(v, fields[k].metadata, path, f'{name}.{k}') for k, v in d.items()})
