"""Held-out identification benchmark: identification that works out of the box.

Recordings come from an independent simulator, MuJoCo (`bench/heldout_mujoco.py`), never from
this package's dynamics, with hidden parameters drawn at random within bounds on each run.
Each recording is written as a rosbag2 and identified by `sysid fit --bag` with the shipped
defaults (the configuration gives only the model, the bounds and the data rate), and by
MuJoCo's own toolbox `mujoco.sysid` on the same (noisy) samples, in the same run.

This module owns the model description this package reads (the double pendulum's URDF,
generated here; the Panda of example-robot-data), the configuration YAML, the bag, the noise,
the excitation, the driver and the report. Cases:

  dp   planar double pendulum, chaotic swinging under random multi-sine torques. Hidden: link
       masses U[0.5, 2.0] kg, COM along each link U[-0.4, -0.1] m, joint damping
       U[0.02, 0.3] N m s/rad; each link's inertia about its COM is that of the nominal uniform
       0.5 m, 1 kg rod, which the fitted models keep when they move mass and COM
       (`--truth-inertia rod`: of a rod of the drawn mass, which no fit of these six parameters
       can reach: the data fix m c and the inertia about the joint, so a wrong inertia about
       the COM is absorbed by a wrong mass and COM). Fitted bounds: mass [0.2, 3.0],
       com.z [-0.5, 0.0], damping [0.0, 0.5].
  arm  Panda (fingers welded), PD tracking of random multi-sine references around a
       comfortable pose. Hidden: a point-mass payload U[0.5, 3.0] kg at an offset from the
       flange (panda_link8) in the box [-0.05, 0.05]^2 x [0, 0.1] m, joint damping U[0.05, 1.0]
       N m s/rad. Both fits identify a point-mass payload at the flange (ours: `model.payload`
       on panda_link8, nominal mass 0) and its position; reported in the panda_link7 frame.

Recordings: RK4 at 1 ms, torques held over each 5 ms sample, 200 Hz, noise N(0, 1e-4 rad) on q
and N(0, 1e-3 rad/s) on qd; torques exact. MuJoCo's toolbox gets the same arrays, the same
bounds and the nominal model as its start, and simulates with the simulator's own settings
(RK4, 1 ms) over 0.5 s windows that start from the measured states (one simulation of a whole
chaotic minute cannot be matched); see `heldout_mujoco.fit_sysid`.

Usage:
  .venv/bin/python -m bench.heldout [--cases dp arm] [--methods [all | NAME ...]] [--seed N]
      [--duration 60] [--out DIR] [--no-mujoco] [--quick] [--truth-inertia nominal|rod]
      [--timeout S]
(--quick: 10 s double pendulum only.) Files under --out: <case>/config.yaml, <case>/bag,
<case>/fit_<method>/ (sysid fit's results) and .log, <case>/mujoco_sysid.log.

Output: per case a table (truth, ours, error, whether the 95% interval holds the truth, the
same for MuJoCo), wall times, and the last line
  RESULT heldout dp_max_rel_err=... dp_wall_s=... dp_mujoco_wall_s=... dp_ratio=...
         dp_coverage=k/n arm_...
plus dp_mujoco_max_rel_err and dp_mujoco_coverage. Relative errors are fractions:
|estimate - truth| / |truth|, for a COM coordinate over the norm of the truth's COM vector (in
the link frame). Coverage: how many 95% intervals hold the truth (ours: estimate.yaml's ci95,
else mean +- 1.96 std). Keys of a method named with --methods carry its name:
dp_csvgd_max_rel_err=...; cases not run are left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

import numpy as np
import yaml

from bench import heldout_mujoco as hm

BENCH = pathlib.Path(__file__).resolve().parent
REPO = BENCH.parent

RATE = 200.0                 # [Hz] recording rate
Q_NOISE = 1e-4               # [rad] std of the position noise
QD_NOISE = 1e-3              # [rad/s] std of the velocity noise
GRAVITY = 9.81               # [m/s^2]
MAX_SPEED = 30.0             # [rad/s] a dp excitation that exceeds this is redrawn weaker
MIN_SPEED = 10.0             # [rad/s] ... one that stays under it (no chaos) stronger
DP_JOINTS = ('joint1', 'joint2')
DP_LINKS = ('link1', 'link2')
DP_BOUNDS = {'mass': (0.2, 3.0), 'com.z': (-0.5, 0.0), 'damping': (0.0, 0.5)}
PANDA_JOINTS = tuple(f'panda_joint{i}' for i in range(1, 8))
FLANGE_LINK = 'panda_link8'
FLANGE = np.array([0.0, 0.0, 0.107])        # [m] panda_link8 (the flange) in panda_link7
PANDA_POSE = np.array([0.0, -0.4, 0.0, -2.2, 0.0, 1.9, 0.8])           # [rad]
PANDA_AMPLITUDE = np.array([0.5, 0.3, 0.5, 0.4, 0.6, 0.4, 0.8])        # [rad] reference peaks
PAYLOAD_MASS_BOUNDS = (0.0, 5.0)                                     # [kg]
PAYLOAD_OFFSET_BOUNDS = (np.array([-0.1, -0.1, -0.05]), np.array([0.1, 0.1, 0.15]))  # [m]
DAMPING_BOUNDS_ARM = (0.0, 2.0)                                      # [N m s/rad]
SEED_SALT = 16                                            # salt of the seeds


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Row:
    """One reported parameter: its name, true value and the scale of its relative error."""

    name: str
    truth: float
    scale: float


@dataclasses.dataclass
class Case:
    """A recording with its hidden truth, the files `sysid fit` reads and both fits' adapters.

    Attributes:
      name: 'dp' or 'arm'.
      config: configuration YAML path; bag: rosbag2 folder.
      joints: (nv,) joint names; t (T,), q, qd, tau (T, nv): the recording as written.
      rows: the reported parameters.
      ours: estimate.yaml content -> {row name: (value, lo, hi)} (95% interval).
      mujoco: runs MuJoCo's toolbox on the recording -> (SysidFit, {row: (value, lo, hi)}).
      note: a line printed under the table.
    """

    name: str
    config: str
    bag: str
    joints: tuple[str, ...]
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    rows: list[Row]
    ours: Callable[[dict], dict[str, tuple[float, float, float]]]
    mujoco: Callable[[], tuple[object, dict[str, tuple[float, float, float]]]]
    note: str = ''


def multisine(t: np.ndarray, peak: np.ndarray, rng: np.random.Generator, num_sines: int = 3,
              f_min: float = 0.1, f_max: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """Per column a sum of `num_sines` sines, frequencies U[f_min, f_max] Hz, random phases,
    peak-normalised to `peak` (nv,). Returns the signal and its time derivative, (T, nv)."""
    nv = len(peak)
    freq = rng.uniform(f_min, f_max, size=(num_sines, nv))
    phase = rng.uniform(0.0, 2.0 * np.pi, size=(num_sines, nv))
    weight = rng.uniform(0.5, 1.0, size=(num_sines, nv))
    angle = 2.0 * np.pi * freq[None] * t[:, None, None] + phase[None]
    signal = np.sum(weight[None] * np.sin(angle), axis=1)
    rate = np.sum(weight[None] * 2.0 * np.pi * freq[None] * np.cos(angle), axis=1)
    scale = np.asarray(peak) / np.max(np.abs(signal), axis=0)
    return signal * scale, rate * scale


def add_noise(q: np.ndarray, qd: np.ndarray, rng: np.random.Generator):
    """Sensor noise: N(0, Q_NOISE^2) on q, N(0, QD_NOISE^2) on qd."""
    return q + rng.normal(0.0, Q_NOISE, q.shape), qd + rng.normal(0.0, QD_NOISE, qd.shape)


def interval(entry: dict) -> tuple[float, float, float]:
    """(mean, lo, hi) of an estimate.yaml parameter: its `ci95`, else mean +- 1.96 std."""
    mean = float(entry['mean'])
    ci = entry.get('ci95')
    if ci is not None and len(ci) == 2:
        return mean, float(ci[0]), float(ci[1])
    std = float(entry.get('std', float('nan')))
    return mean, mean - 1.96 * std, mean + 1.96 * std


def damping_parameters(joints: Sequence[str], nominal: float, lower: float,
                       upper: float) -> list:
    """MuJoCo toolbox parameters of each joint's viscous damping [N m s/rad]."""
    return [hm.SysidParameter(f'{joint}.damping', nominal, lower, upper,
                              lambda s, v, j=joint: setattr(s.joint(j), 'damping',
                                                            [v, 0.0, 0.0]))
            for joint in joints]


def fit_intervals(fit) -> dict[str, tuple[float, float, float]]:
    """{name: (value, low, high)} of a toolbox fit's 95 % intervals."""
    return {n: (v, v - h, v + h) for n, v, h in zip(fit.names, fit.value, fit.half_width)}


def double_pendulum_urdf(mass: float = 1.0, com_z: float = -hm.DP_LENGTH / 2) -> str:
    """URDF of the planar double pendulum: `link1`, `link2` (length 0.5 m, hanging along -z,
    mass `mass` [kg], COM at z = `com_z` [m], uniform-rod inertia of `mass`) on continuous
    joints `joint1`, `joint2` about y, zero damping."""
    ixx, iyy, izz = hm.rod_inertia(mass)
    parts = ['<robot name="double_pendulum"><link name="base"/>']
    parent = 'base'
    for i, (link, joint) in enumerate(zip(DP_LINKS, DP_JOINTS)):
        parts.append(
            f'<link name="{link}"><inertial><origin xyz="0 0 {com_z!r}" rpy="0 0 0"/>'
            f'<mass value="{mass!r}"/><inertia ixx="{ixx!r}" ixy="0" ixz="0" iyy="{iyy!r}" '
            f'iyz="0" izz="{izz!r}"/></inertial></link>'
            f'<joint name="{joint}" type="continuous"><parent link="{parent}"/>'
            f'<child link="{link}"/><origin xyz="0 0 {0.0 if i == 0 else -hm.DP_LENGTH!r}" '
            f'rpy="0 0 0"/>'
            f'<axis xyz="0 1 0"/><dynamics damping="0"/></joint>')
        parent = link
    return ''.join(parts) + '</robot>'


def write_config(path: str, urdf: str, joints: Sequence[str],
                 parameters: dict[str, dict], payload_link: str | None = None) -> str:
    """Write the ROS-parameters YAML `sysid fit` reads: model (with a payload of nominal mass
    0 on `payload_link`, if given), parameter bounds and data rate only (no estimator section:
    the shipped defaults)."""
    model = {'urdf': urdf, 'joints': list(joints), 'actuator': 'viscous'}
    if payload_link is not None:
        model['payload'] = {'link': payload_link}
    doc = {'/**': {'ros__parameters': {
        'model': model,
        'parameters': parameters,
        'data': {'rate': RATE}}}}
    with open(path, 'w', encoding='utf-8') as f:
        f.write('# Written by bench/heldout.py: held-out benchmark, shipped estimator defaults.\n')
        yaml.safe_dump(doc, f, sort_keys=False)
    return path


def write_bag(path: str, t, q, qd, tau, joints: Sequence[str], seed: int, case: str) -> str:
    """Write the recording as a rosbag2 of sensor_msgs/JointState (effort = held torque)."""
    from sysid_ros.io.bag_writer import write_trajectory_bag
    from sysid_ros.io.trajectory import Trajectory

    write_trajectory_bag(path, [Trajectory(t=t, q=q, qd=qd, tau=tau, joint_names=tuple(joints),
                                           source=f'heldout {case}')],
                         custom_data={'generator': 'bench/heldout.py (MuJoCo)',
                                      'case': case, 'seed': str(seed)})
    return path


def dp_recording(rng: np.random.Generator, truth: dict, duration: float,
                 inertia_mass: Sequence[float], rate: float = RATE):
    """Simulate the double pendulum with `truth` ({'mass', 'com_z', 'damping'}: (2,) each)
    from rest at random angles in [-1, 1] rad under multi-sine torques (3 sines, 0.1-1.5 Hz),
    peaks first 0.6 of each joint's largest gravity torque; a draw whose speed exceeds
    MAX_SPEED is redrawn 0.7 times weaker, one whose speed stays under MIN_SPEED (no chaotic
    swinging) 1.4 times stronger. Sampled at `rate` [Hz], torques held between samples.
    Returns (t, q, qd, tau) noise-free."""
    mass, com = np.asarray(truth['mass']), np.abs(np.asarray(truth['com_z']))
    model = hm.mujoco.MjModel.from_xml_string(hm.double_pendulum_mjcf(
        mass, truth['com_z'], truth['damping'], inertia_mass=inertia_mass))
    num = int(round(duration * rate)) + 1
    t = np.arange(num) / rate
    peak = 0.6 * GRAVITY * np.array([mass[0] * com[0] + mass[1] * hm.DP_LENGTH,
                                     mass[1] * com[1]])
    best = None
    for _ in range(30):
        torque, _ = multisine(t, peak, rng)
        q0 = rng.uniform(-1.0, 1.0, size=2)

        def controller(k, tk, q, qd, data, torque=torque):
            return torque[k]

        t, q, qd, tau = hm.simulate(model, q0, np.zeros(2), controller, duration, rate)
        speed = np.max(np.abs(qd)) if np.all(np.isfinite(qd)) else math.inf
        if speed > MAX_SPEED:
            peak = 0.7 * peak
        elif speed < MIN_SPEED and duration >= 5.0:
            best = (t, q, qd, tau)
            peak = 1.4 * peak
        else:
            return t, q, qd, tau
    if best is None:
        raise RuntimeError('dp: no bounded excitation found')
    return best


def make_dp_case(rng: np.random.Generator, seed: int, duration: float, out: str,
                 truth_inertia: str = 'nominal') -> Case:
    """Draw the double pendulum's truth, simulate and noise it, write URDF, config and bag."""
    truth = {'mass': rng.uniform(0.5, 2.0, 2), 'com_z': rng.uniform(-0.4, -0.1, 2),
             'damping': rng.uniform(0.02, 0.3, 2)}
    inertia_mass = truth['mass'] if truth_inertia == 'rod' else np.ones(2)
    t, q, qd, tau = dp_recording(rng, truth, duration, inertia_mass)
    q, qd = add_noise(q, qd, rng)
    folder = os.path.join(out, 'dp')
    os.makedirs(folder, exist_ok=True)
    urdf = os.path.join(folder, 'double_pendulum.urdf')
    with open(urdf, 'w', encoding='utf-8') as f:
        f.write(double_pendulum_urdf())
    (mlo, mhi), (clo, chi), (dlo, dhi) = (DP_BOUNDS[k] for k in ('mass', 'com.z', 'damping'))
    parameters = {link: {'mass': {'min': mlo, 'max': mhi}, 'com': {'z': {'min': clo, 'max': chi}}}
                  for link in DP_LINKS}
    parameters.update({joint: {'damping': {'min': dlo, 'max': dhi}} for joint in DP_JOINTS})
    config = write_config(os.path.join(folder, 'config.yaml'), urdf, DP_JOINTS, parameters)
    bag = write_bag(os.path.join(folder, 'bag'), t, q, qd, tau, DP_JOINTS, seed, 'dp')
    rows = []
    for i, link in enumerate(DP_LINKS):
        rows.append(Row(f'{link}.mass', truth['mass'][i], truth['mass'][i]))
        rows.append(Row(f'{link}.com.z', truth['com_z'][i], abs(truth['com_z'][i])))
    for i, joint in enumerate(DP_JOINTS):
        rows.append(Row(f'{joint}.damping', truth['damping'][i], truth['damping'][i]))

    def ours(estimate):
        return {r.name: interval(estimate['parameters'][r.name]) for r in rows}

    def mujoco_fit():
        spec = hm.mujoco.MjSpec.from_string(hm.double_pendulum_mjcf(
            (1.0, 1.0), (-0.25, -0.25), (0.0, 0.0), inertia_mass=(1.0, 1.0)))
        params = []
        for link in DP_LINKS:
            params.append(hm.SysidParameter(f'{link}.mass', 1.0, mlo, mhi,
                                            lambda s, v, b=link: setattr(s.body(b), 'mass', v)))
            params.append(hm.SysidParameter(f'{link}.com.z', -0.25, clo, chi,
                                            lambda s, v, b=link: setattr(s.body(b), 'ipos',
                                                                         [0.0, 0.0, v])))
        params += damping_parameters(DP_JOINTS, 0.0, dlo, dhi)
        fit = hm.fit_sysid(spec, params, DP_JOINTS, t, q, qd, tau)
        return fit, fit_intervals(fit)

    note = ('inertia about each COM: uniform rod of the drawn mass (truth); both fits keep '
            "the nominal 1 kg rod's" if truth_inertia == 'rod' else
            "inertia about each COM: the nominal 1 kg rod's, in the truth and both fits")
    return Case('dp', config, bag, DP_JOINTS, t, q, qd, tau, rows, ours, mujoco_fit, note)


def arm_recording(rng: np.random.Generator, spec, duration: float):
    """PD tracking of random multi-sine references around PANDA_POSE (peaks PANDA_AMPLITUDE,
    0.1-0.6 Hz, eased in over the first second), as a computed-torque law on the simulated arm
    (MuJoCo's mass matrix and bias forces): tau = bias + M (kp e + kd e_dot) with kp, kd for
    3 Hz and damping ratio 0.7 (joint-wise gains on the raw torques go unstable at 200 Hz on
    the low-inertia mode of the nearly parallel joints 1 and 3); clipped to the URDF effort
    limits. Returns (t, q, qd, tau) noise-free."""
    model = spec.compile()
    num = int(round(duration * RATE)) + 1
    t = np.arange(num) / RATE
    wave, wave_rate = multisine(t, PANDA_AMPLITUDE, rng, f_min=0.1, f_max=0.6)
    ramp = np.clip(t / 1.0, 0.0, 1.0)[:, None]
    ref = PANDA_POSE + ramp * (wave - wave[0])
    ref_rate = ramp * wave_rate + (t[:, None] < 1.0) * (wave - wave[0])
    omega = 2.0 * np.pi * 3.0
    kp, kd = omega ** 2, 2.0 * 0.7 * omega
    limit = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
    inertia = np.zeros((model.nv, model.nv))

    def controller(k, tk, q, qd, data):
        hm.mujoco.mj_fullM(model, data, inertia)
        accel = kp * (ref[k] - q) + kd * (ref_rate[k] - qd)
        return np.clip(data.qfrc_bias + inertia @ accel, -limit, limit)

    return hm.simulate(model, PANDA_POSE, np.zeros(7), controller, duration, RATE)


def make_arm_case(rng: np.random.Generator, seed: int, duration: float, out: str) -> Case:
    """Draw the Panda's payload and damping, simulate and noise it, write config and bag."""
    from sysid_ros.io import model_io

    urdf_path, locked = model_io.example_robot_urdf('panda')
    payload_mass = rng.uniform(0.5, 3.0)
    offset = rng.uniform([-0.05, -0.05, 0.0], [0.05, 0.05, 0.1])
    payload_pos = FLANGE + offset
    damping = rng.uniform(0.05, 1.0, 7)
    spec = hm.panda_spec(urdf_path, locked, PANDA_JOINTS, damping, payload_mass, payload_pos)
    t, q, qd, tau = arm_recording(rng, spec, duration)
    q, qd = add_noise(q, qd, rng)
    folder = os.path.join(out, 'arm')
    os.makedirs(folder, exist_ok=True)
    box_lo, box_hi = FLANGE + PAYLOAD_OFFSET_BOUNDS[0], FLANGE + PAYLOAD_OFFSET_BOUNDS[1]
    dlo, dhi = DAMPING_BOUNDS_ARM
    parameters = {'payload': {
        'mass': {'min': PAYLOAD_MASS_BOUNDS[0], 'max': PAYLOAD_MASS_BOUNDS[1]},
        'com': {axis: {'min': float(PAYLOAD_OFFSET_BOUNDS[0][i]),
                       'max': float(PAYLOAD_OFFSET_BOUNDS[1][i])}
                for i, axis in enumerate('xyz')}}}
    parameters.update({joint: {'damping': {'min': dlo, 'max': dhi}} for joint in PANDA_JOINTS})
    config = write_config(os.path.join(folder, 'config.yaml'), 'example-robot-data:panda',
                          PANDA_JOINTS, parameters, payload_link=FLANGE_LINK)
    bag = write_bag(os.path.join(folder, 'bag'), t, q, qd, tau, PANDA_JOINTS, seed, 'arm')
    norm = float(np.linalg.norm(payload_pos))
    rows = [Row('payload.mass', payload_mass, payload_mass)]
    rows += [Row(f'payload.com.{axis}', payload_pos[i], norm) for i, axis in enumerate('xyz')]
    rows += [Row(f'{joint}.damping', damping[i], damping[i])
             for i, joint in enumerate(PANDA_JOINTS)]

    def ours(estimate):
        """The payload's estimates, its position moved from the flange to the panda_link7
        frame (the flange frame is panda_link7's translated by FLANGE)."""
        par = estimate['parameters']
        result = {'payload.mass': interval(par['payload.mass'])}
        for i, axis in enumerate('xyz'):
            result[f'payload.com.{axis}'] = tuple(
                v + FLANGE[i] for v in interval(par[f'payload.com.{axis}']))
        for joint in PANDA_JOINTS:
            result[f'{joint}.damping'] = interval(par[f'{joint}.damping'])
        return result

    def mujoco_fit():
        fit_spec = hm.panda_spec(urdf_path, locked, PANDA_JOINTS, [0.003] * 7, 0.0,
                                 FLANGE + np.array([0.0, 0.0, 0.05]))
        params = [hm.SysidParameter('payload.mass', 0.0, *PAYLOAD_MASS_BOUNDS,
                                    lambda s, v: setattr(s.body('payload'), 'mass', v))]
        for i, axis in enumerate('xyz'):
            def apply(s, v, i=i):
                pos = np.array(s.body('payload').pos, float)
                pos[i] = v
                s.body('payload').pos = pos
            centre = FLANGE[i] + (0.05 if i == 2 else 0.0)
            params.append(hm.SysidParameter(f'payload.com.{axis}', centre,
                                            float(box_lo[i]), float(box_hi[i]), apply))
        params += damping_parameters(PANDA_JOINTS, 0.003, dlo, dhi)
        fit = hm.fit_sysid(fit_spec, params, PANDA_JOINTS, t, q, qd, tau)
        return fit, fit_intervals(fit)

    note = ('payload COM in the panda_link7 frame; ours: model.payload on panda_link8; '
            'MuJoCo fits the payload body')
    return Case('arm', config, bag, PANDA_JOINTS, t, q, qd, tau, rows, ours, mujoco_fit, note)


# ------------------------------------------------------------------------------------------
# Running the fits
# ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class OurFit:
    """Outcome of one `sysid fit` subprocess."""

    method: str | None
    exit_code: int
    wall_s: float
    estimate: dict | None
    rows: dict[str, tuple[float, float, float]]
    converged: object = None
    warnings: object = None
    log: str = ''


def sysid_executable() -> str:
    """The `sysid` entry point of the running interpreter's environment (else the repo's)."""
    beside = pathlib.Path(sys.executable).with_name('sysid')
    return str(beside if beside.exists() else REPO / '.venv' / 'bin' / 'sysid')


def run_ours(case: Case, method: str | None, out: str, timeout: float) -> OurFit:
    """Run `sysid fit --config --bag --out [--method]` on the case; read estimate.yaml."""
    label = method or 'default'
    fit_out = os.path.join(out, case.name, f'fit_{label}')
    log_path = fit_out + '.log'
    cmd = [sysid_executable(), 'fit', '--config', case.config, '--bag', case.bag, '--out',
           fit_out]
    if method:
        cmd += ['--method', method]
    env = dict(os.environ)
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    env['FASTDDS_DEFAULT_PROFILES_FILE'] = str(REPO / 'config' / 'fastdds_localhost.xml')
    env.setdefault('JAX_COMPILATION_CACHE_DIR', str(REPO / '.jax_cache'))
    shutil.rmtree(fit_out, ignore_errors=True)          # never read a previous run's estimate
    print(f'[{case.name}] {" ".join(cmd)}', flush=True)
    start = time.perf_counter()
    with open(log_path, 'w', encoding='utf-8') as log:
        try:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  cwd=str(REPO), timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = 124
    wall = time.perf_counter() - start
    with open(log_path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    if code != 0:               # e.g. 3: written with warnings; the estimate is still read
        print(f'[{case.name}] sysid fit exited {code}; log: {log_path}\n'
              + '\n'.join(text.splitlines()[-6:]), file=sys.stderr)
    estimate, rows = None, {}
    path = os.path.join(fit_out, 'estimate.yaml')
    if os.path.isfile(path):
        with open(path, encoding='utf-8') as f:
            estimate = yaml.safe_load(f)
        try:
            rows = case.ours(estimate)
        except (KeyError, TypeError, ValueError) as exc:
            print(f'[{case.name}] cannot read {path}: {exc!r}', file=sys.stderr)
    return OurFit(method, code, wall, estimate, rows,
                  converged=(estimate or {}).get('converged'),
                  warnings=(estimate or {}).get('warnings'), log=log_path)


# ------------------------------------------------------------------------------------------
# Scoring and report
# ------------------------------------------------------------------------------------------

def score(rows: Sequence[Row], estimate: dict[str, tuple[float, float, float]]):
    """(max relative error, intervals holding the truth, parameters) of one fit; a missing
    or non-finite estimate counts as an error of inf and a miss."""
    worst, hits = 0.0, 0
    for row in rows:
        value, lo, hi = estimate.get(row.name, (math.nan, math.nan, math.nan))
        err = abs(value - row.truth) / row.scale if math.isfinite(value) else math.inf
        worst = max(worst, err)
        hits += int(lo <= row.truth <= hi)
    return worst, hits, len(rows)


def _cell(entry, row: Row) -> tuple[str, str, str, str]:
    """(value, 95% half-width, error %, interval holds the truth) of one estimate."""
    if entry is None:
        return '-', '-', '-', '-'
    value, lo, hi = entry
    if not math.isfinite(value):
        return 'nan', '-', '-', 'no'
    err = abs(value - row.truth) / row.scale
    return (f'{value:.5g}', f'{(hi - lo) / 2:.2g}', f'{100 * err:.2f}',
            'yes' if lo <= row.truth <= hi else 'no')


def format_table(case: Case, ours: OurFit, mujoco_rows) -> str:
    """The per-parameter table of one case and one of our methods (+-: half-width of the 95%
    interval)."""
    head = ('parameter', 'truth', 'ours', '+-', 'err %', 'in CI', 'mujoco', '+-', 'err %',
            'in CI')
    lines = []
    for row in case.rows:
        a = _cell(ours.rows.get(row.name) if ours.rows else None, row)
        b = _cell(mujoco_rows.get(row.name) if mujoco_rows else None, row)
        lines.append((row.name, f'{row.truth:.5g}') + a + b)
    widths = [max(len(head[k]), *(len(line[k]) for line in lines)) for k in range(len(head))]
    fmt = lambda cols: '  '.join(c.ljust(w) if k == 0 else c.rjust(w)        # noqa: E731
                                 for k, (c, w) in enumerate(zip(cols, widths)))
    return '\n'.join([fmt(head), fmt(['-' * w for w in widths])] + [fmt(line) for line in lines])


def _fmt(value: float) -> str:
    return f'{value:.4g}' if math.isfinite(value) else ('inf' if value > 0 else 'nan')


def run_case(case: Case, methods: Sequence[str | None], out: str, with_mujoco: bool,
             timeout: float) -> dict[str, str]:
    """Run our fits and MuJoCo's on one case, print the tables; return RESULT entries."""
    result: dict[str, str] = {}
    fits = [run_ours(case, method, out, timeout) for method in methods]
    mujoco_fit, mujoco_rows = None, None
    if with_mujoco:
        print(f'[{case.name}] mujoco.sysid (Levenberg-Marquardt) ...', flush=True)
        try:
            mujoco_fit, mujoco_rows = case.mujoco()
        except Exception as exc:                # report ours even when the toolbox fails
            print(f'[{case.name}] mujoco.sysid failed: {exc!r}', file=sys.stderr)
        else:
            with open(os.path.join(out, case.name, 'mujoco_sysid.log'), 'w',
                      encoding='utf-8') as f:
                f.write(mujoco_fit.log)
    for fit in fits:
        label = fit.method or 'default method'
        print(f'\n=== {case.name}: sysid fit ({label}) vs mujoco.sysid ===')
        print(format_table(case, fit, mujoco_rows))
        if case.note:
            print(f'note: {case.note}')
        worst, hits, n = score(case.rows, fit.rows)
        est = fit.estimate or {}
        warnings = list(fit.warnings or [])
        print(f'ours: exit {fit.exit_code}, wall {fit.wall_s:.1f} s (fit itself '
              f'{est.get("wall_time_s", math.nan)} s, method {est.get("method", "?")}, '
              f'{est.get("iterations", "?")} iterations), converged {fit.converged}, '
              f'max rel err {_fmt(worst)}, coverage {hits}/{n}; log {fit.log}')
        for warning in warnings:
            print(f'ours: warning: {str(warning)[:160]}')
        prefix = case.name if fit.method is None else f'{case.name}_{fit.method}'
        result[f'{prefix}_max_rel_err'] = _fmt(worst)
        result[f'{prefix}_wall_s'] = f'{fit.wall_s:.1f}'
        if mujoco_fit is not None:
            if fit is fits[0]:
                result[f'{case.name}_mujoco_wall_s'] = f'{mujoco_fit.wall_s:.1f}'
            result[f'{prefix}_ratio'] = _fmt(fit.wall_s / mujoco_fit.wall_s)
        result[f'{prefix}_coverage'] = f'{hits}/{n}'
    if mujoco_fit is not None:
        worst, hits, n = score(case.rows, mujoco_rows)
        print(f'mujoco.sysid: wall {mujoco_fit.wall_s:.1f} s, {mujoco_fit.iterations} '
              f'iterations on {mujoco_fit.windows} windows, max rel err {_fmt(worst)}, '
              f'coverage {hits}/{n}')
        for fit in fits:
            print(f'wall-time ratio ours ({fit.method or "default"}) / mujoco: '
                  f'{fit.wall_s / mujoco_fit.wall_s:.2f}')
        result[f'{case.name}_mujoco_max_rel_err'] = _fmt(worst)
        result[f'{case.name}_mujoco_coverage'] = f'{hits}/{n}'
    return result


def result_line(entries: dict[str, str]) -> str:
    """`RESULT heldout key=value ...` in the order of `entries` (`run_case` puts each case's
    max_rel_err, wall_s, mujoco_wall_s, ratio, coverage first)."""
    return 'RESULT heldout ' + ' '.join(f'{k}={v}' for k, v in entries.items())


def parse_result_line(line: str) -> dict[str, str]:
    """Inverse of `result_line` (raises ValueError on another line)."""
    words = line.split()
    if words[:2] != ['RESULT', 'heldout']:
        raise ValueError(f'not a RESULT heldout line: {line!r}')
    return dict(word.split('=', 1) for word in words[2:])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--cases', nargs='+', choices=('dp', 'arm'), default=['dp', 'arm'])
    p.add_argument('--methods', nargs='*', default=None, metavar='METHOD',
                   help="methods of sysid fit (default: the configuration's default, no "
                        '--method); "all": every method of the registry')
    p.add_argument('--seed', type=int, help='seed of the truth, the excitation and the noise '
                   '(default: from the clock, printed)')
    p.add_argument('--duration', type=float, default=60.0, help='recording length [s]')
    p.add_argument('--out', help='output folder (default: a new temporary folder)')
    p.add_argument('--no-mujoco', action='store_true', help="skip MuJoCo's sysid toolbox")
    p.add_argument('--quick', action='store_true',
                   help='short run: 10 s double pendulum only')
    p.add_argument('--truth-inertia', choices=('nominal', 'rod'), default='nominal',
                   help='dp: inertia about each COM of the truth: of the nominal 1 kg rod '
                        '(default; the fitted models keep it, so the truth is reachable) or of '
                        'a rod of the drawn mass (not reachable: the fits trade mass against '
                        'COM to match the inertia about the joint)')
    p.add_argument('--timeout', type=float, default=3600.0,
                   help='limit of each sysid fit [s] (exit 124 past it)')
    return p


def methods_from(arg: list[str] | None) -> list[str | None]:
    """--methods -> method names (None: the configuration's default)."""
    if not arg:
        return [None]
    if arg == ['all']:
        from sysid_ros.core.inference.registry import METHODS
        return list(METHODS)
    return list(arg)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    hm.require_mujoco()
    if args.quick:
        args.cases, args.duration = ['dp'], 10.0
    seed = args.seed if args.seed is not None else int(time.time_ns() % (2 ** 31))
    out = args.out or tempfile.mkdtemp(prefix='heldout-')
    os.makedirs(out, exist_ok=True)
    methods = methods_from(args.methods)
    print(f'heldout: seed {seed}, duration {args.duration:g} s at {RATE:g} Hz, cases '
          f'{" ".join(args.cases)}, methods {" ".join(m or "default" for m in methods)}, '
          f'output {out}', flush=True)
    entries: dict[str, str] = {}
    for name in args.cases:
        rng = np.random.default_rng([seed, SEED_SALT, ('dp', 'arm').index(name)])
        start = time.perf_counter()
        if name == 'dp':
            case = make_dp_case(rng, seed, args.duration, out, args.truth_inertia)
        else:
            case = make_arm_case(rng, seed, args.duration, out)
        print(f'[{name}] recording: {len(case.t)} samples, max |qd| '
              f'{np.max(np.abs(case.qd)):.2f} rad/s, max |tau| {np.max(np.abs(case.tau)):.2f} '
              f'N m, simulated in {time.perf_counter() - start:.1f} s; config {case.config}',
              flush=True)
        entries.update(run_case(case, methods, out, not args.no_mujoco, args.timeout))
    print(result_line(entries), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
