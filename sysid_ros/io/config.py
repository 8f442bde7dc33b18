"""Typed, validated configuration of an identification problem.

One YAML file describes a problem; it is also a ROS 2 parameters file (`/**: ros__parameters:`
or `<node>: ros__parameters:` at the top). `load_yaml` reads it, `from_dict` validates a plain
nested dict and `from_flat_dict` the dotted names of ROS parameters (`parameters.link2.mass.min`).
Validation happens here, once; a bad value raises `ConfigError` naming the file, the dotted key
and what was expected, e.g. `config/foo.yaml: estimator.particles: expected int >= 1, got 0`.

Sections: `model`, `parameters`, `data`, `estimator`, `online`, `excitation` (see the
dataclasses of `io.config_sections` for every key, its default and unit). `parameters` is a
nested map whose leaves are `{min, max, init, std}` (`std`: a Gaussian prior about the
nominal value, `io.nominal_prior`):

    /**:
      ros__parameters:
        parameters:
          link2:
            mass: {min: 0.05, max: 0.5, init: 0.2}
            com:
              x: {min: -0.2, max: 0.2}
          joint1:
            damping: {min: 0.0, max: 0.5}

and flattens to `{'link2.mass': (0.05, 0.5), 'link2.com.x': (-0.2, 0.2), ...}`. A missing
`min` is -inf (0 for non-negative quantities such as masses), a missing `max` is inf.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from sysid_ros.core.model import parameters as _parameters
from sysid_ros.io.config_schema import ConfigError, error
from sysid_ros.io.config_sections import (
    DataConfig, EstimatorConfig, ExcitationConfig, GRAPH_METHODS, ModelConfig, OnlineConfig,
    ParametersConfig, UNUSED_BY_ACTUATOR)
from sysid_ros.io.errors import read_yaml

__all__ = [
    'ConfigError',
    'config_error',
    'ModelConfig',
    'ParametersConfig',
    'DataConfig',
    'EstimatorConfig',
    'OnlineConfig',
    'ExcitationConfig',
    'Config',
    'SECTIONS',
    'from_dict',
    'from_flat_dict',
    'check_graph_method',
    'nest_flat',
    'deep_merge',
    'load_yaml',
    'read_tree',
    'to_dict',
    'parameter_spec',
]


def config_error(config: 'Config', key: str, message: str) -> ConfigError:
    """A ConfigError naming the configuration's file (if any) and the dotted `key`."""
    return error(config.source, key, message)


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole problem description.

    Attributes:
      model, parameters, data, estimator: the sections.
      online: settings of the live estimator node.
      excitation: the designed motion of `sysid excite`.
      source: the file it was read from, if any.
    """

    model: ModelConfig
    parameters: ParametersConfig
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    estimator: EstimatorConfig = dataclasses.field(default_factory=EstimatorConfig)
    online: OnlineConfig = dataclasses.field(default_factory=OnlineConfig)
    excitation: ExcitationConfig = dataclasses.field(default_factory=ExcitationConfig)
    source: str | None = None

    @property
    def dt(self) -> float:
        """Integration step [s]: model.dt, else 1 / data.rate."""
        return self.model.dt if self.model.dt is not None else 1.0 / self.data.rate

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'Config':
        return from_dict(d, path)


SECTIONS = ('model', 'parameters', 'data', 'estimator', 'online', 'excitation')


def from_dict(d: Mapping[str, Any], path: str | None = None) -> Config:
    """Validate a plain nested dict (no ros__parameters wrapper) into a `Config`.

    Args:
      d: the configuration.
      path: the file it came from; named in errors and used to resolve relative URDF paths.

    Raises:
      ConfigError: unknown key, wrong type, bad range or inconsistent sections.
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f'{path}: expected a map at the top level, got {type(d).__name__}'
                          if path else f'expected a map, got {type(d).__name__}')
    for key in d:
        if key not in SECTIONS:
            raise error(path, str(key), 'unknown section; expected one of '
                        + ', '.join(SECTIONS))
    for key in ('model', 'parameters'):
        if key not in d:
            raise error(path, key, 'missing section')
    cfg = Config(model=ModelConfig.from_dict(d['model'], path),
                 parameters=ParametersConfig.from_dict(d['parameters'], path),
                 data=DataConfig.from_dict(d.get('data'), path),
                 estimator=EstimatorConfig.from_dict(d.get('estimator'), path),
                 online=OnlineConfig.from_dict(d.get('online'), path),
                 excitation=ExcitationConfig.from_dict(d.get('excitation'), path),
                 source=None if path is None else str(path))
    if cfg.model.prefix:
        cfg = _with_prefix(cfg, cfg.model.prefix)
    mismatch = check_graph_method(cfg.estimator.method, cfg.model.mechanism)
    if mismatch:
        raise error(path, 'estimator.method', mismatch)
    unused = UNUSED_BY_ACTUATOR.get(cfg.model.actuator, ())
    for name in cfg.parameters.names:
        attribute = _parameters.split_name(name)[1]
        if attribute in unused:
            raise error(path, f'parameters.{name}',
                        f'{attribute} is not part of actuator {cfg.model.actuator!r}; '
                        'expected a model.actuator that uses it (e.g. stribeck)')
    return cfg


def _with_prefix(cfg: Config, prefix: str) -> Config:
    """`cfg` with `prefix` prepended to every joint and link name that lacks it (see
    `ModelConfig.prefix`); the payload's parameters keep their name."""
    def name(n: str) -> str:
        return n if n.startswith(prefix) else prefix + n

    def parameter(flat: str) -> str:
        obj, attribute = _parameters.split_name(flat)
        return flat if obj == _parameters.PAYLOAD else f'{name(obj)}.{attribute}'

    model = dataclasses.replace(cfg.model, joints=tuple(name(j) for j in cfg.model.joints))
    if model.payload:
        model = dataclasses.replace(model, payload={**model.payload,
                                                    'link': name(model.payload['link'])})
    parameters = ParametersConfig(
        bounds={parameter(k): v for k, v in cfg.parameters.bounds.items()},
        init={parameter(k): v for k, v in cfg.parameters.init.items()},
        std={parameter(k): v for k, v in cfg.parameters.std.items()})
    data = dataclasses.replace(cfg.data, mocap_frames=tuple(name(f)
                                                            for f in cfg.data.mocap_frames))
    online = dataclasses.replace(cfg.online, push_parameters={
        parameter(k): v for k, v in cfg.online.push_parameters.items()})
    return dataclasses.replace(cfg, model=model, parameters=parameters, data=data,
                               online=online)


def check_graph_method(method: str, mechanism: str | None) -> str:
    """Why `method` cannot run on this model ('' if it can): factor_graph identifies planar
    mechanisms (model.mechanism), and only it does."""
    if method in GRAPH_METHODS and mechanism is None:
        return (f'{method} runs on a planar mechanism; expected model.mechanism (one of '
                'core.constrained.mechanisms.MECHANISMS, e.g. four_bar) instead of '
                'model.urdf/builder')
    if method not in GRAPH_METHODS and mechanism is not None:
        return (f'model.mechanism {mechanism!r} is identified by '
                f'{" | ".join(GRAPH_METHODS)} only, got {method!r}')
    return ''


def from_flat_dict(flat: Mapping[str, Any], path: str | None = None) -> Config:
    """Validate ROS-style dotted names (`{'parameters.link2.mass.min': 0.05, ...}`)."""
    return from_dict(nest_flat(flat, path), path)


def nest_flat(flat: Mapping[str, Any], path: str | None = None) -> dict[str, Any]:
    """ROS-style dotted names -> nested maps (unvalidated); a name that is both a value and a
    map is a ConfigError."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        node = nested
        *heads, last = str(name).split('.')
        for i, head in enumerate(heads):
            node = node.setdefault(head, {})
            if not isinstance(node, dict):
                raise error(path, '.'.join(heads[:i + 1]), 'is both a value and a map')
        if isinstance(node.get(last), dict):
            raise error(path, name, 'is both a value and a map')
        node[last] = value
    return nested


def _unwrap_ros(d, path, node: str | None):
    """Strip `<node>: ros__parameters:`; merge `/**` with `node`'s entry (node wins)."""
    if not isinstance(d, Mapping):
        return d
    wrapped = {k: v for k, v in d.items()
               if isinstance(v, Mapping) and 'ros__parameters' in v}
    if not wrapped:
        return d
    if len(wrapped) != len(d):
        plain = next(k for k in d if k not in wrapped)
        raise error(path, str(plain), 'plain key beside <node>: ros__parameters sections')
    for key, value in wrapped.items():
        if set(value) != {'ros__parameters'}:
            extra = next(k for k in value if k != 'ros__parameters')
            raise error(path, f'{key}.{extra}', 'unknown key; expected ros__parameters')
    wildcard = [k for k in wrapped if k in ('/**', '**')]
    named = [k for k in wrapped if k not in wildcard]
    if node is not None:
        bare = node.strip('/').split('/')[-1]
        named = [k for k in named if k.strip('/').split('/')[-1] == bare]
    elif len(named) > 1 or (named and wildcard):
        raise ConfigError(f'{path}: several ros__parameters sections ({", ".join(wrapped)}); '
                          'pass the node name to choose')
    if not wildcard and not named:
        raise ConfigError(f'{path}: no ros__parameters section for node {node!r} or /**; '
                          f'sections: {", ".join(wrapped)}')
    merged: dict[str, Any] = {}
    for key in wildcard + named:
        deep_merge(merged, wrapped[key]['ros__parameters'] or {})
    return merged


def deep_merge(into: dict, new: Mapping) -> None:
    """Merge nested maps `new` into `into` in place; values of `new` win."""
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            deep_merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def load_yaml(path: str | os.PathLike, node: str | None = None) -> Config:
    """Read and validate a YAML config, plain or wrapped in `<node>: ros__parameters:`.

    Args:
      path: the YAML file.
      node: node name to select when the file has several `ros__parameters` sections (its
        entry is merged over `/**`).

    Raises:
      ConfigError: unreadable file, invalid YAML or invalid configuration.
    """
    path = os.fspath(path)
    return from_dict(read_tree(path, node), path)


def read_tree(path: str | os.PathLike, node: str | None = None) -> dict[str, Any]:
    """The configuration map of a YAML file (as `load_yaml` reads it), not yet validated: for
    callers that complete it first (the estimator node adds the robot's own model).

    Raises:
      ConfigError: unreadable file, invalid YAML, an empty file, a file that is no map.
    """
    path = os.fspath(path)
    d = read_yaml(path, ConfigError)
    if d is None:
        raise ConfigError(f'{path}: empty file')
    tree = _unwrap_ros(d, path, node)
    if not isinstance(tree, Mapping):
        raise ConfigError(f'{path}: expected a map of sections (model, parameters, ...), got '
                          f'{type(tree).__name__}')
    return dict(tree)


def to_dict(cfg: Config) -> dict[str, Any]:
    """Turn a `Config` into a nested plain dict that `from_dict` accepts.

    None values and empty lists or maps are left out, so that a ROS parameters file can hold it.
    """
    out: dict[str, Any] = {}
    for section in ('model', 'data', 'estimator', 'online', 'excitation'):
        values = {}
        for f in dataclasses.fields(getattr(cfg, section)):
            value = getattr(getattr(cfg, section), f.name)
            if value is None or (isinstance(value, (tuple, dict)) and not value):
                continue
            values[f.name] = list(value) if isinstance(value, tuple) else value
        out[section] = values
    tree: dict[str, Any] = {}
    for name, (lo, hi) in cfg.parameters.bounds.items():
        obj, attribute = _parameters.split_name(name)
        node = tree.setdefault(obj, {})
        for part in attribute.split('.'):
            node = node.setdefault(part, {})
        node['min'], node['max'] = lo, hi
        if name in cfg.parameters.init:
            node['init'] = cfg.parameters.init[name]
        if name in cfg.parameters.std:
            node['std'] = cfg.parameters.std[name]
    out['parameters'] = tree
    return out


def parameter_spec(cfg: Config, model, payload: _parameters.Payload | None = None
                   ) -> _parameters.ParameterSpec:
    """Build the `core.model.parameters.ParameterSpec` of `cfg.parameters` for `model`
    (RobotModel), with `payload` (the resolved `model.payload`, if any).

    Raises:
      ConfigError: a parameter names a link or joint that `model` does not have, or the
        payload when none is configured.
    """
    try:
        return _parameters.make_parameter_spec(model, cfg.parameters.bounds,
                                               init=cfg.parameters.init, payload=payload)
    except ValueError as exc:
        raise ConfigError(f'{cfg.source}: parameters.{exc}' if cfg.source
                          else f'parameters.{exc}') from exc
