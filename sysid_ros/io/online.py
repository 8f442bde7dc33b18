"""Online (windowed) Bayesian identification: the ROS-free state of the live estimator node.

An `OnlineSession` holds the Problem and the state of one registered estimator
(`core.inference.registry`, `estimator.method`), and steps it window by window:

    init once (and on `reset`); per window (a `window_buffer.Window`):
        window -> Trajectory (once) -> estimator data (once)
        -> start: the Laplace fit of prior x window (or the jittered particles)
        -> rebase(state, starting particles, data) -> step x `online.iterations_per_window`
           (data and the sequential prior passed as data: nothing recompiles)
        -> divergence check -> posterior (or the last good one)

  * Sequential Bayes: window t's target is p(window t | theta) x prior_t(theta), prior_t the
    posterior after window t - 1 summarised as a Gaussian in physical units (times the
    uniform prior within the bounds), mode m and covariance C,

        prior_t = N(m, C / online.forgetting + diag((online.jitter (upper - lower))^2)),

    with the shipped forgetting 1 and jitter 0 (a model of drift; both widen a static
    parameter's intervals). The first window, and the first after `reset`, has the
    configured prior (uniform within the bounds: a Gaussian of zero precision, so every
    window runs the same compiled step); a warm-start file counts as a previous posterior.
  * Integration step: with `model.dt` empty every window after the first is simulated at
    the current estimate with the session's steps per sample and twice as many
    (`integration_step.resolve`); where the difference is not far below the noise the
    steps double (and the windows' programs compile again), never the other way: a robot
    at rest in the first windows and fast later gets the step its fast windows need.
  * First window (and the first after `reset`): Sobol particles step in z; then the
    window's own Laplace fit from the best of them (`refit_windows` with the flat prior),
    where it identifies every parameter, is the next prior, not the particles' moments
    (20-30 steps from Sobol points leave them short of the posterior).
  * Laplace start (windows of one piece each, of a single-shooting or the equation-error
    likelihood, once there is a posterior): `refit_windows` fits the window alone
    and then prior x window (parameters and start states, Levenberg-Marquardt; the
    equation error has no start states); the particles are drawn around the
    second fit from its Laplace covariance and step in its stds (`optimisers.whitened`), and
    that fit (m, C) is what the next prior is built from, not the particles' moments, whose
    sampling error (16 particles) would compound window after window (docs/design/io.md).
  * Noise scale (`noise_scale`, from the newest NOISE_SCALE_WINDOWS windows): each
    Laplace window's own fit is compared with its prior; where the fits scatter more than
    their covariances say (model error: residuals correlated in time hold less
    information than white noise), the windows' noise variance is multiplied by the factor
    s that makes that scatter typical, and every later window samples prior x
    window^(1/s) (coverage measured in docs/design/io.md).
  * Prior-data conflict (`conflict_inflation`): when the window's own fit lies too far from
    the prior for a static parameter (chi-square test at CONFLICT_LEVEL), the prior's
    covariance is widened just enough for the two to agree (a payload picked up); the factor
    is `WindowResult.prior_inflation`. The test reads the noise scale of the earlier
    windows, and a window that fails it stays out of the noise scale. The equation error's
    windows have both.
  * What carries over between windows is the estimator's `rebase` (`core.inference.methods`:
    for CSVGD the particles; the shooting states restart on the new window's measurements,
    the multipliers at zero and Adam's moments afresh). The first window `init`s it.
  * Jitter: before a window without a Laplace start every particle gets Gaussian noise of
    std `online.jitter` times its parameter's bounds width, clipped into the bounds.
  * Effective sample size: the first step's `StepInfo` describes the starting particles on
    the new window (after a Laplace start, already fitted to it: near P); weighted by their
    likelihood, w_i ~ exp(log_lik_i), ESS = 1 / sum(w_i^2) in [1, P] (P: the data agree
    with the whole posterior; near 1: they do not, e.g. after a change).
  * Divergence: a window whose loss (the lowest mean squared noise-normalised residual of the
    particles that the window's last step started from) is not finite, exceeds
    `online.divergence_factor` times the loss of the particles it started from on the same
    window, or leaves non-finite particles is a divergence: the particles go back to the last
    good posterior and the event is counted. The reference is the window's own starting
    loss, so that a change that raises every particle's loss is followed, not refused.
  * Files (`save`, `load_posterior`): `<stem>.npz` (`particles` (P, M), `names` (M,),
    `lower`, `upper` (M,)) and `<stem>.yaml` (names with mean, std and the 95 % interval
    `ci95` that holds the truth at that rate for a calibrated posterior of few particles,
    `core.inference.intervals`; windows, divergences, method), each written to a temporary
    file in the same folder and renamed into place. The `.npz` also holds the model's
    fingerprint (`model_fingerprint`).
  * Resume: where `online.save_path` holds a posterior of the same parameter names and the
    same model (an earlier run of this configuration, saved at shutdown, on `~/save` or
    every `online.save_interval` seconds), the session starts from it rather than from
    `online.warm_start` or the bounds, as a warm start does, with the saved Laplace summary
    (m, C) and noise scale as the next prior where the file has them (not the particles'
    moments: the std after a restart is the std before it; `resumed` says so; `reset` goes
    back to the configured start). A file of other parameters or another model is
    left alone (`not_resumed` says why).

The session holds a lock: a worker thread may run `update` while a service callback calls
`reset` or `save`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import threading
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.inference import intervals, particles, registry
from sysid_ros.core.inference.base import GaussianPrior
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.io import compile_cache, drivers, estimator_data, integration_step
from sysid_ros.io import posterior_files
from sysid_ros.io import sequential_prior, simulation
from sysid_ros.io.config import config_error
from sysid_ros.io.problem import prepare_trajectories, Problem
from sysid_ros.io.trajectory import hold_torques, Trajectory
from sysid_ros.io.window_buffer import Window
from sysid_ros.io.window_refit import refit_windows

__all__ = [
    'WindowResult',
    'OnlineSession',
    'window_trajectory',
    'model_fingerprint',
]

# Smallest random-walk std of the sequential prior, as a fraction of the bounds width [-]:
# keeps the prior of few or identical particles invertible. (1e-4 was many posterior stds
# after 30 windows of the double pendulum, whose masses' stds reach 1e-5 of the width.)
PRIOR_FLOOR = 1e-9
# Windows whose innovations the noise scale is read from (the newest): the estimate stays an
# average of hundreds of windows, and its cost (a solve per window and bisection step:
# 45 ms per window after 3600 windows when unbounded) stays bounded in a session of hours.
NOISE_SCALE_WINDOWS = 500


class WindowResult(NamedTuple):
    """What one `OnlineSession.update` did.

    Attributes:
      index: windows processed before this one.
      t_end: stamp of the window's last sample [s].
      mean, std: (M,) posterior mean and standard deviation after the window [physical].
      loss: mean squared noise-normalised residual of the best particle [-] (inf if diverged).
      ess: predictive effective sample size of the particles on this window, in [1, P].
      diverged: the window diverged and the posterior went back to the last good one.
      iteration_time: wall time of the update, compilation included on the first [s].
      predicted: (T, 2 nv) states [q; qd] simulated with the posterior mean from the
        window's first measured state under its torques (the model's prediction).
      prior_inflation: the factor by which the window's data widened the sequential prior's
        covariance (`conflict_inflation`; 1: they agreed with it).
      noise_scale: the factor on the windows' noise variance after this window
        (`noise_scale`; 1: their fits scatter as the noise model says).
    """

    index: int
    t_end: float
    mean: np.ndarray
    std: np.ndarray
    loss: float
    ess: float
    diverged: bool
    iteration_time: float
    predicted: np.ndarray
    prior_inflation: float = 1.0
    noise_scale: float = 1.0


def window_trajectory(problem: Problem, window: Window, index: int = 0) -> Trajectory:
    """A buffer window (model joint order, `data.rate` grid) as a validated Trajectory, its
    torques scaled by `data.torque_gains` and held per period as `data.torque_samples` says,
    with the window's poses of the `data.mocap_topics` bodies (if any)."""
    traj = Trajectory(t=np.asarray(window.t), q=np.asarray(window.q),
                      qd=np.asarray(window.qd),
                      tau=drivers.joint_torques(window.tau, problem.config.data),
                      joint_names=problem.model.joint_names, source=f'window {index}',
                      mocap_position=window.mocap_position,
                      mocap_orientation=window.mocap_orientation)
    traj = prepare_trajectories(problem, [traj])[0]
    return hold_torques(traj, problem.config.data.torque_samples)


class OnlineSession:
    """The posterior of a live identification, updated window by window (module doc).

    Args:
      problem: the problem; `estimator` and `online` settings come from its configuration
        (`estimator.method` must be Bayesian; `estimator.window: auto` means `all`: each
        live window is one piece).
      warm_start: posterior file to start from (default: `online.warm_start`; none: the
        starting particles of `core.inference.particles`); a resumable `online.save_path`
        comes first (module doc).

    Raises:
      ConfigError: a non-Bayesian method, unbounded parameters, unknown push names.
      DataError: an unreadable warm-start file.
    """

    def __init__(self, problem: Problem, warm_start: str | None = None):
        cfg = problem.config
        if cfg.estimator.window == 'auto':
            # Each live window (`online.window_length`) is one piece of its own: one shape
            # for every window, so the step compiles once.
            cfg = dataclasses.replace(cfg, estimator=dataclasses.replace(cfg.estimator,
                                                                         window='all'))
            problem = dataclasses.replace(problem, config=cfg)
        self.problem = problem
        self.method = cfg.estimator.method
        if self.method not in registry.BAYESIAN_METHODS:
            raise config_error(cfg, 'estimator.method', f'the live estimator needs one of '
                               f'{" | ".join(registry.BAYESIAN_METHODS)}, got {self.method!r}')
        estimator_data.check_bounds(problem, self.method)
        unknown = [n for n in cfg.online.push_parameters if n not in problem.names]
        if unknown:
            raise config_error(cfg, f'online.push_parameters.{unknown[0]}',
                               f'not an identified parameter; expected one of '
                               f'{", ".join(problem.names)}')
        self.names = problem.names
        self._kind = registry.lookup(self.method).data
        # The integration step's last check (`integration_step`; None with `model.dt` set
        # or before the first window).
        self.integration: integration_step.StepChoice | None = None
        self._integrates = integration_step.integrates(problem, self.method)
        # Samples per window, as `WindowBuffer` cuts them.
        self.window_samples = int(round(cfg.online.window_length * cfg.data.rate))
        self.num_particles = cfg.estimator.particles
        self.lower = np.asarray(problem.spec.lower_bounds, dtype=float)
        self.upper = np.asarray(problem.spec.upper_bounds, dtype=float)
        self._lock = threading.RLock()
        self._rng = np.random.default_rng([cfg.estimator.seed, 11])
        self._estimator = None
        self._estimators = {}           # whitened steps (bool) -> compiled Estimator
        self._state = None
        self.windows = 0
        self.divergences = 0
        self.last_loss = float('nan')
        warm_start = cfg.online.warm_start if warm_start is None else warm_start
        self.warm_start = warm_start
        self.model_id = model_fingerprint(problem)
        self.resumed, self.not_resumed = '', ''
        saved = cfg.online.save_path and posterior_files.posterior_paths(cfg.online.save_path)[0]
        if saved and os.path.exists(saved):
            self.not_resumed = posterior_files.resume_refusal(saved, self.names, self.model_id)
            self.resumed = '' if self.not_resumed else saved
        self._start_from(self.resumed or warm_start)

    # ------------------------------------------------------------------------------------------
    # State
    # ------------------------------------------------------------------------------------------

    @property
    def estimator(self):
        """The compiled `Estimator` the windows step (None before the first window)."""
        return self._estimator

    @property
    def particles(self) -> np.ndarray:
        """(P, M) current posterior particles [physical units] (a copy)."""
        with self._lock:
            return self._particles.copy()

    @property
    def summary(self) -> tuple[np.ndarray, np.ndarray] | None:
        """((M,) mode, (M, M) covariance) of the last window's Laplace fit, which the next
        window's prior is built from; None where the particles' moments are (before the
        first window, after `reset`, for windows without a Laplace start, after a first
        window that does not identify every parameter)."""
        with self._lock:
            return self._summary

    def estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """(M,) mean and (M,) standard deviation of the current particles."""
        theta = self.particles
        return theta.mean(axis=0), theta.std(axis=0)

    def reset(self) -> None:
        """Back to the starting particles (the warm-start file if any, not a resumed one);
        the estimator is initialised again on the next window."""
        self._start_from(self.warm_start)

    def _start_from(self, path: str | None) -> None:
        """The starting particles: those of the posterior file `path`, else the bounds'."""
        with self._lock:
            cfg = self.problem.config
            theta0 = None
            if path:
                theta0 = posterior_files.load_posterior(path, self.names)
                if len(theta0) != self.num_particles:   # resample to the configured count
                    theta0 = theta0[self._rng.integers(0, len(theta0), self.num_particles)]
            self._particles = particles.initial_particles(
                self.problem.spec, self.problem.base_params, self.num_particles,
                cfg.estimator.seed, theta0)
            self._state = None
            self._summary = None
            self._innovations = collections.deque(maxlen=NOISE_SCALE_WINDOWS)
            self._noise_scale = 1.0
            laplace = posterior_files.load_laplace(path, self.names) if path else None
            if laplace is not None:
                self._summary, self._noise_scale = laplace[:2], laplace[2]
                # Without them the next window's noise scale is read from its own alone.
                innovations = posterior_files.load_innovations(path, self.names)
                if innovations is not None:
                    self._innovations.extend(map(sequential_prior.Innovation, *innovations))
            # A posterior file is a previous posterior; Sobol particles are the bounds prior.
            self._has_posterior = bool(path)

    def sequential_prior(self) -> GaussianPrior | None:
        """The prior of the next window: the current particles as a Gaussian with forgetting
        and random-walk noise (module doc), or None (the bounds prior) before the first
        window and after `reset`."""
        with self._lock:
            m = len(self.names)
            if not self._has_posterior:
                return None
            online_cfg = self.problem.config.online
            width = self.upper - self.lower
            # Floor: a tiny fraction of the width keeps the covariance of few (or identical)
            # particles invertible when jitter is 0.
            walk = np.maximum(online_cfg.jitter, PRIOR_FLOOR) * width
            theta = self._particles
            if self._summary is not None:
                mean, cov = self._summary
            else:
                mean = theta.mean(axis=0)
                cov = np.atleast_2d(np.cov(theta, rowvar=False)) if len(theta) > 1 \
                    else np.zeros((m, m))
            cov = cov / online_cfg.forgetting + np.diag(walk ** 2)
            return GaussianPrior(mean=jnp.asarray(mean),
                                 precision=jnp.asarray(np.linalg.inv(cov)))

    def _window_prior(self) -> GaussianPrior:
        """`sequential_prior`, the bounds prior as a Gaussian of zero precision, so that every
        window runs the same compiled step."""
        prior = self.sequential_prior()
        if prior is None:
            m = len(self.names)
            prior = GaussianPrior(mean=jnp.asarray(0.5 * (self.lower + self.upper)),
                                  precision=jnp.zeros((m, m)))
        return prior

    def _interval(self, theta: np.ndarray, level: float) -> np.ndarray:
        """(2, M) central interval of particles theta (P, M) within the bounds
        (`core.inference.intervals`, as the method's particles are; a single particle: the
        point itself)."""
        kind = registry.lookup(self.method).particles
        ends = (intervals.central_interval(theta, level, kind) if len(theta) > 1
                else np.stack([theta[0], theta[0]]))
        return np.clip(ends, self.lower, self.upper)

    def _jittered(self) -> np.ndarray:
        jitter = self.problem.config.online.jitter
        theta = self._particles
        if jitter > 0.0:
            theta = theta + self._rng.normal(size=theta.shape) * jitter * (self.upper - self.lower)
        return theta            # `_start` holds the particles inside the bounds

    # ------------------------------------------------------------------------------------------
    # Update
    # ------------------------------------------------------------------------------------------

    def _window_start(self, prepared: estimator_data.MethodData, prior: GaussianPrior):
        """(particles (P, M), data, prior, Laplace summary or None, prior inflation) this
        window starts from (module doc: the Laplace start, the noise scale, the conflict
        test); the data and the prior are what the window's steps sample (the noise scaled,
        the prior widened). Before the first posterior, with a prior flat in some direction
        (where an uninformative window's Laplace would have no spread), where the fits fail,
        and for windows of several pieces (multiple shooting): the (jittered) particles
        themselves."""
        if not (self._has_posterior and _laplace_windows(prepared)
                and sequential_prior.is_proper(prior)):
            return self._jittered(), prepared, prior, None, 1.0
        flat = GaussianPrior(mean=prior.mean, precision=jnp.zeros_like(prior.precision))
        alone = refit_windows(self.problem, prepared, prior.mean, flat)
        inflation = 1.0
        if alone.theta is not None:
            # The test reads the noise scale of the windows before this one: a window that
            # fails it is a change (a payload picked up), not a scatter, and stays out of
            # the scale, which it would otherwise raise until it hid the change itself.
            inflation = sequential_prior.conflict_inflation(prior, alone.theta,
                                                            self._noise_scale * alone.covariance)
            if inflation > 1.0:
                prior = GaussianPrior(mean=prior.mean, precision=prior.precision / inflation)
            elif self._summary is not None:
                # Only a Laplace posterior is a prior the window's scatter is measured against
                # (a first window that identified too little leaves the particles' moments).
                self._innovations.append(sequential_prior.Innovation(
                    offset=np.asarray(alone.theta, dtype=float) - np.asarray(prior.mean),
                    prior_covariance=np.linalg.inv(np.asarray(prior.precision, dtype=float)),
                    window_covariance=np.asarray(alone.covariance, dtype=float)))
                self._noise_scale = sequential_prior.noise_scale(self._innovations)
        scale = self._noise_scale
        # prior x window^(1/s) has the mode of s prior x window and s times its covariance.
        tempered = GaussianPrior(mean=prior.mean, precision=prior.precision * scale)
        joint = refit_windows(self.problem, prepared, prior.mean, tempered)
        if joint.theta is None:
            return self._jittered(), prepared, prior, None, inflation
        covariance = scale * np.asarray(joint.covariance, dtype=float)
        theta = particles.gaussian_particles(self.problem.spec, joint.theta, covariance,
                                             self.num_particles,
                                             seed=int(self._rng.integers(2 ** 31)))
        data = joint.prepared.data
        prepared = joint.prepared._replace(
            data=data._replace(noise_std=data.noise_std * np.sqrt(scale)))
        return theta, prepared, prior, (np.asarray(joint.theta), covariance), inflation

    def _own_laplace(self, prepared: estimator_data.MethodData, prior: GaussianPrior,
                     theta: np.ndarray, losses: np.ndarray):
        """(mode, covariance) of a window's own Laplace fit (`refit_windows` from its best
        particle) where the window had the bounds prior (the first window, the first after
        `reset`): the next window's prior is then that fit, as after every Laplace window,
        rather than the moments of particles that 30 steps from Sobol points leave short of
        the posterior. None where there is none (the window's likelihood has no Laplace
        start, the prior is not flat, the fit failed or its covariance is not positive
        definite: the window does not identify every parameter)."""
        if (not _laplace_windows(prepared) or sequential_prior.is_proper(prior)
                or not np.isfinite(losses).any()):
            return None
        best = theta[int(np.nanargmin(np.where(np.isfinite(losses), losses, np.nan)))]
        fit = refit_windows(self.problem, prepared, best, prior)
        if fit.theta is None or not sequential_prior.positive_definite(fit.covariance):
            return None
        return np.asarray(fit.theta, dtype=float), np.asarray(fit.covariance, dtype=float)

    def _check_step(self, traj: Trajectory) -> None:
        """Make the integration step finer where this window, simulated at the current
        estimate, needs it (module doc); the windows' programs then compile again. Not
        before there is an estimate: at the spec's starting values the motions are not the
        robot's (a start that needed 4 steps on MuJoCo's double pendulum, its truth 2)."""
        if not self._has_posterior:
            return
        problem, self.integration = integration_step.resolve(
            self.problem, [traj], self._integrates, self._particles.mean(axis=0))
        if problem.substeps != self.problem.substeps:
            self.problem = problem
            self._estimators = {}

    def _window_data(self, traj: Trajectory) -> estimator_data.MethodData:
        return estimator_data.method_data(self.problem, [traj], self._kind)

    def _start(self, theta: np.ndarray, prepared: estimator_data.MethodData, laplace: bool):
        """The estimator state on this window's data at particles `theta` (P, M); `laplace`:
        they are a Laplace draw, and the steps count in their stds (`optimisers.whitened`)
        instead of in z, whose steps of 0.1 scatter them far beyond a narrow posterior. The
        first window's Sobol points step in z: whitened by their own spread, the test's
        first window ended at loss 13373 instead of 2398 (`test/io/test_online.py`)."""
        cfg = self.problem.config
        if laplace not in self._estimators:
            options = compile_cache.method_options(self.problem, cfg.online.iterations_per_window)
            self._estimators[laplace] = compile_cache.compiled_estimator(
                self.problem, self.method, prepared.target, options._replace(whiten=laplace))
        self._estimator = self._estimators[laplace]
        theta = particles.initial_particles(self.problem.spec, self.problem.base_params,
                                            self.num_particles, theta0=theta)
        if self._state is None:
            key = jax.random.PRNGKey(cfg.estimator.seed + self.windows + 1)
            return self._estimator.init(key, jnp.asarray(theta), prepared.data)
        return self._estimator.rebase(self._state, jnp.asarray(theta), prepared.data)

    def update(self, window: Window) -> WindowResult:
        """Step the estimator on one window, from the (jittered) current particles.

        Raises:
          DataError: a window that does not fit the problem (joints, length).
        """
        start = time.perf_counter()
        with self._lock:
            index = self.windows
            traj = window_trajectory(self.problem, window, index)
            self._check_step(traj)
            prepared = self._window_data(traj)
            prior = self._window_prior()
            theta0, prepared, prior, summary, inflation = self._window_start(prepared,
                                                                             prior)
            state = self._start(theta0, prepared, laplace=summary is not None)
            est = self._estimator
            infos = []
            for _ in range(self.problem.config.online.iterations_per_window):
                state, info = est.step(state, prepared.data, prior)
                infos.append(info)
            theta = np.asarray(est.posterior(state), dtype=float)
            start_losses = np.asarray(infos[0].loss, dtype=float)
            ess = _predictive_ess(prepared, start_losses)
            loss = float(np.min(np.asarray(infos[-1].loss)))
            start_loss = float(np.min(start_losses))
            diverged = (not np.isfinite(loss) or not np.all(np.isfinite(theta))
                        or loss > self.problem.config.online.divergence_factor * start_loss)
            if diverged:             # the particles stay those of the last good window
                self.divergences += 1
            else:
                if summary is None:
                    summary = self._own_laplace(prepared, prior, theta,
                                                np.asarray(infos[-1].loss, dtype=float))
                self._particles = theta
                self._summary = summary
                self._has_posterior = True
                self._state = state
            self.windows += 1
            self.last_loss = loss
            mean, std = self._particles.mean(axis=0), self._particles.std(axis=0)
            predicted = self._predict(traj, mean)
        return WindowResult(index=index, t_end=float(window.t[-1]), mean=mean, std=std,
                            loss=loss, ess=ess, diverged=diverged,
                            iteration_time=time.perf_counter() - start, predicted=predicted,
                            prior_inflation=inflation, noise_scale=self._noise_scale)

    def _predict(self, traj: Trajectory, theta: np.ndarray) -> np.ndarray:
        """(T, 2 nv) rollout of `traj`'s torques from its first state with `theta` (M,)."""
        problem, cfg = self.problem, self.problem.config
        params = problem.spec.to_params(jnp.asarray(theta), problem.base_params)
        x0 = jnp.concatenate([jnp.asarray(traj.q[0]), jnp.asarray(traj.qd[0])])
        states = simulation.rollout(problem.model, params, x0, jnp.asarray(traj.tau[:-1]),
                                    problem.dt, integrator=cfg.model.integrator,
                                    actuator=cfg.model.actuator, substeps=problem.substeps)
        return np.asarray(jax.device_get(states), dtype=float)

    # ------------------------------------------------------------------------------------------
    # Files
    # ------------------------------------------------------------------------------------------

    def warm_up(self, traj: Trajectory) -> None:
        """Compile the update and the prediction on the first `window_samples` samples of
        `traj` (e.g. from `pipeline.simulate`), then restore the state as it was. The window
        runs twice: from the current particles, then from a Laplace start (its fits and
        whitened steps), so that neither compiles while data arrive."""
        traj = traj.sample_range(0, self.window_samples)
        window = Window(t=traj.t, q=traj.q, qd=traj.qd, tau=traj.tau,
                        mocap_position=traj.mocap_position,
                        mocap_orientation=traj.mocap_orientation)
        with self._lock:
            saved = (self._particles, self.windows, self.divergences, self.last_loss,
                     self._has_posterior, self._state, self._summary, self._noise_scale,
                     self._innovations.copy())
            self.update(window)           # compiles the step and the prediction
            self.update(window)
            (self._particles, self.windows, self.divergences, self.last_loss,
             self._has_posterior, self._state, self._summary, self._noise_scale,
             self._innovations) = saved

    def save(self, path: str | os.PathLike, timeout: float | None = None) -> tuple[str, str]:
        """Write the current posterior to `<stem>.npz` and `<stem>.yaml` atomically (module
        doc); returns both paths.

        Args:
          path: the file stem (an `.npz` or `.yaml` extension is replaced).
          timeout: longest wait for a running `update` [s] (None: wait); after it the
            posterior of the last completed window is written (particles are replaced,
            never changed in place).
        """
        npz, yml = posterior_files.posterior_paths(path)
        locked = self._lock.acquire(timeout=-1 if timeout is None else timeout)
        try:
            theta = self._particles.copy()
            laplace = (None if self._summary is None
                       else (*(np.asarray(a, dtype=float) for a in self._summary),
                             float(self._noise_scale)))
            innovations = (tuple(np.stack(field) for field in zip(*self._innovations))
                           if self._innovations else None)
            summary = {
                'method': self.method,
                'num_particles': int(theta.shape[0]),
                'windows': int(self.windows),
                'divergences': int(self.divergences),
                'last_loss': float(self.last_loss),
                'config': self.problem.config.source,
                'saved_at_unix_s': time.time(),
                'parameters': {n: {'mean': float(m), 'std': float(s), 'min': float(lo),
                                   'max': float(hi), 'ci95': [float(a), float(b)]}
                               for n, m, s, lo, hi, a, b in zip(
                                   self.names, theta.mean(axis=0), theta.std(axis=0),
                                   self.lower, self.upper, *self._interval(theta, 0.95))}}
        finally:
            if locked:
                self._lock.release()
        posterior_files.write_posterior(npz, yml, theta, self.names, self.lower, self.upper,
                                        summary, self.model_id, laplace, innovations)
        return npz, yml


def model_fingerprint(problem: Problem) -> str:
    """A short hash of what a posterior belongs to: the model's name, joints and links, its
    nominal parameters, the integrator and the identified parameters' names and bounds."""
    spec, model = problem.spec, problem.model
    digest = hashlib.sha256()
    for part in (model.name, *model.joint_names, *model.link_names, *spec.names,
                 problem.config.model.integrator):
        digest.update(str(part).encode() + b'\0')
    for array in (*jax.tree_util.tree_leaves(problem.base_params), spec.lower_bounds,
                  spec.upper_bounds):
        digest.update(np.round(np.asarray(array, dtype=float), 12).tobytes())
    return digest.hexdigest()[:16]


def _laplace_windows(prepared: estimator_data.MethodData) -> bool:
    """Whether the windows have a Laplace start: one window per piece, what
    `refit_windows` fits (a single-shooting likelihood, the equation error)."""
    setting = prepared.target.likelihood
    return setting is not None and setting.num_windows == 1


def _predictive_ess(prepared: estimator_data.MethodData, loss: np.ndarray) -> float:
    """ESS in [1, P] of particles whose residual losses (P,) on a window are `loss`: the
    weights exp(log_lik_i) with log_lik = -n loss / 2 - c (`likelihood.residual_loss`)."""
    finite = np.isfinite(loss)
    if not finite.any():
        return 1.0
    _, n = lik.residual_normaliser(prepared.target.likelihood, prepared.data)
    log_w = np.where(finite, -0.5 * float(n) * loss, -np.inf)
    w = np.exp(log_w - np.max(log_w[finite]))
    w /= w.sum()
    return float(1.0 / np.sum(w * w))
