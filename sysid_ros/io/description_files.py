"""Identified values in the files a robot's description package keeps, written by `sysid fit`
beside `robot_identified.urdf` where the driver's profile names one
(`drivers.DriverProfile.description_file`):

  * `franka_inertials` -> `inertials.yaml`, as franka_description's
    `robots/<arm>/inertials.yaml`: per link, under its name without `model.prefix`
    (`link3` for `fr3_link3` with `prefix: fr3_`), `origin: {xyz: 'x y z', rpy: '0 0 0'}`
    (the centre of mass in the link frame [m]), `mass` [kg] and `inertia: {xx, xy, xz, yy,
    yz, zz}` about the centre of mass in link axes [kg m^2]. The arm's moving links only; a
    configured payload is left out (a Franka takes it through SetLoad).
  * `ur_physical_parameters` -> `physical_parameters.yaml`, as ur_description's
    `config/<ur_type>/physical_parameters.yaml`: under `inertia_parameters`, per link
    `<name>_link` (prefix stripped) `<name>_mass` [kg], `center_of_mass.<name>_cog: {x, y, z}`
    (in the link frame [m]), `rotation.<name>: {roll: 0, pitch: 0, yaw: 0}` and
    `tensor.<name>: {ixx, ixy, ixz, iyy, iyz, izz}` about the centre of mass in link axes
    [kg m^2]. Where `model.xacro_args.physical_params` names a readable file (the driver's
    own), those entries are written into a copy of it, so offsets, radii and the base's mass
    stay and the file can be handed back to the description as it is; otherwise the file
    holds the identified entries alone. A configured payload is left out (a UR takes it
    through SetPayload).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, Callable, Iterator, Mapping

import jax.numpy as jnp
import numpy as np
import yaml

from sysid_ros.core.model.inertia import physical_from_inertial
from sysid_ros.core.model.parameters import INERTIA_ATTRIBUTES, PAYLOAD
from sysid_ros.io import drivers
from sysid_ros.io.problem import Problem

__all__ = ['WRITERS', 'franka_inertials', 'ur_physical_parameters', 'description_files']


def _number(value: float) -> float:
    return float(f'{float(value):.10g}')


def _arm_links(problem: Problem, theta) -> Iterator[tuple[str, float, np.ndarray, np.ndarray]]:
    """(link name without `model.prefix`, mass [kg], COM (3,) in the link frame [m], inertia
    (3, 3) about the COM in link axes [kg m^2]) of each moving link at `theta` (M,), with a
    configured payload taken off (the robot's own file describes the arm alone)."""
    spec, theta = problem.spec, np.array(theta, dtype=float)
    if spec.payload is not None:                 # the arm alone: a payload of no mass
        spec = dataclasses.replace(spec, payload=dataclasses.replace(
            spec.payload, mass=0.0, inertia=(0.0,) * len(INERTIA_ATTRIBUTES)))
        massless = {f'{PAYLOAD}.{a}' for a in ('mass',) + INERTIA_ATTRIBUTES}
        theta[[i for i, n in enumerate(spec.names) if n in massless]] = 0.0
    params = spec.to_params(jnp.asarray(theta), problem.base_params)
    mass, com, inertia = (np.asarray(a, float) for a in physical_from_inertial(params.inertial))
    prefix = problem.config.model.prefix or ''
    for body, link in enumerate(problem.model.link_names):
        key = link[len(prefix):] if prefix and link.startswith(prefix) else link
        yield key, float(mass[body]), com[body], inertia[body]


def _tensor(inertia: np.ndarray, prefix: str) -> dict[str, float]:
    """The six entries of a symmetric (3, 3) `inertia`, named `<prefix>xx` ... `<prefix>zz`."""
    return {f'{prefix}{axes}': _number(inertia['xyz'.index(axes[0]), 'xyz'.index(axes[1])])
            for axes in ('xx', 'xy', 'xz', 'yy', 'yz', 'zz')}


def franka_inertials(problem: Problem, theta) -> dict[str, Any]:
    """franka_description's inertials map of the arm at `theta` (M,) (module doc)."""
    return {key: {'origin': {'xyz': ' '.join(f'{v:.10g}' for v in com), 'rpy': '0 0 0'},
                  'mass': _number(mass), 'inertia': _tensor(inertia, '')}
            for key, mass, com, inertia in _arm_links(problem, theta)}


def ur_physical_parameters(problem: Problem, theta) -> dict[str, Any]:
    """ur_description's physical parameters of the arm at `theta` (M,), merged into the file
    of `model.xacro_args.physical_params` where it can be read (module doc)."""
    source = str(problem.config.model.xacro_args.get('physical_params', ''))
    content: dict[str, Any] = {}
    if source and os.path.isfile(source):
        with open(source, encoding='utf-8') as f:
            content = copy.deepcopy(yaml.safe_load(f) or {})
    section = content.setdefault('inertia_parameters', {})
    for key, mass, com, inertia in _arm_links(problem, theta):
        name = key[:-len('_link')] if key.endswith('_link') else key
        section[f'{name}_mass'] = _number(mass)
        section.setdefault('center_of_mass', {})[f'{name}_cog'] = dict(
            zip('xyz', (_number(v) for v in com)))
        section.setdefault('rotation', {})[name] = {'roll': 0.0, 'pitch': 0.0, 'yaw': 0.0}
        section.setdefault('tensor', {})[name] = _tensor(inertia, 'i')
    return content


WRITERS: Mapping[str, tuple[str, Callable[[Problem, Any], dict]]] = {
    'franka_inertials': ('inertials.yaml', franka_inertials),
    'ur_physical_parameters': ('physical_parameters.yaml', ur_physical_parameters),
}


def description_files(problem: Problem, theta) -> dict[str, dict]:
    """{file name: content} of the description files of `data.driver`'s profile at theta
    (M,); empty where the profile names none."""
    kind = drivers.DRIVERS[problem.config.data.driver].description_file
    if not kind:
        return {}
    name, writer = WRITERS[kind]
    return {name: writer(problem, theta)}
