"""Seed 000 experiment 2 (supplement §2.2-2.3, Tables 1 and 2): the 11-parameter double
pendulum, identified by Emcee, CEM, SGLD, NUTS and SVGD with the single-shooting ("SS") and
the multiple-shooting ("MS", 10 windows) likelihood; SVGD with MS is CSVGD.

The seed fits one real trajectory of the IBM double pendulum and scores each posterior on 10
held-out real trajectories. We have no such recording, so the data here is SIMULATED: a hidden
true parameter vector inside the Table 1 bounds, one training trajectory and 10 held-out test
trajectories released from other poses, all with Gaussian sensor noise. Our numbers are
therefore not the seed's numbers; the table prints both so that the rankings can be compared.

Table 1 -> our `ParameterSpec` (frames: `builders.double_pendulum`, joints about y, links
hanging along -z, motion in the x-z plane):

  | seed row                  | ours                 | bounds              |
  | Link 1 mass               | link1.mass           | 0.05 .. 0.5 kg      |
  | Link 1 I_xx               | link1.inertia.iyy    | 0.002 .. 1.0 kg m^2 |
  | Link 1 COM x              | link1.com.x          | -0.2 .. 0.2 m       |
  | Link 1 COM y              | link1.com.z          | -0.2 .. 0.2 m       |
  | Link 1 joint friction     | joint1.damping       | 0 .. 0.5 N m s/rad  |
  | Link 2 length             | joint2.origin.z      | -0.3 .. -0.08 m     |
  | Link 2 mass, I_xx, COM x, COM y, joint friction: as for link 1 (link2.*, joint2.damping) |

Where the rows do not map one to one, the closest honest equivalent is used:
  * I_xx: the seed's pendulum turns about its x axis; ours turns about y, so the seed's I_xx
    (inertia about the joint axis, through the COM) is our `inertia.iyy`. The other diagonal
    entries cannot affect planar motion; the base model gives them 0.5 kg m^2 so that every
    iyy within the bounds is physically consistent (triangle inequality).
  * COM x, y: the seed does not give its link frame. Of our three COM coordinates, com.y lies
    on the joint axis and cannot affect planar motion (a flat, unidentifiable direction), so
    the two in-plane coordinates com.x (across the link) and com.z (along it) take the two
    COM rows, with the seed's bounds.
  * Link 2 length: in a chain the length of a link is where the next joint sits. The only
    length the dynamics of a double pendulum can see besides the COMs is the distance from
    joint 1 to joint 2, the origin of joint 2 (the joint that carries link 2, as in a URDF):
    `joint2.origin.z` = -length. (Link 2's own extent beyond its COM has no effect.)
  * Joint friction: the seed gives no model or unit; we use viscous damping (the 'viscous'
    actuator, tau = u - d qd) with the seed's bounds, in N m s/rad.

Data: dt = 0.01 s, 300 steps (3 s) per trajectory, unforced from rest, semi-implicit Euler.
Training: 1 trajectory released at (q1, q2) = (90, 0) deg (the seed fits one trajectory).
Test: 10 trajectories released around (60, 45) deg with +-5 deg jitter on each angle (repeated
releases from a different pose). Sensor noise: N(0, 0.02 rad) on angles, N(0, 0.2 rad/s) on
velocities, independent per sample; the release state x0 is known exactly (at rest, measured
before the release). Every method's likelihood uses the true noise level.

Metrics (seed supplement §1.4; `sysid_ros.core.likelihoods.metrics`), on the held-out set only:
each posterior particle is simulated from each test release state (P x 10 trajectories) and the
same sensor noise is added (the posterior predictive of the observations; the seed does not say
whether it added noise); all dimensions are divided by the standard deviation of the test
observations, then trajectory_kl (k = l = 3) in both directions and the unbiased RBF MMD^2
(median heuristic) compare the two sets. A simulation that diverges is dropped and counted.

Methods: the shipped estimators, built by `registry.make_estimator` from one `Options`
(P particles, LEARNING_RATE, N iterations), all started from the same P scrambled-Sobol
particles (seed §1.1) and stepped N times; warm-ups and step-size probes are the factories'
own (`core.inference.methods`). The row "(C)SVGD" is `csvgd`: with one window (SS) it is
SVGD over the parameters, with NUM_WINDOWS windows (MS) CSVGD. A method that needs more
particles than P for the positions' dimension D (`Method.particles_per_dim`: Emcee's 2 D
walkers) runs that many, and P of them, chosen at random, are its posterior sample. The
baselines sample multiple shooting through the defect likelihood of `inference.shooting`
(sigma_def = `methods.DEFECT_STD`, the seed's sigma_def^2 ~ 1e-2) over CSVGD's particle
[z, s_hat].

Usage: python -m bench.experiment_pendulum11 [--quick]; from code `run_experiment2(quick)`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.inference import registry, shooting
from sysid_ros.core.inference.methods import Options, Target
from sysid_ros.core.inference.particles import sobol_particles
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import metrics
from sysid_ros.core.model import builders, inertia, parameters

# Seed Table 1 row -> (our name, bounds in our units).
TABLE1 = (
    ('Link 1 mass', 'link1.mass', (0.05, 0.5)),
    ('Link 1 I_xx', 'link1.inertia.iyy', (0.002, 1.0)),
    ('Link 1 COM x', 'link1.com.x', (-0.2, 0.2)),
    ('Link 1 COM y', 'link1.com.z', (-0.2, 0.2)),
    ('Link 1 joint friction', 'joint1.damping', (0.0, 0.5)),
    ('Link 2 length', 'joint2.origin.z', (-0.3, -0.08)),
    ('Link 2 mass', 'link2.mass', (0.05, 0.5)),
    ('Link 2 I_xx', 'link2.inertia.iyy', (0.002, 1.0)),
    ('Link 2 COM x', 'link2.com.x', (-0.2, 0.2)),
    ('Link 2 COM y', 'link2.com.z', (-0.2, 0.2)),
    ('Link 2 joint friction', 'joint2.damping', (0.0, 0.5)),
)
# The hidden truth, in the order of TABLE1 (a 20 cm + 20 cm pendulum of 300 g and 150 g).
TRUE_THETA = np.array([0.30, 0.010, 0.010, -0.10, 0.010,
                       -0.20, 0.15, 0.006, -0.010, -0.08, 0.005])

DT = 0.01                   # [s]
NUM_STEPS = 300             # 3 s, as the seed's trajectories
NUM_WINDOWS = 10            # the seed's MS column
NUM_TEST = 10               # the seed's held-out set
TRAIN_POSE = np.deg2rad([90.0, 0.0])
TEST_POSE = np.deg2rad([60.0, 45.0])
TEST_JITTER = np.deg2rad(5.0)
NOISE_STD = np.array([0.02, 0.02, 0.2, 0.2])      # [rad, rad, rad/s, rad/s]
# `Options.learning_rate` of every method: CSVGD's Adam step and SGLD's first drift (in z).
LEARNING_RATE = 0.1
INTEGRATOR = 'semi_implicit_euler'
ACTUATOR = 'viscous'

METHODS = ('emcee', 'cem', 'sgld', 'nuts', 'csvgd')
COLUMNS = ('ss', 'ms')
LABELS = {'emcee': 'Emcee', 'cem': 'CEM', 'sgld': 'SGLD', 'nuts': 'NUTS', 'csvgd': '(C)SVGD'}

# Seed supplement Table 2 (real IBM double pendulum data): (KL(real||sim), KL(sim||real),
# MMD) per method and column; None where the seed prints N/A.
SEED_TABLE2 = {
    ('emcee', 'ss'): (8542.2466, 4060.6312, 1.1365),
    ('emcee', 'ms'): (8950.4574, None, None),
    ('cem', 'ss'): (8911.1798, 8549.5927, 0.9687),
    ('cem', 'ms'): (8860.5115, None, 0.5682),
    ('sgld', 'ss'): (8788.0962, 7876.0310, 2.1220),
    ('sgld', 'ms'): (5863.2728, 2187.2825, 0.0759),
    ('nuts', 'ss'): (9196.7461, 6432.2131, 0.5371),
    ('nuts', 'ms'): (8785.5326, 4935.8983, 1.1642),
    ('csvgd', 'ss'): (8803.5683, 10283.6659, 0.7177),
    ('csvgd', 'ms'): (5204.5336, 2773.1751, 0.0366),
}

QUICK = {'num_particles': 32, 'num_iterations': 1000}
FULL = {'num_particles': 100, 'num_iterations': 2000}        # the seed's 100 particles, 2000 its


class Problem(NamedTuple):
    """Experiment 2's model, spec, likelihood settings and data.

    Attributes:
      model, base: the double pendulum and the Params supplying everything not in `spec`.
      spec: the 11 free parameters of TABLE1.
      settings: {'ss': 1 window, 'ms': NUM_WINDOWS windows} `ShootingLikelihood`s.
      train: TrajectoryData of the training trajectory (fits both settings).
      test_x0: (N, 4) release states of the held-out trajectories.
      test_obs: (N, T + 1, 4) noisy held-out observations.
      metric_scale: (4,) divisor of each dimension in the metrics (std of `test_obs`).
    """

    model: object
    base: object
    spec: parameters.ParameterSpec
    settings: dict
    train: lik.TrajectoryData
    test_x0: np.ndarray
    test_obs: np.ndarray
    metric_scale: np.ndarray


class Row(NamedTuple):
    """One method and column of the table.

    Attributes:
      method, column: e.g. 'csvgd', 'ms'.
      kl_real_sim, kl_sim_real, mmd: the metrics (nan where not computable).
      run_s: wall time of the iterations after the first (compiled) one [s].
      compile_s: wall time of `init` (warm-ups and probes) and of the first iteration
        (compilation) [s].
      num_diverged: simulated test trajectories dropped because they diverged.
      theta: (P, 11) final particles in physical units.
      history: list of (iteration, elapsed run time [s], theta (P, 11)) checkpoints.
      settings: the `Options` used, and the particle count the method ran.
    """

    method: str
    column: str
    kl_real_sim: float
    kl_sim_real: float
    mmd: float
    run_s: float
    compile_s: float
    num_diverged: int
    theta: np.ndarray
    history: list
    settings: dict


def _base_model():
    """The rod double pendulum with off-axis inertias 0.5 kg m^2 (see the module doc)."""
    model, rods = builders.double_pendulum(l1=0.2, l2=0.2, m1=0.3, m2=0.15)
    inertials = []
    for mass, length in ((0.3, 0.2), (0.15, 0.2)):
        inertia_c = np.diag([0.5, 0.01, 0.5])
        inertials.append(inertia.inertial_from_physical(
            jnp.asarray(mass), jnp.array([0.0, 0.0, -0.5 * length]), jnp.asarray(inertia_c)))
    return model, dataclasses.replace(rods, inertial=jnp.stack(inertials))


def make_spec(model) -> parameters.ParameterSpec:
    """The 11 parameters of seed Table 1 (TABLE1)."""
    return parameters.make_parameter_spec(model, [(name, bounds) for _, name, bounds in TABLE1])


def _rollouts(model, settings: lik.ShootingLikelihood):
    """jit((P, M) theta, base, (N, 4) x0) -> (P, N, T + 1, 4) noise-free simulations."""
    spec = make_spec(model)

    def one(theta, base, x0):
        params = spec.to_params(theta, base)
        controls = jnp.zeros((NUM_STEPS, model.nv), x0.dtype)
        return integrators.rollout(model, params, x0, controls, DT, integrator=INTEGRATOR,
                                   actuator=ACTUATOR)

    over_x0 = jax.vmap(one, in_axes=(None, None, 0))
    return jax.jit(jax.vmap(over_x0, in_axes=(0, None, None)))


def make_problem(seed: int = 0) -> Problem:
    """Simulate the training and held-out trajectories from TRUE_THETA (with sensor noise)."""
    model, base = _base_model()
    spec = make_spec(model)
    settings = {
        'ss': lik.make_shooting_likelihood(model, DT, 1, 'product', integrator=INTEGRATOR,
                                           actuator=ACTUATOR),
        'ms': lik.make_shooting_likelihood(model, DT, NUM_WINDOWS, 'product',
                                           integrator=INTEGRATOR, actuator=ACTUATOR),
    }
    rng = np.random.default_rng(seed)
    train_x0 = np.concatenate([TRAIN_POSE, np.zeros(2)])[None]
    test_q = TEST_POSE + rng.uniform(-TEST_JITTER, TEST_JITTER, (NUM_TEST, 2))
    test_x0 = np.concatenate([test_q, np.zeros((NUM_TEST, 2))], axis=1)
    simulate = _rollouts(model, settings['ss'])
    truth = jnp.asarray(TRUE_THETA)[None]
    clean = np.asarray(simulate(truth, base, jnp.asarray(np.concatenate([train_x0, test_x0]))))
    clean = clean[0]                                                    # (1 + N, T + 1, 4)
    noisy = clean + NOISE_STD * rng.standard_normal(clean.shape)
    noisy[:, 0] = clean[:, 0]                                           # x0 known exactly
    train = lik.make_trajectory_data(settings['ms'], noisy[:1], np.zeros((1, NUM_STEPS, 2)),
                                     NOISE_STD)
    test_obs = noisy[1:]
    scale = test_obs.reshape(-1, 4).std(axis=0)
    return Problem(model=model, base=base, spec=spec, settings=settings, train=train,
                   test_x0=test_x0, test_obs=test_obs, metric_scale=scale)


_SIMULATORS = {}


def predictive_trajectories(problem: Problem, theta, seed: int = 1):
    """(P, M) particles -> ((P N, T + 1, 4) noisy simulated test observations, finite mask).

    Each particle is simulated from each held-out release state, then sensor noise of the
    experiment's level is added (fixed seed, the same for every method).
    """
    key = id(problem.model)
    if key not in _SIMULATORS:
        _SIMULATORS[key] = _rollouts(problem.model, problem.settings['ss'])
    sims = np.asarray(_SIMULATORS[key](jnp.asarray(theta), problem.base,
                                       jnp.asarray(problem.test_x0)))
    sims = sims.reshape((-1,) + sims.shape[2:])
    sims = sims + NOISE_STD * np.random.default_rng(seed).standard_normal(sims.shape)
    finite = np.all(np.isfinite(sims), axis=(1, 2)) & np.all(np.abs(sims) < 1e6, axis=(1, 2))
    return sims, finite


def evaluate(problem: Problem, theta) -> dict:
    """KL(real||sim), KL(sim||real) (k = l = 3), MMD^2 and the count of diverged sims."""
    sims, finite = predictive_trajectories(problem, theta)
    real = problem.test_obs / problem.metric_scale
    sims = sims[finite] / problem.metric_scale
    out = {'num_diverged': int(np.sum(~finite)), 'kl_real_sim': math.nan,
           'kl_sim_real': math.nan, 'mmd': math.nan}
    if sims.shape[0] >= 4:
        out['kl_real_sim'] = metrics.trajectory_kl(real, sims, 3, 3)
        out['kl_sim_real'] = metrics.trajectory_kl(real, sims, 3, 3, reverse=True)
        out['mmd'] = float(metrics.mmd(real, sims))
    return out


# ------------------------------------------------------------------------------------------
# Methods
# ------------------------------------------------------------------------------------------

def _checkpoints(num_iterations: int, count: int = 10) -> set:
    return {int(round(num_iterations * (i + 1) / count)) for i in range(count)}


def _loop(step: Callable, state, data, num_iterations: int, theta_fn: Callable, label: str,
          progress: Callable | None):
    """Run `num_iterations` steps; returns (state, compile_s, run_s, history)."""
    marks = _checkpoints(num_iterations)
    start = time.perf_counter()
    state, _ = step(state, data)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start
    history = []
    run_s = 0.0
    start = time.perf_counter()
    for i in range(2, num_iterations + 1):
        state, _ = step(state, data)
        if i in marks:
            jax.block_until_ready(state)
            run_s += time.perf_counter() - start
            history.append((i, run_s, np.asarray(theta_fn(state))))
            if progress is not None:
                progress(f'  {label}: iteration {i}/{num_iterations}, {run_s:.1f} s')
            start = time.perf_counter()
    jax.block_until_ready(state)
    run_s += time.perf_counter() - start
    return state, compile_s, run_s, history


def run_method(problem: Problem, method: str, column: str, num_particles: int,
               num_iterations: int, seed: int = 0, progress: Callable | None = print) -> Row:
    """Run one registered method with one likelihood column and score it on the held-out
    set (module doc)."""
    spec, data = problem.spec, problem.train
    setting = problem.settings[column]
    entry = registry.lookup(method)
    theta0 = sobol_particles(spec, num_particles, seed=seed)
    dim = shooting.shooting_positions(setting, spec, theta0, data).shape[1]
    num = max(num_particles, entry.particles_per_dim * dim)
    if num > num_particles:
        theta0 = sobol_particles(spec, num, seed=seed)
    options = Options(num_particles=num, learning_rate=LEARNING_RATE, iterations=num_iterations)
    target = Target(model=problem.model, base_params=problem.base, spec=spec,
                    likelihood=setting, actuator=ACTUATOR)
    estimator = registry.make_estimator(method, target, options)
    label = f'{method} {column.upper()}'
    pick = np.random.default_rng(seed).choice(num, num_particles, replace=False)

    def theta_fn(state):
        theta = np.asarray(estimator.posterior(state))
        return theta if num == num_particles else theta[pick]

    def step(state, window):
        return estimator.step(state, window, None)

    if progress is not None:
        progress(f'{label}: {num} particles, {num_iterations} iterations, D = {dim}, '
                 f'{options._asdict()}')
    start = time.perf_counter()
    state = estimator.init(jax.random.key(seed), theta0, data)
    jax.block_until_ready(state)
    init_s = time.perf_counter() - start
    state, compile_s, run_s, history = _loop(jax.jit(step) if entry.jittable else step,
                                             state, data, num_iterations, theta_fn, label,
                                             progress)
    theta = theta_fn(state)
    scores = evaluate(problem, theta)
    return Row(method=method, column=column, kl_real_sim=scores['kl_real_sim'],
               kl_sim_real=scores['kl_sim_real'], mmd=scores['mmd'], run_s=run_s,
               compile_s=init_s + compile_s, num_diverged=scores['num_diverged'],
               theta=theta, history=history,
               settings=dict(options._asdict(), particles_run=num))


def time_to_final_kl(problem: Problem, row: Row, tolerance: float = 0.05) -> dict:
    """When a run's KL(real||sim) first came within `tolerance` of its total decrease.

    KL is evaluated at the run's checkpoints (every tenth of the iterations); the answer is
    the first checkpoint with KL <= final + tolerance (KL at the first checkpoint - final).

    Returns:
      dict(iteration, seconds (run time, without compilation), curve [(iteration, KL)]).
    """
    curve = [(it, seconds, evaluate(problem, theta)['kl_real_sim'])
             for it, seconds, theta in row.history]
    final = row.kl_real_sim
    first = curve[0][2] if curve else final
    threshold = final + tolerance * max(first - final, 0.0)
    for it, seconds, value in curve:
        if value <= threshold:
            return {'iteration': it, 'seconds': seconds,
                    'curve': [(it_, round(v, 1)) for it_, _, v in curve]}
    return {'iteration': row.history[-1][0] if row.history else 0,
            'seconds': row.run_s, 'curve': [(it_, round(v, 1)) for it_, _, v in curve]}


# ------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------

def _fmt(value, width=10, digits=1):
    if value is None:
        return 'N/A'.rjust(width)
    if not np.isfinite(value):
        return 'n/c'.rjust(width)
    return f'{value:{width}.{digits}f}'


def format_table(rows) -> str:
    """The rows in the shape of seed supplement Table 2, the seed's numbers beside ours."""
    by = {(r.method, r.column): r for r in rows}
    lines = [
        'Experiment 2: 11-parameter double pendulum. OURS = simulated data (hidden truth, '
        'sensor noise),',
        'SEED = Heiden et al. supplement Table 2 on the real IBM pendulum: compare rankings, '
        'not values.',
        'MMD: ours is the unbiased RBF MMD^2 (median bandwidth); n/c = not computable; '
        'time = run s (+ compile s).',
        f'{"":9}| {"KL(real||sim)":^43} | {"KL(sim||real)":^43} | {"MMD":^31} |',
        f'{"":9}| {"SS":^21}|{"MS":^21} | {"SS":^21}|{"MS":^21} | {"SS":^15}|{"MS":^15} | '
        f'{"time SS":>13} {"time MS":>13}',
        f'{"method":9}|' + (' ours      seed      |' * 2 + '|') * 2
        + ' ours   seed   |' * 2 + '|',
    ]
    for method in METHODS:
        cells = []
        for metric, width, digits in (('kl_real_sim', 10, 1), ('kl_sim_real', 10, 1),
                                      ('mmd', 7, 3)):
            index = {'kl_real_sim': 0, 'kl_sim_real': 1, 'mmd': 2}[metric]
            part = []
            for column in COLUMNS:
                row = by.get((method, column))
                ours = getattr(row, metric) if row is not None else None
                seed = SEED_TABLE2[(method, column)][index]
                part.append(f'{_fmt(ours, width, digits)}{_fmt(seed, width, digits)}')
            cells.append(' |'.join(part))
        times = []
        for column in COLUMNS:
            row = by.get((method, column))
            times.append('-'.rjust(13) if row is None
                         else f'{row.run_s:6.1f}(+{row.compile_s:5.1f})')
        lines.append(f'{LABELS[method]:9}|' + ' ||'.join(cells) + ' | ' + ' '.join(times))
    return '\n'.join(lines)


def summarise(rows) -> dict:
    """Headline comparison: CSVGD (csvgd, ms) against every other row on KL and MMD."""
    by = {(r.method, r.column): r for r in rows}
    summary = {}
    target = by.get(('csvgd', 'ms'))
    others = [r for r in rows if (r.method, r.column) != ('csvgd', 'ms')]
    if target is None:
        return summary

    def best(metric):
        values = [(getattr(r, metric), f'{r.method}_{r.column}') for r in others
                  if np.isfinite(getattr(r, metric))]
        return min(values) if values else (math.nan, 'none')

    for metric in ('kl_real_sim', 'kl_sim_real', 'mmd'):
        value, name = best(metric)
        summary[f'csvgd_{metric}'] = getattr(target, metric)
        summary[f'best_baseline_{metric}'] = value
        summary[f'best_baseline_{metric}_method'] = name
        # A baseline whose metric could not be computed (diverged, collapsed) loses.
        summary[f'csvgd_best_{metric}'] = bool(
            np.isfinite(getattr(target, metric)) and all(
                not np.isfinite(getattr(r, metric)) or getattr(target, metric)
                < getattr(r, metric) for r in others))
    summary['csvgd_best_kl'] = (summary['csvgd_best_kl_real_sim']
                                and summary['csvgd_best_kl_sim_real'])
    summary['csvgd_best'] = summary['csvgd_best_kl'] and summary['csvgd_best_mmd']
    summary['csvgd_run_s'] = target.run_s
    return summary


def run_experiment2(quick: bool = True, num_particles: int | None = None,
                    num_iterations: int | None = None, methods=METHODS, columns=COLUMNS,
                    seed: int = 0, progress: Callable | None = print, problem=None):
    """Run experiment 2 and return (rows, summary).

    Args:
      quick: QUICK sizes (32 particles, 1000 iterations) or FULL (100, 2000, the seed's).
      num_particles, num_iterations: override the sizes.
      methods, columns: subsets of METHODS and COLUMNS.
      seed: seeds the Sobol start, the samplers and the held-out data.
      progress: print-like callable for progress lines, or None.
      problem: a `make_problem()` result to reuse.

    Returns:
      (list of Row, summary dict from `summarise` plus CSVGD's time to its final KL).
    """
    sizes = dict(QUICK if quick else FULL)
    if num_particles is not None:
        sizes['num_particles'] = num_particles
    if num_iterations is not None:
        sizes['num_iterations'] = num_iterations
    problem = problem if problem is not None else make_problem(seed)
    rows = []
    for method in methods:
        for column in columns:
            row = run_method(problem, method, column, seed=seed, progress=progress, **sizes)
            rows.append(row)
            if progress is not None:
                progress(f'  -> {method} {column.upper()}: KL(real||sim) '
                         f'{row.kl_real_sim:.1f}, KL(sim||real) {row.kl_sim_real:.1f}, '
                         f'MMD {row.mmd:.4f}, diverged {row.num_diverged}, run '
                         f'{row.run_s:.1f} s, compile {row.compile_s:.1f} s')
    summary = summarise(rows)
    summary.update(sizes)
    target = [r for r in rows if (r.method, r.column) == ('csvgd', 'ms')]
    if target:
        reach = time_to_final_kl(problem, target[0])
        summary['csvgd_time_to_final_kl_s'] = reach['seconds']
        summary['csvgd_iterations_to_final_kl'] = reach['iteration']
        summary['csvgd_kl_curve'] = reach['curve']
    return rows, summary


def main():
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='32 particles, 1000 iterations')
    parser.add_argument('--particles', type=int, default=None)
    parser.add_argument('--iterations', type=int, default=None)
    parser.add_argument('--methods', default=','.join(METHODS))
    parser.add_argument('--columns', default=','.join(COLUMNS))
    args = parser.parse_args()
    jax.config.update('jax_enable_x64', True)
    rows, summary = run_experiment2(args.quick, args.particles, args.iterations,
                                    tuple(args.methods.split(',')),
                                    tuple(args.columns.split(',')))
    print(format_table(rows))
    print({k: v for k, v in summary.items() if k != 'csvgd_kl_curve'})


if __name__ == '__main__':
    main()
