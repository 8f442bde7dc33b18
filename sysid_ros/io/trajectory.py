"""Measured joint trajectories: load, validate, save, resample and differentiate.

A `Trajectory` holds what an identification needs from one experiment: sample times, joint
positions, velocities and the torques applied at the joints, optionally accelerations and the
motion-capture poses of tracked frames (`data.mocap_topics`). Files:

  * `.npz` with keys `t` (T,), `q`, `qd`, `tau` (T, nv), optional `qdd` (T, nv), optional
    `joint_names` (nv,) strings and optional `mocap_position` (T, K, 3) with
    `mocap_orientation` (T, K, 4); without `joint_names` the columns must already be in the
    model's joint order.
  * `.csv` with a header row `t,q_<joint>,...,qd_<joint>,...,tau_<joint>,...` (optional
    `qdd_<joint>` columns), one row per sample; columns may come in any order. No poses.

Columns are matched to the model's joints by name; extra joints in a file (e.g. gripper
fingers) are ignored. Every problem is reported once, at load time, as a `DataError` that
names the file and the key (or column), e.g. `run1.npz: q: non-finite value (nan) at row 17,
joint 'joint2'` (rows count samples from 0, the CSV header not included).

Time stamps must be finite and strictly increasing. Decision for non-uniform sampling: a
trajectory whose steps vary by more than `UNIFORM_RTOL` of the median step is resampled onto
the uniform grid of that median step with linear interpolation (`np.interp`; quaternions
component-wise along the shorter arc, then normalised), and a `UserWarning` says so; the
identification (integrators with a fixed dt, finite differences) assumes a uniform grid.
Duplicate or decreasing stamps are an error, not resampled, since they point to a broken
recording rather than jitter.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Sequence
import warnings

import numpy as np

from sysid_ros.io.errors import InputError, located

__all__ = [
    'UNIFORM_RTOL',
    'DataError',
    'Trajectory',
    'hold_torques',
    'load_trajectory',
    'save_trajectory',
    'validate_trajectory',
    'continuous_quaternions',
    'resample',
    'with_acceleration',
    'savgol_window',
]

# Largest relative deviation of a time step from the median step that still counts as uniform.
UNIFORM_RTOL = 1e-3
_SIGNALS = ('q', 'qd', 'tau', 'qdd')
_POSES = ('mocap_position', 'mocap_orientation')
_REQUIRED = ('t', 'q', 'qd', 'tau')


class DataError(InputError):
    """Invalid measurement data; the message names the file and the key (or column)."""


def _error(source: str | None, key: str, message: str) -> DataError:
    return DataError(located(source, key, message))


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One measured trajectory on a time grid (NumPy, float64).

    Attributes:
      t: (T,) sample times [s], strictly increasing.
      q: (T, nv) joint positions [rad or m].
      qd: (T, nv) joint velocities [rad/s or m/s].
      tau: (T, nv) torques/forces applied at the joints (the actuator command) [N m or N];
        `tau[k]` is held from `t[k]` to `t[k + 1]`.
      qdd: (T, nv) joint accelerations [rad/s^2 or m/s^2], or None if not measured.
      joint_names: (nv,) joint of each column.
      source: file it was read from (named in errors), if any.
      mocap_position: (T, K, 3) origins of the K tracked frames of `data.mocap_topics` in
        the world (mocap) frame [m], or None.
      mocap_orientation: (T, K, 4) their orientations as unit quaternions [x, y, z, w]
        (continuous in sign), or None; given together with `mocap_position`.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    qdd: np.ndarray | None = None
    joint_names: tuple[str, ...] = ()
    source: str | None = None
    mocap_position: np.ndarray | None = None
    mocap_orientation: np.ndarray | None = None

    @property
    def num_samples(self) -> int:
        return int(self.t.shape[0])

    @property
    def nv(self) -> int:
        return int(self.q.shape[1])

    @property
    def num_tracked(self) -> int:
        """K, the tracked frames with poses (0 without)."""
        return 0 if self.mocap_position is None else int(self.mocap_position.shape[1])

    @property
    def dt(self) -> float:
        """Median sample period [s]."""
        return float(np.median(np.diff(self.t)))

    @property
    def duration(self) -> float:
        """t[-1] - t[0] [s]."""
        return float(self.t[-1] - self.t[0])

    def sample_range(self, start: int, stop: int) -> 'Trajectory':
        """Samples `start:stop` (e.g. to hold out the end of a run for validation)."""
        pick = slice(start, stop)
        return dataclasses.replace(self, t=self.t[pick], **{
            key: None if getattr(self, key) is None else getattr(self, key)[pick]
            for key in _SIGNALS + _POSES})


def hold_torques(traj: Trajectory, torque_samples: str = 'instantaneous') -> Trajectory:
    """Torque samples of kind `torque_samples` (`data.torque_samples`) -> the `Trajectory`
    convention (held from t[k] to t[k+1]).

    'held' samples already are; for 'instantaneous' ones each period gets the mean of the
    torques at its two ends, (tau[k] + tau[k + 1]) / 2 (the trapezoidal mean of a torque that
    varies smoothly between samples; second order in dt, where holding tau[k] is first
    order); the last sample keeps its value.
    """
    if torque_samples == 'held':
        return traj
    tau = np.concatenate([0.5 * (traj.tau[:-1] + traj.tau[1:]), traj.tau[-1:]])
    return dataclasses.replace(traj, tau=tau)


def validate_trajectory(traj: Trajectory, min_samples: int = 3) -> Trajectory:
    """Check shapes, finiteness and time stamps; resample a non-uniform grid (see module doc).

    Args:
      traj: the trajectory; arrays are converted to float64.
      min_samples: fewest samples accepted.

    Returns:
      The validated (possibly resampled) trajectory.

    Raises:
      DataError: naming `traj.source` and the offending key.
    """
    src = traj.source
    t = np.asarray(traj.t, dtype=float)
    if t.ndim != 1:
        raise _error(src, 't', f'expected a 1-D array of times, got shape {t.shape}')
    if t.shape[0] < min_samples:
        raise _error(src, 't', f'expected at least {min_samples} samples, got {t.shape[0]}')
    names = tuple(str(n) for n in traj.joint_names)
    q = np.asarray(traj.q) if traj.q is not None else None
    nv = len(names) if names else (q.shape[1] if q is not None and q.ndim == 2 else None)
    arrays = {}
    for key in _SIGNALS:
        value = getattr(traj, key)
        if value is None:
            if key != 'qdd':
                raise _error(src, key, 'missing')
            continue
        try:
            value = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            raise _error(src, key, 'expected numbers') from None
        if value.ndim == 1 and nv == 1:
            value = value[:, None]
        if value.ndim != 2 or value.shape[0] != t.shape[0] or value.shape[1] != nv:
            raise _error(src, key, f'expected shape ({t.shape[0]}, {nv}) (samples of t, '
                         f'joints), got {value.shape}')
        arrays[key] = value
    for key, value in (('t', t[:, None]), *arrays.items()):
        bad = ~np.isfinite(value)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            where = f'row {row}' + (f', joint {names[col]!r}' if key != 't' and names else
                                    (f', column {col}' if key != 't' else ''))
            raise _error(src, key, f'non-finite value ({value[row, col]}) at {where}')
    arrays.update(_validate_poses(traj, t.shape[0]))
    steps = np.diff(t)
    if np.any(steps <= 0.0):
        k = int(np.argmax(steps <= 0.0)) + 1
        raise _error(src, 't', f'time must be strictly increasing; row {k} '
                     f'(t={float(t[k])!r}) follows row {k - 1} (t={float(t[k - 1])!r})')
    traj = dataclasses.replace(traj, t=t, joint_names=names, **arrays)
    median = float(np.median(steps))
    if np.max(np.abs(steps - median)) > UNIFORM_RTOL * median:
        warnings.warn(f'{src or "trajectory"}: non-uniform time steps (median {median:.6g} s, '
                      f'min {steps.min():.6g} s, max {steps.max():.6g} s); resampled onto a '
                      'uniform grid by linear interpolation', UserWarning, stacklevel=2)
        traj = resample(traj, 1.0 / median)
    return traj


def _validate_poses(traj: Trajectory, num: int) -> dict[str, np.ndarray | None]:
    """`mocap_position` (num, K, 3) and `mocap_orientation` (num, K, 4) checked (both or
    neither, finite, non-zero quaternions), the quaternions normalised and continuous."""
    src = traj.source
    given = {key: getattr(traj, key) for key in _POSES}
    if all(v is None for v in given.values()):
        return given
    missing = [key for key, v in given.items() if v is None]
    if missing:
        present = next(key for key in _POSES if key not in missing)
        raise _error(src, missing[0], f'missing beside {present}; give both or neither')
    out = {}
    shape = np.shape(given['mocap_position'])
    k = shape[1] if len(shape) == 3 else 'K'
    for key, width in zip(_POSES, (3, 4)):
        try:
            value = np.asarray(given[key], dtype=float)
        except (TypeError, ValueError):
            raise _error(src, key, 'expected numbers') from None
        if value.shape != (num, k, width):
            raise _error(src, key, f'expected shape ({num}, {k}, {width}) (samples of t, '
                         f'tracked frames, {width}), got {value.shape}')
        if not np.all(np.isfinite(value)):
            row, frame, _ = np.argwhere(~np.isfinite(value))[0]
            raise _error(src, key, f'non-finite value at row {row}, tracked frame {frame}')
        out[key] = value
    norm = np.linalg.norm(out['mocap_orientation'], axis=-1)
    if np.any(norm < 1e-9):
        row, frame = np.argwhere(norm < 1e-9)[0]
        raise _error(src, 'mocap_orientation', f'zero quaternion at row {row}, tracked '
                     f'frame {frame}')
    out['mocap_orientation'] = continuous_quaternions(out['mocap_orientation'])
    return out


def continuous_quaternions(quat: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
    """Unit quaternions (N, ..., 4) [x, y, z, w], normalised, with signs flipped so that
    neighbours along the first axis lie on the shorter arc (q and -q are one rotation),
    continuing from `previous` (..., 4) (default: the first keeps its sign)."""
    quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    first = quat[:1] if previous is None else np.asarray(previous, dtype=float)[None]
    ref = np.concatenate([first, quat[:-1]])
    flips = np.cumsum(np.sum(ref * quat, axis=-1) < 0.0, axis=0) % 2
    return np.where(flips[..., None] == 1, -quat, quat)


def _read_npz(path: str):
    try:
        with np.load(path, allow_pickle=False) as data:
            contents = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise DataError(f'{path}: cannot read as .npz: {exc}') from exc
    for key in _REQUIRED:
        if key not in contents:
            raise _error(path, key, f'missing key; the file has {sorted(contents)}')
    names = contents.get('joint_names')
    if names is not None:
        names = [str(n) for n in np.atleast_1d(names)]
    return contents, names


def _read_csv(path: str):
    try:
        with open(path, newline='', encoding='utf-8') as f:
            header = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f'{path}: cannot read: {exc}') from exc
    if not header:
        raise DataError(f'{path}: empty file; expected a header row t,q_<joint>,...')
    header = [h.strip() for h in header]
    if 't' not in header:
        raise _error(path, 't', 'missing column')
    try:
        table = np.loadtxt(path, delimiter=',', skiprows=1, ndmin=2, dtype=float)
    except ValueError as exc:
        raise DataError(f'{path}: cannot parse numbers: {exc}') from exc
    if table.size and table.shape[1] != len(header):
        raise DataError(f'{path}: rows have {table.shape[1]} columns, the header '
                        f'{len(header)}')
    table = table.reshape(-1, len(header))
    columns = {h: table[:, i] for i, h in enumerate(header)}
    contents = {'t': columns['t']}
    names: list[str] = []
    for h in header:
        if h.startswith('q_') and h[2:] not in names:
            names.append(h[2:])
    for key in _SIGNALS:
        prefix = key + '_'
        present = [n for n in names if prefix + n in columns]
        if key == 'qdd' and not present:
            continue
        if not names:
            raise _error(path, key, f'missing columns {prefix}<joint>')
        missing = [prefix + n for n in names if prefix + n not in columns]
        if missing:
            raise _error(path, missing[0], 'missing column')
        contents[key] = np.stack([columns[prefix + n] for n in names], axis=1)
    return contents, names


def load_trajectory(path: str | os.PathLike, joint_names: Sequence[str] | None = None
                    ) -> Trajectory:
    """Read a trajectory from `.npz` or `.csv` and order its columns like `joint_names`.

    Args:
      path: the file.
      joint_names: the model's joints (state order). None: keep the file's order (an `.npz`
        without `joint_names` then gets names `joint1..`).

    Returns:
      A validated `Trajectory` (see `validate_trajectory`).

    Raises:
      DataError: missing file, key, column or joint; shape mismatch; non-finite values;
        non-increasing time.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f'{path}: file not found')
    ext = os.path.splitext(path)[1].lower()
    if ext == '.npz':
        contents, names = _read_npz(path)
    elif ext == '.csv':
        contents, names = _read_csv(path)
    else:
        raise DataError(f'{path}: unknown data format {ext!r}; expected .npz or .csv')
    nv_file = np.shape(contents['q'])[-1] if np.ndim(contents['q']) == 2 else 1
    if names is None:
        if joint_names is not None and nv_file != len(joint_names):
            raise _error(path, 'q', f'expected {len(joint_names)} columns (joints '
                         f'{list(joint_names)}), got shape {np.shape(contents["q"])}; add a '
                         '`joint_names` key to match columns by name')
        names = list(joint_names) if joint_names is not None else [
            f'joint{i + 1}' for i in range(nv_file)]
    elif len(set(names)) != len(names):
        raise _error(path, 'joint_names', f'duplicate names in {names}')
    for key in ('q', 'qd', 'tau', 'qdd'):
        value = contents.get(key)
        if value is not None and (np.ndim(value) != 2 or np.shape(value)[1] != len(names)):
            if not (np.ndim(value) == 1 and len(names) == 1):
                raise _error(path, key, f'expected shape (T, {len(names)}) for joints '
                             f'{names}, got {np.shape(value)}')
    if joint_names is not None:
        missing = [j for j in joint_names if j not in names]
        if missing:
            raise _error(path, 'joint_names', f'no data for joint {missing[0]!r}; the file '
                         f'has joints {names}')
        order = [names.index(j) for j in joint_names]
        for key in ('q', 'qd', 'tau', 'qdd'):
            if contents.get(key) is not None:
                contents[key] = np.asarray(contents[key]).reshape(-1, len(names))[:, order]
        names = list(joint_names)
    traj = Trajectory(t=contents['t'], q=contents['q'], qd=contents['qd'], tau=contents['tau'],
                      qdd=contents.get('qdd'), joint_names=tuple(names), source=path,
                      **{key: contents.get(key) for key in _POSES})
    return validate_trajectory(traj)


def save_trajectory(path: str | os.PathLike, traj: Trajectory) -> None:
    """Write `traj` as `.npz` or `.csv` (by the suffix of `path`), readable by
    `load_trajectory`. The file is written to a temporary name and renamed into place."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    names = list(traj.joint_names) or [f'joint{i + 1}' for i in range(traj.nv)]
    tmp = f'{path}.tmp{os.getpid()}{ext}'
    try:
        if ext == '.npz':
            arrays = {'t': traj.t, 'q': traj.q, 'qd': traj.qd, 'tau': traj.tau,
                      'joint_names': np.asarray(names, dtype=str)}
            arrays.update((key, getattr(traj, key)) for key in ('qdd',) + _POSES
                          if getattr(traj, key) is not None)
            np.savez(tmp, **arrays)
        elif ext == '.csv':
            if traj.num_tracked:
                raise DataError(f'{path}: a .csv holds no motion-capture poses; save as .npz')
            keys = [k for k in _SIGNALS if getattr(traj, k) is not None]
            header = ['t'] + [f'{k}_{n}' for k in keys for n in names]
            table = np.column_stack([traj.t] + [getattr(traj, k) for k in keys])
            np.savetxt(tmp, table, delimiter=',', header=','.join(header), comments='',
                       fmt='%.17g')
        else:
            raise DataError(f'{path}: unknown data format {ext!r}; expected .npz or .csv')
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def resample(traj: Trajectory, rate: float) -> Trajectory:
    """Linear interpolation onto the uniform grid `t[0] + k / rate` within `[t[0], t[-1]]`.

    Torques are interpolated linearly too (not zero-order held); at rates near the original
    one this changes a piecewise-constant command by less than one sample. Motion-capture
    quaternions (continuous in sign) are interpolated per component and normalised.

    Args:
      traj: a trajectory with increasing `t`.
      rate: new sampling rate [Hz].
    """
    num = int(np.floor(traj.duration * rate + 1e-9)) + 1
    t = traj.t[0] + np.arange(num) / rate

    def interp(x):
        if x is None:
            return None
        flat = x.reshape(len(x), -1)
        return np.stack([np.interp(t, traj.t, flat[:, j]) for j in range(flat.shape[1])],
                        axis=1).reshape((num,) + x.shape[1:])

    orientation = interp(traj.mocap_orientation)
    if orientation is not None:
        orientation = orientation / np.linalg.norm(orientation, axis=-1, keepdims=True)
    return dataclasses.replace(traj, t=t, q=interp(traj.q), qd=interp(traj.qd),
                               tau=interp(traj.tau), qdd=interp(traj.qdd),
                               mocap_position=interp(traj.mocap_position),
                               mocap_orientation=orientation)


def savgol_window(dt: float, seconds: float = 0.05, polyorder: int = 3) -> int:
    """Odd Savitzky-Golay window covering about `seconds` at step `dt`, at least polyorder+2."""
    n = int(round(seconds / dt))
    n += 1 - n % 2
    return max(n, polyorder + 2 + (polyorder + 1) % 2)


def with_acceleration(traj: Trajectory, method: str = 'savgol', window: float = 0.05,
                      polyorder: int = 3, smooth: bool = True) -> Trajectory:
    """Numerical joint accelerations from the velocities, for inverse-dynamics regression.

    `savgol`: a Savitzky-Golay filter (scipy.signal.savgol_filter, zero phase, `polyorder`
    polynomials over a window of about `window` seconds): qdd is the derivative of the local
    fit to qd, and with `smooth` q and qd are replaced by the smoothed values, so that all
    three regressor inputs see the same filter (as DiffNEA's zero-phase offline filters).
    `central`: central differences of qd (np.gradient, one-sided at the ends), no smoothing.

    A trajectory that already has `qdd` is returned unchanged.

    Args:
      traj: a uniformly sampled trajectory.
      method: 'savgol' or 'central'.
      window: filter window [s] (savgol).
      polyorder: polynomial order (savgol).
      smooth: also smooth q and qd (savgol).

    Raises:
      ValueError: for an unknown method.
    """
    if traj.qdd is not None:
        return traj
    dt = traj.dt
    if method == 'central':
        return dataclasses.replace(traj, qdd=np.gradient(traj.qd, dt, axis=0))
    if method != 'savgol':
        raise ValueError(f'with_acceleration: method: expected savgol or central, '
                         f'got {method!r}')
    from scipy.signal import savgol_filter

    n = savgol_window(dt, window, polyorder)
    if n > traj.num_samples:
        return dataclasses.replace(traj, qdd=np.gradient(traj.qd, dt, axis=0))
    qdd = savgol_filter(traj.qd, n, polyorder, deriv=1, delta=dt, axis=0, mode='interp')
    if not smooth:
        return dataclasses.replace(traj, qdd=qdd)
    return dataclasses.replace(
        traj, qdd=qdd, q=savgol_filter(traj.q, n, polyorder, axis=0, mode='interp'),
        qd=savgol_filter(traj.qd, n, polyorder, axis=0, mode='interp'))
