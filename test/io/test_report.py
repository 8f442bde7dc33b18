"""Report figures (io.report): PNG files are written, valid and of sensible size; every axis
label names its unit."""

import io
import re
import struct

import numpy as np
import pytest

from sysid_ros.io import report


def _png_size(path):
    """(width, height) from a PNG's IHDR chunk; fails on anything that is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    assert data[12:16] == b'IHDR'
    return struct.unpack('>II', data[16:24])


def test_trajectory_density_png(tmp_path):
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 3.0, 301)
    clean = np.stack([np.sin(t), np.cos(t)], axis=-1)
    simulated = clean + 0.1 * rng.standard_normal((40, 301, 2))
    simulated[3] = np.nan                                  # a diverged rollout is skipped
    measured = clean + 0.05 * rng.standard_normal((5, 301, 2))
    path = tmp_path / 'density.png'
    report.plot_trajectory_density(path, t, simulated, measured, ['q1 [rad]', 'q2 [rad]'])
    width, height = _png_size(path)
    assert (width, height) == (800, 440)
    assert path.stat().st_size > 10_000                  # a drawn figure, not a blank one


def test_trajectory_density_shape_mismatch(tmp_path):
    with pytest.raises(ValueError, match='disagree'):
        report.plot_trajectory_density(tmp_path / 'x.png', np.arange(5.0), np.zeros((2, 5, 2)),
                                       np.zeros((1, 4, 2)))


def test_posterior_pair_plot_png(tmp_path):
    rng = np.random.default_rng(1)
    theta = rng.normal([0.3, 0.01, -0.1], [0.02, 0.002, 0.01], (64, 3))
    path = tmp_path / 'posterior.png'
    report.plot_posterior(path, theta, ['m [kg]', 'I [kg m^2]', 'c [m]'],
                          bounds=[(0.05, 0.5), (0.002, 0.03), (-0.2, 0.2)],
                          reference=[0.3, 0.01, -0.1])
    width, height = _png_size(path)
    assert width == height and 300 <= width <= 2000
    assert path.stat().st_size > 5_000
    with pytest.raises(ValueError, match='expected 3 names'):
        report.plot_posterior(path, theta, ['a', 'b'])


def _labels(fig):
    """(x labels, y labels) of a figure's axes that have one."""
    return ([ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()],
            [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()])


def test_every_axis_label_carries_a_unit():
    rng = np.random.default_rng(2)
    t = 0.01 * np.arange(1, 21)
    measured = rng.normal(size=(12, 20, 2))
    predicted = measured + 0.1 * rng.normal(size=(30, 12, 20, 2))
    predicted[4] = np.inf                                # a diverged particle is left out
    figures = [
        report.prediction_figure(t, measured, predicted, ['q j1 [rad]', 'qd j1 [rad/s]']),
        report.convergence_figure(np.geomspace(10.0, 0.1, 30)),
        report.posterior_figure(rng.normal(size=(300, 2)), ['m [kg]', 'c [N m]']),
        report.trajectory_density_figure(t, predicted[:, 0], measured[:2], ['a [m]', 'b [m]']),
    ]
    for fig in figures:
        xlabels, ylabels = _labels(fig)
        assert xlabels and ylabels
        assert all(re.search(r'\[[^]]+\]', label) for label in xlabels + ylabels), (
            xlabels, ylabels)
    # The prediction shows the first 8 of 12 segments back to back: 8 x 0.2 s.
    assert figures[0].axes[0].get_xlim()[1] >= 1.6
    report.save_figure(figures[0], io.BytesIO())


def test_prediction_and_corner_reject_bad_input():
    with pytest.raises(ValueError, match='expected 2 labels'):
        report.prediction_figure(np.arange(1.0, 4.0), np.zeros((2, 3, 2)),
                                 np.zeros((5, 2, 3, 2)), ['q [rad]'])
    with pytest.raises(ValueError, match='needs more than 3 finite particles'):
        report.posterior_figure(np.ones((3, 3)), ['a', 'b', 'c'])
