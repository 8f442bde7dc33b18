"""Held-out benchmark (bench/heldout.py, bench/heldout_mujoco.py): the independent MuJoCo
recordings are physical and describe the same system as the URDF this package reads, the
bag round-trips, and the harness runs end to end (slow)."""

import dataclasses
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip('mujoco')

from bench import heldout  # noqa: E402
from bench import heldout_mujoco as hm  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TRUTH = {'mass': np.array([0.8, 1.6]), 'com_z': np.array([-0.18, -0.33]),
         'damping': np.array([0.05, 0.2])}


def _energy(model, q, qd):
    """(T,) total mechanical energy [J] of MuJoCo states (potential + kinetic)."""
    model.opt.enableflags |= hm.mujoco.mjtEnableBit.mjENBL_ENERGY
    data = hm.mujoco.MjData(model)
    energy = []
    for qk, qdk in zip(q, qd):
        data.qpos[:], data.qvel[:] = qk, qdk
        hm.mujoco.mj_forward(model, data)
        energy.append(data.energy.sum())
    return np.asarray(energy)


def _package_params(truth):
    """This package's (RobotModel, Params) of the double-pendulum URDF with `truth` written in
    (mass, COM, rod inertia of the drawn mass about the COM, damping)."""
    import jax.numpy as jnp

    from sysid_ros.core.model import inertia
    from sysid_ros.io import model_io

    model, params = model_io.load_urdf(heldout.double_pendulum_urdf())
    inertial = [inertia.inertial_from_physical(
        truth['mass'][i], jnp.array([0.0, 0.0, truth['com_z'][i]]),
        jnp.diag(jnp.array(hm.rod_inertia(truth['mass'][i])))) for i in range(2)]
    return model, dataclasses.replace(params, inertial=jnp.stack(inertial),
                                      damping=jnp.asarray(truth['damping']))


def test_free_double_pendulum_conserves_energy():
    model = hm.mujoco.MjModel.from_xml_string(hm.double_pendulum_mjcf(
        TRUTH['mass'], TRUTH['com_z'], (0.0, 0.0)))
    _, q, qd, _ = hm.simulate(model, np.array([2.0, -1.0]), np.array([0.0, 3.0]),
                              lambda *args: np.zeros(2), duration=5.0, rate=heldout.RATE)
    assert np.max(np.abs(qd)) > 5.0                      # a large, swinging motion
    energy = _energy(model, q, qd)
    assert np.max(np.abs(energy - energy[0])) < 1e-5 * (1.0 + abs(energy[0]))   # drift 3e-6 J


def test_mujoco_and_package_rollouts_of_the_truth_agree():
    """The MJCF (MuJoCo) and the URDF (this package's RK4 at the same 1 ms step, torques held
    over each 5 ms sample) describe the same double pendulum."""
    import jax.numpy as jnp

    from sysid_ros.io import simulation

    rng = np.random.default_rng(0)
    t, q, qd, tau = heldout.dp_recording(rng, TRUTH, 0.5, TRUTH['mass'])
    assert np.max(np.abs(qd)) > 1.0
    model, params = _package_params(TRUTH)
    states = np.asarray(simulation.rollout(
        model, params, jnp.concatenate([jnp.asarray(q[0]), jnp.asarray(qd[0])]),
        jnp.asarray(tau[:-1]), 1.0 / heldout.RATE, integrator='rk4', actuator='viscous',
        substeps=int(round(1.0 / (heldout.RATE * hm.SIM_DT)))))
    np.testing.assert_allclose(states[:, :2], q, atol=1e-8, rtol=0)
    np.testing.assert_allclose(states[:, 2:], qd, atol=1e-7, rtol=0)


def test_dp_case_files_round_trip(tmp_path):
    """The configuration is the shipped-defaults one with the six bounds; the bag holds the
    noisy recording the MuJoCo fit gets."""
    from sysid_ros.io import bags, config as config_io, problem

    case = heldout.make_dp_case(np.random.default_rng(1), 1, 2.0, str(tmp_path))
    cfg = config_io.load_yaml(case.config)
    assert cfg.estimator == config_io.EstimatorConfig()
    assert cfg.data.rate == heldout.RATE and cfg.model.actuator == 'viscous'
    assert dict(cfg.parameters.bounds) == {
        'link1.mass': (0.2, 3.0), 'link1.com.z': (-0.5, 0.0),
        'link2.mass': (0.2, 3.0), 'link2.com.z': (-0.5, 0.0),
        'joint1.damping': (0.0, 0.5), 'joint2.damping': (0.0, 0.5)}
    assert problem.build_problem(cfg).spec.names == tuple(cfg.parameters.bounds)
    assert [r.name for r in case.rows] == list(cfg.parameters.bounds)
    for row in case.rows:
        lo, hi = cfg.parameters.bounds[row.name]
        assert lo < row.truth < hi
    segments = bags.read_bag(case.bag, heldout.DP_JOINTS, cfg.data)
    assert len(segments) == 1
    traj = segments[0].trajectory
    assert traj.q.shape == case.q.shape == (401, 2)
    np.testing.assert_allclose(traj.t - traj.t[0], case.t, atol=1e-9)
    for key in ('q', 'qd', 'tau'):
        np.testing.assert_allclose(getattr(traj, key), getattr(case, key), atol=1e-9)


def test_scores_and_result_line():
    rows = [heldout.Row('a.mass', 2.0, 2.0), heldout.Row('a.com.z', -0.1, 0.2)]
    worst, hits, n = heldout.score(rows, {'a.mass': (2.2, 2.1, 2.3),
                                          'a.com.z': (-0.12, -0.2, 0.0)})
    assert (round(worst, 6), hits, n) == (0.1, 1, 2)
    assert heldout.score(rows, {})[0] == math.inf
    assert heldout.interval({'mean': 1.0, 'std': 0.5}) == pytest.approx((1.0, 0.02, 1.98))
    assert heldout.interval({'mean': 1.0, 'std': 0.5, 'ci95': [0.5, 1.2]}) == (1.0, 0.5, 1.2)
    line = heldout.result_line({'dp_max_rel_err': '0.1', 'dp_coverage': '1/2'})
    assert line == 'RESULT heldout dp_max_rel_err=0.1 dp_coverage=1/2'
    assert heldout.parse_result_line(line) == {'dp_max_rel_err': '0.1', 'dp_coverage': '1/2'}


@pytest.mark.slow
def test_panda_mujoco_matches_package_rollout():
    """MuJoCo's Panda (compiled from the same URDF, payload body, damping) and this package's
    (Pinocchio-loaded, payload by `add_point_mass`) agree under the recorded torques."""
    import jax.numpy as jnp

    from sysid_ros.core.model import edits
    from sysid_ros.io import model_io, simulation

    urdf, locked = model_io.example_robot_urdf('panda')
    damping = np.linspace(0.1, 0.9, 7)
    position = heldout.FLANGE + np.array([0.02, -0.03, 0.06])
    spec = hm.panda_spec(urdf, locked, heldout.PANDA_JOINTS, damping, 1.5, position)
    t, q, qd, tau = heldout.arm_recording(np.random.default_rng(2), spec, 2.0)
    model, params = model_io.load_urdf('example-robot-data:panda')
    params = edits.add_point_mass(params, 6, 1.5, position)
    params = dataclasses.replace(params, damping=jnp.asarray(damping))
    states = np.asarray(simulation.rollout(
        model, params, jnp.concatenate([jnp.asarray(q[200]), jnp.asarray(qd[200])]),
        jnp.asarray(tau[200:300]), 1.0 / heldout.RATE, integrator='rk4', actuator='viscous',
        substeps=5))
    np.testing.assert_allclose(states[:, :7], q[200:301], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_heldout_harness_runs_end_to_end(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-m', 'bench.heldout', '--cases', 'dp', '--no-mujoco', '--seed', '3',
         '--out', str(tmp_path)],
        capture_output=True, text=True, timeout=3600, cwd=str(REPO))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    entries = heldout.parse_result_line(last)
    assert {'dp_max_rel_err', 'dp_wall_s', 'dp_coverage'} <= set(entries)
    float(entries['dp_max_rel_err'])
    assert float(entries['dp_wall_s']) > 0.0
    hits, n = (int(v) for v in entries['dp_coverage'].split('/'))
    assert n == 6 and 0 <= hits <= n
    assert not any(k.startswith('arm_') or 'mujoco' in k for k in entries)
