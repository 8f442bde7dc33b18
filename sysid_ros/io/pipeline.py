"""The one path from a configuration to a posterior, shared by `sysid fit` and the ROS node.

    config -> Problem (model, base params, ParameterSpec, dt) -> data -> estimator -> FitResult

  * `build_problem(config)`: the robot from `model.urdf` (a file, URDF XML or
    `example-robot-data:NAME`, with every joint outside `model.joints` locked) or from
    `model.builder` + `model.builder_args` (`core.builders.BUILDERS`); the parameters to
    identify from `parameters` (`core.parameters.make_parameter_spec`).
  * `prepare_trajectories(problem, trajectories)`: load files, order joints by name,
    resample to `data.rate`.
  * `fit(config, trajectories)`: run an estimator and return a `FitResult` (particles,
    mean, std, loss history, wall time, diagnostics): NEA or DiffNEA here, the Bayesian
    methods (CSVGD, SVGD, SGLD, NUTS, Emcee, CEM) through `io.bayes`. Every method runs
    in `run_steps`, the one loop with progress reports and Ctrl-C handling.
  * `simulate(problem, ...)`: synthetic data from the nominal model under a smooth random
    excitation, for demos and tests; `prediction_error` scores parameters on held-out data.
  * Planar closed-chain mechanisms (`model.mechanism`, `core.mechanisms`) make a
    `MechanismProblem`, identified by `factor_graph`: GTSAM's fixed-lag smoother with the
    parameters as graph variables (`graph.identification`), run over the trajectories in turn.
    Its Gaussian posterior is returned as the 2M sigma points of the unscented transform
    (their mean and standard deviation are exactly the marginal's), with the estimate and its
    marginal standard deviation over time in `FitResult.marginals`. The data are the angle
    coordinates (the crank encoder: q, its rate: qd, a gyroscope on the crank) and torques.
    `estimator.iterations` is not used (iSAM2 takes one Gauss-Newton step per sample), nor are
    `fit`'s theta0 and seed (the prior comes from `parameters`).

Conventions: the control period is dt = 1 / `data.rate`; `model.dt` (if given) is the
integration step, so each command is integrated with round(1 / (rate dt)) substeps. The
state vector follows the model's joint order (parents before children); data files are
matched to it by joint name, so the order of `model.joints` does not matter.

DiffNEA here uses the loss `estimator.loss` (one-step or rollout) on all segments of
`estimator.rollout_horizon` steps (full batch, deterministic), Adam with a cosine-decaying
step size starting at `estimator.learning_rate`, `estimator.iterations` steps and
`estimator.particles` restarts. `estimator.shooting_windows` and `estimator.likelihood`
belong to the Bayesian multiple-shooting likelihoods (`io.bayes`) and are not used by these
point estimators.
NEA runs Gauss-Newton least-squares steps (exact after one step for the linear cases) until
the step is negligible, at most `iterations` (capped at `NEA_MAX_ITERATIONS`) steps. If its
raw least-squares solution is not physically consistent, the projected solution and the
consistent anchor are refined by consistent least squares (`estimators.make_consistent_ls`,
`NEA_REFINE_ITERATIONS` Levenberg-Marquardt iterations each); the anchor's fit is kept unless
the projection's has a loss lower by `NEA_REFINE_MARGIN` (relative), and either only if it
beats the projection.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import math
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sysid_ros.core import builders, dynamics, estimators, integrators, losses
from sysid_ros.core import mechanisms
from sysid_ros.core.parameters import ParameterSpec
from sysid_ros.core.types import Params, RobotModel
from sysid_ros.io import config as config_io
from sysid_ros.io import model_io
from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io import urdf_export
from sysid_ros.io.config import Config, ConfigError
from sysid_ros.io.trajectory import DataError, Trajectory

__all__ = [
    'FIT_METHODS',
    'BestSoFar',
    'StepsResult',
    'run_steps',
    'NEA_MAX_ITERATIONS',
    'Problem',
    'MechanismProblem',
    'FitResult',
    'build_problem',
    'prepare_trajectories',
    'fit',
    'excitation',
    'simulate',
    'prediction_error',
    'nea_samples',
]

FIT_METHODS = config_io.METHODS
NEA_MAX_ITERATIONS = 20
# NEA stops when a Gauss-Newton step is smaller than this (bounds-scaled units).
NEA_TOLERANCE = 1e-9
# Levenberg-Marquardt iterations of the consistent least squares after an inconsistent NEA.
NEA_REFINE_ITERATIONS = 100
# Relative loss margin by which the refinement from the projection must beat the one from the
# anchor to be chosen.
NEA_REFINE_MARGIN = 0.01
# Samples dropped at both ends of each trajectory for NEA (filter edge effects).
NEA_EDGE_SAMPLES = 3
# factor_graph: sensor noise when data.noise_std is empty [rad, rad/s]; marginal covariance
# of the parameters every this many steps (FitResult.marginals).
GRAPH_DEFAULT_NOISE = (1e-3, 1e-2)
GRAPH_MARGINAL_EVERY = 5


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
    """

    config: Config
    model: RobotModel
    base_params: Params
    spec: ParameterSpec
    dt: float
    substeps: int = 1

    @property
    def names(self) -> tuple[str, ...]:
        return self.spec.names

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.model.joint_names


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Outcome of `fit`.

    Attributes:
      method: one of FIT_METHODS.
      names: (M,) parameter names.
      particles: (P, M) identified parameters, physical units: one row per restart of a
        point estimator, the posterior sample of a Bayesian method (`io.bayes`).
      initial: (P, M) starting particles.
      lower, upper: (M,) bounds.
      loss_history: (K,) lowest loss over particles at each step [-] (for the Bayesian
        methods the mean squared noise-normalised residual, see `io.bayes`).
      iterations: steps taken (K).
      final_loss: loss of the returned particles (lowest over particles) [-].
      wall_time: seconds spent in `fit`, compilation included [s].
      consistent: (P,) whether each particle is physically consistent (`spec.is_consistent`).
      interrupted: True if stopped by Ctrl-C: a point estimator returns the best particles
        so far, a Bayesian method the latest ones.
      info: method-specific diagnostics (plain Python values).
      marginals: online methods (factor_graph): {'t': (K,) [s], 'mean': (K, M), 'std': (K, M)}
        the estimate and its marginal standard deviation as the data came in; else None.
    """

    method: str
    names: tuple[str, ...]
    particles: np.ndarray
    initial: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    loss_history: np.ndarray
    iterations: int
    final_loss: float
    wall_time: float
    consistent: np.ndarray
    interrupted: bool = False
    info: dict = dataclasses.field(default_factory=dict)
    marginals: dict | None = None

    @property
    def mean(self) -> np.ndarray:
        """(M,) mean over particles."""
        return self.particles.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """(M,) standard deviation over particles (0 for a single particle)."""
        return self.particles.std(axis=0)

    def as_dict(self, which: str = 'mean') -> dict[str, float]:
        """{name: value} of the mean (or 'std')."""
        values = self.mean if which == 'mean' else self.std
        return {n: float(v) for n, v in zip(self.names, values)}


def _config_error(config: Config, key: str, message: str) -> ConfigError:
    return ConfigError(f'{config.source}: {key}: {message}' if config.source
                       else f'{key}: {message}')


def _load_model(config: Config) -> tuple[RobotModel, Params]:
    cfg = config.model
    joints = tuple(cfg.joints)
    if cfg.urdf is not None:
        try:
            pmodel = model_io.load_pinocchio(cfg.urdf)
        except model_io.ModelError as exc:
            raise _config_error(config, 'model.urdf', str(exc)) from exc
        movable = list(pmodel.names[1:])          # example robots: default locks applied
        unknown = [j for j in joints if j not in movable]
        if unknown:
            raise _config_error(config, 'model.joints', f'no joint named {unknown[0]!r} in the '
                                f'URDF; movable joints: {", ".join(movable)}')
        try:
            return model_io.load_urdf(cfg.urdf, keep_joints=list(joints) or None)
        except model_io.ModelError as exc:
            raise _config_error(config, 'model.urdf', str(exc)) from exc
    try:
        model, params = builders.BUILDERS[cfg.builder](**cfg.builder_args)
    except KeyError:
        raise _config_error(config, 'model.builder', f'expected one of '
                            f'{" | ".join(builders.BUILDERS)}, got {cfg.builder!r}') from None
    except (TypeError, ValueError) as exc:
        raise _config_error(config, 'model.builder_args', str(exc)) from exc
    unknown = [j for j in joints if j not in model.joint_names]
    if unknown:
        raise _config_error(config, 'model.joints', f'no joint named {unknown[0]!r} in builder '
                            f'{cfg.builder!r}; joints: {", ".join(model.joint_names)}')
    if joints and set(joints) != set(model.joint_names):
        missing = [j for j in model.joint_names if j not in joints]
        raise _config_error(config, 'model.joints', f'builder {cfg.builder!r} cannot lock '
                            f'joints; expected all of {", ".join(model.joint_names)} '
                            f'(missing {", ".join(missing)})')
    return model, params


def build_problem(config: Config | str) -> Problem | MechanismProblem:
    """Configuration (or a YAML path) -> Problem (MechanismProblem for a model.mechanism).

    Raises:
      ConfigError: unknown URDF/builder, joints that the model does not have, parameters of
        unknown links or joints, an integration step that does not divide the sample period.
    """
    if not isinstance(config, Config):
        config = config_io.load_yaml(config)
    if config.model.mechanism is not None:
        return _build_mechanism_problem(config)
    model, params = _load_model(config)
    spec = config_io.parameter_spec(config, model)
    dt = 1.0 / config.data.rate
    substeps = 1
    if config.model.dt is not None:
        ratio = dt / config.model.dt
        substeps = int(round(ratio))
        if substeps < 1 or abs(ratio - substeps) > 1e-6 * ratio:
            raise _config_error(config, 'model.dt', f'expected 1 / data.rate = {dt:g} s divided '
                                f'by a whole number, got {config.model.dt:g} s')
    return Problem(config=config, model=model, base_params=params, spec=spec, dt=dt,
                   substeps=substeps)


def prepare_trajectories(problem: Problem, trajectories: Sequence[Trajectory | str]
                         ) -> list[Trajectory]:
    """Load paths, order the columns like the model's joints and resample to `data.rate`.

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
        else:
            traj = trajectory_io.load_trajectory(item, joints)
        if traj.nv != len(joints):
            raise DataError(f'{traj.source or "trajectory"}: q: expected {len(joints)} '
                            f'joints, got {traj.nv}')
        if abs(traj.dt * problem.config.data.rate - 1.0) > trajectory_io.UNIFORM_RTOL:
            traj = trajectory_io.resample(traj, problem.config.data.rate)
        out.append(traj)
    return out


# ------------------------------------------------------------------------------------------
# Compiled steps, cached per problem structure
# ------------------------------------------------------------------------------------------

# Compiled functions per problem structure (and nominal parameters), least recently used
# last; a long-running process (the ROS node) keeps at most `_CACHE_SIZE` problems.
_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 16


def _params_digest(params: Params) -> str:
    leaves = jax.tree_util.tree_leaves(params)
    digest = hashlib.sha1()
    for leaf in leaves:
        digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return digest.hexdigest()


def _cached(key, build: Callable):
    if key in _CACHE:
        _CACHE.move_to_end(key)
    else:
        _CACHE[key] = build()
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return _CACHE[key]


def _loss_fn(problem: Problem, kind: str | None = None) -> losses.LossFn:
    cfg = problem.config
    return losses.make_loss_fn(problem.model, kind or cfg.estimator.loss, problem.dt,
                               integrator=cfg.model.integrator, actuator=cfg.model.actuator,
                               substeps=problem.substeps)


def _diffnea(problem: Problem, iterations: int, num_particles: int,
             grad_mode: str = 'reverse'):
    cfg = problem.config.estimator
    loss_fn = _loss_fn(problem)
    key = ('diffnea', problem.model, problem.spec, loss_fn, cfg.learning_rate, iterations,
           num_particles, grad_mode, _params_digest(problem.base_params))

    def build():
        schedule = optax.cosine_decay_schedule(cfg.learning_rate, max(iterations, 1),
                                               alpha=0.01)
        est = estimators.make_diffnea(problem.model, problem.base_params, problem.spec,
                                      loss_fn, optax.adam(schedule), num_particles,
                                      grad_mode=grad_mode)
        return jax.jit(est.init), jax.jit(est.step)

    return _cached(key, build)


def _nea(problem: Problem):
    actuator = problem.config.model.actuator
    key = ('nea', problem.model, problem.spec, actuator, _params_digest(problem.base_params))

    def build():
        try:
            est = estimators.make_nea(problem.model, problem.base_params, problem.spec,
                                      actuator=actuator)
        except ValueError as exc:
            raise _config_error(problem.config, 'estimator.method', str(exc)) from exc
        regressor = jax.jit(estimators.make_regressor_data, static_argnums=0)
        refine = estimators.make_consistent_ls(problem.model, problem.base_params,
                                               problem.spec, actuator=actuator,
                                               iterations=NEA_REFINE_ITERATIONS)
        return jax.jit(est.init), jax.jit(est.step), regressor, jax.jit(refine)

    return _cached(key, build)


def _project(problem: Problem):
    key = ('project', problem.spec, _params_digest(problem.base_params))

    def build():
        def project(theta, anchor):
            return estimators.project_consistent(problem.spec, problem.base_params, theta,
                                                 anchor)

        def anchor(theta):
            return estimators.consistent_anchor(problem.spec, problem.base_params, theta)

        def consistent(theta):
            return problem.spec.is_consistent(theta, problem.base_params)

        return (jax.jit(jax.vmap(project)), jax.jit(jax.vmap(anchor)),
                jax.jit(jax.vmap(consistent)))

    return _cached(key, build)


def nea_samples(traj: Trajectory) -> dict[str, np.ndarray]:
    """Inverse-dynamics samples of one trajectory for NEA: {q, qd, qdd, tau} (N, nv).

    Without measured accelerations, q, qd and qdd come from a Savitzky-Golay filter of the
    measurements (`trajectory.with_acceleration`). That symmetric estimate of qdd at t_k
    averages the accelerations just before and after t_k; since `tau[k]` is held from t_k to
    t_k+1 (the `Trajectory` convention, which DiffNEA integrates), the torque that goes with it
    is the mean of the commands either side, (tau[k-1] + tau[k]) / 2. Measured accelerations
    are used with the torques as they are. `NEA_EDGE_SAMPLES` are dropped at both ends, where
    the filter is one-sided.
    """
    measured = traj.qdd is not None
    traj = trajectory_io.with_acceleration(traj)
    tau = traj.tau if measured else np.concatenate([traj.tau[:1],
                                                    0.5 * (traj.tau[1:] + traj.tau[:-1])])
    edge = NEA_EDGE_SAMPLES if traj.num_samples > 4 * NEA_EDGE_SAMPLES else 0
    inner = slice(edge, traj.num_samples - edge)
    return {'q': traj.q[inner], 'qd': traj.qd[inner], 'qdd': traj.qdd[inner], 'tau': tau[inner]}


def _nea_data(problem: Problem, trajs: Sequence[Trajectory]) -> estimators.RegressorData:
    """Stack the samples of all trajectories for NEA (see `nea_samples`)."""
    parts = {k: [] for k in ('q', 'qd', 'qdd', 'tau')}
    for traj in trajs:
        for k, v in nea_samples(traj).items():
            parts[k].append(v)
    arrays = {k: jnp.asarray(np.concatenate(v)) for k, v in parts.items()}
    regressor = _nea(problem)[2]
    return regressor(problem.model, problem.base_params, arrays['q'], arrays['qd'],
                     arrays['qdd'], arrays['tau'])


def _segments(problem: Problem, trajs: Sequence[Trajectory], horizon: int) -> losses.Segments:
    shortest = min(t.num_samples for t in trajs)
    horizon = max(1, min(horizon, shortest - 1))
    try:
        return losses.make_segments([t.q for t in trajs], [t.qd for t in trajs],
                                    [t.tau for t in trajs], horizon)
    except ValueError as exc:
        raise DataError(str(exc)) from exc


# ------------------------------------------------------------------------------------------
# The loop shared by every estimator
# ------------------------------------------------------------------------------------------

class BestSoFar:
    """Per particle row, the lowest loss seen so far and the parameters that had it.

    Attributes:
      theta: (P, M) parameters of each row's best step [physical units].
      loss: (P,) their loss (inf until a finite loss is seen).
    """

    def __init__(self, theta):
        self.theta = np.array(theta, dtype=float)
        self.loss = np.full(self.theta.shape[0], np.inf)

    def update(self, loss, theta) -> None:
        """Keep the rows of `theta` (P, M) whose `loss` (P,) beats the row's best (NaN never)."""
        loss = np.asarray(loss, dtype=float)
        improved = loss < self.loss
        self.loss = np.where(improved, loss, self.loss)
        self.theta[improved] = np.asarray(theta, dtype=float)[improved]

    def overall(self) -> tuple[np.ndarray, float]:
        """(M,) parameters and loss of the best row."""
        k = int(np.argmin(self.loss))
        return self.theta[k].copy(), float(self.loss[k])


class StepsResult(NamedTuple):
    """Outcome of `run_steps`.

    Attributes:
      state: the estimator state after the last completed step.
      info: what the last completed step returned (None if no step completed).
      history: (K,) the loss recorded at each completed step.
      interrupted: True if Ctrl-C (KeyboardInterrupt) stopped the loop.
    """

    state: Any
    info: Any
    history: np.ndarray
    interrupted: bool


def run_steps(step: Callable, state, iterations: int, record: Callable,
              progress: Callable | None = None, start: float | None = None,
              converged: Callable | None = None) -> StepsResult:
    """Run `iterations` estimator steps with progress reports; Ctrl-C stops them cleanly.

    Args:
      step: `step(state) -> (state, info)`, e.g. a jitted estimator step with its data bound.
      state: the initial state.
      iterations: most steps to take.
      record: `record(previous_state, state, info) -> loss` after each step: the loss of
        the history (and any best-so-far bookkeeping, e.g. `BestSoFar.update`).
      progress: called after each step as `progress(iteration, iterations, loss, elapsed_s)`.
      start: `time.perf_counter()` at which the elapsed time starts (default: now).
      converged: `converged(info) -> bool`; True stops the loop early.

    Returns:
      StepsResult. A KeyboardInterrupt, in a step or in `progress`, ends the loop with the
      state of the last completed step and `interrupted=True`.
    """
    start = time.perf_counter() if start is None else start
    history: list[float] = []
    info = None
    interrupted = False
    try:
        for k in range(iterations):
            new_state, new_info = step(state)
            history.append(float(record(state, new_state, new_info)))
            state, info = new_state, new_info
            if progress is not None:
                progress(k + 1, iterations, history[-1], time.perf_counter() - start)
            if converged is not None and converged(info):
                break
    except KeyboardInterrupt:
        interrupted = True
    return StepsResult(state=state, info=info, history=np.asarray(history, dtype=float),
                       interrupted=interrupted)


# ------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------

def fit(config: Config | Problem | str, trajectories: Sequence[Trajectory | str],
        progress: Callable | None = None, method: str | None = None,
        iterations: int | None = None, theta0=None, seed: int | None = None) -> FitResult:
    """Identify the configured parameters from measured trajectories.

    Args:
      config: a Config, a YAML path, or an already built Problem.
      trajectories: Trajectory objects or `.npz`/`.csv` paths.
      progress: called after every step as `progress(iteration, total, loss, elapsed_s)`.
      method: one of FIT_METHODS (default: `estimator.method`); the Bayesian ones run in
        `io.bayes.fit_posterior` (see there for their data, initial particles and result).
      iterations: steps (default: `estimator.iterations`; NEA stops earlier once converged).
      theta0: initial (M,) or (P, M) physical values (default: `parameters.*.init`, else the
        nominal model's values; Bayesian methods: Sobol points in the bounds, see
        `io.bayes.initial_particles`).
      seed: PRNG seed of extra particles (default: `estimator.seed`).

    Returns:
      FitResult. On Ctrl-C (KeyboardInterrupt) during the steps, a point estimator returns
      the best particles so far, a Bayesian method the latest ones, with `interrupted=True`.

    Raises:
      ConfigError, DataError: bad configuration or data, before anything is compiled.
    """
    start = time.perf_counter()
    problem = (config if isinstance(config, (Problem, MechanismProblem))
               else build_problem(config))
    cfg = problem.config
    method = method or cfg.estimator.method
    if method not in FIT_METHODS:
        raise _config_error(cfg, 'estimator.method', f'sysid fit runs {" | ".join(FIT_METHODS)}'
                            f', got {method!r}; pass --method to choose one')
    mismatch = config_io.check_graph_method(method, cfg.model.mechanism)
    if mismatch:
        raise _config_error(cfg, 'estimator.method', mismatch)
    iterations = int(iterations if iterations is not None else cfg.estimator.iterations)
    if iterations < 1:
        raise _config_error(cfg, 'estimator.iterations', f'expected >= 1, got {iterations}')
    if isinstance(problem, MechanismProblem):
        return _fit_factor_graph(problem, prepare_trajectories(problem, trajectories),
                                 progress, start)
    spec = problem.spec
    if theta0 is not None:
        theta0 = np.asarray(theta0, dtype=float)
        if theta0.ndim not in (1, 2) or theta0.shape[-1] != spec.num_params:
            raise ValueError(f'fit: theta0: expected shape ({spec.num_params},) or (P, '
                             f'{spec.num_params}) for {", ".join(spec.names)}; got '
                             f'{theta0.shape}')
    trajs = prepare_trajectories(problem, trajectories)
    if method in config_io.BAYESIAN_METHODS:
        # io.bayes builds on this module (Problem, FitResult, run_steps), so it is imported
        # here rather than at the top.
        from sysid_ros.io import bayes
        return bayes.fit_posterior(problem, trajs, method, iterations, progress=progress,
                                   theta0=theta0, seed=seed, start=start)
    key = jax.random.PRNGKey(cfg.estimator.seed if seed is None else seed)
    project, anchor_fn, consistent_fn = _project(problem)
    info: dict = {}

    if method == 'nea':
        init, step, _, refine = _nea(problem)
        data = _nea_data(problem, trajs)
        iterations = min(iterations, NEA_MAX_ITERATIONS)
    else:
        segments = _segments(problem, trajs, cfg.estimator.rollout_horizon)
        init, step = _diffnea(problem, iterations, cfg.estimator.particles)
        data = segments
        info['num_segments'] = segments.num_segments
        info['horizon'] = segments.horizon
    state = init(key, theta0)
    initial = np.asarray(state.theta)
    best = BestSoFar(initial)

    def record(previous, new, step_info):
        """The step's loss is that of the particles before it (`previous.theta`)."""
        loss = np.asarray(step_info.loss)
        best.update(loss, previous.theta)
        return np.min(loss)

    def converged(step_info):
        return method == 'nea' and float(np.max(step_info.step_norm)) < NEA_TOLERANCE

    steps = run_steps(lambda s: step(s, data), state, iterations, record, progress, start,
                      converged)
    state, last_info, history, interrupted = steps

    if method == 'nea':
        particles = np.asarray(state.theta)
        # Loss at the projected particles: one more step from them, its state discarded.
        _, final_info = step(state._replace(z=state.theta), data)
        final_loss = float(np.min(np.asarray(final_info.loss)))
        if last_info is not None:
            info.update(rank=int(np.min(np.asarray(last_info.rank))),
                        raw_consistent=bool(np.all(np.asarray(last_info.raw_consistent))),
                        num_parameters=spec.num_params)
            info['projected'] = bool(np.any(np.abs(np.asarray(state.z) - particles) > 0.0))
        if last_info is not None and not info['raw_consistent']:
            # Consistent least squares from the projection and from the anchor (2, P, M).
            starts = jnp.concatenate([state.theta, state.aux])
            refined, refined_loss = (np.asarray(a).reshape((2, -1) + a.shape[1:])
                                     for a in refine(starts, data))
            projected_loss = np.asarray(final_info.loss)                 # (P,)
            # The fit from the anchor keeps what the data cannot see near the nominal values;
            # the one from the projection is taken only if it fits clearly better.
            better = np.where(refined_loss[0] < (1.0 - NEA_REFINE_MARGIN) * refined_loss[1],
                              0, 1)                                      # (P,)
            rows = np.arange(particles.shape[0])
            keep = refined_loss[better, rows] < projected_loss
            particles = np.where(keep[:, None], refined[better, rows], particles)
            final_loss = float(np.min(np.where(keep, refined_loss[better, rows],
                                               projected_loss)))
            info.update(loss_projected=float(np.min(projected_loss)),
                        refined=bool(np.any(keep)))
    else:
        if not interrupted:
            _, final_info = step(state, data)      # loss at the final particles
            best.update(np.asarray(final_info.loss), state.theta)
        particles, final_loss = best.theta, float(np.min(best.loss))
        ok = np.asarray(consistent_fn(jnp.asarray(particles)))
        info['projected'] = int(np.sum(~ok))
        if not ok.all():
            anchors = np.asarray(anchor_fn(jnp.asarray(initial)))
            particles = np.asarray(project(jnp.asarray(particles), jnp.asarray(anchors)))
    particles = np.asarray(particles, dtype=float)
    consistent = np.asarray(consistent_fn(jnp.asarray(particles)), dtype=bool)
    return FitResult(method=method, names=spec.names, particles=particles, initial=initial,
                     lower=np.asarray(spec.lower_bounds, float),
                     upper=np.asarray(spec.upper_bounds, float),
                     loss_history=history, iterations=len(history),
                     final_loss=final_loss, wall_time=time.perf_counter() - start,
                     consistent=consistent, interrupted=interrupted, info=info)


# ------------------------------------------------------------------------------------------
# Simulation and validation
# ------------------------------------------------------------------------------------------

_rollout = jax.jit(integrators.rollout,
                   static_argnames=('integrator', 'actuator', 'substeps'))


@functools.partial(jax.jit, static_argnames=('integrator', 'actuator', 'substeps'))
def _rollout_batch(model, params, x0, controls, dt, integrator, actuator, substeps):
    """`integrators.rollout` vmapped over initial states (S, 2 nv) and controls (S, H, nv)."""
    def one(x, u):
        return integrators.rollout(model, params, x, u, dt, integrator=integrator,
                                   actuator=actuator, substeps=substeps)
    return jax.vmap(one)(x0, controls)


@jax.jit
def _gravity_and_inertia(model: RobotModel, params: Params, q):
    """Gravity torques (S, nv) and mass-matrix diagonals (S, nv) at configurations (S, nv)."""
    def one(qi):
        zero = jnp.zeros_like(qi)
        return (dynamics.rnea(model, params, qi, zero, zero),
                jnp.diag(dynamics.crba(model, params, qi)))
    return jax.vmap(one)(q)


def typical_torque(model: RobotModel, params: Params, rng: np.random.Generator) -> np.ndarray:
    """(nv,) typical torque per joint: spread of gravity torques plus mass-matrix diagonal
    times 1 rad/s^2, over random configurations."""
    lo = np.where(np.isfinite(model.q_min), model.q_min, -np.pi)
    hi = np.where(np.isfinite(model.q_max), model.q_max, np.pi)
    q = jnp.asarray(rng.uniform(lo, hi, size=(32, model.nv)))
    gravity, mass = _gravity_and_inertia(model, params, q)
    return np.asarray(jnp.std(gravity, axis=0) + jnp.mean(mass, axis=0))


def excitation(t: np.ndarray, scale: np.ndarray, rng: np.random.Generator,
               num_sines: int = 5, max_frequency: float = 1.0) -> np.ndarray:
    """Smooth random torques: per joint a sum of `num_sines` sinusoids.

    Frequencies are uniform in [0.1, max_frequency] Hz, phases uniform, amplitudes uniform
    and normalised so the peak of each joint's sum is at most `scale[j]`.

    Args:
      t: (T,) times [s].
      scale: (nv,) peak torque per joint [N m].
      rng: NumPy generator.

    Returns:
      (T, nv) torques [N m].
    """
    nv = len(scale)
    freq = rng.uniform(0.1, max_frequency, size=(num_sines, nv))
    phase = rng.uniform(0.0, 2.0 * np.pi, size=(num_sines, nv))
    amp = rng.uniform(0.5, 1.0, size=(num_sines, nv))
    amp = amp / amp.sum(axis=0) * np.asarray(scale)
    return np.sum(amp[None] * np.sin(2 * np.pi * freq[None] * t[:, None, None] + phase[None]),
                  axis=1)


def simulate(problem: Problem, params: Params | None = None, duration: float = 10.0,
             noise: float = 0.0, seed: int = 0, torque_scale: float = 1.0,
             x0=None) -> Trajectory:
    """Simulate the model under a random smooth excitation and add sensor noise.

    The commands are `excitation(...)` with peaks of `torque_scale` times a typical torque of
    each joint (gravity spread + inertia, see `typical_torque`), clipped to the effort limits;
    the model is integrated with the configured integrator, actuator and substeps, starting
    at rest at q = 0 (clipped into the joint limits). Noise: independent N(0, noise^2) added
    to every q [rad, m] and qd [rad/s, m/s] sample; the torques are the exact commands.

    Args:
      problem: the problem (model, integrator, actuator, rate).
      params: true parameters (default: the nominal `problem.base_params`).
      duration: [s].
      noise: sensor noise standard deviation.
      seed: seed of the excitation and the noise.
      torque_scale: excitation strength.
      x0: (2 nv,) initial state (default: at rest at q = 0).

    Returns:
      Trajectory with T = round(duration / dt) + 1 samples (tau of the last sample repeats
      the previous command).
    """
    if isinstance(problem, MechanismProblem):
        return _simulate_mechanism(problem, params, duration, noise, seed, torque_scale)
    model, cfg = problem.model, problem.config
    params = problem.base_params if params is None else params
    rng = np.random.default_rng(seed)
    num = int(round(duration / problem.dt))
    t = np.arange(num + 1) * problem.dt
    scale = torque_scale * typical_torque(model, params, rng)
    limit = np.asarray(model.effort_max if model.effort_max else [np.inf] * model.nv, float)
    limit = np.where(limit > 0.0, limit, np.inf)            # 0: no limit given in the URDF
    controls = np.clip(excitation(t[:-1], scale, rng), -limit, limit)
    if x0 is None:
        q0 = np.clip(np.zeros(model.nv), model.q_min or -np.inf, model.q_max or np.inf)
        x0 = np.concatenate([q0, np.zeros(model.nv)])
    states = np.asarray(_rollout(model, params, jnp.asarray(x0, float), jnp.asarray(controls),
                                 problem.dt, integrator=cfg.model.integrator,
                                 actuator=cfg.model.actuator, substeps=problem.substeps))
    if not np.all(np.isfinite(states)):
        raise DataError('simulate: the simulation diverged; lower the excitation or the step')
    q, qd = states[:, :model.nv], states[:, model.nv:]
    if noise > 0.0:
        q = q + rng.normal(0.0, noise, q.shape)
        qd = qd + rng.normal(0.0, noise, qd.shape)
    tau = np.concatenate([controls, controls[-1:]], axis=0)
    return Trajectory(t=t, q=q, qd=qd, tau=tau, joint_names=model.joint_names,
                      source='simulate')


def prediction_error(problem: Problem, theta, trajectory: Trajectory, horizon: int = 100
                     ) -> dict[str, float]:
    """Score parameters by simulating held-out data.

    The trajectory is cut into segments of `horizon` steps; each is simulated from its
    measured start under the measured commands.

    Args:
      problem: the problem.
      theta: (M,) physical parameter values.
      trajectory: held-out data on the problem's time grid.
      horizon: steps per segment.

    Returns:
      {'nmse': normalised mean squared state error [-] (the rollout loss),
       'rmse_q': root mean squared joint-position error [rad or m],
       'rmse_qd': root mean squared joint-velocity error [rad/s or m/s]}.
    """
    traj = prepare_trajectories(problem, [trajectory])[0]
    segments = _segments(problem, [traj], horizon)
    params = problem.spec.to_params(jnp.asarray(theta, float), problem.base_params)
    cfg = problem.config
    nv = problem.model.nv

    predicted = np.asarray(_rollout_batch(
        problem.model, params, segments.x0, segments.controls, problem.dt,
        integrator=cfg.model.integrator, actuator=cfg.model.actuator,
        substeps=problem.substeps))[:, 1:]
    error = predicted - np.asarray(segments.targets)
    scale = np.asarray(segments.state_scale)
    finite = np.all(np.isfinite(error))
    return {'nmse': float(np.mean(np.square(error / scale))) if finite else math.inf,
            'rmse_q': float(np.sqrt(np.mean(np.square(error[..., :nv])))) if finite
            else math.inf,
            'rmse_qd': float(np.sqrt(np.mean(np.square(error[..., nv:])))) if finite
            else math.inf}


def identified_urdf(problem: Problem, theta) -> str | None:
    """URDF text with the parameters `theta` (M,) written in.

    The configured URDF is updated (merged fixed links keep their values); a builder's model
    gets a URDF of its own; a planar mechanism has none (None).
    """
    if isinstance(problem, MechanismProblem):
        return None
    params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
    source = problem.config.model.urdf
    if source is None:
        return urdf_export.model_to_urdf(problem.model, params)
    if source.startswith(model_io.EXAMPLE_ROBOT_PREFIX):
        source, _ = model_io.example_robot_urdf(source[len(model_io.EXAMPLE_ROBOT_PREFIX):])
    if not source.lstrip().startswith('<'):
        with open(source, encoding='utf-8') as f:
            source = f.read()
    return urdf_export.update_urdf(source, problem.model, problem.base_params, params)


# ------------------------------------------------------------------------------------------
# Planar mechanisms (factor_graph)
# ------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MechanismProblem:
    """A planar closed-chain mechanism to identify with `factor_graph`.

    Attributes:
      config: the validated configuration (`model.mechanism`).
      mechanism: static description (`core.mechanisms.Mechanism`).
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


def _build_mechanism_problem(config: Config) -> MechanismProblem:
    from sysid_ros.graph import identification   # gtsam is imported only for mechanisms
    cfg = config.model
    try:
        mech, params, q_branch = mechanisms.MECHANISMS[cfg.mechanism](**cfg.builder_args)
    except (TypeError, ValueError) as exc:
        raise _config_error(config, 'model.builder_args', str(exc)) from exc
    joints = tuple(mech.bar_names[k] for k in mech.angle_bars)
    if cfg.joints and set(cfg.joints) != set(joints):
        raise _config_error(config, 'model.joints', f'mechanism {cfg.mechanism!r} has the '
                            f'angle coordinates {", ".join(joints)}; got {list(cfg.joints)}')
    known = identification.parameter_names(mech)
    for name in config.parameters.names:
        if name not in known:
            raise _config_error(config, f'parameters.{name}', f'not a parameter of mechanism '
                                f'{cfg.mechanism!r}; expected one of {", ".join(known)}')
        if not all(map(math.isfinite, config.parameters.bounds[name])):
            raise _config_error(config, f'parameters.{name}', 'factor_graph needs finite min '
                                'and max (its Gaussian prior has std (max - min) / 4)')
    return MechanismProblem(config=config, mechanism=mech, base_params=params,
                            q_branch=np.asarray(q_branch), names=config.parameters.names,
                            dt=1.0 / config.data.rate)


def _graph_noise(problem: MechanismProblem) -> tuple[float, float]:
    """(angle [rad], rate [rad/s]) sensor noise std from data.noise_std (one or two numbers)."""
    noise = problem.config.data.noise_std or GRAPH_DEFAULT_NOISE
    if len(noise) > 2:
        raise _config_error(problem.config, 'data.noise_std', 'factor_graph: expected one '
                            f'number or two (angle, rate), got {list(noise)}')
    return float(noise[0]), float(noise[-1])


def _sigma_points(mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """(2M, M) unscented-transform points mean +- sqrt(M) L_i (cov = L L^T): their mean and
    (population) covariance are exactly mean and cov."""
    chol = np.linalg.cholesky(cov)
    offsets = np.sqrt(mean.size) * chol.T
    return np.concatenate([mean + offsets, mean - offsets])


def _fit_factor_graph(problem: MechanismProblem, trajs: Sequence[Trajectory],
                      progress: Callable | None, start: float) -> FitResult:
    """The fixed-lag smoother over each trajectory in turn; the Gaussian posterior of the
    parameters after one is the prior of the next. The first prior has the mean
    `parameters.*.init` (else the nominal value) and std (max - min) / 4."""
    from sysid_ros.graph import identification
    cfg, mech = problem.config, problem.mechanism
    lower, upper = (np.array(b, dtype=float) for b in zip(*cfg.parameters.bounds.values()))
    nominal = identification.get_parameters(mech, problem.names, problem.base_params)
    mean = np.array([cfg.parameters.init.get(n, v) for n, v in zip(problem.names, nominal)])
    cov = np.diag(((upper - lower) / 4.0) ** 2)
    initial = mean[None].copy()
    angle_sigma, rate_sigma = _graph_noise(problem)
    total = sum(traj.num_samples for traj in trajs)
    trace = collections.defaultdict(list)
    done, t_offset = 0, 0.0
    for traj in trajs:
        try:
            q0, v0 = identification.assemble(mech, problem.q_branch, traj.q[0], traj.qd[0])
        except mechanisms.MechanismError as exc:
            raise DataError(f'{traj.source or "trajectory"}: q: row 0: {exc}') from exc

        def report(step, _, error, elapsed, done=done):
            if progress is not None:
                progress(done + step, total, error, time.perf_counter() - start)

        res = identification.identify_online(
            mech, problem.base_params, problem.names, mean, cov, q0, v0, traj.tau[:-1],
            traj.q, problem.dt, cfg.estimator.lag, angle_sigma, gyro=traj.qd,
            gyro_bar=mech.angle_bars, gyro_sigma=rate_sigma,
            covariance_every=GRAPH_MARGINAL_EVERY, progress=report)
        mean, cov = res.mean[-1], res.cov
        rows = ~np.isnan(res.std[:, 0])
        trace['t'].append(t_offset + traj.t[rows] - traj.t[0])
        trace['mean'].append(res.mean[rows])
        trace['std'].append(res.std[rows])
        trace['loss'].append(res.error)
        done, t_offset = done + traj.num_samples, t_offset + traj.duration + problem.dt
    particles = _sigma_points(mean, cov)
    is_mass = np.array([n.endswith('.mass') for n in problem.names])
    consistent = np.all(np.where(is_mass, particles > 0.0, particles >= 0.0), axis=1)
    loss = np.concatenate(trace.pop('loss'))
    wall = time.perf_counter() - start
    return FitResult(
        method='factor_graph', names=problem.names, particles=particles, initial=initial,
        lower=lower, upper=upper, loss_history=loss, iterations=loss.size,
        final_loss=float(loss[-1]), wall_time=wall, consistent=consistent,
        info=dict(lag_steps=cfg.estimator.lag, angle_noise=angle_sigma, rate_noise=rate_sigma,
                  covariance=cov.tolist(), real_time_factor=t_offset / wall),
        marginals={k: np.concatenate(v) for k, v in trace.items()})


def _simulate_mechanism(problem: MechanismProblem, params, duration: float, noise: float,
                        seed: int, torque_scale: float) -> Trajectory:
    """Angle-coordinate encoders and rates (noise std `noise`) of the mechanism under a smooth
    random torque (peaks `torque_scale` times `mechanisms.typical_torque`), simulated by RK4
    in the angle coordinates at dt / 20 from rest at the builder's configuration."""
    from sysid_ros.graph import identification
    mech = problem.mechanism
    params = problem.base_params if params is None else params
    num = int(round(duration / problem.dt))
    scale = torque_scale * np.asarray(mechanisms.typical_torque(mech, params,
                                                                problem.q_branch))

    def torque(t):
        return excitation(t, scale, np.random.default_rng(seed))

    u, _, _, angle, rate = identification.simulate_sensors(
        mech, params, problem.q_branch, torque, problem.dt, num, encoder_sigma=noise,
        gyro_bar=list(mech.angle_bars), gyro_sigma=noise, seed=seed)
    if not (np.all(np.isfinite(angle)) and np.all(np.isfinite(rate))):
        raise DataError('simulate: the simulation diverged; lower the excitation or the step')
    return Trajectory(t=np.arange(num + 1) * problem.dt, q=angle, qd=rate,
                      tau=np.concatenate([u, u[-1:]]), joint_names=problem.joint_names,
                      source='simulate')
