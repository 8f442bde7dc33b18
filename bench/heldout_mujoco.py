"""MuJoCo side of the held-out benchmark (`bench/heldout.py`).

This module owns everything that runs in MuJoCo, the simulator that is independent of this
package's dynamics:

  * the models with the hidden truth: the planar double pendulum written as MJCF
    (`double_pendulum_mjcf`) and the Panda compiled from the example-robot-data URDF with a
    payload body and joint damping added through `mujoco.MjSpec` (`panda_spec`);
  * the simulation of a recording (`simulate`): RK4 at `SIM_DT`, torques held (zero-order
    hold) over each sample period of the recording;
  * MuJoCo's own identification toolbox, `mujoco.sysid`, run on the same recording
    (`fit_sysid`): Levenberg-Marquardt (`sysid.optimize(optimizer='mujoco')`) on the
    state-trajectory residual of short windows that start from the measured states, and the
    toolbox's 95% confidence intervals (`sysid.calculate_intervals`).

The URDF, the configuration, the bag and the driver live in `bench/heldout.py`. Units: SI
(kg, m, s, rad, N m); arrays are NumPy float64 with time first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import time
from typing import Callable, Sequence
import xml.etree.ElementTree as ET

import numpy as np

try:
    import mujoco
    from mujoco import sysid
    _MISSING = '' if hasattr(sysid, 'optimize') else 'mujoco.sysid (the [sysid] extra)'
except ImportError:                                       # pragma: no cover - environment
    mujoco = sysid = None
    _MISSING = 'mujoco'

__all__ = [
    'SIM_DT',
    'DP_LENGTH',
    'DP_RADIUS',
    'require_mujoco',
    'rod_inertia',
    'double_pendulum_mjcf',
    'panda_spec',
    'simulate',
    'mass_matrix_diagonal',
    'SysidParameter',
    'SysidFit',
    'fit_sysid',
]

SIM_DT = 1e-3              # [s] MuJoCo step of the simulator (RK4)
DP_LENGTH = 0.5            # [m] length of each double-pendulum link
DP_RADIUS = 0.01           # [m] rod radius, only for the (unexcited) inertia about the rod axis
PAYLOAD_INERTIA = 1e-9     # [kg m^2] diagonal inertia of the payload body (a point mass)


def require_mujoco() -> None:
    """Raise a clear ImportError when MuJoCo or its sysid toolbox is missing."""
    if _MISSING:
        raise ImportError(
            f'bench/heldout.py needs {_MISSING}: install it with '
            f".venv/bin/pip install 'mujoco[sysid]==4.0.0' (listed in requirements.txt)")


def rod_inertia(mass: float) -> tuple[float, float, float]:
    """(ixx, iyy, izz) [kg m^2] about the COM of a uniform rod of `mass` [kg] along z,
    `DP_LENGTH` long and `DP_RADIUS` thick (m L^2 / 12 across the rod, m r^2 / 2 about it)."""
    across = mass * DP_LENGTH ** 2 / 12.0
    return across, across, mass * DP_RADIUS ** 2 / 2.0


def double_pendulum_mjcf(mass: Sequence[float], com_z: Sequence[float],
                         damping: Sequence[float], inertia_mass: Sequence[float] | None = None,
                         timestep: float = SIM_DT) -> str:
    """MJCF of the planar double pendulum, written independently of the URDF.

    Links `link1`, `link2` of length `DP_LENGTH` hang along -z from hinges `joint1`, `joint2`
    about y (link2's hinge at the tip of link1); motors `joint1_motor`, `joint2_motor` apply
    the torques (gear 1, unlimited). RK4, no contacts, gravity 9.81 m/s^2 along -z.

    Args:
      mass: (2,) link masses [kg].
      com_z: (2,) COM of each link along its z axis [m] (negative: down the link).
      damping: (2,) joint viscous damping [N m s/rad].
      inertia_mass: (2,) mass of the uniform rod whose inertia about the COM each link has
        (default: `mass`).
      timestep: MuJoCo step [s].
    """
    inertia_mass = mass if inertia_mass is None else inertia_mass
    bodies = ''
    for i in (1, 0):
        ixx, iyy, izz = rod_inertia(float(inertia_mass[i]))
        pos = '0 0 0' if i == 0 else f'0 0 {-DP_LENGTH!r}'
        bodies = (f'<body name="link{i + 1}" pos="{pos}">'
                  f'<joint name="joint{i + 1}" type="hinge" axis="0 1 0" '
                  f'damping="{float(damping[i])!r}"/>'
                  f'<inertial pos="0 0 {float(com_z[i])!r}" mass="{float(mass[i])!r}" '
                  f'diaginertia="{ixx!r} {iyy!r} {izz!r}"/>' + bodies + '</body>')
    return (f'<mujoco model="double_pendulum">'
            f'<option timestep="{timestep!r}" integrator="RK4" gravity="0 0 -9.81">'
            f'<flag contact="disable"/></option>'
            f'<worldbody>{bodies}</worldbody>'
            f'<actuator><motor name="joint1_motor" joint="joint1"/>'
            f'<motor name="joint2_motor" joint="joint2"/></actuator></mujoco>')


def _strip_urdf(urdf_path: str, fixed_joints: Sequence[str]) -> str:
    """URDF text without visual/collision elements (MuJoCo would load their meshes) and with
    `fixed_joints` made fixed at their zero position."""
    root = ET.parse(urdf_path).getroot()
    for link in root.findall('link'):
        for tag in ('visual', 'collision'):
            for element in link.findall(tag):
                link.remove(element)
    for joint in root.findall('joint'):
        if joint.get('name') in fixed_joints:
            joint.set('type', 'fixed')
            for tag in ('axis', 'limit', 'dynamics', 'safety_controller', 'mimic'):
                for element in joint.findall(tag):
                    joint.remove(element)
    return ET.tostring(root, encoding='unicode')


def panda_spec(urdf_path: str, fixed_joints: Sequence[str], joints: Sequence[str],
               damping: Sequence[float], payload_mass: float, payload_pos: Sequence[float],
               payload_body: str = 'panda_link7', timestep: float = SIM_DT) -> 'mujoco.MjSpec':
    """MjSpec of the Panda compiled by MuJoCo from the URDF, with the hidden truth added.

    Visuals and collisions are dropped, `fixed_joints` (the fingers) welded at zero, joint
    limits and contacts disabled, static bodies kept (not fused), RK4 at `timestep`; one
    motor `<joint>_motor` per joint of `joints` (gear 1, unlimited); a body `payload` (a point
    mass `payload_mass` [kg], inertia `PAYLOAD_INERTIA`) at `payload_pos` (3,) [m] in the
    frame of `payload_body`; joint damping `damping` (7,) [N m s/rad], no other friction.
    """
    require_mujoco()
    spec = mujoco.MjSpec.from_string(_strip_urdf(urdf_path, fixed_joints))
    spec.compiler.fusestatic = False        # fusing would delete the payload body from the spec
    spec.option.timestep = timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_RK4
    spec.option.disableflags |= (mujoco.mjtDisableBit.mjDSBL_CONTACT
                                 | mujoco.mjtDisableBit.mjDSBL_LIMIT)
    for name, d in zip(joints, damping, strict=True):
        joint = spec.joint(name)
        joint.damping = [float(d), 0.0, 0.0]      # linear, then polynomial terms
        joint.frictionloss = 0.0
        joint.armature = 0.0
        spec.add_actuator(name=f'{name}_motor', target=name,
                          trntype=mujoco.mjtTrn.mjTRN_JOINT)
    spec.body(payload_body).add_body(
        name='payload', pos=[float(p) for p in payload_pos], mass=float(payload_mass),
        ipos=[0.0, 0.0, 0.0], inertia=[PAYLOAD_INERTIA] * 3, explicitinertial=True)
    return spec


def mass_matrix_diagonal(model: 'mujoco.MjModel', q: np.ndarray) -> np.ndarray:
    """(nv,) diagonal of the joint-space mass matrix [kg m^2] at configuration `q` (nv,)."""
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    full = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, full)
    return np.diag(full).copy()


Controller = Callable[[int, float, np.ndarray, np.ndarray, 'mujoco.MjData'], np.ndarray]


def simulate(model: 'mujoco.MjModel', q0: np.ndarray, qd0: np.ndarray,
             controller: Controller, duration: float, rate: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Simulate `model` for `duration` [s] and sample it at `rate` [Hz].

    At each sample k the controller gets (k, t_k, q_k, qd_k, data with `mj_forward` done at
    that state, e.g. for `qfrc_bias`) and returns the torques (nv,) [N m]; they are written to
    `data.ctrl` (motors of gear 1 in joint order) and held for the 1 / rate period, integrated
    by `mj_step` at the model's timestep (which must divide the period).

    Returns:
      t (T,) [s], q (T, nv) [rad], qd (T, nv) [rad/s], tau (T, nv) [N m] with
      T = round(duration * rate) + 1; tau[k] is held from t[k] to t[k + 1] (the last one
      repeats the one before), as `sysid_ros.io.trajectory.Trajectory` expects. Noise-free.
    """
    period = 1.0 / rate
    substeps = int(round(period / model.opt.timestep))
    if substeps < 1 or abs(substeps * model.opt.timestep - period) > 1e-9:
        raise ValueError(f'simulate: timestep {model.opt.timestep} s does not divide the '
                         f'sample period {period} s')
    num = int(round(duration * rate)) + 1
    data = mujoco.MjData(model)
    data.qpos[:] = q0
    data.qvel[:] = qd0
    q = np.zeros((num, model.nv))
    qd = np.zeros((num, model.nv))
    tau = np.zeros((num, model.nv))
    for k in range(num):
        mujoco.mj_forward(model, data)
        q[k], qd[k] = data.qpos, data.qvel
        if k == num - 1:
            tau[k] = tau[k - 1]
            break
        tau[k] = controller(k, k * period, q[k].copy(), qd[k].copy(), data)
        data.ctrl[:] = tau[k]
        for _ in range(substeps):
            mujoco.mj_step(model, data)
    return np.arange(num) * period, q, qd, tau


@dataclasses.dataclass(frozen=True)
class SysidParameter:
    """One scalar parameter of the MuJoCo fit.

    Attributes:
      name: the benchmark's name of the parameter (e.g. 'link1.mass').
      start: initial guess (the nominal model's value, clipped into the bounds).
      lower, upper: bounds (same units as the value).
      apply: writes a value into the MjSpec of the model being identified.
    """

    name: str
    start: float
    lower: float
    upper: float
    apply: Callable[['mujoco.MjSpec', float], None]


@dataclasses.dataclass(frozen=True)
class SysidFit:
    """Result of `fit_sysid`.

    Attributes:
      names: (M,) parameter names.
      value: (M,) identified values.
      half_width: (M,) half-widths of the toolbox's 95% confidence intervals (inf: not
        identifiable at the optimum).
      wall_s: wall time of the whole identification (data set-up, optimisation, intervals) [s].
      iterations: Levenberg-Marquardt iterations.
      windows: number of windows the recording was cut into.
      log: what the optimiser printed.
    """

    names: tuple[str, ...]
    value: np.ndarray
    half_width: np.ndarray
    wall_s: float
    iterations: int
    windows: int
    log: str


def fit_sysid(spec: 'mujoco.MjSpec', parameters: Sequence[SysidParameter],
              joints: Sequence[str], t: np.ndarray, q: np.ndarray, qd: np.ndarray,
              tau: np.ndarray, window: float = 0.5, max_iters: int = 100) -> SysidFit:
    """Identify `parameters` with `mujoco.sysid` from a recording.

    The recording (t (T,) uniform [s], q, qd, tau (T, nv), tau[k] held over [t_k, t_k+1]) is
    cut into windows of `window` [s]; each becomes a measured sequence of one
    `sysid.ModelSequences` that starts from its measured (noisy) q, qd and is driven by its
    torques, resampled (zero-order hold) to the model's timestep. The observations are the
    states `<joint>_qpos` and `<joint>_qvel` (MjStateQPos / MjStateQVel: the state after each
    step, at its time; MuJoCo's joint sensors would be one step late). Residuals: the
    toolbox's default (measured minus predicted at the measured times, each column scaled by
    the column's norm / sqrt 2). Optimiser: `sysid.optimize(optimizer='mujoco')`
    (Levenberg-Marquardt, finite-difference Jacobian) from each parameter's `start` moved off
    its bounds; intervals: `sysid.calculate_intervals` (alpha = 0.05).

    Args:
      spec: the nominal model (motors in the order of `joints`); modified in place.
      parameters: the parameters to identify.
      joints: (nv,) joint names, the column order of q, qd and tau.
      t: (T,) sample times [s].
      q: (T, nv) joint positions.
      qd: (T, nv) joint velocities.
      tau: (T, nv) commanded torques, held over each sample interval.
      window: window length [s].
      max_iters: Levenberg-Marquardt iteration limit.
    """
    require_mujoco()
    from absl import logging as absl_logging

    start = time.perf_counter()
    model = spec.compile()
    rate_dt = float(np.median(np.diff(t)))
    substeps = int(round(rate_dt / model.opt.timestep))
    per_window = max(1, int(round(window / rate_dt)))
    names_q = [f'{j}_qpos' for j in joints]
    names_qd = [f'{j}_qvel' for j in joints]
    sequence_names, initial_states, controls, sensors = [], [], [], []
    for k0 in range(0, len(t) - per_window, per_window):
        k1 = k0 + per_window
        ctrl = np.repeat(tau[k0:k1], substeps, axis=0)
        ctrl = np.concatenate([ctrl, tau[k1 - 1:k1]], axis=0)
        controls.append(sysid.TimeSeries(np.arange(len(ctrl)) * model.opt.timestep, ctrl))
        observed = np.concatenate([q[k0:k1 + 1], qd[k0:k1 + 1]], axis=1)
        sensors.append(sysid.TimeSeries.from_names(
            np.arange(per_window + 1) * rate_dt, observed, model, names_q + names_qd))
        initial_states.append(sysid.create_initial_state(
            model, q[k0].copy(), qd[k0].copy(), qpos_names=names_q, qvel_names=names_qd))
        sequence_names.append(f'window{len(sequence_names)}')
    params = sysid.ParameterDict()
    for p in parameters:
        params.add(sysid.Parameter(
            p.name, nominal=float(np.clip(p.start, p.lower, p.upper)), min_value=p.lower,
            max_value=p.upper,
            modifier=lambda s, par, apply=p.apply: apply(s, float(par.value[0]))))
    params.move_off_bounds()
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)   # one 'missing sensors' line per window
    printed = io.StringIO()
    try:
        sequences = sysid.ModelSequences('heldout', spec, sequence_names, initial_states,
                                         controls, sensors, allow_missing_sensors=True)
        residual_fn = sysid.build_residual_fn(models_sequences=[sequences])
        with contextlib.redirect_stdout(printed):
            opt_params, result = sysid.optimize(params, residual_fn, optimizer='mujoco',
                                                verbose=False, max_iters=max_iters)
        residuals, _, _ = residual_fn(result.x, opt_params)
        _, half_width = sysid.calculate_intervals(residuals, result.jac)
    finally:
        absl_logging.set_verbosity(verbosity)
    wall = time.perf_counter() - start
    log = printed.getvalue()
    done = re.search(r'Terminated after (\d+) iterations', log)
    iterations = int(done.group(1)) if done else len(result.extras.get('objective', ()))
    return SysidFit(names=tuple(p.name for p in parameters), value=np.asarray(result.x, float),
                    half_width=np.asarray(half_width, float), wall_s=wall,
                    iterations=iterations, windows=len(sequence_names), log=log)
