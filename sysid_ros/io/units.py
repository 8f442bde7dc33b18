"""Physical units of parameters and states, for tables and axis labels (one table for all).

A parameter's unit follows its attribute (`core.model.parameters`: `link2.mass` -> kg,
`joint1.damping` -> N m s/rad) and, for joint attributes, whether the joint is revolute or
prismatic (`joint1.damping` of a prismatic joint -> N s/m).
"""

from __future__ import annotations

from typing import Sequence

from sysid_ros.core.model.parameters import INERTIA_ATTRIBUTES
from sysid_ros.io.problem import MechanismProblem, Problem

__all__ = ['ATTRIBUTE_UNITS', 'attribute_unit', 'labelled', 'parameter_units', 'state_labels']

_LENGTH = ('m', 'm')
_ANGLE = ('rad', 'rad')
# Attribute -> (unit at a revolute joint, unit at a prismatic joint).
ATTRIBUTE_UNITS: dict[str, tuple[str, str]] = {
    'mass': ('kg', 'kg'),
    'com.x': _LENGTH, 'com.y': _LENGTH, 'com.z': _LENGTH,
    **{attribute: ('kg m^2', 'kg m^2') for attribute in INERTIA_ATTRIBUTES},
    'damping': ('N m s/rad', 'N s/m'),
    'coulomb': ('N m', 'N'),
    'stribeck.torque': ('N m', 'N'),
    'stribeck.velocity': ('rad/s', 'm/s'),
    'armature': ('kg m^2', 'kg'),
    'offset': ('N m', 'N'),
    'gain': ('-', '-'),
    'load_coulomb': ('-', '-'),
    'origin.x': _LENGTH, 'origin.y': _LENGTH, 'origin.z': _LENGTH,
    'origin.roll': _ANGLE, 'origin.pitch': _ANGLE, 'origin.yaw': _ANGLE,
}
# Joint position and velocity: (revolute, prismatic).
_POSITION = ('rad', 'm')
_VELOCITY = ('rad/s', 'm/s')


def attribute_unit(attribute: str, prismatic: bool = False) -> str:
    """Unit of a parameter attribute ('damping' -> 'N m s/rad'; of a prismatic joint 'N s/m')."""
    return ATTRIBUTE_UNITS[attribute][int(prismatic)]


def parameter_units(problem: Problem | MechanismProblem) -> tuple[str, ...]:
    """(M,) unit of each identified parameter of `problem`, in the order of its names."""
    return tuple(attribute_unit(attribute, prismatic)
                 for attribute, prismatic in problem.parameter_attributes)


def state_labels(problem: Problem | MechanismProblem) -> tuple[str, ...]:
    """(2 nv,) axis labels of the state [q, qd] with units, e.g. 'q joint1 [rad]'."""
    prismatic = problem.prismatic
    return tuple(f'{symbol} {joint} [{units[int(slide)]}]'
                 for symbol, units in (('q', _POSITION), ('qd', _VELOCITY))
                 for joint, slide in zip(problem.joint_names, prismatic))


def labelled(names: Sequence[str], units: Sequence[str]) -> list[str]:
    """Axis labels 'name [unit]' (the bare name where the unit is empty)."""
    return [f'{name} [{unit}]' if unit else name for name, unit in zip(names, units)]
