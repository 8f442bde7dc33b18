"""The live demo (`sysid demo`): its convergence scoring, and (slow) the whole run."""

import os
import pathlib
import subprocess
import sys

import pytest

from sysid_ros.ros import live_demo

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


@pytest.mark.slow
def test_sysid_demo_runs_both_nodes_and_scores_the_estimate(tmp_path):
    run = subprocess.run(
        [sys.executable, '-m', 'sysid_ros.cli', 'demo', '--duration', '30', '--out',
         str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ))               # with the DDS isolation of test/ros/conftest.py
    assert run.returncode in (live_demo.EXIT_CONVERGED, live_demo.EXIT_NOT_CONVERGED), (
        run.stdout + run.stderr)
    for name in ('link1.mass', 'link2.mass', 'joint1.damping', 'joint2.damping'):
        assert name in run.stdout
    assert 'converged' in run.stdout.lower()
    assert (tmp_path / 'posterior.npz').is_file()
    assert (tmp_path / 'estimator.log').is_file() and (tmp_path / 'sim_robot.log').is_file()
