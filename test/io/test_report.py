"""Report figures (io.report): PNG files are written, valid and of sensible size."""

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
