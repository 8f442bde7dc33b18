"""ROS parameters <-> the problem configuration (`io.config`): what a node declares.

The configuration file is also a ROS 2 parameters file, whose nested keys reach a node as
dotted names (`online.hop`, `parameters.link2.mass.min`). A node reads the parameters it was
given (`given`), builds and validates the configuration from them in `io.config` (which
names an unknown key), then declares every key of the resulting configuration
(`config_parameters`): read-only, typed, described and ranged as the configuration's fields
are, with the value in use, so that `ros2 param get/describe` show what the node runs with
and `ros2 param set` is refused with a reason. Anything given that the node did not declare
is refused at start (`check_given`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from typing import Any, Mapping, NamedTuple, Sequence

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from sysid_ros.io import config as config_io

__all__ = ['Declaration', 'given', 'declare', 'node_parameters', 'config_parameters',
           'check_given']

_INT64_MAX = 2 ** 63 - 1
_TYPE_OF_KIND = {'float': Parameter.Type.DOUBLE, 'int': Parameter.Type.INTEGER,
                 'str': Parameter.Type.STRING, 'topic': Parameter.Type.STRING,
                 'str_list': Parameter.Type.STRING_ARRAY,
                 'topic_list': Parameter.Type.STRING_ARRAY,
                 'float_list': Parameter.Type.DOUBLE_ARRAY}
_ATTRIBUTE = re.compile(r'^  (\w+): ', re.MULTILINE)      # an entry of `Attributes:`


class Declaration(NamedTuple):
    """One parameter to declare: `value` is a Python value, or a `Parameter.Type` for a
    parameter that is not set (an optional key left out, an empty list)."""

    name: str
    value: Any
    descriptor: ParameterDescriptor


def given(node: Node) -> dict[str, Any]:
    """{name: value} of the parameters given to `node` at start (params files, `-p`).

    rclpy keeps them as the node's parameter overrides and has no public accessor for those
    before they are declared; the configuration's names are only known from them.
    """
    return {name: parameter.value for name, parameter in node._parameter_overrides.items()}


def declare(node: Node, declarations: Sequence[Declaration]) -> None:
    """Declare `declarations` on `node` with their values (overrides already applied); those
    already declared (a lifecycle node configured again) stay as they are: read-only."""
    node.declare_parameters('', [tuple(d) for d in declarations
                                 if not node.has_parameter(d.name)], ignore_override=True)


def node_parameters(node: Node, specs: Sequence[tuple[str, Any, str, float | None]]
                    ) -> dict[str, Any]:
    """Declare a node's own read-only parameters and return their values.

    Args:
      node: the node.
      specs: (name, default, description, minimum or None) per parameter; the default's type
        is the parameter's (an int given for a float parameter is taken as a float).

    Raises:
      config_io.ConfigError: a value of another type or below its minimum.
    """
    supplied = given(node)
    values, declarations = {}, []
    for name, default, description, minimum in specs:
        value = supplied.get(name, default)
        if isinstance(default, float) and type(value) is int:
            value = float(value)
        if type(value) is not type(default):
            raise config_io.ConfigError(f'parameter {name}: expected a {type(default).__name__}'
                                        f', got {value!r}')
        if minimum is not None and not value >= minimum:
            raise config_io.ConfigError(f'parameter {name}: expected a number >= {minimum:g}, '
                                        f'got {value!r}')
        values[name] = value
        declarations.append(Declaration(name, value, _descriptor(description, {'ge': minimum},
                                                                 value)))
    declare(node, declarations)
    return values


def check_given(node: Node) -> None:
    """Refuse a parameter that was given but that `node` did not declare (a typo).

    Raises:
      config_io.ConfigError: naming the first such parameter.
    """
    unknown = sorted(name for name in given(node) if not node.has_parameter(name))
    if unknown:
        raise config_io.ConfigError(
            f'parameter {unknown[0]}: unknown to node {node.get_name()}; expected one of '
            + ', '.join(node.list_parameters([], 1).names) + ' or a configuration key ('
            + ', '.join(f'{s}.*' for s in config_io.SECTIONS) + ') or '
            'qos_overrides.<subscribed topic>.subscription.<policy>')


def _field_docs(cls) -> dict[str, str]:
    """{field: text} from the `Attributes:` section of a config dataclass's docstring."""
    section = (inspect.getdoc(cls) or '').partition('Attributes:')[2]
    parts = _ATTRIBUTE.split(section)
    return {name: ' '.join(text.split()) for name, text in zip(parts[1::2], parts[2::2])}


def _ros_value(value) -> Any:
    """A configuration value as a ROS parameter value (lists of numbers with a float in them
    become lists of floats)."""
    if isinstance(value, (list, tuple)):
        items = list(value)
        if any(isinstance(v, float) for v in items) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return [float(v) for v in items]
        return items
    return value


def _descriptor(description: str, meta: Mapping[str, Any], value) -> ParameterDescriptor:
    """Read-only descriptor with the choices, words and bounds of the field metadata."""
    descriptor = ParameterDescriptor(description=description, read_only=True)
    constraints = []
    if meta.get('choices'):
        constraints.append('one of ' + ' | '.join(meta['choices']))
    if meta.get('words'):
        constraints.append('or one of ' + ' | '.join(meta['words']))
    low = meta.get('gt', meta.get('ge'))
    if low is not None and meta.get('gt') is not None:
        constraints.append(f'> {low:g}')
    descriptor.additional_constraints = '; '.join(constraints)
    if low is not None and isinstance(value, float):
        descriptor.floating_point_range = [FloatingPointRange(
            from_value=float(low), to_value=math.inf, step=0.0)]
    elif low is not None and isinstance(value, int) and not isinstance(value, bool):
        first = int(low) + 1 if meta.get('gt') is not None else int(low)
        descriptor.integer_range = [IntegerRange(from_value=first, to_value=_INT64_MAX,
                                                 step=1)]
    return descriptor


def _leaves(tree: Mapping[str, Any], prefix: str):
    """(dotted name, value) of every leaf of a nested map."""
    for key, value in tree.items():
        name = f'{prefix}.{key}'
        if isinstance(value, Mapping):
            yield from _leaves(value, name)
        else:
            yield name, value


def _section_parameters(section: str, cfg) -> list[Declaration]:
    docs = _field_docs(type(cfg))
    out = []
    for f in dataclasses.fields(cfg):
        name, value, meta = f'{section}.{f.name}', getattr(cfg, f.name), f.metadata
        description = docs.get(f.name, '')
        if meta['kind'] == 'map':
            out += [Declaration(leaf, _ros_value(v), _descriptor(
                f'{description} (entry {leaf[len(name) + 1:]})', {}, v))
                for leaf, v in _leaves(value, name)]
        elif value is None or value == ():
            out.append(Declaration(name, _TYPE_OF_KIND[meta['kind']],
                                   _descriptor(f'{description} (not set)', meta, value)))
        else:
            out.append(Declaration(name, _ros_value(value), _descriptor(description, meta,
                                                                        value)))
    return out


def config_parameters(cfg: config_io.Config) -> list[Declaration]:
    """Every key of `cfg` as a read-only parameter with its value, type, description and
    range: the fixed fields of `model`, `data`, `estimator` and `online`, the entries of
    their maps (`model.builder_args.*`, `online.push_parameters.*`, ...), and the bounds and
    initial values of `parameters.<name>.{min,max,init}`."""
    out = []
    for section in config_io.SECTIONS:
        if section != 'parameters':
            out += _section_parameters(section, getattr(cfg, section))
    for name, (lo, hi) in cfg.parameters.bounds.items():
        out.append(Declaration(f'parameters.{name}.min', lo, _descriptor(
            f'lower bound of {name} (physical units)', {}, lo)))
        out.append(Declaration(f'parameters.{name}.max', hi, _descriptor(
            f'upper bound of {name} (physical units)', {}, hi)))
        if name in cfg.parameters.init:
            value = cfg.parameters.init[name]
            out.append(Declaration(f'parameters.{name}.init', value, _descriptor(
                f'initial value of {name} (physical units)', {}, value)))
    return out
