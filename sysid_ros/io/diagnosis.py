"""Whether a fit converged, what its symptoms of failure are, and what the data determine.

* `diagnose`: converged or not, how the fit stopped, and one warning line per symptom of a
  failed fit, each naming the setting to change (`FitResult.converged`, `.warnings`).
* `identifiability_report`: the range-scaled Gauss-Newton Hessian's singular values,
  condition number, predicted std per parameter and weakest combination, with warnings.
* `starts_agreeing`: how many restarts of a point estimator reached the best one.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.inference.kernels import lm
from sysid_ros.io.problem import Problem
from sysid_ros.io.step_loop import StepsResult

__all__ = [
    'Diagnosis',
    'diagnose',
    'identifiability_report',
    'starts_agreeing',
]

# Restarts agree with the best one within these shares of loss and bounds width.
AGREE_LOSS = 1e-3
AGREE_WIDTH = 1e-3
# Identifiability warnings (`identifiability_report`).
IDENTIFIABILITY_CONDITION = 1e8
IDENTIFIABILITY_WIDTH = 0.1
# `diagnose`: convergence by a flat loss, particles that never moved, defects, loss.
STALL_RTOL = 1e-4
STALL_SHARE = 0.1
STALL_STEPS = 10
MOVED_WIDTH = 1e-6
DEFECT_TOLERANCE = 0.05
LOSS_LIMIT = 10.0
# A posterior sample has settled when the mean per-parameter spread (std) of its particles
# over the last SPREAD_SHARE of the steps is within a factor SPREAD_RTOL of that over the
# SPREAD_SHARE before: particles that still contract (or spread) are no posterior yet. An
# eighth, because CSVGD's and SVGD's steps decay over the last half
# (`optimisers.annealed_adam`) and their particles settle early in that decay
# (docs/design/io.md).
SPREAD_SHARE = 0.125
SPREAD_RTOL = 1.3
# A posterior sample from the windows' joint fit (`refit_windows`) has reached the
# posterior when its mean lies within MODE_OFFSET Laplace stds of the fit's mode, for every
# parameter whose mode lies at least MODE_MARGIN of those stds inside its bounds (nearer,
# the posterior is truncated and its mean not its mode).
MODE_OFFSET = 1.0
MODE_MARGIN = 2.0


def starts_agreeing(theta, loss, best_theta, spec) -> str:
    """'k of P': restarts whose loss is within AGREE_LOSS of the best and whose parameters
    are within AGREE_WIDTH of the bounds' width (or relative) of the best's."""
    width = np.asarray(spec.range_width(best_theta))
    best_loss = np.min(loss)
    close = (np.all(np.abs(theta - best_theta) <= AGREE_WIDTH * width, axis=1)
             & (loss <= best_loss * (1.0 + AGREE_LOSS)))
    return f'{int(np.sum(close))} of {theta.shape[0]}'


def identifiability_report(problem: Problem, hessian: np.ndarray, theta) -> dict:
    """What the recording determines at theta (M,) from the Gauss-Newton Hessian (M, M)
    there (`lm.identifiability`) as plain values:
    singular values, condition number, predicted std per parameter, the weakest
    combination, and warning lines for a condition number above IDENTIFIABILITY_CONDITION
    or parameters whose predicted std exceeds IDENTIFIABILITY_WIDTH of their bounds width."""
    spec = problem.spec
    width = np.asarray(spec.range_width(theta))
    ident = lm.identifiability(jnp.asarray(hessian), jnp.asarray(width))
    singular = np.asarray(ident.singular_values, dtype=float)
    condition = float(ident.condition_number)
    std = np.asarray(ident.predicted_std, dtype=float)
    weakest = np.asarray(ident.directions[-1], dtype=float)
    combination = ' '.join(f'{v:+.2f} {n}' for v, n in sorted(
        zip(weakest, spec.names), key=lambda p: -abs(p[0])) if abs(v) >= 0.1)
    poor = [n for n, sd, w, sv in zip(spec.names, std, width, np.diagonal(hessian))
            if sd > IDENTIFIABILITY_WIDTH * w or sv <= 0.0]
    warnings = []
    if condition > IDENTIFIABILITY_CONDITION:
        warnings.append(f'the recording hardly determines the combination {combination} '
                        f'(condition number {condition:.3g} of the range-scaled Jacobian); '
                        'fix or drop a parameter of it, or record more varied motion')
    if poor:
        warnings.append(f'predicted std above {IDENTIFIABILITY_WIDTH:g} of the bounds width '
                        f'(or no sensitivity): {", ".join(poor)}')
    return {'condition_number': condition, 'singular_values': singular.tolist(),
            'predicted_std': {n: float(v) for n, v in zip(spec.names, std)},
            'weakest_combination': combination, 'poorly_determined': poor,
            'warnings': warnings}


def _loss_fall(history: np.ndarray, tail: int) -> float:
    """Relative fall of the lowest loss over the last `tail` steps of `history` (inf when
    there are no steps before them or no finite loss)."""
    before, recent = history[:-tail], history[-tail:]
    if not before.size or not np.isfinite(np.min(before)):
        return np.inf
    return float((np.min(before) - np.min(recent)) / max(abs(np.min(before)), 1e-300))


class Diagnosis(NamedTuple):
    """`converged`, how the fit stopped (`reason`) and the `warnings` lines (`diagnose`)."""

    converged: bool
    reason: str
    warnings: tuple[str, ...]


def diagnose(method: str, history, initial, theta, final, loss: float, steps: StepsResult,
             spec, shooting_windows: int = 1, bayesian: bool = False,
             spread=None, mode=None, misfit: str = '') -> Diagnosis:
    """Whether a fit converged, and its symptoms of failure, each a warning line naming the
    setting to change:

      * interrupted (Ctrl-C): not converged, with one warning that says so (and nothing else
        checked: the parameters are where the steps stopped);
      * converged: the method's own tolerance (`StepInfo.converged`), or a loss that fell
        by less than STALL_RTOL over the last STALL_SHARE of the steps (at least
        STALL_STEPS); else the iteration budget ran out while the loss still fell;
      * particles that never moved: every particle within MOVED_WIDTH of the bounds' width
        of its start;
      * defects: the largest normalised shooting defect above DEFECT_TOLERANCE (multiple
        shooting only);
      * the loss (mean squared noise-normalised residual, ~1 at the truth) above LOSS_LIMIT,
        with the likelihood's `misfit` hint (`estimator_data.Residual.misfit`);
      * a Bayesian method (`bayesian`) with one particle: its std is no uncertainty;
      * a Bayesian method whose particles' spread (`spread` (steps, M): their std per
        parameter after each step) still changes: `_spread_change` above SPREAD_RTOL. A
        sample that still contracts holds the truth in nearly all its intervals, one that
        still spreads in too few; a flat loss (the best particle's) does not show either;
      * a Bayesian method whose particles' mean is off the posterior's mode `mode`
        ((M,) mode, (M, M) Laplace covariance [physical units], `refit_windows`' joint
        fit): `_mode_offsets` above MODE_OFFSET; the spread check does not see it.
    """
    warnings = []
    history = np.asarray(history, dtype=float)
    if steps.interrupted:
        return Diagnosis(False, f'interrupted (Ctrl-C) after {history.size} iterations', (
            f'{method} was interrupted (Ctrl-C) after {history.size} iterations: the '
            'parameters are where it stopped, not a converged estimate, and their std is no '
            'uncertainty; run the fit to its end',))
    if final is not None and bool(np.asarray(final.converged)):
        converged, reason = True, 'tolerance'
    else:
        tail = max(STALL_STEPS, int(np.ceil(STALL_SHARE * history.size)))
        fall = _loss_fall(history, tail)
        converged = bool(fall < STALL_RTOL)
        reason = (f'loss flat (fell {max(fall, 0.0):.2g} over the last {tail} iterations)'
                  if converged else f'iteration budget ({history.size}) spent')
        if not converged:
            warnings.append(f'{method} did not converge in {history.size} iterations (the '
                            f'loss still fell {fall:.2g} over the last {tail}); raise '
                            'estimator.iterations')
    width = np.asarray(spec.range_width(initial[0]))
    if np.all(np.abs(np.asarray(theta) - np.asarray(initial)) <= MOVED_WIDTH * width):
        warnings.append(f'{method}: the particles never moved from their start; check '
                        'estimator.learning_rate and estimator.window')
    if final is not None and shooting_windows > 1:
        defect = float(np.max(np.asarray(final.max_defect)))
        if defect > DEFECT_TOLERANCE:
            warnings.append(f'{method}: shooting defects up to {defect:.3g} (normalised) '
                            f'> {DEFECT_TOLERANCE:g}: the windows do not join; shorten '
                            'estimator.window or raise estimator.iterations')
    change = _spread_change(spread) if bayesian and spread is not None else 1.0
    if change > SPREAD_RTOL:
        warnings.append(f"{method}: the particles' spread still changed by a factor "
                        f'{change:.2f} over the last {SPREAD_SHARE:.0%} of the iterations; '
                        'raise estimator.iterations')
    if bayesian and mode is not None:
        offsets = _mode_offsets(theta, *mode, spec)
        worst = int(np.argmax(offsets))
        if offsets[worst] > MODE_OFFSET:
            warnings.append(f"{method}: the particles' mean of {spec.names[worst]} lies "
                            f'{offsets[worst]:.2g} stds (of the Laplace posterior at the '
                            "windows' joint fit) from its mode: they have not reached the "
                            'posterior; raise estimator.iterations')
    if bayesian and np.asarray(theta).shape[0] < 2:
        warnings.append(f'{method}: one particle has no spread, so the reported std is no '
                        'uncertainty; set estimator.particles (e.g. 32)')
    if not np.isfinite(loss) or loss > LOSS_LIMIT:
        warnings.append(f'{method}: loss {loss:.4g} (mean squared residual in noise stds; ~1 '
                        'when the model fits): the model misses the data; check '
                        'model.actuator, model.integrator, the bounds and data.noise_std'
                        + (f'; {misfit}' if misfit else ''))
    return Diagnosis(converged and not warnings, reason, tuple(warnings))


def _spread_change(spread) -> float:
    """Largest factor (>= 1) between a parameter's mean spread over the last SPREAD_SHARE of
    the steps and that over the SPREAD_SHARE before (1 for too short a history or a spread
    of zero)."""
    spread = np.asarray(spread, dtype=float)
    tail = int(np.ceil(SPREAD_SHARE * len(spread)))
    if spread.ndim != 2 or tail < 1 or 2 * tail > len(spread):
        return 1.0
    last, before = spread[-tail:].mean(axis=0), spread[-2 * tail:-tail].mean(axis=0)
    ok = (last > 0.0) & (before > 0.0) & np.isfinite(last) & np.isfinite(before)
    if not np.any(ok):
        return 1.0
    ratio = last[ok] / before[ok]
    return float(np.max(np.maximum(ratio, 1.0 / ratio)))


def _mode_offsets(theta, mode, covariance, spec) -> np.ndarray:
    """(M,) |mean of the particles theta (P, M) - mode| in the Laplace stds of `covariance`,
    0 for a parameter whose mode lies within MODE_MARGIN stds of a bound or whose std is 0."""
    std = np.sqrt(np.maximum(np.diagonal(covariance), 0.0))
    mode = np.asarray(mode, dtype=float)
    inside = ((mode - MODE_MARGIN * std > np.asarray(spec.lower_bounds, float))
              & (mode + MODE_MARGIN * std < np.asarray(spec.upper_bounds, float)) & (std > 0))
    mean = np.mean(np.asarray(theta, float), axis=0)
    offset = np.abs(mean - mode) / np.where(inside, std, 1.0)
    return np.where(inside, offset, 0.0)
