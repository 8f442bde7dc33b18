"""Simulation-based calibration: do the intervals hold the truth as often as they claim?

For each case, truths are drawn uniformly from the configured bounds (the prior every method
of the registry assumes), a recording is simulated for each, the recording is fitted with the
shipped defaults, and for every parameter the fit's central 50 %, 90 % and 95 % intervals are
checked against the truth. Intervals: the fit's own (`FitResult.interval`): for a Bayesian
method (csvgd, svgd, sgld, nuts, emcee, cem) from its particles as the method's
`Method.particles` says (draws: the order-statistics rule; SVGD's points, a quadrature:
mean +- z std; `core.inference.intervals`), estimate +- t std of the Laplace covariance for
lm (Student-t quantiles with the covariance's dof). Plain percentiles are printed beside them.
Beside the coverage, the rank of the truth in the posterior (SBC, Talts et al. 2018: the
number of particles below the truth, randomised within its cell, `particle_rank`, or the t
CDF of (truth - estimate) / std for a Laplace posterior) is uniform on [0, 1] for a
calibrated method; their histograms go to `calibration.png`.

Cases (every recording 100 Hz, random multi-sine torques, noise N(0, --noise^2) on q and qd):
  pendulum  one link: mass, COM along the link, viscous damping.
  dp        double pendulum: both masses, both COMs along the links, both dampings.
  chain3    three links with viscous + Coulomb friction: masses and both friction terms.
Settings:
  exact   data simulated by the fit's own model: rk4 at the data rate, the fit's `model.dt`
          set to it (not the step the shipped default would choose).
  finer   data simulated by rk4 at a ten times finer step, fitted with the shipped default
          step (`model.dt` empty: chosen from the data, `io.integration_step`).
  mujoco  dp only: data from an independent engine, MuJoCo (`heldout.dp_recording`: RK4 at
          1 ms, 200 Hz, its own double-pendulum MJCF) fitted on `heldout`'s URDF of it with
          the shipped default step.

Online (`--online`): the live estimator's session (`io.online.OnlineSession`) with the
shipped live configuration `config/double_pendulum_live.yaml` (csvgd, 16 particles, 1 s
windows, its noise_std), on a recording with that noise and held torques, after 10, 30 and
60 windows the particles' central intervals are checked (the rule of `Method.particles`, as
`FitResult.interval` does for a posterior sample), and beside them (`<prefix>_laplace`) the
Gaussian intervals of the session's Laplace summary (`OnlineSession.summary`: the mode and
covariance the next window's prior is built from), which separate the filter's own
calibration from the 16 particles' sampling of it. Recordings (`--online-data`):
  exact   simulated by the live model itself (rk4 at the data rate, multi-sine torques),
          the session's `model.dt` set to that step.
  mujoco  MuJoCo's double pendulum (`heldout.dp_recording` at the live data rate), the
          session running the live configuration (its step chosen from the windows) on
          `heldout`'s URDF of it.

Coverage of a nominal level over n independent truths x M parameters is binomial if the
method is calibrated: the table gives the pooled rate with its binomial standard error.

Usage:
  .venv/bin/python -m bench.calibration [--cases pendulum dp chain3] [--methods lm csvgd ...]
      [--truths 100] [--settings exact finer mujoco] [--online N]
      [--online-data exact mujoco] [--online-set SECTION.KEY=VALUE ...]
      [--set estimator.KEY=VALUE ...] [--quick] [--out DIR]
Last line: `RESULT calibration key=value ...` with <method>_cov50/_cov90/_cov95 pooled over
cases and settings (laplace_* for lm), per case/setting keys <case>_<setting>_<method>_cov90,
and online_cov90 (after the last checkpoint) with online_w<k>_cov<level> per checkpoint
(online_mujoco_* for the MuJoCo recordings).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import pathlib
import sys
import tempfile
import time
from typing import Callable, NamedTuple, Sequence

import jax
import numpy as np
from scipy import stats
import yaml

from bench import heldout
from sysid_ros.core.inference import intervals, registry
from sysid_ros.io import config as config_io
from sysid_ros.io import online, pipeline, simulation
from sysid_ros.io.trajectory import Trajectory
from sysid_ros.io.window_buffer import Window

LEVELS = (0.5, 0.9, 0.95)
RATE = 100.0                  # [Hz]
DURATION = 4.0                # [s] per recording
TORQUE_SCALE = 3.0            # excitation strength (simulation.simulate)

_MASS = {'min': 0.5, 'max': 2.0}              # [kg]
_COM = {'z': {'min': -0.4, 'max': -0.1}}      # [m] along the hanging link
_DAMPING = {'min': 0.02, 'max': 0.3}          # [N m s/rad]
_COULOMB = {'min': 0.02, 'max': 0.3}          # [N m]

CASES = {
    'pendulum': {'model': {'builder': 'chain', 'builder_args': {'num_links': 1}},
                 'parameters': {'link1': {'mass': _MASS, 'com': _COM},
                                'joint1': {'damping': _DAMPING}}},
    'dp': {'model': {'builder': 'double_pendulum'},
           'parameters': {'link1': {'mass': _MASS, 'com': _COM},
                          'link2': {'mass': _MASS, 'com': _COM},
                          'joint1': {'damping': _DAMPING}, 'joint2': {'damping': _DAMPING}}},
    'chain3': {'model': {'builder': 'chain', 'builder_args': {'num_links': 3},
                         'actuator': 'coulomb_viscous'},
               'parameters': {**{f'link{i}': {'mass': _MASS} for i in (1, 2, 3)},
                              **{f'joint{i}': {'damping': _DAMPING, 'coulomb': _COULOMB}
                                 for i in (1, 2, 3)}}},
}
# Data of the `finer` setting: the same model integrated at 1 / (RATE * FINE) s.
FINE = 10
SETTINGS = ('exact', 'finer', 'mujoco')
LIVE_CONFIG = pathlib.Path(__file__).resolve().parents[1] / 'config' / 'double_pendulum_live.yaml'
CHECKPOINTS = (10, 30, 60)    # windows after which the online posterior is checked
# Fits after which the compiled programs are dropped: their shapes vary with each truth's
# windows and integration step, and a run of 29 double-pendulum csvgd fits exhausted XLA's
# code mappings (LLVM: 'Unable to allocate section memory'; vm.max_map_count 65530).
CLEAR_CACHES_EVERY = 10


class Draw(NamedTuple):
    """One truth and what a method said of it.

    Attributes:
      truth: (M,) physical units.
      rank: (M,) SBC rank in [0, 1] of the truth in the posterior (`particle_rank`).
      inside: (len(LEVELS), M) whether each central interval holds the truth.
      converged: the fit's own verdict.
      seconds: wall time of the fit [s].
      inside_percentile: (len(LEVELS), M) membership of the plain central percentiles of
        a posterior sample (what the intervals were before `core.inference.intervals`), or
        None for a Laplace fit.
      warnings: the fit's warning lines (`FitResult.warnings`).
    """

    truth: np.ndarray
    rank: np.ndarray
    inside: np.ndarray
    converged: bool
    seconds: float
    inside_percentile: np.ndarray | None = None
    warnings: tuple[str, ...] = ()


def case_config(case: str, dt: float | None = None, estimator: dict | None = None
                ) -> config_io.Config:
    """The case's configuration with the shipped estimator defaults, but for `estimator`,
    and the integration step `dt` [s] (None: the shipped default, chosen from the data)."""
    spec = CASES[case]
    model = dict(spec['model'])
    if dt is not None:
        model['dt'] = dt
    return config_io.from_dict({'model': model, 'parameters': spec['parameters'],
                                'data': {'rate': RATE}, 'estimator': estimator or {}})


def own_recorder(case: str, setting: str, noise: float, estimator: dict | None = None
                 ) -> tuple[pipeline.Problem, Callable]:
    """The fit's problem and `record(truth (M,), rng) -> Trajectory` from this package's
    simulator (settings exact and finer)."""
    step = 1.0 / (RATE * FINE) if setting == 'finer' else 1.0 / RATE
    data_problem = pipeline.build_problem(case_config(case, dt=step))

    def record(truth, rng):
        params = data_problem.spec.to_params(truth, data_problem.base_params)
        return simulation.simulate(data_problem, params, duration=DURATION, noise=noise,
                                   seed=int(rng.integers(2**31)), torque_scale=TORQUE_SCALE)

    fit_step = 1.0 / RATE if setting == 'exact' else None
    return pipeline.build_problem(case_config(case, fit_step, estimator)), record


def heldout_dp_model(folder: str) -> dict:
    """The model section of `heldout`'s double-pendulum URDF (written into `folder`), the
    model MuJoCo's recordings (`mujoco_recording`) are fitted on."""
    urdf = os.path.join(folder, 'double_pendulum.urdf')
    pathlib.Path(urdf).write_text(heldout.double_pendulum_urdf())
    return {'urdf': urdf, 'joints': list(heldout.DP_JOINTS)}


def mujoco_recording(value: dict[str, float], rng: np.random.Generator, noise: float,
                     duration: float, rate: float) -> Trajectory:
    """MuJoCo's recording (`heldout.dp_recording`) of the double pendulum with parameter
    values by name (`link<i>.mass`, `joint<i>.damping` and, where given, `link<i>.com.z`; the
    URDF's otherwise), sampled at `rate` [Hz], with noise N(0, noise^2) on q and qd."""
    links = (1, 2)
    t, q, qd, tau = heldout.dp_recording(
        rng, {'mass': [value[f'link{i}.mass'] for i in links],
              'com_z': [value.get(f'link{i}.com.z', -heldout.hm.DP_LENGTH / 2) for i in links],
              'damping': [value[f'joint{i}.damping'] for i in links]},
        duration, inertia_mass=[1.0, 1.0], rate=rate)   # the URDF's rod inertia about the COM
    return Trajectory(t=t, q=q + rng.normal(0.0, noise, q.shape),
                      qd=qd + rng.normal(0.0, noise, qd.shape), tau=tau,
                      joint_names=tuple(heldout.DP_JOINTS), source='mujoco')


def mujoco_recorder(noise: float, folder: str, estimator: dict | None = None
                    ) -> tuple[pipeline.Problem, Callable]:
    """The dp fit on `heldout`'s URDF and `record(truth, rng)` by MuJoCo (setting mujoco):
    truth = (mass1, com1, mass2, com2, damping1, damping2) in the dp case's order."""
    config = config_io.from_dict({
        'model': heldout_dp_model(folder), 'parameters': CASES['dp']['parameters'],
        'data': {'rate': heldout.RATE}, 'estimator': estimator or {}})
    problem = pipeline.build_problem(config)

    def record(truth, rng):
        return mujoco_recording(dict(zip(problem.spec.names, truth)), rng, noise, DURATION,
                                heldout.RATE)

    return problem, record


def membership(interval_at: Callable[[float], np.ndarray], truth: np.ndarray) -> np.ndarray:
    """(len(LEVELS), M) whether the truth (M,) lies in `interval_at(level)` (2, M)."""
    return np.stack([(lo <= truth) & (truth <= hi) for lo, hi in map(interval_at, LEVELS)])


def percentile_interval(particles: np.ndarray, level: float) -> np.ndarray:
    """(2, M) central percentiles (linear interpolation) of particles (P, M)."""
    return np.percentile(particles, [50.0 * (1.0 - level), 50.0 * (1.0 + level)], axis=0)


def particle_rank(particles: np.ndarray, truth: np.ndarray, rng: np.random.Generator
                  ) -> np.ndarray:
    """(M,) SBC rank of the truth (M,) among particles (P, M): (number below + U) / (P + 1),
    U ~ Uniform(0, 1). Uniform on [0, 1] when the truth is exchangeable with the particles;
    the plain fraction below (k / P, P + 1 values) aliased against the histogram's bins."""
    below = np.sum(particles < truth, axis=0)
    return (below + rng.uniform(size=below.shape)) / (particles.shape[0] + 1)


def posterior_checks(result: pipeline.FitResult, truth: np.ndarray, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """SBC rank (M,), interval membership (len(LEVELS), M) of a truth under a fit (the
    intervals are the fit's own, `FitResult.interval`, as `estimate.yaml` reports them) and
    that of plain percentiles of a posterior sample (None for Laplace); `rng` randomises a
    sample's rank (`particle_rank`)."""
    if result.covariance is not None:           # Laplace: estimate + std * t(dof) or N(0, 1)
        z = (truth - result.estimate) / np.maximum(result.std, 1e-300)
        rank = (stats.t.cdf(z, result.covariance_dof) if result.covariance_dof
                else stats.norm.cdf(z))
        percentile = None
    else:                                       # a posterior sample
        rank = particle_rank(result.particles, truth, rng)
        percentile = membership(functools.partial(percentile_interval, result.particles),
                                truth)
    return rank, membership(result.interval, truth), percentile


def sample_checks(particles: np.ndarray, truth: np.ndarray, kind: str,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SBC rank (M,) (`particle_rank`), membership (len(LEVELS), M) of the central intervals
    of posterior particles (P, M) that are `kind` (`core.inference.intervals`, as
    `FitResult.interval`) and of their plain percentiles."""
    return (particle_rank(particles, truth, rng),
            membership(functools.partial(intervals.central_interval, particles, kind=kind),
                       truth),
            membership(functools.partial(percentile_interval, particles), truth))


def gaussian_checks(mean: np.ndarray, covariance: np.ndarray, truth: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """SBC rank (M,) (the normal CDF of the truth's z) and membership (len(LEVELS), M) of the
    central intervals mean +- z_level std of a Gaussian posterior (mean (M,), cov (M, M))."""
    std = np.sqrt(np.maximum(np.diagonal(covariance), 1e-300))
    z = (truth - mean) / std
    return stats.norm.cdf(z), np.stack([np.abs(z) <= stats.norm.ppf(0.5 + 0.5 * level)
                                        for level in LEVELS])


def setting_pair(text: str) -> tuple[str, object]:
    """`section.key=value` from the command line; the value read as YAML."""
    key, sep, value = text.partition('=')
    if not sep or '.' not in key:
        raise argparse.ArgumentTypeError(f'expected section.key=value, got {text!r}')
    return key, yaml.safe_load(value)


def live_config(settings: Sequence[tuple[str, object]] = (), model: dict | None = None
                ) -> config_io.Config:
    """The shipped live configuration with held torques, `settings` ((`section.key`, value)
    pairs) replacing its values and `model`, if given, its model section (validated as a
    file's)."""
    tree = config_io.to_dict(config_io.load_yaml(str(LIVE_CONFIG)))
    if model is not None:
        tree['model'] = model
    for key, value in [('data.torque_samples', 'held'), *settings]:
        *sections, name = key.split('.')
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return config_io.from_dict(tree, str(LIVE_CONFIG))


def online_draws(num_truths: int, seed: int, settings: Sequence[tuple[str, object]] = (),
                 data: str = 'exact', progress=print
                 ) -> tuple[tuple[str, ...], dict[int, list[Draw]], dict[int, list[Draw]]]:
    """The live session's posterior after each of CHECKPOINTS windows, per random truth
    (module doc): (parameter names, {windows: [Draw per truth]} of its particles, the same
    of its Laplace summary where it has one); `settings` as `live_config`'s. `data`:
    'exact' (recorded by the live model itself) or 'mujoco' (by MuJoCo, fitted on
    `heldout`'s URDF)."""
    model = (heldout_dp_model(tempfile.mkdtemp(prefix='sysid_calibration_live_'))
             if data == 'mujoco' else None)
    # Exact recordings come from the live model at the sample period: the session's step.
    own_step = [('model.dt', 1.0 / live_config().data.rate)] if data == 'exact' else []
    cfg = live_config([*own_step, *settings], model)
    problem = pipeline.build_problem(cfg)
    rng = np.random.default_rng(seed)
    draws: dict[int, list[Draw]] = {k: [] for k in CHECKPOINTS}
    laplace: dict[int, list[Draw]] = {k: [] for k in CHECKPOINTS}
    for i in range(num_truths):
        truth = rng.uniform(problem.spec.lower, problem.spec.upper)
        session = online.OnlineSession(problem)
        n = session.window_samples
        duration = max(CHECKPOINTS) * n / cfg.data.rate
        noise = cfg.data.noise_std[0]
        recorder_seed = int(rng.integers(2**31))
        if data == 'mujoco':
            traj = mujoco_recording(dict(zip(problem.spec.names, truth)),
                                    np.random.default_rng(recorder_seed), noise, duration,
                                    cfg.data.rate)
        else:
            params = problem.spec.to_params(truth, problem.base_params)
            traj = simulation.simulate(problem, params, duration=duration, noise=noise,
                                       seed=recorder_seed, torque_scale=TORQUE_SCALE)
        start = time.perf_counter()
        for w in range(max(CHECKPOINTS)):
            part = slice(w * n, (w + 1) * n)
            session.update(Window(t=traj.t[part], q=traj.q[part], qd=traj.qd[part],
                                  tau=traj.tau[part]))
            if w + 1 in draws:
                rank, inside, percentile = sample_checks(
                    session.particles, truth, registry.lookup(session.method).particles,
                    np.random.default_rng((seed, i, w)))
                draws[w + 1].append(Draw(truth, rank, inside, session.divergences == 0,
                                         time.perf_counter() - start, percentile))
                if session.summary is not None:
                    rank, inside = gaussian_checks(*session.summary, truth)
                    laplace[w + 1].append(Draw(truth, rank, inside, session.divergences == 0,
                                               time.perf_counter() - start))
        if progress:
            cov = np.mean([d.inside[1] for d in draws[max(CHECKPOINTS)]])
            progress(f'  online ({data}): {i + 1}/{num_truths} truths, cov90 after '
                     f'{max(CHECKPOINTS)} windows so far {cov:.2f} '
                     f'({time.perf_counter() - start:.0f} s)')
    return problem.spec.names, draws, laplace


def run_case(problem: pipeline.Problem, record: Callable, label: str, method: str,
             num_truths: int, seed: int, progress=print) -> list[Draw]:
    """Fit `num_truths` recordings `record(truth, rng)` of truths drawn uniformly within the
    bounds of `problem`; one Draw per truth."""
    spec = problem.spec
    rng = np.random.default_rng(seed)
    draws = []
    for i in range(num_truths):
        truth = rng.uniform(spec.lower, spec.upper)
        traj = record(truth, rng)
        start = time.perf_counter()
        result = pipeline.fit(problem, [traj], method=method, seed=i, log=lambda _: None)
        rank, inside, percentile = posterior_checks(result, truth,
                                                    np.random.default_rng((seed, i)))
        draws.append(Draw(truth, rank, inside, bool(result.converged),
                          time.perf_counter() - start, percentile, tuple(result.warnings)))
        if (i + 1) % CLEAR_CACHES_EVERY == 0:
            jax.clear_caches()
        if progress and (i + 1) % max(1, num_truths // 5) == 0:
            cov = np.mean([d.inside[1] for d in draws])
            progress(f'  {label}: {i + 1}/{num_truths} truths, cov90 so far {cov:.2f}, '
                     f'last fit {draws[-1].seconds:.1f} s')
    return draws


def coverage(draws: list[Draw]) -> np.ndarray:
    """(len(LEVELS), M) empirical coverage per level and parameter."""
    return np.mean([d.inside for d in draws], axis=0)


def plot_ranks(path: str, groups: dict[str, list[Draw]], bins: int = 10) -> None:
    """SBC rank histograms, one panel per case/setting/method (pooled over parameters)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    keys = list(groups)
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        ranks = np.concatenate([d.rank for d in groups[key]])
        ax.hist(ranks, bins=bins, range=(0, 1), color='tab:blue', alpha=0.8)
        expected = ranks.size / bins
        band = 1.96 * np.sqrt(expected * (1 - 1 / bins))
        ax.axhspan(expected - band, expected + band, color='grey', alpha=0.3,
                   label='uniform, 95 %')
        ax.set_title(key, fontsize=9)
        ax.set_xlabel('rank of the truth in the posterior [-]')
        ax.set_ylabel('count')
    for ax in list(axes.flat)[len(keys):]:
        ax.axis('off')
    axes.flat[0].legend(fontsize=8)
    fig.suptitle('Simulation-based calibration: a calibrated posterior gives flat histograms')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _label(method: str) -> str:
    """The name of a method's intervals in the summary: the method, or what its intervals
    are read from when not its particles (lm: 'laplace')."""
    entry = registry.lookup(method)
    return method if entry.intervals == 'particles' else entry.intervals


def symptom(warning: str) -> str:
    """A warning line of `diagnosis.diagnose` shortened to its kind."""
    for key, kind in (('did not converge', 'budget'), ('spread', 'spread'),
                      ('never moved', 'unmoved'), ('defects', 'defects'),
                      ('misses the data', 'loss'), ('one particle', 'one particle'),
                      ('from its mode', 'mode')):
        if key in warning:
            return kind
    return 'other'


def print_table(key: str, draws: list[Draw], names) -> np.ndarray:
    """Print the coverage per parameter and pooled; return the pooled (len(LEVELS),)."""
    cov = coverage(draws)
    n = len(draws)
    print(f'\n{key}: {n} truths, converged {sum(d.converged for d in draws)}/{n}, '
          f'fit {np.mean([d.seconds for d in draws]):.2f} s mean')
    print(f'{"parameter":20}' + ''.join(f'{f"cov{round(100 * lv)}":>9}' for lv in LEVELS))
    for j, name in enumerate(names):
        print(f'{name:20}' + ''.join(f'{cov[k, j]:9.2f}' for k in range(len(LEVELS))))
    pooled = cov.mean(axis=1)
    print(f'{"pooled":20}' + ''.join(f'{p:9.3f}' for p in pooled) + '   (binomial se '
          + ', '.join(f'{np.sqrt(lv * (1 - lv) / (n * len(names))):.3f}' for lv in LEVELS)
          + ')')
    done = [d for d in draws if d.converged]
    if 0 < len(done) < n:
        kept = np.mean([d.inside for d in done], axis=(0, 2))
        print(f'{"converged fits only":20}' + ''.join(f'{p:9.3f}' for p in kept)
              + f'   ({len(done)} fits)')
    symptoms = collections.Counter(symptom(line) for d in draws for line in d.warnings)
    if symptoms:
        print('warnings: ' + ', '.join(f'{k} {v}' for k, v in symptoms.most_common()))
    if draws[0].inside_percentile is not None:
        plain = np.mean([d.inside_percentile for d in draws], axis=(0, 2))
        print(f'{"plain percentiles":20}' + ''.join(f'{p:9.3f}' for p in plain))
    return pooled


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cases', nargs='+', default=list(CASES), choices=list(CASES))
    parser.add_argument('--settings', nargs='+', default=['exact', 'mujoco'],
                        choices=SETTINGS, help='mujoco: dp only (other cases skip it)')
    parser.add_argument('--methods', nargs='*', default=['lm', 'csvgd'],
                        help='methods of the registry (lm: its Laplace covariance); none: '
                             'only --online')
    parser.add_argument('--truths', type=int, default=100)
    parser.add_argument('--particles', type=int, default=32,
                        help='estimator.particles of the Bayesian methods (the default 1 '
                             'is no posterior sample)')
    parser.add_argument('--noise', type=float, default=1e-3, help='[rad, rad/s]')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--online', type=int, default=0, metavar='N',
                        help='also the live session on N truths (0: not run)')
    parser.add_argument('--online-data', nargs='+', default=['exact'],
                        choices=('exact', 'mujoco'),
                        help="the live session's recordings: its own model's (exact) or "
                             "MuJoCo's on heldout's URDF (mujoco, model error)")
    parser.add_argument('--online-set', type=setting_pair, action='append', default=[],
                        metavar='SECTION.KEY=VALUE',
                        help='replace a value of the live configuration (repeatable), e.g. '
                             'estimator.start=measured')
    parser.add_argument('--set', type=setting_pair, action='append', default=[],
                        metavar='estimator.KEY=VALUE', dest='estimator_set',
                        help='replace an estimator setting of every offline fit (repeatable), '
                             'e.g. estimator.start=measured')
    parser.add_argument('--quick', action='store_true',
                        help='pendulum only, exact setting, 30 truths')
    parser.add_argument('--out', default=os.path.join('/tmp', 'sysid_calibration'))
    args = parser.parse_args(argv)
    jax.config.update('jax_enable_x64', True)
    if args.quick:
        args.cases, args.settings, args.truths = ['pendulum'], ['exact'], 30
    os.makedirs(args.out, exist_ok=True)

    offline_settings = {}
    for key, value in args.estimator_set:
        section, _, name = key.partition('.')
        if section != 'estimator' or '.' in name:
            parser.error(f'--set: expected estimator.KEY=VALUE, got {key}')
        offline_settings[name] = value
    groups: dict[str, list[Draw]] = {}
    summary: dict[str, float] = {}
    folder = tempfile.mkdtemp(prefix='sysid_calibration_')
    for case in args.cases:
        for setting in args.settings:
            if setting == 'mujoco' and case != 'dp':
                continue
            for method in args.methods:
                estimator = dict(offline_settings)
                if registry.lookup(method).bayesian:
                    estimator['particles'] = args.particles
                problem, record = (
                    mujoco_recorder(args.noise, folder, estimator) if setting == 'mujoco'
                    else own_recorder(case, setting, args.noise, estimator))
                names = problem.spec.names
                key = f'{case}/{setting}/{method}'
                draws = run_case(problem, record, key, method, args.truths, args.seed)
                groups[key] = draws
                pooled = print_table(key, draws, names)
                summary[f'{case}_{setting}_{_label(method)}_cov90'] = pooled[1]
    for data in args.online_data if args.online else ():
        prefix = 'online' if data == 'exact' else f'online_{data}'
        names, by_windows, by_windows_laplace = online_draws(args.online, args.seed,
                                                             args.online_set, data)
        for label, checked in ((prefix, by_windows), (f'{prefix}_laplace', by_windows_laplace)):
            for windows, draws in checked.items():
                if not draws:
                    continue
                key = f'{label}/after {windows} windows'
                groups[key] = draws
                pooled = print_table(key, draws, names)
                for level, value in zip(LEVELS, pooled):
                    summary[f'{label}_w{windows}_cov{round(100 * level)}'] = value
        summary[f'{prefix}_cov90'] = summary[f'{prefix}_w{max(CHECKPOINTS)}_cov90']

    for method in args.methods:
        label = _label(method)
        mine = [d for key, draws in groups.items() if key.endswith('/' + method) for d in draws]
        pooled = np.concatenate([d.inside for d in mine], axis=1).mean(axis=1)
        for level, value in zip(LEVELS, pooled):
            summary[f'{label}_cov{round(100 * level)}'] = value
    path = os.path.join(args.out, 'calibration.png')
    plot_ranks(path, groups)
    print(f'\nrank histograms: {path}')
    print('RESULT calibration ' + ' '.join(f'{k}={v:.3f}' for k, v in summary.items()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
