"""Robot models from URDF (through Pinocchio's parser) and back to Pinocchio.

Unsupported input is rejected here, once, with an error that names the file or joint, never
inside traced code (as MuJoCo MJX's `put_model` does). Pinocchio merges fixed joints into
their parent body; continuous joints (cos/sin in Pinocchio) become 1-DoF revolute joints.
"""

from __future__ import annotations

import os
import re
import sysconfig
from typing import Any, Mapping
import xml.etree.ElementTree as ET
from xml.parsers.expat import ExpatError

import jax.numpy as jnp
import numpy as np
import pinocchio as pin

from sysid_ros.core.model.types import Params, PRISMATIC, REVOLUTE, RobotModel
from sysid_ros.io import urdf_export
from sysid_ros.io.errors import InputError

EXAMPLE_ROBOT_PREFIX = 'example-robot-data:'
# Robots of the example-robot-data wheel, by short name: (URDF path below robots/, joints to lock).
EXAMPLE_ROBOTS = {
    'panda': ('panda_description/urdf/panda.urdf',
              ('panda_finger_joint1', 'panda_finger_joint2')),
    'ur5': ('ur_description/urdf/ur5_robot.urdf', ()),
    'ur3': ('ur_description/urdf/ur3_robot.urdf', ()),
    'double_pendulum': ('double_pendulum_description/urdf/double_pendulum.urdf', ()),
}

_URI = re.compile(r'^[A-Za-z][A-Za-z0-9+.\-]*:')          # example-robot-data:panda
_PACKAGE_URI = 'package://'
XACRO_SUFFIX = '.xacro'
_AXIS_BY_SUFFIX = {'X': (1.0, 0.0, 0.0), 'Y': (0.0, 1.0, 0.0), 'Z': (0.0, 0.0, 1.0)}


class ModelError(InputError):
    """A robot description that cannot be turned into a `RobotModel`."""


def example_robot_urdf(name: str) -> tuple[str, tuple[str, ...]]:
    """Path of an example-robot-data URDF and the joints to lock to make it a fixed-base arm."""
    if name not in EXAMPLE_ROBOTS:
        raise ModelError(f'unknown example robot {name!r}; known: {sorted(EXAMPLE_ROBOTS)}')
    rel, locked = EXAMPLE_ROBOTS[name]
    root = os.path.join(sysconfig.get_paths()['purelib'], 'cmeel.prefix', 'share',
                        'example-robot-data', 'robots')
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        raise ModelError(f'{path}: not found; is the example-robot-data wheel installed?')
    return path, locked


def resolve_urdf(urdf: str, folder: str | None = None,
                 xacro_args: Mapping[str, Any] | None = None) -> str:
    """What `load_pinocchio` takes for a configured `model.urdf`: a file path resolved
    against `folder` (the config file's; None: the working directory) or, for
    `package://PKG/FILE`, in PKG's share folder; a `.xacro` file expanded to URDF XML with
    the arguments `xacro_args` (`name: value`, as `xacro FILE name:=value`); URDF XML and
    other `scheme:` references (`example-robot-data:panda`) unchanged.

    Raises:
      ModelError: no such file, an unknown package, or a xacro file that cannot be expanded.
    """
    if urdf.lstrip().startswith('<') or (_URI.match(urdf)
                                         and not urdf.startswith(_PACKAGE_URI)):
        return urdf
    if urdf.startswith(_PACKAGE_URI):
        resolved = _package_file(urdf)
    else:
        resolved = os.path.expanduser(urdf)
        if not os.path.isabs(resolved) and folder is not None:
            resolved = os.path.join(folder, resolved)
        resolved = os.path.normpath(resolved)
    if not os.path.isfile(resolved):
        raise ModelError(f'expected an existing URDF file, got {urdf!r} (looked for '
                         f'{resolved})')
    if resolved.endswith(XACRO_SUFFIX):
        return _expand_xacro(resolved, xacro_args or {})
    return resolved


def _expand_xacro(file: str, args: Mapping[str, Any]) -> str:
    """The URDF XML that the `xacro` package (what `ros2 run xacro xacro FILE name:=value`
    runs) makes of FILE with the arguments `args` (the others at their defaults)."""
    try:
        import xacro
    except ImportError as exc:
        raise ModelError(f'{file}: a .xacro file needs the xacro package (pip install xacro, '
                         'or a ROS 2 install)') from exc
    try:
        return xacro.process_file(file, mappings={str(k): _xacro_value(v)
                                                  for k, v in args.items()}).toxml()
    except (xacro.XacroException, ExpatError, RuntimeError) as exc:
        hint = (' (give it in model.xacro_args)' if 'Undefined substitution argument'
                in str(exc) else '')
        raise ModelError(f'{file}: xacro: {exc}{hint}') from exc


def _xacro_value(value) -> str:
    """A xacro argument as the command line writes it (YAML true -> 'true')."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _package_file(uri: str) -> str:
    """`package://PKG/FILE` -> FILE in the share folder of the ROS 2 package PKG, looked up in
    the ament index (AMENT_PREFIX_PATH) as ROS 2 tools resolve such URIs."""
    package, _, relative = uri[len(_PACKAGE_URI):].partition('/')
    try:
        from ament_index_python.packages import get_package_share_directory
    except ImportError as exc:
        raise ModelError(f'{uri!r} needs ament_index_python (a ROS 2 install or the '
                         'ros-ament-index-python wheel)') from exc
    try:
        return os.path.join(get_package_share_directory(package), relative)
    except (LookupError, ValueError, OSError) as exc:       # OSError: no AMENT_PREFIX_PATH
        raise ModelError(f'expected a package:// URI of an installed ROS 2 package, got '
                         f'{uri!r} ({exc})') from exc


def _joint_kind(jmodel, name: str):
    """(joint type, continuous, axis) of a Pinocchio 1-DoF joint, or ModelError."""
    short = jmodel.shortname()
    for prefix, kind, continuous in (('JointModelRUB', REVOLUTE, True),
                                     ('JointModelR', REVOLUTE, False),
                                     ('JointModelP', PRISMATIC, False)):
        suffix = short[len(prefix):]
        if short.startswith(prefix) and suffix in _AXIS_BY_SUFFIX:
            return kind, continuous, _AXIS_BY_SUFFIX[suffix]
    unaligned = {'JointModelRevoluteUnaligned': (REVOLUTE, False),
                 'JointModelRevoluteUnboundedUnaligned': (REVOLUTE, True),
                 'JointModelPrismaticUnaligned': (PRISMATIC, False)}
    if short in unaligned:
        kind, continuous = unaligned[short]
        axis = np.asarray(jmodel.extract().axis, dtype=float)
        return kind, continuous, tuple(float(a) for a in axis / np.linalg.norm(axis))
    raise ModelError(f'joint {name!r}: unsupported joint type {short} '
                     '(supported: revolute, continuous, prismatic, fixed)')


def _body_names(pmodel: pin.Model) -> list[str]:
    """Name of the first BODY frame attached to each joint (the URDF child link)."""
    names = [None] * pmodel.njoints
    for frame in pmodel.frames:
        if frame.type == pin.FrameType.BODY and names[frame.parentJoint] is None:
            names[frame.parentJoint] = frame.name
    return names


def urdf_text(urdf: str) -> str:
    """The URDF XML of `urdf` as `load_pinocchio` takes it (a file path, the XML itself, or
    `example-robot-data:NAME`).

    Raises:
      ModelError: a file that cannot be read.
    """
    if urdf.startswith(EXAMPLE_ROBOT_PREFIX):
        urdf, _ = example_robot_urdf(urdf[len(EXAMPLE_ROBOT_PREFIX):])
    if urdf.lstrip().startswith('<'):
        return urdf
    try:
        with open(urdf, encoding='utf-8') as f:
            return f.read()
    except OSError as exc:
        raise ModelError(f'{urdf}: cannot read the URDF: {exc.strerror}') from exc


def joint_dynamics(urdf: str) -> dict[str, dict[str, float]]:
    """Joint name -> the values of its `<sysid:dynamics>` element (`urdf_export`: armature,
    offset, gain, stribeck_torque, stribeck_velocity, load_coulomb; absent ones at their
    defaults),
    for the joints of `urdf` (as `load_pinocchio` takes it) that have one.

    Raises:
      ModelError: a file that cannot be read, XML that cannot be parsed.
    """
    if urdf.startswith(EXAMPLE_ROBOT_PREFIX):       # no such elements in those
        return {}
    try:
        root = ET.fromstring(urdf_text(urdf))
    except ET.ParseError as exc:
        raise ModelError(f'cannot parse URDF {urdf[:80]!r}: {exc}') from exc
    tag = f'{{{urdf_export.JOINT_DYNAMICS_NAMESPACE}}}dynamics'
    found = {}
    for joint in root.iter('joint'):
        element = joint.find(tag)
        if element is not None:
            try:
                found[joint.get('name')] = {
                    key: float(element.get(key, default))
                    for key, default in urdf_export.JOINT_DYNAMICS_ATTRIBUTES.items()}
            except ValueError as exc:
                raise ModelError(f'joint {joint.get("name")!r}: sysid:dynamics: {exc}') from exc
    return found


def from_pinocchio(pmodel: pin.Model, dtype=jnp.float64,
                   dynamics: Mapping[str, Mapping[str, float]] | None = None
                   ) -> tuple[RobotModel, Params]:
    """Convert a Pinocchio model of 1-DoF joints on a fixed base to `(RobotModel, Params)`;
    `dynamics`: joint name -> values the URDF keeps beyond Pinocchio's (`joint_dynamics`)."""
    if pmodel.njoints < 2:
        raise ModelError(f'model {pmodel.name!r} has no moving joint')
    bodies = _body_names(pmodel)
    kinds, continuous, axes, placements, inertials = [], [], [], [], []
    q_min, q_max = [], []
    for j in range(1, pmodel.njoints):
        name = pmodel.names[j]
        kind, cont, axis = _joint_kind(pmodel.joints[j], name)
        placement = pmodel.jointPlacements[j]
        kinds.append(kind)
        continuous.append(cont)
        axes.append(axis)
        placements.append(np.concatenate([placement.translation,
                                          pin.rpy.matrixToRpy(placement.rotation)]))
        inertials.append(pmodel.inertias[j].toDynamicParameters())
        iq = pmodel.joints[j].idx_q
        lo, hi = (-np.inf, np.inf) if cont else (pmodel.lowerPositionLimit[iq],
                                                 pmodel.upperPositionLimit[iq])
        q_min.append(float(lo))
        q_max.append(float(hi))
    model = RobotModel(
        name=pmodel.name,
        link_names=tuple(bodies[1:]),
        joint_names=tuple(pmodel.names[1:]),
        parents=tuple(int(p) - 1 for p in pmodel.parents[1:]),
        joint_types=tuple(kinds),
        continuous=tuple(continuous),
        axis=tuple(axes),
        gravity=tuple(float(g) for g in pmodel.gravity.linear),
        q_min=tuple(q_min),
        q_max=tuple(q_max),
        v_max=tuple(float(v) for v in pmodel.velocityLimit),
        effort_max=tuple(float(e) for e in pmodel.effortLimit),
    )
    extra = {key: np.array([(dynamics or {}).get(name, {}).get(key, default)
                            for name in model.joint_names], dtype=float)
             for key, default in urdf_export.JOINT_DYNAMICS_ATTRIBUTES.items()}
    armature = np.asarray(pmodel.armature, dtype=float)
    named = [name in (dynamics or {}) for name in model.joint_names]
    armature = np.where(named, extra['armature'], armature)
    params = Params(
        inertial=jnp.asarray(np.stack(inertials), dtype),
        placement=jnp.asarray(np.stack(placements), dtype),
        armature=jnp.asarray(armature, dtype),
        damping=jnp.asarray(pmodel.damping, dtype),
        coulomb=jnp.asarray(pmodel.friction, dtype),
        stribeck=jnp.asarray(np.stack([extra['stribeck_torque'],
                                       extra['stribeck_velocity']], axis=1), dtype),
        offset=jnp.asarray(extra['offset'], dtype),
        gain=jnp.asarray(extra['gain'], dtype),
        load_coulomb=jnp.asarray(extra['load_coulomb'], dtype),
    )
    return model, params


def frame_in_body(pmodel: pin.Model, name: str) -> tuple[int, np.ndarray, np.ndarray]:
    """Where a link or fixed frame of `pmodel` sits on the moving body that carries it.

    Returns:
      (body index of `from_pinocchio`'s model, rotation (3, 3), translation (3,) [m] of the
      frame in that body's (joint) frame).

    Raises:
      ModelError: no frame of that name, or one fixed to the world.
    """
    if not pmodel.existFrame(name):
        links = [f.name for f in pmodel.frames if f.type == pin.FrameType.BODY]
        raise ModelError(f'no link or frame named {name!r}; links: {", ".join(links)}')
    frame = pmodel.frames[pmodel.getFrameId(name)]
    if frame.parentJoint == 0:
        raise ModelError(f'frame {name!r} is fixed to the world, not carried by a moving body')
    return (int(frame.parentJoint) - 1, np.array(frame.placement.rotation),
            np.array(frame.placement.translation))


def load_pinocchio(urdf: str, locked_joints=(), keep_joints=None) -> pin.Model:
    """Parse a URDF (file path, XML string or `example-robot-data:NAME`) with Pinocchio.

    Args:
      urdf: path to a `.urdf` file, the URDF XML itself (as on `robot_description`), or
        `example-robot-data:panda` (fingers locked) and the like.
      locked_joints: names of joints to lock at their zero (or nearest in-limit) position.
      keep_joints: if given, every other movable joint is locked too; each must exist.

    Raises:
      ModelError: missing or malformed file, unknown joint name, unsupported joint type.
    """
    locked = list(locked_joints)
    if urdf.startswith(EXAMPLE_ROBOT_PREFIX):
        urdf, default_locked = example_robot_urdf(urdf[len(EXAMPLE_ROBOT_PREFIX):])
        locked += [j for j in default_locked if j not in locked]
    source = 'robot_description string' if urdf.lstrip().startswith('<') else urdf
    try:
        if source == urdf:
            if not os.path.isfile(urdf):
                raise ModelError(f'{urdf}: URDF file not found')
            pmodel = pin.buildModelFromUrdf(urdf)
        else:
            pmodel = pin.buildModelFromXML(urdf)
    except ModelError:
        raise
    except Exception as exc:  # Pinocchio raises plain RuntimeError/ValueError on bad XML.
        raise ModelError(f'{source}: cannot parse URDF: {str(exc).strip()}') from exc
    names = list(pmodel.names)
    for name in list(locked) + list(keep_joints or ()):
        if name not in names:
            raise ModelError(f'{source}: no joint named {name!r}; joints: {names[1:]}')
    if keep_joints is not None:
        locked += [n for n in names[1:] if n not in keep_joints and n not in locked]
    if locked:
        q_ref = np.clip(pin.neutral(pmodel), pmodel.lowerPositionLimit,
                        pmodel.upperPositionLimit)
        pmodel = pin.buildReducedModel(pmodel, [pmodel.getJointId(n) for n in locked], q_ref)
    return pmodel


def load_urdf(urdf: str, locked_joints=(), keep_joints=None, dtype=jnp.float64):
    """URDF (path, XML string or `example-robot-data:NAME`) -> `(RobotModel, Params)`, with
    the joints' `<sysid:dynamics>` values (`joint_dynamics`)."""
    return from_pinocchio(load_pinocchio(urdf, locked_joints, keep_joints), dtype,
                          joint_dynamics(urdf))


def to_pinocchio(model: RobotModel, params: Params) -> pin.Model:
    """Build the Pinocchio model of `(model, params)`: the reference for verification."""
    pmodel = pin.Model()
    pmodel.name = model.name
    pmodel.gravity = pin.Motion(np.asarray(model.gravity), np.zeros(3))
    inertial = np.asarray(params.inertial, dtype=float)
    placement = np.asarray(params.placement, dtype=float)
    for i, parent in enumerate(model.parents):
        axis = np.asarray(model.axis[i], dtype=float)
        if model.joint_types[i] == PRISMATIC:
            joint = pin.JointModelPrismaticUnaligned(axis)
        elif model.continuous[i]:
            joint = pin.JointModelRevoluteUnboundedUnaligned(axis)
        else:
            joint = pin.JointModelRevoluteUnaligned(axis)
        frame = pin.SE3(pin.rpy.rpyToMatrix(placement[i, 3:]), placement[i, :3])
        jid = pmodel.addJoint(parent + 1, joint, frame, model.joint_names[i])
        pmodel.appendBodyToJoint(jid, pin.Inertia.FromDynamicParameters(inertial[i]),
                                 pin.SE3.Identity())
        joint_frame = pmodel.addJointFrame(jid)
        pmodel.addBodyFrame(model.link_names[i], jid, pin.SE3.Identity(), joint_frame)
    pmodel.armature = np.asarray(params.armature, dtype=float)
    pmodel.damping = np.asarray(params.damping, dtype=float)
    pmodel.friction = np.asarray(params.coulomb, dtype=float)
    return pmodel


def pinocchio_configuration(model: RobotModel, q) -> np.ndarray:
    """Our joint angles (nv,) -> Pinocchio's configuration (cos, sin for continuous joints)."""
    out = []
    for i, qi in enumerate(np.asarray(q, dtype=float)):
        out.extend([np.cos(qi), np.sin(qi)] if model.continuous[i] else [qi])
    return np.asarray(out)
