"""Fit report figures (PNG, matplotlib Agg backend), after seed 000 figs 3/6 and 7/10.

  * `plot_trajectory_density`: per state dimension, the density of posterior rollouts over
    time (a 2-D histogram of (t, value), log-shaded) with the measured held-out trajectories
    drawn on top as lines (seed figs 3 and 6).
  * `plot_posterior`: the particles' marginals on the diagonal and pairwise scatter plots
    below it, optionally with the parameter bounds as axis limits and a reference value
    (seed figs 7 and 10).
"""

from __future__ import annotations

import os
from typing import Sequence

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

__all__ = ['plot_posterior', 'plot_trajectory_density']


def _as_batch(array, name: str, ndim: int) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    if array.ndim != ndim:
        raise ValueError(f'{name}: expected a {ndim}-D array, got shape {array.shape}')
    return array


def plot_trajectory_density(path: str | os.PathLike, t, simulated, measured,
                            labels: Sequence[str] | None = None, title: str = '',
                            bins: int = 100) -> None:
    """Posterior rollouts as a density over time, measured trajectories as lines.

    Args:
      path: PNG file to write.
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
    fig, axes = plt.subplots(dims, 1, figsize=(8, 2.2 * dims), sharex=True, squeeze=False)
    time_bins = min(t.shape[0], 300)
    for d, ax in enumerate(axes[:, 0]):
        # The measured data in full; the rollouts' outer 1 % may fall outside.
        low, high = measured[..., d].min(), measured[..., d].max()
        if simulated.shape[0]:
            sim_low, sim_high = np.percentile(simulated[..., d], [0.5, 99.5])
            low, high = min(low, sim_low), max(high, sim_high)
        pad = 0.05 * (high - low) if high > low else 0.5
        low, high = low - pad, high + pad
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
    fig.savefig(os.fspath(path), dpi=100)
    plt.close(fig)


def plot_posterior(path: str | os.PathLike, theta, names: Sequence[str],
                   bounds: Sequence[tuple[float, float]] | None = None, reference=None,
                   title: str = '', bins: int = 20) -> None:
    """Marginal histograms (diagonal) and pairwise scatter plots (below) of particles.

    Args:
      path: PNG file to write.
      theta: (P, M) particles in physical units.
      names: M parameter names (with units where useful).
      bounds: M (low, high) axis limits (the prior's bounds), or None for the data range.
      reference: (M,) values drawn as lines/crosses (e.g. a truth or a literature value).
      title: figure title.
      bins: histogram bins.
    """
    theta = _as_batch(theta, 'theta', 2)
    m = theta.shape[1]
    if len(names) != m:
        raise ValueError(f'names: expected {m} names, got {len(names)}')
    if bounds is not None and len(bounds) != m:
        raise ValueError(f'bounds: expected {m} pairs, got {len(bounds)}')
    theta = theta[np.all(np.isfinite(theta), axis=1)]
    size = max(1.4 * m, 3.0)
    fig, axes = plt.subplots(m, m, figsize=(size, size), squeeze=False)

    def limits(i):
        if bounds is not None:
            return bounds[i]
        low, high = (theta[:, i].min(), theta[:, i].max()) if theta.size else (0.0, 1.0)
        pad = 0.05 * (high - low) if high > low else 0.5
        return low - pad, high + pad

    for i in range(m):
        for j in range(m):
            ax = axes[i, j]
            if j > i:
                ax.axis('off')
                continue
            if i == j:
                ax.hist(theta[:, i], bins=bins, range=limits(i), color='tab:blue')
                if reference is not None:
                    ax.axvline(reference[i], color='tab:red', lw=1)
                ax.set_yticks([])
            else:
                ax.scatter(theta[:, j], theta[:, i], s=3, color='tab:blue', alpha=0.6)
                if reference is not None:
                    ax.plot(reference[j], reference[i], 'x', color='tab:red')
                ax.set_ylim(limits(i))
            ax.set_xlim(limits(j))
            ax.tick_params(labelsize=5)
            if i == m - 1:
                ax.set_xlabel(names[j], fontsize=6)
            if j == 0 and i > 0:
                ax.set_ylabel(names[i], fontsize=6)
    fig.suptitle(title or f'posterior of {theta.shape[0]} particles')
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=80)
    plt.close(fig)
