"""`simulation.joint_sines`: a smooth joint motion that stays inside the position limits
(with the margin) and under the speed bound, with consistent derivatives."""

import numpy as np

from sysid_ros.io import simulation

Q_MIN = np.array([-2.9, -1.76, -0.0175, -np.inf])
Q_MAX = np.array([2.9, 1.76, 3.75, np.inf])
V_MAX = np.array([2.175, 0.5, 2.61, 0.0])       # 0: no speed bound


def test_joint_sines_stay_inside_the_limits():
    t = np.arange(0.0, 60.0, 1e-3)
    q, qd, qdd = simulation.joint_sines(t, Q_MIN, Q_MAX, V_MAX, np.random.default_rng(0),
                                        num_sines=5, max_frequency=1.0, margin=0.1,
                                        speed=0.5)
    assert q.shape == qd.shape == qdd.shape == (len(t), 4)
    lo = np.where(np.isfinite(Q_MIN), Q_MIN, -np.pi)
    hi = np.where(np.isfinite(Q_MAX), Q_MAX, np.pi)
    margin = 0.1 * 0.5 * (hi - lo)
    assert np.all(q >= lo + margin - 1e-12) and np.all(q <= hi - margin + 1e-12)
    speed = np.max(np.abs(qd), axis=0)
    assert np.all(speed[:3] <= 0.5 * V_MAX[:3] + 1e-12)
    # Joint 2's slow limit binds: it moves far less than its range allows.
    assert np.ptp(q[:, 1]) < 0.5 * np.ptp(q[:, 0])
    # Derivatives: central differences.
    np.testing.assert_allclose(np.gradient(q, t, axis=0)[1:-1], qd[1:-1], atol=1e-4)
    np.testing.assert_allclose(np.gradient(qd, t, axis=0)[1:-1], qdd[1:-1], atol=1e-3)


def test_joint_sines_repeat_for_one_seed():
    t = np.linspace(0.0, 2.0, 11)
    first = simulation.joint_sines(t, Q_MIN, Q_MAX, V_MAX, np.random.default_rng(4))
    again = simulation.joint_sines(t[5:], Q_MIN, Q_MAX, V_MAX, np.random.default_rng(4))
    np.testing.assert_array_equal(first[0][5:], again[0])
