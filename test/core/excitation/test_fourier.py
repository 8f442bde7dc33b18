"""The start/stop-at-rest Fourier trajectory (`excitation.fourier`)."""

import numpy as np

from sysid_ros.core.excitation import fourier


def test_fourier_trajectory_starts_and_stops_at_rest_and_is_consistent():
    rng = np.random.default_rng(0)
    coeffs = rng.normal(size=(2, 3, 4))
    q0 = np.array([0.3, -0.2, 1.0])
    t = np.linspace(0.0, 3.0, 30001)
    q, qd, qdd = (np.asarray(a) for a in fourier.fourier_trajectory(coeffs, q0, t, 3.0, 0.4))
    for k in (0, -1):
        np.testing.assert_allclose(q[k], q0, atol=1e-12)
        np.testing.assert_allclose(qd[k], 0.0, atol=1e-12)
        np.testing.assert_allclose(qdd[k], 0.0, atol=1e-11)
    # The rates are the derivatives of the positions (central differences, O(dt^2)).
    dt = t[1] - t[0]
    np.testing.assert_allclose((q[2:] - q[:-2]) / (2 * dt), qd[1:-1], atol=1e-4)
    np.testing.assert_allclose((qd[2:] - qd[:-2]) / (2 * dt), qdd[1:-1], atol=1e-3)
    # Linear in the coefficients about q0.
    q2 = np.asarray(fourier.fourier_trajectory(2.0 * coeffs, q0, t, 3.0, 0.4)[0])
    np.testing.assert_allclose(q2 - q0, 2.0 * (q - q0), atol=1e-12)
