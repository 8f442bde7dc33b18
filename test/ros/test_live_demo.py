"""The live demo (`sysid demo`): its convergence scoring, its phases, the payload demo's
configurations, and (slow) the whole run of each robot."""

import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from sysid_ros import cli_demo
from sysid_ros.io import config as config_io
from sysid_ros.ros import demo_robots, live_demo, payload_demo

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

BOUNDS = {'m': (0.0, 2.0), 'd': (0.0, 0.5)}
TRUTH = {'m': 1.0, 'd': 0.2}


def _estimate(m, d):
    return {'m': (m, 0.01), 'd': (d, 0.01)}


def test_convergence_time_is_the_start_of_the_final_converged_run():
    history = [(1.0, _estimate(1.5, 0.2)), (2.0, _estimate(1.1, 0.21)),
               (3.0, _estimate(1.3, 0.2)), (4.0, _estimate(1.05, 0.2)),
               (5.0, _estimate(0.98, 0.19))]
    result = live_demo.convergence(history, TRUTH, BOUNDS, tolerance=0.1)
    assert result.converged
    assert result.time == 4.0                  # 3.0 was off by 0.15 of the mass bounds width
    assert result.errors['m'] == pytest.approx(0.01)
    assert result.errors['d'] == pytest.approx(0.02)


def test_not_converged_when_the_last_estimate_is_off():
    history = [(1.0, _estimate(1.0, 0.2)), (2.0, _estimate(1.0, 0.3))]
    result = live_demo.convergence(history, TRUTH, BOUNDS, tolerance=0.1)
    assert not result.converged and result.time is None
    assert result.errors['d'] == pytest.approx(0.2)
    assert not live_demo.convergence([], TRUTH, BOUNDS, 0.1).converged


def test_phases_split_at_a_change_of_the_truth_and_skip_an_unheld_payloads_com():
    empty = {'payload.mass': 0.0, 'payload.com.x': 0.02, 'joint1.damping': 0.3}
    held = dict(empty, **{'payload.mass': 1.0})
    history = [(1.0, 'a'), (2.0, 'b'), (3.0, 'c')]
    phases = live_demo._phases(history, [(0.5, empty), (2.5, held)])
    assert phases == [(0.5, empty, [(1.0, 'a'), (2.0, 'b')]), (2.5, held, [(3.0, 'c')])]
    assert live_demo._scored(list(empty), empty) == ['payload.mass', 'joint1.damping']
    assert live_demo._scored(list(held), held) == list(held)


def test_the_franka_stand_in_config_reads_the_profile_stream_and_may_drop_the_model(tmp_path):
    franka = demo_robots.STAND_INS['franka']
    config = cli_demo.packaged_config(franka.config)
    with_model = config_io.load_yaml(payload_demo.write_config(franka, config, tmp_path))
    assert with_model.data.driver == 'franka'
    assert with_model.data.joint_states_topic == '/franka/joint_states'
    path = payload_demo.write_config(franka, config, tmp_path, model=False)
    tree = yaml.safe_load(pathlib.Path(path).read_text())['/**']['ros__parameters']
    assert 'urdf' not in tree['model'] and 'joint_states_topic' not in tree['data']


def test_the_error_is_the_handed_mass_else_the_last_estimate():
    case = payload_demo.PayloadCase(mass=2.0, handed=2.02, estimated=1.9)
    assert case.error_pct() == pytest.approx(1.0)
    assert payload_demo.PayloadCase(mass=2.0, handed=None,
                                    estimated=1.9).error_pct() == pytest.approx(5.0)


def _demo(tmp_path, *args, timeout=600):
    return subprocess.run(
        [sys.executable, '-m', 'sysid_ros.cli', 'demo', '--out', str(tmp_path), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ))               # with the DDS isolation of test/ros/conftest.py


@pytest.mark.slow
def test_sysid_demo_double_pendulum_runs_both_nodes_and_scores_the_estimate(tmp_path):
    run = _demo(tmp_path, '--robot', 'double_pendulum', '--duration', '30')
    assert run.returncode in (live_demo.EXIT_CONVERGED, live_demo.EXIT_NOT_CONVERGED), (
        run.stdout + run.stderr)
    for name in ('link1.mass', 'link2.mass', 'joint1.damping', 'joint2.damping'):
        assert name in run.stdout
    assert 'converged' in run.stdout.lower()
    assert (tmp_path / 'posterior.npz').is_file()
    assert (tmp_path / 'estimator.log').is_file() and (tmp_path / 'sim_robot.log').is_file()


@pytest.mark.slow
def test_sysid_demo_arm_converges_and_follows_the_pick_up(tmp_path):
    run = _demo(tmp_path)
    assert run.returncode == live_demo.EXIT_CONVERGED, run.stdout + run.stderr
    assert 'phase 2' in run.stdout and 'payload.mass 0 -> 1' in run.stdout
    assert 'after the change' in run.stdout
    for name in ('payload.mass', 'payload.com.z', 'panda_joint7.coulomb'):
        assert name in run.stdout
    assert (tmp_path / 'posterior.npz').is_file()


@pytest.mark.slow
def test_sysid_demo_ur_hands_the_payload_to_the_stand_in_and_restores_it(tmp_path):
    run = _demo(tmp_path, '--robot', 'ur', timeout=1500)
    assert run.returncode == payload_demo.EXIT_APPLIED, run.stdout + run.stderr
    line, = [x for x in run.stdout.splitlines() if x.startswith('payload: true')]
    off = float(line.split('(')[1].split(' %')[0])
    assert off < 2.0, line                       # the goal for the UR
    assert 'earlier load restored: yes' in line
