"""Identified values in the files a robot's description package keeps, written by `sysid fit`
beside `robot_identified.urdf` where the driver's profile names one
(`drivers.DriverProfile.description_file`):

  * `franka_inertials` -> `inertials.yaml`, as franka_description's
    `robots/<arm>/inertials.yaml`: per link, under its name without `model.prefix`
    (`link3` for `fr3_link3` with `prefix: fr3_`), `origin: {xyz: 'x y z', rpy: '0 0 0'}`
    (the centre of mass in the link frame [m]), `mass` [kg] and `inertia: {xx, xy, xz, yy,
    yz, zz}` about the centre of mass in link axes [kg m^2]. The arm's moving links only; a
    configured payload is left out (a Franka takes it through SetLoad).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model.inertia import physical_from_inertial
from sysid_ros.io import drivers
from sysid_ros.io.problem import Problem

__all__ = ['WRITERS', 'franka_inertials', 'description_files']


def _number(value: float) -> float:
    return float(f'{float(value):.10g}')


def franka_inertials(problem: Problem, theta) -> dict[str, Any]:
    """franka_description's inertials map of the arm at `theta` (M,) (module doc)."""
    spec, theta = problem.spec, np.array(theta, dtype=float)
    if spec.payload is not None:                 # the arm alone: a payload of no mass
        spec = dataclasses.replace(spec, payload=dataclasses.replace(spec.payload, mass=0.0))
        theta[[i for i, n in enumerate(spec.names) if n == 'payload.mass']] = 0.0
    params = spec.to_params(jnp.asarray(theta), problem.base_params)
    mass, com, inertia = (np.asarray(a, float) for a in physical_from_inertial(params.inertial))
    prefix = problem.config.model.prefix or ''
    out = {}
    for body, link in enumerate(problem.model.link_names):
        key = link[len(prefix):] if prefix and link.startswith(prefix) else link
        c, i = com[body], inertia[body]
        out[key] = {'origin': {'xyz': ' '.join(f'{v:.10g}' for v in c),
                               'rpy': '0 0 0'},
                    'mass': _number(mass[body]),
                    'inertia': {'xx': _number(i[0, 0]), 'xy': _number(i[0, 1]),
                                'xz': _number(i[0, 2]), 'yy': _number(i[1, 1]),
                                'yz': _number(i[1, 2]), 'zz': _number(i[2, 2])}}
    return out


WRITERS: Mapping[str, tuple[str, Callable[[Problem, Any], dict]]] = {
    'franka_inertials': ('inertials.yaml', franka_inertials),
}


def description_files(problem: Problem, theta) -> dict[str, dict]:
    """{file name: content} of the description files of `data.driver`'s profile at theta
    (M,); empty where the profile names none."""
    kind = drivers.DRIVERS[problem.config.data.driver].description_file
    if not kind:
        return {}
    name, writer = WRITERS[kind]
    return {name: writer(problem, theta)}
