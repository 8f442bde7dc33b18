"""Parsers of the public datasets (io.datasets) and `sysid convert`, on small fixtures written
in each dataset's published format."""

import numpy as np
import pytest
import yaml

from sysid_ros.io import datasets
from sysid_ros.io.trajectory import DataError

RATE = 400.0
L1, L2 = 600.0, 450.0          # [px] link lengths as in the IBM recordings
PIVOT = np.array([1200.0, 1220.0])


def _markers(q1, q2):
    """Pixel markers of a pendulum at angles (frames of the module doc: image y = -z)."""
    phi2 = q1 + q2
    green = PIVOT + L1 * np.stack([-np.sin(q1), np.cos(q1)], axis=1)
    blue = green + L2 * np.stack([-np.sin(phi2), np.cos(phi2)], axis=1)
    return np.concatenate([np.broadcast_to(PIVOT, green.shape), green, blue], axis=1)


def _ibm_angles(num=800):
    t = np.arange(num) / RATE
    # Link 1 turns over (crosses +-pi), link 2 swings: tests the unwrapping.
    return t, 1.0 + 4.0 * t, 0.8 * np.sin(2 * np.pi * 1.5 * t), 4.0, \
        0.8 * 2 * np.pi * 1.5 * np.cos(2 * np.pi * 1.5 * t)


@pytest.fixture
def ibm_folder(tmp_path):
    folder = tmp_path / 'ibm'
    (folder / 'dpc_dataset_csv').mkdir(parents=True)
    t, q1, q2, _, _ = _ibm_angles()
    np.savetxt(folder / 'dpc_dataset_csv' / '0.csv', np.round(_markers(q1, q2)), fmt='%d',
               delimiter=',')
    np.savetxt(folder / 'dpc_dataset_csv' / '2.csv', np.round(_markers(-q1, q2))[:400],
               fmt='%d', delimiter=',')
    return folder


def test_pendulum_angles_invert_marker_geometry():
    # Both links turn over more than once (the angles are unwrapped, starting within +-pi).
    q1 = np.linspace(-3.0, 9.0, 200)
    q2 = np.linspace(3.0, -8.0, 200)
    np.testing.assert_allclose(datasets.pendulum_angles(_markers(q1, q2)),
                               np.stack([q1, q2], 1), atol=1e-9)


def test_ibm_run_recovers_angles_and_velocities(ibm_folder):
    trajs = datasets.load_dataset('ibm-double-pendulum', ibm_folder)
    assert [len(t.t) for t in trajs] == [800, 400]
    traj = trajs[0]
    t, q1, q2, qd1, qd2 = _ibm_angles()
    assert traj.joint_names == ('joint1', 'joint2')
    assert traj.dt == pytest.approx(1.0 / RATE)
    np.testing.assert_array_equal(traj.tau, 0.0)
    # Pixel rounding: about 0.5 / 450 rad of angle noise; the fit smooths it.
    np.testing.assert_allclose(traj.q, np.stack([q1, q2], 1), atol=3e-3)
    inner = slice(20, -20)
    np.testing.assert_allclose(traj.qd[inner, 0], qd1, atol=0.15)
    np.testing.assert_allclose(traj.qd[inner, 1], qd2[inner], atol=0.3)
    assert 'Savitzky-Golay' in datasets.describe('ibm-double-pendulum')


def test_ibm_bad_files(tmp_path, ibm_folder):
    bad = tmp_path / 'bad.csv'
    bad.write_text('1,2,3,4,5\n' * 50)
    with pytest.raises(DataError, match='bad.csv: expected 6 columns'):
        datasets.read_ibm_run(bad)
    same = np.zeros((50, 6))
    np.savetxt(tmp_path / 'same.csv', same, fmt='%d', delimiter=',')
    with pytest.raises(DataError, match=r'same.csv: row 0: markers of link 1'):
        datasets.read_ibm_run(tmp_path / 'same.csv')
    with pytest.raises(DataError, match=r"run '5' not found; available: 0, 2"):
        datasets.load_dataset('ibm-double-pendulum', ibm_folder, [5])
    with pytest.raises(DataError, match='no kuka-lwr4 runs'):
        datasets.load_dataset('kuka-lwr4', ibm_folder)
    with pytest.raises(DataError, match='unknown dataset'):
        datasets.load_dataset('atlas', ibm_folder)


@pytest.fixture
def kuka_folder(tmp_path):
    folder = tmp_path / 'kuka' / 'HW'
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    num = 201
    times = 1.46e9 + np.arange(num) * 0.005 + rng.uniform(-1e-3, 1e-3, num)
    times[0], times[-1] = 1.46e9, 1.46e9 + 1.0
    q = np.sin(np.linspace(0, 3, num))[:, None] * np.arange(1, 8)
    for run in (1, 3):
        np.savez(folder / f'measurements_{run}.npz', times=times, positions=q * run,
                 velocities=2 * q, accelerations=3 * q, torques=4 * q,
                 target_positions=q)
    return folder.parent


def test_kuka_runs(kuka_folder):
    assert datasets.list_runs('kuka-lwr4', kuka_folder) == ['1', '3']
    first, third = datasets.load_dataset('kuka-lwr4', kuka_folder, ['1', 3])
    assert first.joint_names == datasets.KUKA_JOINTS
    assert third.num_samples == 201 and third.t[0] == 0.0
    np.testing.assert_allclose(np.diff(third.t), 0.005, rtol=1e-9)
    # Linear interpolation of a smooth signal onto the jitter-free grid.
    raw = np.load(kuka_folder / 'HW' / 'measurements_3.npz')
    expected = np.interp(third.t, raw['times'] - raw['times'][0], raw['torques'][:, 6])
    np.testing.assert_allclose(third.tau[:, 6], expected)
    assert third.qdd is not None and np.allclose(third.qdd, 0.75 * third.tau)


def test_kuka_missing_key(tmp_path):
    (tmp_path / 'HW').mkdir()
    np.savez(tmp_path / 'HW' / 'measurements_1.npz', times=np.arange(5.0),
             positions=np.zeros((5, 7)))
    with pytest.raises(DataError, match='measurements_1.npz: velocities: missing'):
        datasets.load_dataset('kuka-lwr4', tmp_path)


@pytest.fixture
def panda_folder(tmp_path):
    folder = tmp_path / 'panda'
    (folder / 'rbt_log').mkdir(parents=True)
    num = 500
    t = np.arange(num) * 1e-3
    t[100:] += 4e-3                                   # a logging hiccup
    q = np.cos(t)[:, None] + np.arange(7)
    for name, values in (('time', t), ('positions', q), ('velocity', -np.sin(t)[:, None]
                                                         * np.ones(7)),
                         ('torques', 10 * q)):
        np.savetxt(folder / 'rbt_log' / f'exciting_traj_{name}.txt', values.reshape(-1))
    return folder


def test_panda_run(panda_folder):
    (traj,) = datasets.load_dataset('panda-gaz2019', panda_folder)
    assert traj.joint_names == datasets.PANDA_JOINTS
    np.testing.assert_allclose(np.diff(traj.t), 1e-3, rtol=1e-9)
    assert traj.t[-1] == pytest.approx(0.503)
    raw_t = np.loadtxt(panda_folder / 'rbt_log' / 'exciting_traj_time.txt')
    np.testing.assert_allclose(traj.q[:, 3], np.interp(traj.t, raw_t, np.cos(raw_t) + 3))
    # Away from the hiccup the linear interpolation of the smooth signal is near exact.
    np.testing.assert_allclose(traj.q[:90], np.cos(traj.t[:90])[:, None] + np.arange(7),
                               atol=1e-12)
    np.testing.assert_allclose(traj.tau, 10 * traj.q)


def test_panda_wrong_count(panda_folder):
    path = panda_folder / 'rbt_log' / 'exciting_traj_torques.txt'
    path.write_text('\n'.join(['1.0'] * 13))
    with pytest.raises(DataError, match='exciting_traj_torques.txt: expected a multiple of 7'):
        datasets.read_panda_run(panda_folder)


def test_convert_writes_bag_with_provenance(ibm_folder, tmp_path):
    from rosbags.rosbag2 import Reader

    from sysid_ros import cli

    out = tmp_path / 'ibm_bag'
    assert cli.main(['convert', '--dataset', 'ibm-double-pendulum', '--source',
                     str(ibm_folder), '--out', str(out), '--runs', '2', '0']) == 0
    with Reader(out) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
    info = yaml.safe_load((out / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    custom = info['custom_data']
    assert counts == {'/joint_states': 1200}
    assert custom['sysid_convert.dataset'] == 'ibm-double-pendulum'
    assert custom['sysid_convert.runs'] == '2,0'
    assert 'atan2' in custom['sysid_convert.preprocessing']
    # A second conversion never overwrites the bag.
    assert cli.main(['convert', '--dataset', 'ibm-double-pendulum', '--source',
                     str(ibm_folder), '--out', str(out)]) == 2
