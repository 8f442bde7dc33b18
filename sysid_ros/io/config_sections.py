"""The sections of a configuration (`model`, `parameters`, `data`, `estimator`, `online`,
`excitation`): one frozen dataclass each, with every key's default, unit and check.

The names a key may take (ACTUATORS, METHODS, ...) are defined here; `io.config` assembles
the sections into a `Config` and reads files.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from typing import Any, Mapping

from sysid_ros.core.inference import registry
from sysid_ros.core.likelihoods import equation_error as _equation_error
from sysid_ros.core.likelihoods import likelihood as _likelihood
from sysid_ros.core.model import inertia as _inertia
from sysid_ros.core.model import parameters as _parameters
from sysid_ros.io import drivers, log_layout, model_io
from sysid_ros.io.config_schema import as_number, error, option, parse_section, ROS_NAME

__all__ = [
    'ACTUATORS', 'INTEGRATORS', 'BAYESIAN_METHODS', 'POINT_METHODS', 'GRAPH_METHODS', 'METHODS',
    'LIKELIHOODS', 'LOSSES', 'WINDOW_WORDS', 'INITS', 'STARTS', 'RESIDUALS',
    'TORQUE_FROM_JOINT_STATES', 'TORQUE_SAMPLES', 'UNUSED_BY_ACTUATOR', 'ModelConfig',
    'ParametersConfig', 'DataConfig', 'EstimatorConfig', 'OnlineConfig', 'ExcitationConfig',
]
ACTUATORS = ('ideal', 'viscous', 'coulomb_viscous', 'stribeck', 'nn_friction', 'nn_residual',
             'ff_nn')
INTEGRATORS = ('semi_implicit_euler', 'rk4', 'variational')
# The estimators' names come from the one registry; factor_graph is the GTSAM smoother of
# `graph` for planar mechanisms, outside the estimator contract.
BAYESIAN_METHODS = registry.BAYESIAN_METHODS
POINT_METHODS = registry.POINT_METHODS
GRAPH_METHODS = ('factor_graph',)         # planar mechanisms (model.mechanism), `graph`
METHODS = BAYESIAN_METHODS + POINT_METHODS + GRAPH_METHODS
LIKELIHOODS = ('product', 'sum')
LOSSES = ('one_step', 'rollout')
WINDOW_WORDS = ('auto', 'all')
INITS = ('point', 'sobol')
STARTS = ('auto',) + _likelihood.STARTS
RESIDUALS = _equation_error.RESIDUALS
TORQUE_FROM_JOINT_STATES = 'joint_states.effort'
TORQUE_SAMPLES = ('held', 'instantaneous')

# Friction attributes that each white-box actuator model leaves unused.
UNUSED_BY_ACTUATOR = {
    'ideal': ('damping', 'coulomb', 'stribeck.torque', 'stribeck.velocity', 'load_coulomb'),
    'viscous': ('coulomb', 'stribeck.torque', 'stribeck.velocity', 'load_coulomb'),
    'coulomb_viscous': ('stribeck.torque', 'stribeck.velocity'),
}
_BOUND_KEYS = ('min', 'max', 'init', 'std')


# ------------------------------------------------------------------------------------------
# Sections
# ------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """`model:` the robot, its joints and its actuator and integrator models.

    Attributes:
      urdf: URDF file (relative paths resolve against the config file's directory; a
        `.xacro` file is expanded by the `xacro` package with `xacro_args`), the URDF XML
        itself, or a reference such as `example-robot-data:panda` that `io.model_io`
        resolves. Exactly one of `urdf` and `builder` is set, except where the estimator
        node takes the model from `robot_description` or its topic (then neither).
      xacro_args: arguments of a `.xacro` `urdf`, as `xacro FILE name:=value` takes them
        (FR3: `{arm_id: fr3}`; UR: `{name: ur, ur_type: ur5e}`); the others keep their
        defaults.
      builder: name of a canonical system in `core.model.builders` (e.g. `double_pendulum`).
      builder_args: keyword arguments of the builder or mechanism (e.g. `{l1: 0.5}`).
      mechanism: name of a planar closed-chain mechanism in
        `core.constrained.mechanisms.MECHANISMS` (e.g. `four_bar`), identified by
        `estimator.method: factor_graph`; it replaces urdf and builder, and its joints are its
        angle coordinates (the crank).
      joints: joints that form the state vector, in order; empty: all movable joints.
      prefix: the robot's joint- and link-name prefix (a UR driver's `tf_prefix`, a
        namespaced description's `left_`): prepended to every joint and link this
        configuration names (`joints`, `parameters`, `payload.link`, `data.mocap_frames`,
        `online.push_parameters`) that does not already start with it, so one configuration
        serves every prefixed copy of a robot.
      actuator: actuator/friction model, one of ACTUATORS.
      integrator: one of INTEGRATORS (default rk4: semi-implicit Euler at a recording's rate
        biased the held-out fits by 8-13 %, bench/heldout.py).
      dt: integration step [s], dividing 1 / data.rate; None: chosen by each fit from its
        data (`io.integration_step`: the fewest steps per sample whose discretisation error
        is within 0.01 noise stds, at the estimate of a fit at the sample period; the live
        session checks every window from the second at its estimate and only refines).
      payload: a rigid body the robot holds, which `parameters.payload.mass`,
        `parameters.payload.com.x|y|z` and `parameters.payload.inertia.ixx|ixy|ixz|iyy|iyz|izz`
        identify: `{link: <link or fixed frame of the URDF>, mass: <nominal kg, default 0>,
        com: [x, y, z] (nominal centre of mass in that frame [m], default 0), inertia:
        {ixx, ixy, ixz, iyy, iyz, izz} (nominal inertia about the centre of mass in that
        frame's axes [kg m^2], each default 0: a point mass)}`; empty: none.
    """

    urdf: str | None = option(None, 'str', optional=True)
    xacro_args: dict[str, Any] = option({}, 'map')
    builder: str | None = option(None, 'str', optional=True)
    builder_args: dict[str, Any] = option({}, 'map')
    mechanism: str | None = option(None, 'str', optional=True)
    joints: tuple[str, ...] = option((), 'str_list')
    prefix: str | None = option(None, 'str', optional=True)
    actuator: str = option('viscous', 'str', choices=ACTUATORS)
    integrator: str = option('rk4', 'str', choices=INTEGRATORS)
    dt: float | None = option(None, 'float', unit='s', optional=True, gt=0.0)
    payload: dict[str, Any] = option({}, 'map')

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'ModelConfig':
        """Validate the `model` section; relative `urdf` paths resolve against `path`'s folder."""
        cfg = parse_section(cls, d, path, 'model')
        if cfg.payload:
            cfg = dataclasses.replace(cfg, payload=_payload(cfg.payload, path))
        if cfg.mechanism is not None:
            if cfg.urdf is not None or cfg.builder is not None:
                raise error(path, 'model.mechanism', 'a planar mechanism replaces model.urdf '
                            'and model.builder; expected neither beside it')
            _check_factory('mechanism', cfg.mechanism, cfg.builder_args, path)
            return cfg
        if (cfg.urdf is None) == (cfg.builder is None):
            raise error(path, 'model', 'expected exactly one of urdf and builder, got '
                        + ('both' if cfg.urdf is not None else 'neither'))
        if cfg.xacro_args and not (cfg.urdf or '').endswith(model_io.XACRO_SUFFIX):
            raise error(path, 'model.xacro_args', 'only allowed with a .xacro model.urdf')
        if cfg.urdf is not None:
            cfg = dataclasses.replace(cfg, urdf=_resolve_urdf(cfg.urdf, path, cfg.xacro_args))
            if cfg.builder_args:
                raise error(path, 'model.builder_args', 'only allowed with model.builder')
        else:
            _check_factory('builder', cfg.builder, cfg.builder_args, path)
        return cfg


_PAYLOAD_INERTIA = tuple(a.partition('.')[2] for a in _parameters.INERTIA_ATTRIBUTES)


def _payload(d: Mapping[str, Any], path: str | None) -> dict[str, Any]:
    """Validate `model.payload`: {link: str, mass: number >= 0, com: 3 numbers, inertia:
    {ixx, ixy, ixz, iyy, iyz, izz} numbers (missing: 0), a real body's}."""
    unknown = [k for k in d if k not in ('link', 'mass', 'com', 'inertia')]
    if unknown:
        raise error(path, f'model.payload.{unknown[0]}', 'unknown key; expected one of link, '
                    'mass, com, inertia')
    link = d.get('link')
    if not isinstance(link, str) or not link:
        raise error(path, 'model.payload.link', f'expected the name of the link (or fixed '
                    f'frame) that holds the payload, got {link!r}')
    mass = as_number(d.get('mass', 0.0), path, 'model.payload.mass')
    if mass < 0.0:
        raise error(path, 'model.payload.mass', f'expected number >= 0 [kg], got {mass!r}')
    com = d.get('com', [0.0, 0.0, 0.0])
    if not isinstance(com, (list, tuple)) or len(com) != 3:
        raise error(path, 'model.payload.com', f'expected 3 numbers [m], got {com!r}')
    com = [as_number(v, path, 'model.payload.com') for v in com]
    given = d.get('inertia', {})
    if not isinstance(given, Mapping):
        raise error(path, 'model.payload.inertia', f'expected a map of '
                    f'{", ".join(_PAYLOAD_INERTIA)} [kg m^2], got {given!r}')
    unknown = [k for k in given if k not in _PAYLOAD_INERTIA]
    if unknown:
        raise error(path, f'model.payload.inertia.{unknown[0]}', 'unknown key; expected one '
                    f'of {", ".join(_PAYLOAD_INERTIA)}')
    entries = [as_number(given.get(k, 0.0), path, f'model.payload.inertia.{k}')
               for k in _PAYLOAD_INERTIA]
    if not bool(_inertia.is_inertia_consistent(_inertia.inertia_matrix_from_entries(*entries))):
        raise error(path, 'model.payload.inertia', f'not the inertia of a real body (principal '
                    f'moments negative or against the triangle inequality): {entries}')
    return {'link': link, 'mass': mass, 'com': com,
            'inertia': dict(zip(_PAYLOAD_INERTIA, entries))}


def _resolve_urdf(urdf: str, path: str | None, xacro_args: Mapping[str, Any]) -> str:
    """`model_io.resolve_urdf` against the folder of the config file `path`; its errors
    name `model.urdf`."""
    folder = None if path is None else os.path.dirname(os.path.abspath(path))
    try:
        return model_io.resolve_urdf(urdf, folder, xacro_args)
    except model_io.ModelError as exc:
        raise error(path, 'model.urdf', str(exc)) from exc


def _check_factory(kind: str, builder: str, args: Mapping[str, Any], path: str | None) -> None:
    """Check a builder's (`core.model.builders.BUILDERS`) or mechanism's
    (`core.constrained.mechanisms.MECHANISMS`) name and argument names; `kind` is the model key."""
    try:
        if kind == 'mechanism':
            from sysid_ros.core.constrained.mechanisms import MECHANISMS as BUILDERS
        else:
            from sysid_ros.core.model.builders import BUILDERS
    except ImportError:                         # builders not available: leave it to the model
        return
    if builder not in BUILDERS:
        raise error(path, f'model.{kind}',
                    f'expected one of {" | ".join(BUILDERS)}, got {builder!r}')
    signature = inspect.signature(BUILDERS[builder])
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    for key in args:
        if not accepts_any and key not in signature.parameters:
            raise error(path, f'model.builder_args.{key}',
                        f'unknown argument of {kind} {builder!r}; expected one of '
                        + ', '.join(signature.parameters))


@dataclasses.dataclass(frozen=True)
class ParametersConfig:
    """`parameters:` the physical parameters to identify.

    Attributes:
      bounds: flat name (e.g. 'link2.com.x') -> (min, max) in physical units (+-inf allowed),
        in file order; see `core.model.parameters` for the names and units.
      init: flat name -> initial value, for the parameters that give one.
      std: flat name -> standard deviation of a Gaussian prior about the parameter's nominal
        value (its `init`, else the model's value) [physical units], for the parameters
        that give one (`io.nominal_prior`): holds what the data cannot tell apart, e.g. the
        link parameters a motion does not separate, near the nominal model; the others
        have a flat prior within their bounds.
    """

    bounds: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    init: dict[str, float] = dataclasses.field(default_factory=dict)
    std: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.bounds)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'ParametersConfig':
        """Flatten and validate the nested `parameters` map."""
        if not isinstance(d, Mapping) or not d:
            raise error(path, 'parameters', 'expected a non-empty map of links and joints, '
                        f'got {d!r}')
        bounds, init, std = {}, {}, {}
        for obj, tree in d.items():
            if not isinstance(obj, str) or not obj:
                raise error(path, f'parameters.{obj}', 'expected a link or joint name')
            _flatten(tree, (obj,), path, bounds, init, std)
        return cls(bounds=bounds, init=init, std=std)


def _flatten(tree, keys: tuple[str, ...], path, bounds, init, std) -> None:
    """Walk `parameters.<obj>.<attr...>` down to the `{min, max, init, std}` leaves."""
    key = 'parameters.' + '.'.join(str(k) for k in keys)
    if not isinstance(tree, Mapping) or not tree:
        raise error(path, key, f'expected a map with min/max (and optional init, std), got '
                    f'{tree!r}')
    leaf_keys = [k for k in tree if k in _BOUND_KEYS]
    if not leaf_keys:
        for sub, subtree in tree.items():
            _flatten(subtree, keys + (str(sub),), path, bounds, init, std)
        return
    if len(leaf_keys) != len(tree):
        other = [k for k in tree if k not in _BOUND_KEYS]
        raise error(path, f'{key}.{other[0]}', 'unknown key; expected one of '
                    + ', '.join(_BOUND_KEYS))
    attribute = '.'.join(keys[1:])
    if attribute not in _parameters.ATTRIBUTES:
        raise error(path, key, f'unknown attribute {attribute!r}; expected one of '
                    + ', '.join(_parameters.ATTRIBUTES))
    nonnegative = attribute in _parameters.NONNEGATIVE_ATTRIBUTES
    lo = as_number(tree.get('min', 0.0 if nonnegative else -math.inf), path, f'{key}.min')
    hi = as_number(tree.get('max', math.inf), path, f'{key}.max')
    if nonnegative and lo < 0.0:
        raise error(path, f'{key}.min', f'expected number >= 0 ({attribute} cannot be '
                    f'negative), got {lo!r}')
    if not lo < hi:
        raise error(path, f'{key}.max', f'expected number > min = {lo!r}, got {hi!r}')
    name = '.'.join(keys)
    bounds[name] = (lo, hi)
    if 'init' in tree:
        value = as_number(tree['init'], path, f'{key}.init')
        if not lo <= value <= hi:
            raise error(path, f'{key}.init', f'expected number in [{lo}, {hi}], got {value!r}')
        init[name] = value
    if 'std' in tree:
        value = as_number(tree['std'], path, f'{key}.std')
        if not 0.0 < value < math.inf:
            raise error(path, f'{key}.std', f'expected a finite number > 0, got {value!r}')
        std[name] = value


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """`data:` where measurements come from and how they are resampled.

    Attributes:
      rate: resampling rate [Hz].
      driver: the robot driver whose topics are read, one of `io.drivers.DRIVERS`
        (`generic`, `franka`, `ur`): it sets the default joint-state topic, says what its
        efforts are (a UR's are motor currents, which need `torque_gains`) and which of its
        topics are low-rate republishes (refused).
      joint_states_topic: sensor_msgs/JointState topic; default: the driver's full-rate
        stream (`generic`: /joint_states, `franka`: /franka/joint_states).
      torque_source: `joint_states.effort` or a topic with the applied torques.
      torque_gains: joint torque per unit of the torque source's values, per joint (one
        number: the same for all), e.g. a UR's current-to-torque gains [N m / A]; applied to
        recordings, live windows and logs read through `data.layout`; empty: the values are
        joint torques [N m, N].
      layout: where time, positions, velocities and efforts are in a CSV or NPZ log of the
        user's own layout, and their units (`io.log_layout`: `time`, `time_unit`,
        `position`, `velocity`, `effort`, `angle_unit`, `header`, `delimiter`); `sysid fit
        --data` and `sysid predict --data` then read every file through it; empty: the files
        are in the trajectory format of `io.trajectory`.
      torque_samples: what a torque sample is: `held` (a command held until the next sample,
        e.g. a controller running at `data.rate`) or `instantaneous` (the value at the stamp
        of a torque that varies between samples, e.g. measured efforts); each period then
        gets the mean of its two ends (`trajectory.hold_torques`). Applies to bags, logs read
        through `layout` and live windows; trajectory files hold tau[k] by their own
        convention.
      mocap_topics: geometry_msgs/PoseStamped topics, one per tracked body.
      mocap_frames: the link (or fixed URDF frame) whose pose each of `mocap_topics`
        measures, in the same order; the poses then enter the output-error likelihood
        beside the joint states (`io.estimator_data`). The poses are taken in the model's
        base (world) frame: register the mocap frame to the robot's base beforehand. Empty:
        the poses are recorded and buffered but not observed.
      mocap_offsets: where each tracked frame (the marker body's frame) sits in its link,
        6 numbers per entry of `mocap_frames`: [x, y, z] [m], then URDF roll, pitch, yaw
        [rad]; empty: at the link frame.
      mocap_noise_std: standard deviation of the motion-capture noise on each coordinate of
        the tracked frame's origin and of its axis tips 1 m out [m] (a rotation error of 1
        mrad moves a tip by 1 mm); empty: estimated from the poses like `noise_std`.
      noise_std: measurement noise standard deviation per observed dimension (one number:
        the same for all) [rad, rad/s, m]; empty: the estimator's default.
      torque_noise_std: standard deviation of the equation error's torque residual per
        joint (one number: the same for all) [N m, N]; empty: estimated from the data
        (`io.estimator_data`).
      torque_timing_std: standard deviation of an unknown offset in time between the
        torques and the joint states, one per piece of the equation error, marginalised
        (`core.likelihoods.equation_error`, Timing) [s]; default 1 ms, the period of a
        1 kHz driver (a held command read at its stamp is half of it early); 0: none.
      gap: a recording is cut into trajectories wherever its joint states pause longer than
        this [s] (`sysid fit --bag`).
      segments: bag time ranges to use, as pairs `[start, end, start, end, ...]` [s] after
        the bag's start; empty: the whole bag.
      holdout: share of the bag's trajectories (the last ones) kept out of the fit and used
        for the evaluation metrics [0, 1).
    """

    rate: float = option(100.0, 'float', unit='Hz', gt=0.0)
    driver: str = option('generic', 'str', choices=tuple(drivers.DRIVERS))
    joint_states_topic: str = option('/joint_states', 'topic')
    torque_source: str = option(TORQUE_FROM_JOINT_STATES, 'str')
    torque_gains: tuple[float, ...] = option((), 'float_list', unit='N m / unit', gt=0.0)
    layout: dict[str, Any] = option({}, 'map')
    torque_samples: str = option('held', 'str', choices=TORQUE_SAMPLES)
    mocap_topics: tuple[str, ...] = option((), 'topic_list')
    mocap_frames: tuple[str, ...] = option((), 'str_list')
    mocap_offsets: tuple[float, ...] = option((), 'float_list', unit='m, rad')
    mocap_noise_std: float | None = option(None, 'float', unit='m', optional=True, gt=0.0)
    noise_std: tuple[float, ...] = option((), 'float_list', gt=0.0)
    torque_noise_std: tuple[float, ...] = option((), 'float_list', unit='N m', gt=0.0)
    torque_timing_std: float = option(1e-3, 'float', unit='s', ge=0.0)
    gap: float = option(0.5, 'float', unit='s', gt=0.0)
    segments: tuple[float, ...] = option((), 'float_list', unit='s', ge=0.0)
    holdout: float = option(0.0, 'float', ge=0.0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'DataConfig':
        """Validate the `data` section."""
        cfg = parse_section(cls, d, path, 'data')
        cfg = _with_driver(cfg, 'joint_states_topic' in (d or {}), path)
        if cfg.layout:
            cfg = dataclasses.replace(cfg, layout=log_layout.parse_layout(cfg.layout, path))
        if not cfg.holdout < 1.0:
            raise error(path, 'data.holdout', f'expected a share in [0, 1), got {cfg.holdout!r}')
        pairs = cfg.segments
        if len(pairs) % 2 or any(not a < b for a, b in zip(pairs[::2], pairs[1::2])):
            raise error(path, 'data.segments', 'expected pairs [start, end, ...] with start < '
                        f'end [s], got {list(pairs)}')
        if cfg.torque_source != TORQUE_FROM_JOINT_STATES and not ROS_NAME.match(
                cfg.torque_source):
            raise error(path, 'data.torque_source', f'expected {TORQUE_FROM_JOINT_STATES!r} '
                        f'or a topic name, got {cfg.torque_source!r}')
        frames, topics = cfg.mocap_frames, cfg.mocap_topics
        if frames and len(frames) != len(topics):
            raise error(path, 'data.mocap_frames', f'expected one link per entry of '
                        f'data.mocap_topics ({len(topics)}: {list(topics)}), got '
                        f'{len(frames)}: {list(frames)}')
        if cfg.mocap_offsets and len(cfg.mocap_offsets) != 6 * len(frames):
            raise error(path, 'data.mocap_offsets', f'expected 6 numbers [x, y, z, roll, '
                        f'pitch, yaw] per entry of data.mocap_frames ({6 * len(frames)}), got '
                        f'{len(cfg.mocap_offsets)}')
        return cfg


def _with_driver(cfg: 'DataConfig', topic_given: bool, path: str | None) -> 'DataConfig':
    """`cfg` with the driver profile's joint-state topic unless one is given; ConfigError
    for a republished topic or efforts that are currents without gains."""
    profile = drivers.DRIVERS[cfg.driver]
    if not topic_given:
        cfg = dataclasses.replace(cfg, joint_states_topic=profile.joint_states_topic)
    if cfg.joint_states_topic in profile.republished_topics:
        raise error(path, 'data.joint_states_topic', f'{cfg.joint_states_topic} of driver '
                    f'{cfg.driver} is a low-rate republish stamped on receipt; read '
                    f'{profile.joint_states_topic} (the default)')
    if (profile.effort == drivers.CURRENT and cfg.torque_source == TORQUE_FROM_JOINT_STATES
            and not cfg.torque_gains):
        raise error(path, 'data.torque_gains', f'driver {cfg.driver} publishes motor currents '
                    f'[A] as efforts on {cfg.joint_states_topic}: give the current-to-torque '
                    "gain of each joint [N m / A] (the arm maker's data, or a calibration "
                    'with a known load)')
    return cfg


@dataclasses.dataclass(frozen=True)
class EstimatorConfig:
    """`estimator:` the inference method and its settings.

    Attributes:
      method: one of METHODS: point estimators (POINT_METHODS: lm, the default; diffnea,
        nea) or Bayesian ones (BAYESIAN_METHODS: csvgd, svgd, sgld, nuts, emcee, cem).
      particles: number of particles: restarts of a point estimator; particles, chains,
        walkers or population size of a Bayesian one.
      iterations: most optimiser / sampler steps (a method stops earlier once converged).
      window: duration of one shooting window [s] of the output-error methods (lm and the
        Bayesian ones); `auto` (default): chosen from the data (`io.estimator_data`);
        `all`: the shortest trajectory is one piece of `shooting_windows` windows.
      shooting_windows: windows per trajectory piece (consecutive windows joined by free
        shooting states, CSVGD's multiple shooting; 1: every window starts at its measured
        state); each window must span at least 2 steps.
      start: where the first window of each piece starts in the Bayesian methods'
        likelihood: `profiled` (for each particle at the state that fits the window best,
        `core.likelihoods.profiled_start`; needs `shooting_windows: 1`), `measured` (at the
        measured state; a fit from the lm estimate refits it there and holds it,
        `io.window_refit`) or `auto` (default): `profiled` for single shooting,
        else `measured`. A start held fixed makes the posterior the conditional one given
        the starts: narrower than the truth allows and centred on the estimate that fitted
        them (`bench/calibration.py`).
      batch: trajectory pieces each step of csvgd, svgd and sgld sees (`io.minibatch`: a
        new random order per epoch, the log-likelihood scaled by pieces / batch), so a step
        costs the same on a long recording; `auto` (default): 8; `all`: every piece. Only
        with `shooting_windows: 1` and `likelihood: product` (else every piece).
      init: where the Bayesian methods start: `point` (default: from the lm estimate, for
        single-shooting windows refitted on the Bayesian windows, and its Laplace
        covariance, clipped into the bounds; `io.start_fit`) or `sobol` (Sobol points over
        the bounds, for multimodal problems).
      learning_rate: step size: Adam's (in unconstrained coordinates) for diffnea, csvgd and
        svgd; for sgld the drift of the first Langevin step (`core.inference.methods`).
      seed: PRNG seed.
      loss: `one_step` (next-state prediction) or `rollout` (simulate `rollout_horizon` steps).
      rollout_horizon: steps simulated per window in the `rollout` loss [steps].
      likelihood: how the Bayesian methods combine the trajectories (pieces) of the data:
        `product` (independent experiments with one parameter vector: log-likelihoods add)
        or `sum` (an equally weighted mixture: each may come from other parameters).
      lag: steps kept by the fixed-lag smoother of `factor_graph` [steps].
      residual: the likelihood of lm and the Bayesian methods: `output_error` (default:
        simulate windows and compare the joint states, `core.likelihoods.likelihood`) or
        `equation_error` (torque residuals through inverse dynamics with accelerations from
        a causal filter, `core.likelihoods.equation_error`; additive actuator models only).
      filter_window: length of the equation error's causal Savitzky-Golay filter [s]
        (rounded to an odd number of at least 5 samples; its delay is half of it); empty:
        0.05 s, which an offline fit lengthens where more than 2 % of the accelerations'
        variance is velocity noise (`io.estimator_data.longer_filter_window`).
    """

    method: str = option('lm', 'str', choices=METHODS)
    particles: int = option(1, 'int', ge=1)
    iterations: int = option(200, 'int', ge=1)
    window: float | str = option('auto', 'float', unit='s', gt=0.0, words=WINDOW_WORDS)
    shooting_windows: int = option(1, 'int', ge=1)
    start: str = option('auto', 'str', choices=STARTS)
    batch: int | str = option('auto', 'int', ge=1, words=WINDOW_WORDS)
    init: str = option('point', 'str', choices=INITS)
    learning_rate: float = option(1e-2, 'float', gt=0.0)
    seed: int = option(0, 'int')
    loss: str = option('rollout', 'str', choices=LOSSES)
    rollout_horizon: int = option(50, 'int', unit='steps', ge=1)
    likelihood: str = option('product', 'str', choices=LIKELIHOODS)
    lag: int = option(10, 'int', unit='steps', ge=2)
    residual: str = option('output_error', 'str', choices=RESIDUALS)
    filter_window: float | None = option(None, 'float', unit='s', optional=True, gt=0.0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'EstimatorConfig':
        """Validate the `estimator` section."""
        return parse_section(cls, d, path, 'estimator')


@dataclasses.dataclass(frozen=True)
class OnlineConfig:
    """`online:` the live estimator node (`io.online`, `ros.estimator`).

    Attributes:
      window_length: duration of each data window [s].
      hop: time between the starts of consecutive windows [s].
      iterations_per_window: estimator steps run on each window, warm-started from the
        previous posterior.
      jitter: std of the Gaussian noise added to the particles before each window, as a
        fraction of each parameter's bounds width [-]; also the random-walk noise added to
        the covariance of the sequential prior (a parameter that drifts; 0: none). A sudden
        change (a payload) needs neither: the prior-data conflict test widens the prior of
        a window that disagrees with it (`io.sequential_prior.conflict_inflation`), except for
        equation-error windows, which have no such test and follow changes only through
        jitter and forgetting. Both widen a static parameter's intervals past its posterior.
      forgetting: lambda in (0, 1]: each window's prior is the previous posterior as a
        Gaussian with its covariance divided by lambda (1: no forgetting; smaller: the
        estimate averages over fewer windows, ~1 / (1 - lambda), and a static parameter's
        intervals are up to sqrt(1 + lambda) times too wide).
      divergence_factor: a window whose loss exceeds this times the loss of the particles it
        started from (or is not finite) counts as a divergence: the posterior goes back to the
        last good one [-].
      save_path: posterior file written on ~/save, at shutdown and every `save_interval`
        (`.npz` + `.yaml`; empty: not saved). A later run of the same configuration resumes
        from it (`io.online`: same parameters and model, else it starts afresh and says why).
      save_interval: the posterior is also written to `save_path` this often, after the
        window that passes it [s, wall], so a killed node loses at most this much (empty:
        only on ~/save and at shutdown).
      warm_start: posterior file (`.npz`) to start from (empty: Sobol particles).
      push_node: node whose parameters receive estimates, all in one
        rcl_interfaces/srv/SetParametersAtomically request (empty: no push).
      push_parameters: estimate name -> parameter name of `push_node`, nested like
        `parameters` (`link2: {mass: payload_mass}`).
      push_rate: most pushes per second [Hz].
      push_max_std: a window's posterior is pushed only if every pushed parameter's
        standard deviation is below this fraction of its bounds width [-] (and the window
        did not diverge); one unit-free threshold for parameters of mixed units (the uniform
        prior's std is 0.29 of the width).
      silent_warn: a subscribed topic silent this long turns its diagnostics WARN [s, wall].
      silent_stale: a subscribed topic silent this long turns its diagnostics STALE [s, wall].
      diagnostics_rate: diagnostics publish rate [Hz].
    """

    window_length: float = option(2.0, 'float', unit='s', gt=0.0)
    hop: float = option(1.0, 'float', unit='s', gt=0.0)
    iterations_per_window: int = option(20, 'int', ge=1)
    jitter: float = option(0.0, 'float', ge=0.0)
    forgetting: float = option(1.0, 'float', gt=0.0)
    divergence_factor: float = option(1e3, 'float', gt=1.0)
    save_path: str | None = option(None, 'str', optional=True)
    save_interval: float | None = option(None, 'float', unit='s', optional=True, gt=0.0)
    warm_start: str | None = option(None, 'str', optional=True)
    push_node: str | None = option(None, 'str', optional=True)
    push_parameters: dict[str, Any] = option({}, 'map')
    push_rate: float = option(1.0, 'float', unit='Hz', gt=0.0)
    push_max_std: float = option(0.05, 'float', gt=0.0)
    silent_warn: float = option(1.0, 'float', unit='s', gt=0.0)
    silent_stale: float = option(3.0, 'float', unit='s', gt=0.0)
    diagnostics_rate: float = option(1.0, 'float', unit='Hz', gt=0.0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'OnlineConfig':
        """Validate the `online` section; `push_parameters` is flattened to dotted names."""
        cfg = parse_section(cls, d, path, 'online')
        if not cfg.forgetting <= 1.0:
            raise error(path, 'online.forgetting', f'expected a number in (0, 1], got '
                        f'{cfg.forgetting!r}')
        if cfg.save_interval is not None and not cfg.save_path:
            raise error(path, 'online.save_interval', 'needs online.save_path (where to '
                        'write the posterior)')
        if not cfg.silent_stale > cfg.silent_warn:
            raise error(path, 'online.silent_stale', f'expected a number > online.silent_warn '
                        f'({cfg.silent_warn:g} s), got {cfg.silent_stale!r}')
        flat: dict[str, str] = {}
        _flatten_names(cfg.push_parameters, (), path, flat)
        return dataclasses.replace(cfg, push_parameters=flat)


def _flatten_names(tree, keys: tuple[str, ...], path, out: dict) -> None:
    """{'link2': {'mass': 'm'}} -> out['link2.mass'] = 'm' (leaves: non-empty strings)."""
    key = '.'.join(('online.push_parameters',) + keys)
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            _flatten_names(v, keys + (str(k),), path, out)
    elif isinstance(tree, str) and tree.strip() and keys:
        out['.'.join(keys)] = tree
    else:
        raise error(path, key, f'expected a parameter name of online.push_node, got {tree!r}')


@dataclasses.dataclass(frozen=True)
class ExcitationConfig:
    """`excitation:` the designed motion of `sysid excite` (`io.excitation`).

    Attributes:
      duration: length of the motion [s].
      base_frequency: fundamental f0 of the Fourier series [Hz].
      harmonics: harmonics per joint (frequencies f0 .. harmonics f0).
      design_rate: rate of the grid the information and the penalties are evaluated on
        [Hz]; the hard check of the limits and the written trajectory use `data.rate`.
      iterations: most L-BFGS iterations.
      seed: seed of the random starting coefficients.
      start: (nv,) start and end position of every joint [rad, m], in the model's joint
        order; empty: the middle of each joint's position limits (0 where unlimited).
      position_margin: distance kept from each position limit [rad, m].
      velocity: speed limit per joint (one number: all joints) [rad/s, m/s]; empty: the
        URDF's. Every joint needs a finite one from here or the URDF.
      acceleration: acceleration limit per joint [rad/s^2, m/s^2]; empty: none (the effort
        limit bounds the accelerations through the dynamics).
      effort: command limit per joint [N m, N]; empty: the URDF's. Every joint needs a
        finite one from here or the URDF.
    """

    duration: float = option(10.0, 'float', unit='s', gt=0.0)
    base_frequency: float = option(0.1, 'float', unit='Hz', gt=0.0)
    harmonics: int = option(5, 'int', ge=1)
    design_rate: float = option(20.0, 'float', unit='Hz', gt=0.0)
    iterations: int = option(200, 'int', ge=1)
    seed: int = option(0, 'int')
    start: tuple[float, ...] = option((), 'float_list', unit='rad')
    position_margin: float = option(0.1, 'float', unit='rad', ge=0.0)
    velocity: tuple[float, ...] = option((), 'float_list', unit='rad/s', gt=0.0)
    acceleration: tuple[float, ...] = option((), 'float_list', unit='rad/s^2', gt=0.0)
    effort: tuple[float, ...] = option((), 'float_list', unit='N m', gt=0.0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str | None = None) -> 'ExcitationConfig':
        """Validate the `excitation` section (lengths per joint are checked against the
        model by `io.excitation`, which knows it)."""
        return parse_section(cls, d, path, 'excitation')
