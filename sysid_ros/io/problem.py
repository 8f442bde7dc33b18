"""An identification problem without its data: configuration -> model, nominal parameters,
ParameterSpec and time step; trajectories ordered and resampled for it; the identified URDF.

  * `build_problem(config)`: the robot from `model.urdf` (a file, URDF XML or
    `example-robot-data:NAME`, with every joint outside `model.joints` locked) or from
    `model.builder` + `model.builder_args` (`core.model.builders.BUILDERS`); the parameters
    to identify from `parameters` (`core.model.parameters.make_parameter_spec`); the frames
    that `data.mocap_topics` track from `data.mocap_frames` and `data.mocap_offsets` (a
    link or a fixed URDF frame, placed on the moving body that carries it). A
    `model.mechanism` (planar closed chain, `core.constrained.mechanisms`) makes a
    `MechanismProblem` instead, identified by the factor graph (`io.mechanism_fit`).
  * `prepare_trajectories(problem, trajectories)`: load files, order joints by name,
    resample to `data.rate`.
  * `problem.identified_urdf(theta)`: the URDF with identified values written in.

Both kinds of problem expose what the units, labels and result files need (`prismatic`,
`parameter_attributes`, `identified_urdf`), so that callers never ask which kind they hold.

Conventions: the control period is dt = 1 / `data.rate`; `model.dt` (if given) is the
integration step, so each command is integrated with round(1 / (rate dt)) substeps. The
state vector follows the model's joint order (parents before children); data files are
matched to it by joint name, so the order of `model.joints` does not matter.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np
import pinocchio as pin

from sysid_ros.core.constrained import mechanisms
from sysid_ros.core.dynamics import observations
from sysid_ros.core.model import builders
from sysid_ros.core.model.inertia import inertia_matrix_from_entries, physical_from_inertial
from sysid_ros.core.model.parameters import (INERTIA_ATTRIBUTES, ParameterSpec, PAYLOAD, Payload,
                                             PAYLOAD_ATTRIBUTES, split_name)
from sysid_ros.core.model.types import Params, PRISMATIC, RobotModel
from sysid_ros.io import config as config_io
from sysid_ros.io import drivers, log_layout
from sysid_ros.io import model_io
from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io import urdf_export
from sysid_ros.io.config import Config, config_error
from sysid_ros.io.trajectory import DataError, hold_torques, Trajectory

__all__ = [
    'Problem',
    'MechanismProblem',
    'build_problem',
    'prepare_trajectories',
    'BodyInertia',
    'identified_inertias',
]


@dataclasses.dataclass(frozen=True)
class Problem:
    """An identification problem without its data.

    Attributes:
      config: the validated configuration.
      model: static tree (state order = `model.joint_names`).
      base_params: nominal Params (URDF or builder values): every parameter not in the spec.
      spec: the parameters to identify.
      dt: control (sample) period [s] = 1 / data.rate.
      substeps: integration steps per control period.
      mocap: the frames that `data.mocap_topics` track, in their order (offsets composed
        with the frame's placement on its body); () when the poses are not observed.
    """

    config: Config
    model: RobotModel
    base_params: Params
    spec: ParameterSpec
    dt: float
    substeps: int = 1
    mocap: tuple[observations.MocapFrame, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.spec.names

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.model.joint_names

    @property
    def prismatic(self) -> tuple[bool, ...]:
        """(nv,) whether each joint of the state is prismatic."""
        return tuple(kind == PRISMATIC for kind in self.model.joint_types)

    @property
    def parameter_attributes(self) -> tuple[tuple[str, bool], ...]:
        """(M,) each parameter's attribute (`link2.mass` -> 'mass') and whether it belongs to
        a prismatic joint: what its unit follows (`io.units`)."""
        prismatic = self.prismatic
        return tuple((attribute, body >= 0 and prismatic[body])
                     for body, attribute in zip(self.spec.bodies, self.spec.attributes))

    def identified_urdf(self, theta) -> str:
        """URDF text with the parameters `theta` (M,) written in: the configured URDF
        updated (merged fixed links keep their values), or a URDF of a builder's model."""
        params = self.spec.to_params(jnp.asarray(theta), self.base_params)
        source = self.config.model.urdf
        if source is None:
            return urdf_export.model_to_urdf(self.model, params)
        return urdf_export.update_urdf(model_io.urdf_text(source), self.model,
                                       self.base_params, params)


@dataclasses.dataclass(frozen=True)
class MechanismProblem:
    """A planar closed-chain mechanism to identify with `factor_graph`.

    Attributes:
      config: the validated configuration (`model.mechanism`).
      mechanism: static description (`core.constrained.mechanisms.Mechanism`).
      base_params: nominal `MechanismParams` (builder values): every parameter not identified.
      q_branch: (n,) an assembled configuration [m]; it picks the assembly branch.
      names: parameters to identify ('<bar>.mass' [kg], '<angle bar>.damping' [N m s/rad]).
      dt: sample period [s] = 1 / data.rate.
    """

    config: Config
    mechanism: mechanisms.Mechanism
    base_params: mechanisms.MechanismParams
    q_branch: np.ndarray
    names: tuple[str, ...]
    dt: float

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The angle bars: their angles and rates are the data's q and qd."""
        return tuple(self.mechanism.bar_names[k] for k in self.mechanism.angle_bars)

    @property
    def prismatic(self) -> tuple[bool, ...]:
        """(nv,) all False: the angle coordinates are angles."""
        return (False,) * len(self.joint_names)

    @property
    def parameter_attributes(self) -> tuple[tuple[str, bool], ...]:
        """(M,) each parameter's attribute ('mass', 'damping') and False (`io.units`)."""
        return tuple((split_name(name)[1], False) for name in self.names)

    def identified_urdf(self, theta) -> None:
        """None: a planar mechanism has no URDF."""
        return None


def _load_model(config: Config):
    """The model, its nominal parameters and `locate(link) -> (body, rotation (3, 3),
    translation (3,) [m])` of a link's (or fixed frame's) frame in the body frame that
    carries it (raises `model_io.ModelError` for an unknown name)."""
    cfg = config.model
    joints = tuple(cfg.joints)
    if cfg.urdf is not None:
        try:
            pmodel = model_io.load_pinocchio(cfg.urdf)
        except model_io.ModelError as exc:
            raise config_error(config, 'model.urdf', str(exc)) from exc
        movable = list(pmodel.names[1:])          # example robots: default locks applied
        unknown = [j for j in joints if j not in movable]
        if unknown:
            raise config_error(config, 'model.joints', f'no joint named {unknown[0]!r} in the '
                               f'URDF; movable joints: {", ".join(movable)}')
        try:
            pmodel = model_io.load_pinocchio(cfg.urdf, keep_joints=list(joints) or None)
            model, params = model_io.from_pinocchio(
                pmodel, dynamics=model_io.joint_dynamics(cfg.urdf))
        except model_io.ModelError as exc:
            raise config_error(config, 'model.urdf', str(exc)) from exc
        return model, params, lambda link: model_io.frame_in_body(pmodel, link)
    try:
        model, params = builders.BUILDERS[cfg.builder](**cfg.builder_args)
    except KeyError:
        raise config_error(config, 'model.builder', f'expected one of '
                           f'{" | ".join(builders.BUILDERS)}, got {cfg.builder!r}') from None
    except (TypeError, ValueError) as exc:
        raise config_error(config, 'model.builder_args', str(exc)) from exc
    unknown = [j for j in joints if j not in model.joint_names]
    if unknown:
        raise config_error(config, 'model.joints', f'no joint named {unknown[0]!r} in builder '
                           f'{cfg.builder!r}; joints: {", ".join(model.joint_names)}')
    if joints and set(joints) != set(model.joint_names):
        missing = [j for j in model.joint_names if j not in joints]
        raise config_error(config, 'model.joints', f'builder {cfg.builder!r} cannot lock '
                           f'joints; expected all of {", ".join(model.joint_names)} '
                           f'(missing {", ".join(missing)})')

    def link_frame(link):
        if link not in model.link_names:
            raise model_io.ModelError(f'no link named {link!r}; links: '
                                      f'{", ".join(model.link_names)}')
        return model.link_names.index(link), np.eye(3), np.zeros(3)

    return model, params, link_frame


def _payload(config: Config, locate) -> Payload | None:
    """`model.payload` on the body that carries its link: `locate(link) -> (body, rotation
    (3, 3), translation (3,))` of that link's frame in the body frame."""
    given = config.model.payload
    if not given:
        return None
    try:
        body, rotation, translation = locate(given['link'])
    except model_io.ModelError as exc:
        raise config_error(config, 'model.payload.link', str(exc)) from exc
    return Payload(body=body, rotation=tuple(float(v) for v in np.ravel(rotation)),
                   translation=tuple(float(v) for v in translation), mass=given['mass'],
                   com=tuple(given['com']),
                   inertia=tuple(float(given.get('inertia', {}).get(a.partition('.')[2], 0.0))
                                 for a in INERTIA_ATTRIBUTES))


def _mocap_frames(config: Config, model: RobotModel, locate
                  ) -> tuple[observations.MocapFrame, ...]:
    """`data.mocap_frames` with `data.mocap_offsets` as tracked frames of `model`, each
    offset composed with its link's placement on the body (`locate`, see `_load_model`)."""
    data = config.data
    offsets = np.reshape(data.mocap_offsets or np.zeros(6 * len(data.mocap_frames)), (-1, 6))
    frames = []
    for i, (link, offset) in enumerate(zip(data.mocap_frames, offsets)):
        try:
            body, rotation, translation = locate(link)
        except model_io.ModelError as exc:
            raise config_error(config, f'data.mocap_frames[{i}]', str(exc)) from exc
        placement = pin.SE3(np.asarray(rotation), np.asarray(translation)) * pin.SE3(
            pin.rpy.rpyToMatrix(offset[3:]), offset[:3])
        frames.append((body, np.concatenate([placement.translation,
                                             pin.rpy.matrixToRpy(placement.rotation)])))
    try:
        return observations.make_mocap_frames(model, frames) if frames else ()
    except ValueError as exc:
        raise config_error(config, 'data.mocap_frames', str(exc)) from exc


def build_problem(config: Config | str) -> Problem | MechanismProblem:
    """Configuration (or a YAML path) -> Problem (MechanismProblem for a model.mechanism).

    Raises:
      ConfigError: unknown URDF/builder, joints that the model does not have, parameters of
        unknown links or joints, an integration step that does not divide the sample period,
        a tracked frame (`data.mocap_frames`) that the model does not have or that is listed
        twice, `data.torque_gains` of another length than 1 or one per joint.
    """
    if not isinstance(config, Config):
        config = config_io.load_yaml(config)
    if config.model.mechanism is not None:
        return _build_mechanism_problem(config)
    model, params, locate = _load_model(config)
    spec = config_io.parameter_spec(config, model, _payload(config, locate))
    drivers.torque_gains(config.data.torque_gains, model.nv, config.source)
    dt = 1.0 / config.data.rate
    substeps = 1
    if config.model.dt is not None:
        ratio = dt / config.model.dt
        substeps = int(round(ratio))
        if substeps < 1 or abs(ratio - substeps) > 1e-6 * ratio:
            raise config_error(config, 'model.dt', f'expected 1 / data.rate = {dt:g} s divided '
                               f'by a whole number, got {config.model.dt:g} s')
    return Problem(config=config, model=model, base_params=params, spec=spec, dt=dt,
                   substeps=substeps, mocap=_mocap_frames(config, model, locate))


def prepare_trajectories(problem: Problem, trajectories: Sequence[Trajectory | str]
                         ) -> list[Trajectory]:
    """Load paths (in `data.layout` where one is given, its efforts times
    `data.torque_gains`), order the columns like the model's joints and resample to
    `data.rate`.

    Raises:
      DataError: unreadable data, a joint of the model missing, a trajectory too short.
    """
    if not trajectories:
        raise DataError('no trajectories given')
    joints = problem.joint_names
    out = []
    for item in trajectories:
        if isinstance(item, Trajectory):
            traj = item
            if traj.joint_names and tuple(traj.joint_names) != joints:
                missing = [j for j in joints if j not in traj.joint_names]
                if missing:
                    raise DataError(f'{traj.source or "trajectory"}: joint_names: no data for '
                                    f'joint {missing[0]!r}; it has {list(traj.joint_names)}')
                order = [list(traj.joint_names).index(j) for j in joints]
                traj = dataclasses.replace(
                    traj, q=traj.q[:, order], qd=traj.qd[:, order], tau=traj.tau[:, order],
                    qdd=None if traj.qdd is None else traj.qdd[:, order], joint_names=joints)
            traj = trajectory_io.validate_trajectory(traj)
        elif problem.config.data.layout:
            revolute = [kind != PRISMATIC for kind in problem.model.joint_types]
            traj = log_layout.read_log(item, problem.config.data.layout, joints, revolute)
            traj = hold_torques(dataclasses.replace(
                traj, tau=drivers.joint_torques(traj.tau, problem.config.data)),
                problem.config.data.torque_samples)
        else:
            traj = trajectory_io.load_trajectory(item, joints)
        if traj.nv != len(joints):
            raise DataError(f'{traj.source or "trajectory"}: q: expected {len(joints)} '
                            f'joints, got {traj.nv}')
        if abs(traj.dt * problem.config.data.rate - 1.0) > trajectory_io.UNIFORM_RTOL:
            traj = trajectory_io.resample(traj, problem.config.data.rate)
        out.append(traj)
    return out


class BodyInertia(NamedTuple):
    """The inertial parameters of one identified body, as robots' payload interfaces take them
    (franka_msgs SetLoad, geometry_msgs/Inertia).

    Attributes:
      name: the link, or `payload` (the configured `model.payload`).
      frame: the frame `com` is expressed in: the link's, or the payload's frame.
      mass: [kg].
      com: (3,) centre of mass [m].
      inertia: (3, 3) inertia about the centre of mass, in `frame`'s axes [kg m^2] (zero for
        a payload without inertia: a point mass).
    """

    name: str
    frame: str
    mass: float
    com: np.ndarray
    inertia: np.ndarray


def identified_inertias(problem: Problem, theta) -> list[BodyInertia]:
    """The bodies whose parameters `problem` identifies, with the values `theta` (M,): each
    link named by a parameter (its whole inertia, a held payload included), then the payload
    alone where `payload.*` parameters are free."""
    params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
    mass, com, inertia_c = (np.asarray(a) for a in physical_from_inertial(params.inertial))
    objects = dict.fromkeys(split_name(name)[0] for name in problem.names)
    links = problem.model.link_names
    out = [BodyInertia(link, link, float(mass[links.index(link)]), com[links.index(link)],
                       inertia_c[links.index(link)]) for link in objects if link in links]
    if PAYLOAD in objects:
        payload = problem.spec.payload
        values = dict(zip(PAYLOAD_ATTRIBUTES, payload.nominal))
        values.update((split_name(name)[1], float(v)) for name, v in zip(problem.names, theta)
                      if split_name(name)[0] == PAYLOAD)
        out.append(BodyInertia(PAYLOAD, problem.config.model.payload['link'], values['mass'],
                               np.array([values[f'com.{c}'] for c in 'xyz']),
                               np.asarray(inertia_matrix_from_entries(
                                   *(values[a] for a in INERTIA_ATTRIBUTES)))))
    return out


def _build_mechanism_problem(config: Config) -> MechanismProblem:
    from sysid_ros.graph import identification   # gtsam is imported only for mechanisms
    cfg = config.model
    try:
        mech, params, q_branch = mechanisms.MECHANISMS[cfg.mechanism](**cfg.builder_args)
    except (TypeError, ValueError) as exc:
        raise config_error(config, 'model.builder_args', str(exc)) from exc
    joints = tuple(mech.bar_names[k] for k in mech.angle_bars)
    if cfg.joints and set(cfg.joints) != set(joints):
        raise config_error(config, 'model.joints', f'mechanism {cfg.mechanism!r} has the '
                           f'angle coordinates {", ".join(joints)}; got {list(cfg.joints)}')
    known = identification.parameter_names(mech)
    for name in config.parameters.names:
        if name not in known:
            raise config_error(config, f'parameters.{name}', f'not a parameter of mechanism '
                               f'{cfg.mechanism!r}; expected one of {", ".join(known)}')
        if not all(map(math.isfinite, config.parameters.bounds[name])):
            raise config_error(config, f'parameters.{name}', 'factor_graph needs finite min '
                               'and max (its Gaussian prior has std (max - min) / 4)')
    return MechanismProblem(config=config, mechanism=mech, base_params=params,
                            q_branch=np.asarray(q_branch), names=config.parameters.names,
                            dt=1.0 / config.data.rate)
