"""Fit report figures (matplotlib, Agg backend), after Heiden et al. 2022, figs 3/6 and 7/10.

Each `*_figure` function returns a matplotlib Figure (for `io.html_report`, which embeds it);
each `plot_*` function writes one as a PNG file.

  * `trajectory_density_figure`: per state dimension, the density of posterior rollouts over
    time (a 2-D histogram of (t, value), log-shaded) with the measured held-out trajectories
    drawn on top as lines (seed figs 3 and 6).
  * `prediction_figure`: measured held-out segments back to back, each predicted from its
    measured start state: the particles' median and 5-95 % band.
  * `posterior_figure`: a corner plot of the particles (the `corner` package): marginals on
    the diagonal, pairwise densities below it (seed figs 7 and 10).
  * `convergence_figure`: loss per iteration on a log scale.
"""

from __future__ import annotations

import os
from typing import IO, Sequence

import corner
import matplotlib

matplotlib.use('Agg')
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ['convergence_figure', 'plot_posterior', 'plot_trajectory_density',
           'posterior_figure', 'prediction_figure', 'save_figure',
           'trajectory_density_figure']

# Corner plots draw density contours only from this many samples on (fewer: points only).
CONTOUR_MIN_SAMPLES = 200
# Corner plots title each marginal (median and 16/84 % quantiles) up to this many parameters.
TITLED_MAX_PARAMETERS = 8


def _as_batch(array, name: str, ndim: int) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    if array.ndim != ndim:
        raise ValueError(f'{name}: expected a {ndim}-D array, got shape {array.shape}')
    return array


def save_figure(fig: Figure, target: str | os.PathLike | IO[bytes], dpi: float = 100) -> None:
    """Write `fig` as PNG to a path or binary file object and release it."""
    fig.savefig(target if hasattr(target, 'write') else os.fspath(target), format='png',
                dpi=dpi)
    plt.close(fig)          # figures that pyplot made (corner's); a no-op for the others


def _padded(low: float, high: float) -> tuple[float, float]:
    """(low, high) widened by 5 % of their distance (of the value, or 0.5, when equal)."""
    pad = 0.05 * (high - low) if high > low else (0.05 * abs(low) or 0.5)
    return low - pad, high + pad


def trajectory_density_figure(t, simulated, measured, labels: Sequence[str] | None = None,
                              title: str = '', bins: int = 100) -> Figure:
    """Posterior rollouts as a density over time, measured trajectories as lines.

    Args:
      t: (T,) time of each sample [s].
      simulated: (S, T, D) rollouts of posterior particles; non-finite ones are skipped.
      measured: (N, T, D) measured (held-out) trajectories.
      labels: D axis labels with units, e.g. 'q1 [rad]'.
      title: figure title.
      bins: histogram bins along the value axis (the time axis uses one bin per sample, at
        most 300).
    """
    t = _as_batch(t, 't', 1)
    simulated = _as_batch(simulated, 'simulated', 3)
    measured = _as_batch(measured, 'measured', 3)
    if simulated.shape[1:] != measured.shape[1:] or simulated.shape[1] != t.shape[0]:
        raise ValueError(f'simulated {simulated.shape}, measured {measured.shape} and t '
                         f'{t.shape} disagree on (T, D)')
    simulated = simulated[np.all(np.isfinite(simulated), axis=(1, 2))]
    dims = measured.shape[2]
    labels = list(labels) if labels is not None else [f'x{i}' for i in range(dims)]
    fig = Figure(figsize=(8, 2.2 * dims))
    axes = fig.subplots(dims, 1, sharex=True, squeeze=False)
    time_bins = min(t.shape[0], 300)
    for d, ax in enumerate(axes[:, 0]):
        # The measured data in full; the rollouts' outer 1 % may fall outside.
        low, high = measured[..., d].min(), measured[..., d].max()
        if simulated.shape[0]:
            sim_low, sim_high = np.percentile(simulated[..., d], [0.5, 99.5])
            low, high = min(low, sim_low), max(high, sim_high)
        low, high = _padded(low, high)
        if simulated.shape[0]:
            grid, xedges, yedges = np.histogram2d(
                np.broadcast_to(t, simulated.shape[:2]).ravel(), simulated[..., d].ravel(),
                bins=(time_bins, bins), range=((t[0], t[-1]), (low, high)))
            ax.pcolormesh(xedges, yedges, np.where(grid > 0, grid, np.nan).T, cmap='Blues',
                          norm=LogNorm(), shading='flat')
        for k, traj in enumerate(measured):
            ax.plot(t, traj[:, d], color='tab:red', lw=0.8, alpha=0.8,
                    label='measured' if k == 0 else None)
        ax.set_ylim(low, high)
        ax.set_ylabel(labels[d])
    axes[0, 0].legend(loc='upper right', fontsize='small')
    axes[0, 0].set_title(title or f'{simulated.shape[0]} posterior rollouts (density) vs '
                         f'{measured.shape[0]} measured')
    axes[-1, 0].set_xlabel('t [s]')
    fig.tight_layout()
    return fig


def plot_trajectory_density(path: str | os.PathLike, t, simulated, measured,
                            labels: Sequence[str] | None = None, title: str = '',
                            bins: int = 100) -> None:
    """`trajectory_density_figure` written as a PNG file `path`."""
    save_figure(trajectory_density_figure(t, simulated, measured, labels, title, bins), path)


def prediction_figure(t, measured, predicted, labels: Sequence[str], title: str = '',
                      max_segments: int = 8) -> Figure:
    """Measured vs predicted held-out segments, the first `max_segments` back to back.

    Args:
      t: (H,) time within a segment [s].
      measured: (N, H, D) measured segments.
      predicted: (P, N, H, D) each particle's prediction of each segment from its measured
        start state; particles with non-finite predictions are left out.
      labels: D axis labels with units, e.g. 'q joint1 [rad]'.
      title: figure title.
      max_segments: segments drawn.
    """
    t = _as_batch(t, 't', 1)
    measured = _as_batch(measured, 'measured', 3)
    predicted = _as_batch(predicted, 'predicted', 4)
    if predicted.shape[1:] != measured.shape or measured.shape[1] != t.shape[0]:
        raise ValueError(f'predicted {predicted.shape}, measured {measured.shape} and t '
                         f'{t.shape} disagree on (N, H, D)')
    if len(labels) != measured.shape[2]:
        raise ValueError(f'labels: expected {measured.shape[2]} labels, got {len(labels)}')
    num = min(measured.shape[0], max_segments)
    predicted = predicted[np.all(np.isfinite(predicted), axis=(1, 2, 3))][:, :num]
    band = (np.percentile(predicted, [5.0, 50.0, 95.0], axis=0) if predicted.shape[0]
            else None)
    dims = measured.shape[2]
    fig = Figure(figsize=(9, 1.9 * dims + 0.8))
    axes = fig.subplots(dims, 1, sharex=True, squeeze=False)[:, 0]
    for d, ax in enumerate(axes):
        for k in range(num):
            time = k * t[-1] + t
            ax.axvline(time[0] - t[0], color='0.8', lw=0.6, ls=':')
            ax.plot(time, measured[k, :, d], color='black', lw=1.0,
                    label='measured' if k == 0 else None)
            if band is not None:
                ax.fill_between(time, band[0, k, :, d], band[2, k, :, d], color='tab:blue',
                                alpha=0.25, lw=0, label='predicted 5-95 %' if k == 0 else None)
                ax.plot(time, band[1, k, :, d], color='tab:blue', lw=1.0,
                        label='predicted median' if k == 0 else None)
        ax.set_ylabel(labels[d], fontsize='small')
        ax.grid(True, alpha=0.3)
    axes[0].legend(loc='upper right', fontsize='x-small', ncols=3)
    count = predicted.shape[0]
    axes[0].set_title(title or f'{num} of {measured.shape[0]} held-out segments, each '
                      f'predicted by {count} particle{"s" * (count != 1)} from its measured start')
    axes[-1].set_xlabel('time in the segments shown (back to back) [s]')
    fig.tight_layout()
    return fig


def posterior_figure(theta, names: Sequence[str],
                     bounds: Sequence[tuple[float, float]] | None = None, reference=None,
                     title: str = '', bins: int = 20) -> Figure:
    """Corner plot (`corner.corner`) of particles: marginal histograms on the diagonal and
    pairwise densities (points, with contours from CONTOUR_MIN_SAMPLES samples) below it.

    Args:
      theta: (P, M) particles in physical units; non-finite rows are left out.
      names: M parameter names (with units where useful).
      bounds: M (low, high) axis limits (the prior's bounds; an infinite one gives way to
        the particles' range), or None for the particles' range.
      reference: (M,) values drawn as lines (e.g. a truth or a literature value).
      title: figure title (empty: none).
      bins: histogram bins.

    Raises:
      ValueError: names or bounds of another length than M, or fewer finite particles than
        parameters (too few for a corner plot).
    """
    theta = _as_batch(theta, 'theta', 2)
    m = theta.shape[1]
    if len(names) != m:
        raise ValueError(f'names: expected {m} names, got {len(names)}')
    if bounds is not None and len(bounds) != m:
        raise ValueError(f'bounds: expected {m} pairs, got {len(bounds)}')
    theta = theta[np.all(np.isfinite(theta), axis=1)]
    if theta.shape[0] <= m:
        raise ValueError(f'theta: a corner plot of {m} parameters needs more than {m} finite '
                         f'particles, got {theta.shape[0]}')
    ranges = [_padded(theta[:, i].min(), theta[:, i].max()) for i in range(m)]
    if bounds is not None:
        ranges = [(lo if np.isfinite(lo) else r[0], hi if np.isfinite(hi) else r[1])
                  for (lo, hi), r in zip(bounds, ranges)]
    dense = theta.shape[0] >= CONTOUR_MIN_SAMPLES
    titled = m <= TITLED_MAX_PARAMETERS
    fig = corner.corner(theta, bins=bins, range=ranges, labels=list(names), truths=reference,
                        truth_color='tab:red', show_titles=titled, title_fmt='.3g',
                        quantiles=[0.16, 0.5, 0.84] if titled else None,
                        plot_contours=dense, plot_density=dense, color='tab:blue',
                        label_kwargs={'fontsize': 9}, title_kwargs={'fontsize': 8},
                        max_n_ticks=3)
    for ax in fig.axes:
        ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title, y=1.0)
    return fig


def plot_posterior(path: str | os.PathLike, theta, names: Sequence[str],
                   bounds: Sequence[tuple[float, float]] | None = None, reference=None,
                   title: str = '', bins: int = 20) -> None:
    """`posterior_figure` written as a PNG file `path` (at most about 1600 pixels wide)."""
    fig = posterior_figure(theta, names, bounds, reference, title, bins)
    save_figure(fig, path, dpi=min(80.0, 1600.0 / fig.get_figwidth()))


def convergence_figure(history, title: str = '') -> Figure:
    """Loss per iteration (history (K,) [-], the lowest over particles) on a log scale."""
    history = np.asarray(history, dtype=float)
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    iterations = np.arange(1, history.size + 1)
    positive = history > 0
    if positive.any():
        ax.semilogy(iterations[positive], history[positive], lw=1.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel('iteration [-]')
    ax.set_ylabel('loss [-] (normalised)')
    ax.set_title(title or 'convergence')
    ax.grid(True, which='both', alpha=0.3)
    fig.tight_layout()
    return fig
