"""Parsers of three public real-robot datasets into `Trajectory` objects.

Each parser reads a dataset folder laid out as published (see `../shared/data/*/README.md`)
and returns one `Trajectory` per run, plus `describe(dataset)`, the preprocessing in words
(stored in a converted bag's metadata by `sysid convert`).

IBM double pendulum (`ibm-double-pendulum`, folder with `dpc_dataset_csv/<run>.csv`):
  rows of marker pixels `x_red, y_red, x_green, y_green, x_blue, y_blue` at 400 Hz (red =
  pivot, green = elbow, blue = tip; image y grows downward). Joint angles, in the frames of
  `core.model.builders.double_pendulum` (joints about +y, links hanging along -z, q = 0 hanging
  down): image x is world x and image y is world -z, so a link pointing along the pixel
  vector (dx, dy) has absolute angle phi = atan2(-dx, dy) (R_y(phi) (0, 0, -1) = (-sin phi,
  0, -cos phi)); q1 = phi(green - red), q2 = phi(blue - green) - q1, both unwrapped (no
  2 pi jumps). Velocities are the first derivative of a Savitzky-Golay fit (cubic, window
  `trajectory.savgol_window(dt, IBM_SMOOTHING_S)`), positions are the same fit's values
  (pixel quantisation is about 1/600 rad on link 1). The pendulum is unactuated: tau = 0.
  t = k / 400 s from the first row.
KUKA LWR4+ (`kuka-lwr4`, folder with `HW/measurements_<run>.npz`): positions, velocities,
  accelerations and torques as recorded, joints `lwr_0_joint` .. `lwr_6_joint` (the
  FloBaRoID URDFs' names); t = times - times[0]. The host stamps jitter (steps 3.2 to 6.8 ms
  around 5 ms), so the run is resampled onto a uniform `KUKA_RATE` grid by linear
  interpolation. Nothing is filtered. (A bag written by `sysid convert` holds JointState
  messages, which have no acceleration field: the recorded accelerations are not in it.)
Franka Panda (`panda-gaz2019`, folder with `rbt_log/exciting_traj_*.txt`): one run of
  positions, velocities and torques (7 values per sample, sample-major), joints
  `panda_joint1` .. `panda_joint7`; the logged stamps jitter (up to 8.8 ms), so the run is
  resampled onto a uniform `PANDA_RATE` grid by linear interpolation. No accelerations.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np
from scipy.signal import savgol_filter

from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io.trajectory import DataError, Trajectory

__all__ = [
    'DATASETS',
    'IBM_RATE',
    'IBM_SMOOTHING_S',
    'KUKA_JOINTS',
    'KUKA_RATE',
    'PANDA_JOINTS',
    'PANDA_RATE',
    'describe',
    'list_runs',
    'load_dataset',
    'pendulum_angles',
    'read_ibm_run',
    'read_kuka_run',
    'read_panda_run',
]

IBM_RATE = 400.0              # [Hz] camera frame rate of the IBM recordings
IBM_SMOOTHING_S = 0.04        # [s] Savitzky-Golay window of the angle fit
IBM_JOINTS = ('joint1', 'joint2')
KUKA_RATE = 200.0             # [Hz] uniform grid of the resampled KUKA runs
KUKA_JOINTS = tuple(f'lwr_{i}_joint' for i in range(7))
PANDA_JOINTS = tuple(f'panda_joint{i}' for i in range(1, 8))
PANDA_RATE = 1000.0           # [Hz] uniform grid of the resampled Panda log
_PANDA_FILES = {'t': 'exciting_traj_time.txt', 'q': 'exciting_traj_positions.txt',
                'qd': 'exciting_traj_velocity.txt', 'tau': 'exciting_traj_torques.txt'}
_KUKA_KEYS = {'t': 'times', 'q': 'positions', 'qd': 'velocities', 'qdd': 'accelerations',
              'tau': 'torques'}


def pendulum_angles(markers: np.ndarray) -> np.ndarray:
    """(T, 6) marker pixels (red, green, blue x/y) -> (T, 2) unwrapped joint angles [rad].

    See the module doc for the frames: q1 absolute angle of link 1, q2 relative to link 1.
    """
    markers = np.asarray(markers, dtype=float)
    link1 = markers[:, 2:4] - markers[:, 0:2]
    link2 = markers[:, 4:6] - markers[:, 2:4]
    phi1 = np.unwrap(np.arctan2(-link1[:, 0], link1[:, 1]))
    phi2 = np.unwrap(np.arctan2(-link2[:, 0], link2[:, 1]))
    return np.stack([phi1, phi2 - phi1], axis=1)


def read_ibm_run(path: str | os.PathLike) -> Trajectory:
    """One IBM marker file -> Trajectory of (q1, q2) at 400 Hz (see the module doc).

    Raises:
      DataError: naming the file, for a wrong column count, non-numbers, too few rows, or
        coinciding markers (a link of zero pixel length).
    """
    path = os.fspath(path)
    try:
        markers = np.loadtxt(path, delimiter=',', ndmin=2)
    except (OSError, ValueError) as exc:
        raise DataError(f'{path}: expected comma-separated integer pixels x_red, y_red, '
                        f'x_green, y_green, x_blue, y_blue without a header ({exc})') from None
    if markers.shape[1] != 6:
        raise DataError(f'{path}: expected 6 columns (x_red, y_red, x_green, y_green, x_blue, '
                        f'y_blue), got {markers.shape[1]}')
    dt = 1.0 / IBM_RATE
    window = trajectory_io.savgol_window(dt, IBM_SMOOTHING_S)
    if markers.shape[0] <= window:
        raise DataError(f'{path}: expected more than {window} rows, got {markers.shape[0]}')
    for name, a, b in (('link 1 (red-green)', 0, 2), ('link 2 (green-blue)', 2, 4)):
        length = np.hypot(*(markers[:, b:b + 2] - markers[:, a:a + 2]).T)
        if np.any(length == 0):
            row = int(np.flatnonzero(length == 0)[0])
            raise DataError(f'{path}: row {row}: markers of {name} coincide; cannot compute '
                            'an angle')
    angles = pendulum_angles(markers)
    q = savgol_filter(angles, window, 3, axis=0)
    qd = savgol_filter(angles, window, 3, deriv=1, delta=dt, axis=0)
    t = np.arange(markers.shape[0]) * dt
    return trajectory_io.validate_trajectory(Trajectory(
        t=t, q=q, qd=qd, tau=np.zeros_like(q), joint_names=IBM_JOINTS, source=path))


def read_kuka_run(path: str | os.PathLike) -> Trajectory:
    """One FloBaRoID `measurements_<run>.npz` -> Trajectory (200 Hz, measured qdd)."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in _KUKA_KEYS.values() if k not in data.files]
            if missing:
                raise DataError(f'{path}: {missing[0]}: missing; expected arrays '
                                f'{", ".join(_KUKA_KEYS.values())}')
            arrays = {ours: np.asarray(data[theirs], dtype=float)
                      for ours, theirs in _KUKA_KEYS.items()}
    except (OSError, ValueError) as exc:
        raise DataError(f'{path}: cannot read as .npz ({exc})') from None
    t = arrays['t']
    if t.ndim != 1 or t.size < 3 or not np.all(np.diff(t) > 0):
        raise DataError(f'{path}: times: expected at least 3 strictly increasing time stamps')
    raw = Trajectory(**dict(arrays, t=t - t[0]), joint_names=KUKA_JOINTS, source=path)
    for key in ('q', 'qd', 'qdd', 'tau'):
        if getattr(raw, key).shape != (t.size, len(KUKA_JOINTS)):
            raise DataError(f'{path}: {_KUKA_KEYS[key]}: expected shape ({t.size}, '
                            f'{len(KUKA_JOINTS)}), got {getattr(raw, key).shape}')
    return trajectory_io.validate_trajectory(trajectory_io.resample(raw, KUKA_RATE))


def _read_column(path: str, per_sample: int) -> np.ndarray:
    try:
        values = np.loadtxt(path, ndmin=1)
    except (OSError, ValueError) as exc:
        raise DataError(f'{path}: expected one number per line ({exc})') from None
    if values.ndim != 1 or values.size % per_sample:
        raise DataError(f'{path}: expected a multiple of {per_sample} numbers (one per line, '
                        f'sample-major), got {values.size}')
    return values.reshape(-1, per_sample) if per_sample > 1 else values


def read_panda_run(folder: str | os.PathLike) -> Trajectory:
    """The Panda log in `folder/rbt_log/` -> Trajectory resampled to PANDA_RATE."""
    folder = os.fspath(folder)
    arrays = {}
    for key, name in _PANDA_FILES.items():
        arrays[key] = _read_column(os.path.join(folder, 'rbt_log', name),
                                   1 if key == 't' else len(PANDA_JOINTS))
    num = arrays['t'].shape[0]
    for key in ('q', 'qd', 'tau'):
        if arrays[key].shape[0] != num:
            raise DataError(f'{os.path.join(folder, "rbt_log", _PANDA_FILES[key])}: expected '
                            f'{num} samples (as {_PANDA_FILES["t"]}), got '
                            f'{arrays[key].shape[0]}')
    t = arrays['t']
    if num < 3 or not np.all(np.diff(t) > 0):
        raise DataError(f'{os.path.join(folder, "rbt_log", _PANDA_FILES["t"])}: expected at '
                        'least 3 strictly increasing time stamps')
    raw = Trajectory(t=t - t[0], q=arrays['q'], qd=arrays['qd'], tau=arrays['tau'],
                     joint_names=PANDA_JOINTS,
                     source=os.path.join(folder, 'rbt_log'))
    return trajectory_io.validate_trajectory(trajectory_io.resample(raw, PANDA_RATE))


DATASETS = ('ibm-double-pendulum', 'kuka-lwr4', 'panda-gaz2019')


def list_runs(dataset: str, source: str | os.PathLike) -> list[str]:
    """Run names available in a dataset folder, sorted numerically ('0', '1', ...)."""
    source = os.fspath(source)
    if dataset == 'panda-gaz2019':
        return ['0'] if os.path.isdir(os.path.join(source, 'rbt_log')) else []
    if dataset == 'ibm-double-pendulum':
        folder, prefix, suffix = os.path.join(source, 'dpc_dataset_csv'), '', '.csv'
    elif dataset == 'kuka-lwr4':
        folder, prefix, suffix = os.path.join(source, 'HW'), 'measurements_', '.npz'
    else:
        raise DataError(f'unknown dataset {dataset!r}; expected one of {", ".join(DATASETS)}')
    if not os.path.isdir(folder):
        return []
    names = [f[len(prefix):-len(suffix)] for f in os.listdir(folder)
             if f.startswith(prefix) and f.endswith(suffix)]
    return sorted((n for n in names if n.isdigit()), key=int)


def load_dataset(dataset: str, source: str | os.PathLike,
                 runs: Sequence[str | int] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> list[Trajectory]:
    """Parse runs of a dataset folder (all runs if `runs` is None), in the order given;
    `progress(done, total)` after each run.

    Raises:
      DataError: unknown dataset, no runs in `source`, or a requested run that is missing.
    """
    source = os.fspath(source)
    available = list_runs(dataset, source)
    if not available:
        raise DataError(f'{source}: no {dataset} runs found (see sysid_ros.io.datasets for the '
                        'expected layout)')
    runs = available if runs is None else [str(r) for r in runs]
    unknown = [r for r in runs if r not in available]
    if unknown:
        raise DataError(f'{source}: run {unknown[0]!r} not found; available: '
                        f'{", ".join(available)}')
    trajectories = []
    for run in runs:
        trajectories.append(_read_run(dataset, source, run))
        if progress is not None:
            progress(len(trajectories), len(runs))
    return trajectories


def _read_run(dataset: str, source: str, run: str) -> Trajectory:
    """One run of a dataset folder (the Panda log has one run)."""
    if dataset == 'ibm-double-pendulum':
        return read_ibm_run(os.path.join(source, 'dpc_dataset_csv', f'{run}.csv'))
    if dataset == 'kuka-lwr4':
        return read_kuka_run(os.path.join(source, 'HW', f'measurements_{run}.npz'))
    return read_panda_run(source)


def describe(dataset: str) -> str:
    """One paragraph on how `dataset` was turned into joint trajectories."""
    if dataset == 'ibm-double-pendulum':
        return ('IBM double pendulum marker pixels at 400 Hz -> q1 = atan2(-dx, dy) of '
                'green-red, q2 = atan2(-dx, dy) of blue-green minus q1 (image x = world x, '
                'image y = world -z, q = 0 hanging down, unwrapped); q and qd from a cubic '
                f'Savitzky-Golay fit over {IBM_SMOOTHING_S * 1e3:g} ms; tau = 0 (unactuated).')
    if dataset == 'kuka-lwr4':
        return ('FloBaRoID KUKA LWR4+ measurements: positions, velocities, accelerations and '
                'measured joint torques, linearly resampled from jittery host stamps onto a '
                f'uniform {KUKA_RATE:g} Hz grid; t from 0; no filtering.')
    if dataset == 'panda-gaz2019':
        return ('Gaz et al. 2019 Panda log: positions, velocities and measured torques, '
                f'linearly resampled from jittery ~1 kHz stamps onto a uniform {PANDA_RATE:g} '
                'Hz grid; no accelerations.')
    raise DataError(f'unknown dataset {dataset!r}; expected one of {", ".join(DATASETS)}')
