"""The realistic-arm recorder (io.realistic_arm): its recordings obey the truth's inverse
dynamics in Pinocchio, are reproducible, and each effect changes what it claims to."""

import numpy as np
import pinocchio as pin
import pytest

from sysid_ros.io import realistic_arm
from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io.realistic_arm import ALL_ON, NO_EFFECTS, RealisticArm

JOINTS = [f'panda_joint{i}' for i in range(1, 8)]


@pytest.fixture(scope='module')
def arm():
    return RealisticArm('example-robot-data:panda', JOINTS, 'panda_link7')


@pytest.fixture(scope='module')
def recordings(arm):
    truth = arm.draw_truth(np.random.default_rng(4))
    return truth, {name: arm.record(truth, effects, duration=4.0, rate=100.0, seed=4)
                   for name, effects in (('none', NO_EFFECTS),
                                         ('gain', ALL_ON.only('gain_error')),
                                         ('jitter', ALL_ON.only('jitter')))}


def _torque_residual(arm, truth, traj, payload: bool, held: bool = True) -> np.ndarray:
    """Per-joint RMS of measured minus Pinocchio's inverse-dynamics torque of the truth
    (without its payload unless `payload`), friction included, accelerations from a
    Savitzky-Golay fit; each effort held over its sample period (the mean of the torques at
    its two ends) or, unless `held`, the torque at its stamp."""
    smooth = trajectory_io.with_acceleration(traj)
    model = arm.payload_model(truth, 0.0) if payload else arm.model
    data = model.createData()
    predicted = np.stack([pin.rnea(model, data, q, qd, qdd) for q, qd, qdd in
                          zip(smooth.q, smooth.qd, smooth.qdd)])
    predicted += truth.damping * smooth.qd + truth.coulomb * np.tanh(smooth.qd / 1e-2)
    predicted = 0.5 * (predicted[:-1] + predicted[1:]) if held else predicted[:-1]
    return np.sqrt(np.mean((traj.tau[:-1] - predicted)[10:-10] ** 2, axis=0))


def test_the_recording_obeys_the_truths_dynamics(arm, recordings):
    truth, traj = recordings[0], recordings[1]['none']
    with_payload = _torque_residual(arm, truth, traj, payload=True)
    without = _torque_residual(arm, truth, traj, payload=False)
    scale = np.sqrt(np.mean(traj.tau ** 2, axis=0))
    # The shoulder and elbow joints carry the payload's gravity: the truth explains their
    # torques to a few percent, the same arm without the payload does not.
    assert np.all(with_payload[[1, 3]] < 0.03 * scale[[1, 3]]), with_payload / scale
    assert np.all(without[[1, 3]] > 5 * with_payload[[1, 3]]), (without, with_payload)


def test_efforts_are_held_over_their_sample_period(arm, monkeypatch):
    # Noise-free, an effort is the torque over its sample period (the `Trajectory`
    # convention the fits read); taken as the torque at its stamp it lags the states by half
    # a sample (measured on joints 1-4: 0.013-0.023 N m held, 0.13-0.26 N m at the stamps).
    for name in ('POSITION_NOISE', 'VELOCITY_NOISE', 'TORQUE_NOISE'):
        monkeypatch.setattr(realistic_arm, name, 0.0)
    truth = arm.draw_truth(np.random.default_rng(4))
    traj = arm.record(truth, NO_EFFECTS, duration=4.0, rate=100.0, seed=4)
    held = _torque_residual(arm, truth, traj, payload=True)
    at_stamps = _torque_residual(arm, truth, traj, payload=True, held=False)
    assert np.all(held[:4] < 0.2 * at_stamps[:4]), (held, at_stamps)


def test_recordings_are_reproducible_and_effects_change_what_they_claim(arm, recordings):
    truth, traj = recordings
    again = arm.record(truth, NO_EFFECTS, duration=4.0, rate=100.0, seed=4)
    np.testing.assert_array_equal(again.tau, traj['none'].tau)
    # Gains: the same motion, each joint's torques scaled by one factor within a few stds.
    np.testing.assert_array_equal(traj['gain'].q, traj['none'].q)
    difference = traj['gain'].tau - traj['none'].tau
    true_tau = traj['none'].tau
    factor = np.sum(difference * true_tau, axis=0) / np.sum(true_tau ** 2, axis=0)
    assert np.all(np.abs(factor) < 4 * ALL_ON.gain_error) and np.any(factor != 0.0)
    # Jitter: the same values at other stamps.
    np.testing.assert_array_equal(traj['jitter'].tau, traj['none'].tau)
    offsets = traj['jitter'].t - traj['none'].t
    assert 0.5e-3 < np.std(offsets) < 2e-3
