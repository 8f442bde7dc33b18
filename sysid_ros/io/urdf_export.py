"""Write identified parameters into a URDF: update the user's URDF, or write one from scratch.

Pinocchio merges links attached by fixed (or locked) joints into the moving body, so the
identified inertial of body i is `own(link_i) + merged children`. Updating a URDF therefore
writes `own' = identified_i - (nominal_i - own(link_i))`: the merged children keep their
URDF values and the whole change lands on the moving link itself. Joint origins ("no-Kin"
parameters) are written likewise relative to any fixed transforms folded into them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin

from sysid_ros.core.model.types import Params, PRISMATIC, RobotModel
from sysid_ros.io.errors import InputError

__all__ = ['JOINT_DYNAMICS_NAMESPACE', 'JOINT_DYNAMICS_ATTRIBUTES', 'update_urdf',
           'model_to_urdf']

JOINT_DYNAMICS_NAMESPACE = 'urn:sysid_ros:joint-dynamics'
# attribute -> its default (written only where a joint's value differs from it)
JOINT_DYNAMICS_ATTRIBUTES = {'armature': 0.0, 'offset': 0.0, 'gain': 1.0,
                             'stribeck_torque': 0.0, 'stribeck_velocity': 0.0,
                             'load_coulomb': 0.0}
_JOINT_DYNAMICS = f'{{{JOINT_DYNAMICS_NAMESPACE}}}dynamics'
ET.register_namespace('sysid', JOINT_DYNAMICS_NAMESPACE)


def _fmt(values) -> str:
    return ' '.join(f'{float(v):.12g}' for v in np.atleast_1d(values))


def _se3(xyz, rpy) -> pin.SE3:
    return pin.SE3(pin.rpy.rpyToMatrix(np.asarray(rpy, float)), np.asarray(xyz, float))


def _origin(element) -> pin.SE3:
    origin = element.find('origin') if element is not None else None
    if origin is None:
        return pin.SE3.Identity()
    xyz = [float(v) for v in origin.get('xyz', '0 0 0').split()]
    rpy = [float(v) for v in origin.get('rpy', '0 0 0').split()]
    return _se3(xyz, rpy)


def _own_inertial(link) -> np.ndarray:
    """(10,) inertial vector of a URDF <link>'s own <inertial> about the link frame."""
    inertial = link.find('inertial')
    if inertial is None:
        return np.zeros(10)
    mass = float(inertial.find('mass').get('value'))
    tag = inertial.find('inertia')
    ixx, ixy, ixz, iyy, iyz, izz = (float(tag.get(k, 0.0))
                                    for k in ('ixx', 'ixy', 'ixz', 'iyy', 'iyz', 'izz'))
    inertia = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    local = pin.Inertia(mass, np.zeros(3), inertia)
    return _origin(inertial).act(local).toDynamicParameters()


def _set_inertial(link, pi: np.ndarray):
    """Replace a <link>'s <inertial> by the (10,) vector `pi` (about the link frame)."""
    for old in link.findall('inertial'):
        link.remove(old)
    inertia = pin.Inertia.FromDynamicParameters(np.asarray(pi, float))
    elem = ET.SubElement(link, 'inertial')
    ET.SubElement(elem, 'origin', xyz=_fmt(inertia.lever), rpy='0 0 0')
    ET.SubElement(elem, 'mass', value=_fmt(inertia.mass))
    J = inertia.inertia
    ET.SubElement(elem, 'inertia', ixx=_fmt(J[0, 0]), ixy=_fmt(J[0, 1]), ixz=_fmt(J[0, 2]),
                  iyy=_fmt(J[1, 1]), iyz=_fmt(J[1, 2]), izz=_fmt(J[2, 2]))


def _set_dynamics(joint, damping: float, coulomb: float):
    dyn = joint.find('dynamics')
    if dyn is None:
        dyn = ET.SubElement(joint, 'dynamics')
    dyn.set('damping', _fmt(damping))
    dyn.set('friction', _fmt(coulomb))


def _set_joint_dynamics(joint, params: Params, i: int):
    """Joint i's values of `JOINT_DYNAMICS_ATTRIBUTES` as its `<sysid:dynamics>` (module
    doc); any earlier one is replaced, none is written where all are at their defaults."""
    for old in joint.findall(_JOINT_DYNAMICS):
        joint.remove(old)
    values = {'armature': params.armature[i], 'offset': params.offset[i],
              'gain': params.gain[i], 'stribeck_torque': params.stribeck[i, 0],
              'stribeck_velocity': params.stribeck[i, 1],
              'load_coulomb': params.load_coulomb[i]}
    if any(float(values[k]) != default for k, default in JOINT_DYNAMICS_ATTRIBUTES.items()):
        ET.SubElement(joint, _JOINT_DYNAMICS, {k: _fmt(v) for k, v in values.items()})


def _set_origin(joint, placement: pin.SE3):
    for old in joint.findall('origin'):
        joint.remove(old)
    ET.SubElement(joint, 'origin', xyz=_fmt(placement.translation),
                  rpy=_fmt(pin.rpy.matrixToRpy(placement.rotation)))


def _placement(row) -> pin.SE3:
    row = np.asarray(row, float)
    return _se3(row[:3], row[3:])


def update_urdf(urdf_xml: str, model: RobotModel, nominal: Params, identified: Params) -> str:
    """Return `urdf_xml` with the identified inertials, friction and joint origins written in.

    Args:
      urdf_xml: the URDF that `model` and `nominal` were loaded from (same locked joints).
      model: the model loaded from `urdf_xml`.
      nominal: the parameters as loaded.
      identified: the parameters to write.
    """
    root = ET.fromstring(urdf_xml)
    links = {link.get('name'): link for link in root.findall('link')}
    joints = {joint.get('name'): joint for joint in root.findall('joint')}
    for i, (link_name, joint_name) in enumerate(zip(model.link_names, model.joint_names)):
        if link_name not in links or joint_name not in joints:
            raise InputError(f'URDF has no link {link_name!r} or joint {joint_name!r}')
        link, joint = links[link_name], joints[joint_name]
        merged = np.asarray(nominal.inertial[i]) - _own_inertial(link)
        _set_inertial(link, np.asarray(identified.inertial[i]) - merged)
        _set_dynamics(joint, identified.damping[i], identified.coulomb[i])
        _set_joint_dynamics(joint, identified, i)
        # nominal placement = fixed-joint chain * URDF origin; keep the chain, swap the origin.
        fixed_chain = _placement(nominal.placement[i]) * _origin(joint).inverse()
        _set_origin(joint, fixed_chain.inverse() * _placement(identified.placement[i]))
    return ET.tostring(root, encoding='unicode')


def model_to_urdf(model: RobotModel, params: Params) -> str:
    """A URDF of `(model, params)` (e.g. a builder's model), with a `base` link at the root."""
    root = ET.Element('robot', name=model.name)
    ET.SubElement(root, 'link', name='base')
    for i, parent in enumerate(model.parents):
        link = ET.SubElement(root, 'link', name=model.link_names[i])
        _set_inertial(link, np.asarray(params.inertial[i]))
    for i, parent in enumerate(model.parents):
        kind = model.joint_types[i]
        if kind != PRISMATIC and model.continuous[i]:
            kind = 'continuous'
        joint = ET.SubElement(root, 'joint', name=model.joint_names[i], type=kind)
        ET.SubElement(joint, 'parent', link='base' if parent < 0 else model.link_names[parent])
        ET.SubElement(joint, 'child', link=model.link_names[i])
        _set_origin(joint, _placement(params.placement[i]))
        ET.SubElement(joint, 'axis', xyz=_fmt(model.axis[i]))
        if kind != 'continuous':
            lo, hi = model.q_min[i], model.q_max[i]
            big = 1e6
            ET.SubElement(joint, 'limit', lower=_fmt(lo if np.isfinite(lo) else -big),
                          upper=_fmt(hi if np.isfinite(hi) else big),
                          effort=_fmt(min(model.effort_max[i], big)),
                          velocity=_fmt(min(model.v_max[i], big)))
        _set_dynamics(joint, params.damping[i], params.coulomb[i])
        _set_joint_dynamics(joint, params, i)
    ET.indent(root)
    return ET.tostring(root, encoding='unicode')
