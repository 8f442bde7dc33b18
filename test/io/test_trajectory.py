"""Trajectory files: round trips, joint matching by name, errors that name file and key,
resampling and numerical accelerations."""

import dataclasses
import warnings

import numpy as np
import pytest

from sysid_ros.io import trajectory
from sysid_ros.io.errors import InputError
from sysid_ros.io.trajectory import DataError, Trajectory

JOINTS = ('joint1', 'joint2')


def _trajectory(num=200, dt=0.01, names=JOINTS, qdd=False):
    t = np.arange(num) * dt
    freq = np.array([0.7, 1.3])[:len(names)]
    q = np.sin(2 * np.pi * freq * t[:, None])
    qd = 2 * np.pi * freq * np.cos(2 * np.pi * freq * t[:, None])
    acc = -(2 * np.pi * freq) ** 2 * q
    tau = 0.5 * q + 0.1 * qd
    return Trajectory(t=t, q=q, qd=qd, tau=tau, qdd=acc if qdd else None,
                      joint_names=tuple(names))


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return str(path)


def test_data_error_is_an_input_error():
    assert issubclass(DataError, InputError)


@pytest.mark.parametrize('ext', ['npz', 'csv'])
@pytest.mark.parametrize('with_qdd', [False, True])
def test_round_trip(tmp_path, ext, with_qdd):
    traj = _trajectory(qdd=with_qdd)
    path = tmp_path / f'run.{ext}'
    trajectory.save_trajectory(path, traj)
    back = trajectory.load_trajectory(path, JOINTS)
    for key in ('t', 'q', 'qd', 'tau'):
        np.testing.assert_allclose(getattr(back, key), getattr(traj, key), rtol=0, atol=1e-15)
    assert (back.qdd is None) == (not with_qdd)
    assert back.joint_names == JOINTS
    assert back.source == str(path)
    assert not list(tmp_path.glob('*.tmp*'))


def test_columns_are_matched_by_name_in_any_order(tmp_path):
    traj = _trajectory()
    header = ['tau_joint2', 't', 'qd_joint1', 'q_joint2', 'tau_joint1', 'q_joint1',
              'qd_joint2', 'q_extra', 'qd_extra', 'tau_extra']
    columns = {'t': traj.t, 'q_joint1': traj.q[:, 0], 'q_joint2': traj.q[:, 1],
               'qd_joint1': traj.qd[:, 0], 'qd_joint2': traj.qd[:, 1],
               'tau_joint1': traj.tau[:, 0], 'tau_joint2': traj.tau[:, 1],
               'q_extra': traj.t, 'qd_extra': traj.t, 'tau_extra': traj.t}
    path = tmp_path / 'shuffled.csv'
    np.savetxt(path, np.column_stack([columns[h] for h in header]), delimiter=',',
               header=','.join(header), comments='', fmt='%.17g')
    back = trajectory.load_trajectory(path, ('joint2', 'joint1'))
    np.testing.assert_array_equal(back.q, traj.q[:, ::-1])
    np.testing.assert_array_equal(back.tau, traj.tau[:, ::-1])
    # npz with joint_names: reordered too, extra joints ignored.
    npz = _npz(tmp_path / 'named.npz', t=traj.t, q=traj.q[:, ::-1], qd=traj.qd[:, ::-1],
               tau=traj.tau[:, ::-1], joint_names=np.array(['joint2', 'joint1']))
    back = trajectory.load_trajectory(npz, JOINTS)
    np.testing.assert_array_equal(back.qd, traj.qd)


def test_npz_without_names_must_match_the_joint_count(tmp_path):
    traj = _trajectory()
    path = _npz(tmp_path / 'plain.npz', t=traj.t, q=traj.q, qd=traj.qd, tau=traj.tau)
    assert trajectory.load_trajectory(path, JOINTS).joint_names == JOINTS
    with pytest.raises(DataError, match=r'plain\.npz: q: expected 3 columns'):
        trajectory.load_trajectory(path, ('a', 'b', 'c'))


def test_missing_file_key_joint_and_column(tmp_path):
    traj = _trajectory()
    with pytest.raises(DataError, match=r'nope\.npz: file not found'):
        trajectory.load_trajectory(tmp_path / 'nope.npz', JOINTS)
    path = _npz(tmp_path / 'no_tau.npz', t=traj.t, q=traj.q, qd=traj.qd)
    with pytest.raises(DataError, match=r'no_tau\.npz: tau: missing key'):
        trajectory.load_trajectory(path, JOINTS)
    path = tmp_path / 'run.csv'
    trajectory.save_trajectory(path, traj)
    with pytest.raises(DataError, match=r"run\.csv: joint_names: no data for joint 'elbow'"):
        trajectory.load_trajectory(path, ('joint1', 'elbow'))
    text = path.read_text().splitlines()
    text[0] = text[0].replace('qd_joint2', 'qd_other')
    path.write_text('\n'.join(text) + '\n')
    with pytest.raises(DataError, match=r'run\.csv: qd_joint2: missing column'):
        trajectory.load_trajectory(path, JOINTS)
    with pytest.raises(DataError, match=r'unknown data format'):
        trajectory.load_trajectory(_touch(tmp_path), JOINTS)


def _touch(tmp_path):
    path = tmp_path / 'data.txt'
    path.write_text('t\n0\n')
    return path


def test_shape_mismatch_names_the_key(tmp_path):
    traj = _trajectory()
    path = _npz(tmp_path / 'short.npz', t=traj.t, q=traj.q, qd=traj.qd[:-1], tau=traj.tau)
    with pytest.raises(DataError, match=r'short\.npz: qd: expected shape \(200, 2\)'):
        trajectory.load_trajectory(path, JOINTS)
    path = _npz(tmp_path / 'cols.npz', t=traj.t, q=traj.q, qd=traj.qd, tau=traj.tau[:, :1],
                joint_names=np.array(JOINTS))
    with pytest.raises(DataError, match=r'cols\.npz: tau: expected shape'):
        trajectory.load_trajectory(path, JOINTS)


@pytest.mark.parametrize('key', ['q', 'qd', 'tau', 't'])
def test_nonfinite_values_name_key_and_first_row(tmp_path, key):
    traj = _trajectory()
    arrays = {'t': traj.t.copy(), 'q': traj.q.copy(), 'qd': traj.qd.copy(), 'tau': traj.tau.copy()}
    if key == 't':
        arrays['t'][17] = np.inf
    else:
        arrays[key][17, 1] = np.nan
        arrays[key][40, 0] = np.inf
    path = _npz(tmp_path / 'bad.npz', joint_names=np.array(JOINTS), **arrays)
    pattern = (r'bad\.npz: t: non-finite value \(inf\) at row 17' if key == 't' else
               rf"bad\.npz: {key}: non-finite value \(nan\) at row 17, joint 'joint2'")
    with pytest.raises(DataError, match=pattern):
        trajectory.load_trajectory(path, JOINTS)


def test_time_must_increase(tmp_path):
    traj = _trajectory()
    t = traj.t.copy()
    t[50] = t[49]
    path = _npz(tmp_path / 'stuck.npz', t=t, q=traj.q, qd=traj.qd, tau=traj.tau)
    with pytest.raises(DataError, match=r'stuck\.npz: t: time must be strictly increasing; '
                                        r'row 50'):
        trajectory.load_trajectory(path, JOINTS)


def test_nonuniform_time_is_resampled_with_a_warning(tmp_path):
    traj = _trajectory(num=400, dt=0.005)
    rng = np.random.default_rng(0)
    t = traj.t + rng.uniform(-1e-3, 1e-3, traj.t.shape)
    t[0], t[-1] = traj.t[0], traj.t[-1]
    freq = np.array([0.7, 1.3])
    q = np.sin(2 * np.pi * freq * t[:, None])
    path = _npz(tmp_path / 'jitter.npz', t=t, q=q, qd=q, tau=q)
    with pytest.warns(UserWarning, match='non-uniform'):
        back = trajectory.load_trajectory(path, JOINTS)
    steps = np.diff(back.t)
    np.testing.assert_allclose(steps, steps[0], rtol=1e-9)
    np.testing.assert_allclose(back.q, np.sin(2 * np.pi * freq * back.t[:, None]), atol=2e-3)
    # Uniform data: no warning, no change.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        trajectory.validate_trajectory(traj)


def test_resample_changes_rate_and_keeps_signals():
    traj = _trajectory(num=201, dt=0.01)
    fine = trajectory.resample(traj, 400.0)
    assert fine.num_samples == 801
    assert fine.dt == pytest.approx(0.0025)
    np.testing.assert_allclose(fine.q[::4], traj.q, atol=1e-12)


@pytest.mark.parametrize('method,tol', [('savgol', 2e-3), ('central', 5e-3)])
def test_numerical_acceleration(method, tol):
    traj = _trajectory(num=400, dt=0.005, qdd=True)
    exact = traj.qdd
    est = trajectory.with_acceleration(dataclasses.replace(traj, qdd=None), method=method)
    inner = slice(10, -10)
    scale = np.max(np.abs(exact))
    assert np.max(np.abs(est.qdd[inner] - exact[inner])) < tol * scale
    # With noisy velocities, Savitzky-Golay beats central differences.
    rng = np.random.default_rng(1)
    noisy = dataclasses.replace(traj, qdd=None, qd=traj.qd + rng.normal(0, 1e-2, traj.qd.shape))
    errors = {m: np.sqrt(np.mean((trajectory.with_acceleration(noisy, method=m).qdd[inner]
                                  - exact[inner]) ** 2)) for m in ('savgol', 'central')}
    assert errors['savgol'] < 0.5 * errors['central']
    # Measured accelerations are kept.
    assert trajectory.with_acceleration(traj) is traj
    with pytest.raises(ValueError, match='method'):
        trajectory.with_acceleration(dataclasses.replace(traj, qdd=None), method='magic')


def test_slice_and_properties():
    traj = _trajectory(num=101, dt=0.01)
    part = traj.sample_range(10, 60)
    assert part.num_samples == 50 and part.nv == 2
    assert part.duration == pytest.approx(0.49)
    assert part.t[0] == pytest.approx(0.1)


def test_hold_torques_gives_each_period_the_trapezoidal_mean():
    # A ramp sampled at its stamps: the mean over [t_k, t_k+1] is its value at the midpoint.
    traj = _trajectory(num=11, dt=0.1)
    ramp = dataclasses.replace(traj, tau=np.stack([2.0 * traj.t, -traj.t + 1.0], axis=1))
    held = trajectory.hold_torques(ramp)
    mid = 0.5 * (ramp.t[:-1] + ramp.t[1:])
    np.testing.assert_allclose(held.tau[:-1], np.stack([2.0 * mid, -mid + 1.0], axis=1))
    np.testing.assert_array_equal(held.tau[-1], ramp.tau[-1])
    np.testing.assert_array_equal(held.q, ramp.q)
    assert trajectory.hold_torques(ramp, 'held') is ramp      # already the convention


def test_all_names_importable():
    for name in trajectory.__all__:
        assert hasattr(trajectory, name)
