"""`sysid simulate`, `sysid fit` and `sysid demo` end to end (in process, except the SIGINT
test, which runs `sysid fit` in a subprocess)."""

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from sysid_ros import cli, cli_demo
from sysid_ros.io import model_io
from sysid_ros.io import progress
from sysid_ros.io import results

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TRUE = {'link1.mass': 1.0, 'link2.mass': 1.0, 'link2.com.x': 0.0, 'joint1.damping': 0.15,
        'joint2.damping': 0.08}


def _step(integrator, rate=200.0):
    """`model.dt` for first-order integrators: the step of the model that simulates the
    data (the fit would otherwise take a finer one, `io.integration_step`)."""
    return {'dt': 1.0 / rate} if integrator == 'semi_implicit_euler' else {}


def _config(method='nea', integrator='rk4'):
    return {'/**': {'ros__parameters': {
        'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
                  'joints': ['joint1', 'joint2'], 'actuator': 'viscous',
                  'integrator': integrator, **_step(integrator)},
        'parameters': {
            'link1': {'mass': {'min': 0.1, 'max': 5.0, 'init': 1.3}},
            'link2': {'mass': {'min': 0.1, 'max': 5.0, 'init': 0.7},
                      'com': {'x': {'min': -0.2, 'max': 0.2, 'init': 0.05}}},
            'joint1': {'damping': {'min': 0.0, 'max': 1.0, 'init': 0.3}},
            'joint2': {'damping': {'min': 0.0, 'max': 1.0, 'init': 0.04}},
        },
        'data': {'rate': 200.0},
        'estimator': {'method': method, 'iterations': 300, 'learning_rate': 0.05,
                      'rollout_horizon': 25},
    }}}


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    """A config and a simulated data file (via `sysid simulate`)."""
    root = tmp_path_factory.mktemp('cli')
    config = root / 'dp.yaml'
    config.write_text(yaml.safe_dump(_config(), sort_keys=False))
    data = root / 'run.npz'
    assert cli.main(['simulate', '--config', str(config), '--out', str(data),
                     '--duration', '5', '--noise', '0.001', '--seed', '3']) == 0
    return root, config, data


def _fit(config, data, out, *extra):
    return cli.main(['fit', '--config', str(config), '--data', *map(str, data),
                     '--out', str(out), *extra])


def _snapshot(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def test_simulate_writes_a_loadable_trajectory(workdir, tmp_path, capsys):
    _, config, data = workdir
    with np.load(data) as npz:
        assert npz['q'].shape == (1001, 2) and list(npz['joint_names']) == ['joint1', 'joint2']
        assert np.all(np.isfinite(npz['tau']))
    csv = tmp_path / 'sub' / 'run.csv'
    assert cli.main(['simulate', '--config', str(config), '--out', str(csv), '--duration', '5',
                     '--noise', '0.001', '--seed', '3']) == 0
    assert 'joint1, joint2' in capsys.readouterr().out
    header = csv.read_text().splitlines()[0].split(',')
    assert header[:3] == ['t', 'q_joint1', 'q_joint2']


def test_fit_writes_all_files_and_recovers_parameters(workdir, tmp_path, capsys):
    _, config, data = workdir
    out = tmp_path / 'out'
    assert _fit(config, [data], out, '--method', 'nea') == 0
    captured = capsys.readouterr()
    # Not a terminal: plain progress lines (io.progress), about one per 10 % of the steps.
    lines = [line for line in captured.err.splitlines() if line.startswith('sysid fit [nea]: ')]
    assert 2 <= len(lines) <= 12 and 'ETA' in lines[-1] and 'loss' in lines[-1]
    assert 'link2.com.x' in captured.out and 'consistent: True' in captured.out
    assert sorted(os.listdir(out)) == sorted(results.BASE_FILES)
    # report.html names every parameter with its unit.
    page = (out / 'report.html').read_text()
    for name, unit in zip(TRUE, ('kg', 'kg', 'm', 'N m s/rad', 'N m s/rad')):
        assert f'<td class="name">{name}</td><td class="text">{unit}</td>' in page, name
    estimate = results.read_estimate(out)
    assert estimate['method'] == 'nea' and estimate['consistent'] is True
    assert estimate['data'] == [str(data)]
    params = estimate['parameters']
    for name in ('link1.mass', 'link2.mass', 'joint1.damping', 'joint2.damping'):
        assert params[name]['mean'] == pytest.approx(TRUE[name], rel=0.05), name
    assert abs(params['link2.com.x']['mean']) < 2e-3
    assert params['link1.mass']['initial'] == 1.3
    # The identified URDF loads and carries the estimate.
    _, identified = model_io.load_urdf(str(out / 'robot_identified.urdf'))
    assert float(identified.inertial[0, 0]) == pytest.approx(params['link1.mass']['mean'])
    assert float(identified.damping[1]) == pytest.approx(params['joint2.damping']['mean'])


def test_failing_run_leaves_previous_output_untouched(workdir, tmp_path, capsys):
    root, config, data = workdir
    out = tmp_path / 'out'
    assert _fit(config, [data], out, '--method', 'nea') == 0
    before = _snapshot(out)
    capsys.readouterr()
    # Missing data file: exit 2, one line naming the file, no traceback.
    assert _fit(config, [root / 'missing.npz'], out) == 2
    err = capsys.readouterr().err
    assert 'missing.npz: file not found' in err and 'Traceback' not in err
    # Non-finite data: names the file, key and row.
    with np.load(data) as npz:
        arrays = dict(npz)
    arrays['qd'][7, 1] = np.nan
    bad = tmp_path / 'bad.npz'
    np.savez(bad, **arrays)
    assert _fit(config, [bad], out) == 2
    assert "bad.npz: qd: non-finite value (nan) at row 7, joint 'joint2'" in \
        capsys.readouterr().err
    # Bad configuration: names the file and key.
    broken = tmp_path / 'broken.yaml'
    cfg = _config()
    cfg['/**']['ros__parameters']['estimator']['method'] = 'magic'
    broken.write_text(yaml.safe_dump(cfg))
    assert _fit(broken, [data], out) == 2
    assert 'broken.yaml: estimator.method' in capsys.readouterr().err
    # A failure while writing results (after a successful fit) changes nothing either.
    original = results.plot_convergence

    def broken_plot(*args, **kwargs):
        raise OSError(28, 'No space left on device')

    results.plot_convergence = broken_plot
    try:
        with pytest.raises(OSError):
            _fit(config, [data], out, '--method', 'nea')
    finally:
        results.plot_convergence = original
    assert _snapshot(out) == before
    assert sorted(os.listdir(tmp_path)) == ['bad.npz', 'broken.yaml', 'out']


def test_ctrl_c_saves_the_best_result_so_far(workdir, tmp_path, monkeypatch, capsys):
    _, config, data = workdir

    @contextlib.contextmanager
    def interrupting(label, **kwargs):
        def report(iteration, total, loss=None, elapsed=None):
            if iteration == 2:
                raise KeyboardInterrupt
        yield report

    monkeypatch.setattr(progress, 'progress_bar', interrupting)
    out = tmp_path / 'out'
    assert _fit(config, [data], out, '--method', 'nea') == 130
    assert 'interrupted; wrote the best result so far' in capsys.readouterr().err
    estimate = results.read_estimate(out)
    assert estimate['interrupted'] is True and estimate['iterations'] == 2
    assert estimate['consistent'] is True
    # Not an estimate, and every file says so.
    assert estimate['converged'] is False and estimate['convergence'].startswith('interrupted')
    assert len(estimate['warnings']) == 1 and 'not a converged estimate' in estimate['warnings'][0]
    assert not np.load(out / 'posterior.npz')['converged']
    assert (out / 'robot_identified.urdf').read_text().splitlines()[0].startswith(
        '<!-- NOT CONVERGED (interrupted')


def test_argument_errors():
    with pytest.raises(SystemExit) as exc:
        cli.main(['fit', '--config', 'x.yaml', '--data', 'y.npz', '--out', 'o',
                  '--iterations', '0'])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(['simulate', '--config', 'x.yaml', '--out', 'y.npz', '--noise', '-1'])


def test_packaged_demo_config_is_found():
    path = cli_demo.packaged_config(cli_demo.DEMO_CONFIG)
    assert pathlib.Path(path).is_file()


def test_live_demo_runs_the_arm_by_default_and_finds_every_robots_config():
    from sysid_ros.ros import demo_robots

    assert cli.build_parser().parse_args(['demo']).robot == 'panda'
    for robot in [*demo_robots.ROBOTS.values(), *demo_robots.STAND_INS.values()]:
        assert pathlib.Path(cli_demo.packaged_config(robot.config)).is_file()
    assert cli.build_parser().parse_args(['demo', '--robot', 'ur']).robot == 'ur'


@pytest.mark.slow
def test_sigint_during_fit_saves_results(workdir, tmp_path):
    """A real Ctrl-C (SIGINT) to `sysid fit` in a subprocess: exit 130 with the results."""
    _, _, data = workdir
    config = tmp_path / 'dp.yaml'
    config.write_text(yaml.safe_dump(_config('diffnea', 'semi_implicit_euler')))
    out = tmp_path / 'out'
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, '-m', 'sysid_ros.cli', 'fit', '--config', str(config), '--data',
         str(data), '--out', str(out), '--iterations', '1000000'],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    lines = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if 'sysid fit [diffnea]: ' in line or not line:
            break
    assert any('sysid fit [diffnea]: ' in line for line in lines), lines
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert 'interrupted' in stderr
    estimate = results.read_estimate(out)
    assert estimate['interrupted'] is True and estimate['iterations'] >= 1


@pytest.mark.slow
def test_demo_runs_and_recovers_parameters(tmp_path, capsys):
    start = time.perf_counter()
    assert cli.main(['demo-offline', '--out', str(tmp_path / 'demo')]) == 0
    wall = time.perf_counter() - start
    out = capsys.readouterr().out
    assert 'held-out prediction' in out
    for method in ('nea', 'diffnea'):
        estimate = results.read_estimate(tmp_path / 'demo' / method)
        assert estimate['consistent'] is True
    summary = (tmp_path / 'demo' / 'summary.txt').read_text()
    rows = {line.split()[0]: line.split() for line in summary.splitlines()
            if line.startswith(('link', 'joint')) and '(-)' not in line}
    for name, row in rows.items():
        nea_err, diffnea_err = row[4], row[6]
        for err in (nea_err, diffnea_err):
            value = float(err.rstrip('%')) / (100.0 if err.endswith('%') else 1.0)
            limit = 0.002 if name.endswith('.x') else 0.05
            assert abs(value) < limit, (name, err)
    print(f'demo wall time {wall:.1f} s')
