"""Logs in the user's own layout (io.log_layout, `data.layout`): a foreign CSV with its own
units and column names, currents scaled by `data.torque_gains`, and a real KUKA recording read
through a layout instead of its dataset parser."""

import glob
import os

import numpy as np
import pytest

from sysid_ros.io import log_layout, pipeline
from sysid_ros.io.config import ConfigError, DataConfig, from_dict
from sysid_ros.io.trajectory import DataError

KUKA = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'shared', 'data',
                    'kuka-lwr4-flobaroid', 'HW')
GAINS = (11.0, 3.5)


def _problem(layout, rate=100.0, **data):
    return pipeline.build_problem(from_dict({
        'model': {'builder': 'double_pendulum'},
        'parameters': {'link2': {'mass': {'min': 0.05, 'max': 0.5}}},
        'data': {'rate': rate, 'torque_gains': list(GAINS), 'layout': layout, **data}}))


def _truth(num=400, rate=100.0):
    t = 3.0 + np.arange(num) / rate
    q = np.stack([0.5 * np.sin(t), 0.3 * np.cos(2 * t)], axis=1)
    qd = np.stack([0.5 * np.cos(t), -0.6 * np.sin(2 * t)], axis=1)
    current = np.stack([np.sin(3 * t), 0.2 + 0.1 * t], axis=1)
    return t, q, qd, current


def test_a_foreign_csv_is_read_in_model_units_with_torques_from_currents(tmp_path):
    t, q, qd, current = _truth()
    # Columns in another order, an extra column, milliseconds, degrees, names by template.
    path = tmp_path / 'log.csv'
    columns = {'motor_A_2': current[:, 1], 'stamp_ms': 1e3 * t, 'pos_joint2': np.degrees(q[:, 1]),
               'pos_joint1': np.degrees(q[:, 0]), 'temperature': 30 + 0 * t,
               'vel1': np.degrees(qd[:, 0]), 'vel2': np.degrees(qd[:, 1]),
               'motor_A_1': current[:, 0]}
    np.savetxt(path, np.column_stack(list(columns.values())), delimiter=';',
               header=';'.join(columns), comments='', fmt='%.17g')
    problem = _problem({'time': 'stamp_ms', 'time_unit': 'ms', 'position': 'pos_{joint}',
                        'velocity': 'vel{index}', 'effort': ['motor_A_1', 'motor_A_2'],
                        'angle_unit': 'deg', 'delimiter': ';'})
    (traj,) = pipeline.prepare_trajectories(problem, [str(path)])
    np.testing.assert_allclose(traj.t, t - t[0], atol=1e-12)
    np.testing.assert_allclose(traj.q, q, atol=1e-12)
    np.testing.assert_allclose(traj.qd, qd, atol=1e-12)
    np.testing.assert_allclose(traj.tau, current * np.asarray(GAINS), atol=1e-12)


def test_efforts_read_at_their_stamps_are_held_as_their_periods_means(tmp_path):
    t, q, qd, current = _truth()
    path = tmp_path / 'log.npz'
    np.savez(path, t=t, q=q, qd=qd, i=current)
    layout = {'time': 't', 'position': 'q', 'velocity': 'qd', 'effort': 'i'}
    (held,) = pipeline.prepare_trajectories(_problem(layout), [str(path)])
    (stamped,) = pipeline.prepare_trajectories(
        _problem(layout, torque_samples='instantaneous'), [str(path)])
    torque = current * np.asarray(GAINS)
    np.testing.assert_allclose(held.tau, torque, atol=1e-12)
    np.testing.assert_allclose(stamped.tau[:-1], 0.5 * (torque[:-1] + torque[1:]), atol=1e-12)


def test_without_velocities_they_are_differenced_from_positions(tmp_path):
    t, q, qd, current = _truth()
    path = tmp_path / 'log.npz'
    np.savez(path, time=t, q=q, i1=current[:, 0], i2=current[:, 1])
    problem = _problem({'time': 'time', 'position': 'q', 'effort': ['i1', 'i2']})
    (traj,) = pipeline.prepare_trajectories(problem, [str(path)])
    # Central differences at 100 Hz of motions at up to 2 rad/s: error ~ (h w)^2 / 6 of qd.
    np.testing.assert_allclose(traj.qd[1:-1], qd[1:-1], atol=1e-4)
    np.testing.assert_allclose(traj.tau, current * np.asarray(GAINS), atol=1e-12)


@pytest.mark.skipif(not glob.glob(os.path.join(KUKA, 'measurements_*.npz')),
                    reason='the KUKA LWR4+ recordings of ../shared/data are not on this machine')
def test_a_real_kuka_recording_reads_through_a_layout_as_recorded():
    path = sorted(glob.glob(os.path.join(KUKA, 'measurements_*.npz')))[0]
    joints = [f'lwr_{i}_joint' for i in range(7)]
    layout = log_layout.parse_layout({'time': 'times', 'position': 'positions',
                                      'velocity': 'velocities', 'effort': 'torques'})
    with pytest.warns(UserWarning, match='non-uniform time steps'):     # host stamps jitter
        traj = log_layout.read_log(path, layout, joints, [True] * 7)
    raw = np.load(path)
    t = raw['times'] - raw['times'][0]
    for key, field in (('q', 'positions'), ('qd', 'velocities'), ('tau', 'torques')):
        expected = np.stack([np.interp(traj.t, t, raw[field][:, j]) for j in range(7)], axis=1)
        np.testing.assert_allclose(getattr(traj, key), expected, atol=1e-12)


@pytest.mark.parametrize('layout, key, message', [
    ({'time': 't', 'position': 'q', 'effort': 'e', 'colour': 1}, 'colour', 'unknown key'),
    ({'time': 't', 'position': 'q'}, 'effort', 'missing'),
    ({'time': 't', 'position': 'q', 'effort': 'e', 'time_unit': 'min'}, 'time_unit',
     'one of s, ms, us, ns'),
    ({'time': 't', 'position': 'q_{name}', 'effort': 'e'}, 'position', 'template'),
    ({'time': 1.5, 'position': 'q', 'effort': 'e'}, 'time', 'column name or index'),
])
def test_a_bad_layout_names_its_key(layout, key, message):
    with pytest.raises(ConfigError, match=f'data.layout.{key}: .*{message}'):
        DataConfig.from_dict({'layout': layout})


def test_a_column_the_log_lacks_is_named_with_what_it_has(tmp_path):
    path = tmp_path / 'log.csv'
    path.write_text('time,a1,a2,e1,e2\n0,0,0,0,0\n0.01,0,0,0,0\n0.02,0,0,0,0\n')
    problem = _problem({'time': 'time', 'position': 'p{index}', 'effort': 'e{index}'})
    with pytest.raises(DataError, match=r"position: no column 'p1'; the header has time, a1"):
        pipeline.prepare_trajectories(problem, [str(path)])
    headless = _problem({'time': 0, 'position': [1, 2], 'effort': [3, 9], 'header': False})
    path.write_text('0,0,0,0,0\n0.01,0,0,0,0\n0.02,0,0,0,0\n')
    with pytest.raises(DataError, match='effort: column 9, but rows have 5 columns'):
        pipeline.prepare_trajectories(headless, [str(path)])
