"""`sysid fleet`: the manifest's bad entries (one message each, the rest run), and a local
Ray cluster of 2 workers that fits a small fleet, is killed with a fit unfinished and resumes
without refitting the finished ones; its fleet posterior (`core.inference.population` on the
fits' own estimates, tested there on fleets with known truths) and report written at the
end."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.core.inference import population
from sysid_ros.io import fleet_manifest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = {'/**': {'ros__parameters': {
    'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
              'joints': ['joint1', 'joint2'], 'actuator': 'viscous'},
    'parameters': {'link2': {'mass': {'min': 0.1, 'max': 5.0}},
                   'joint2': {'damping': {'min': 0.0, 'max': 1.0}}},
    'data': {'rate': 100.0},
    'estimator': {'residual': 'equation_error'},
}}}
# Six fits on two workers: when the first lands and the run is killed, at most three more have
# started (workers left behind start no new fit), so the rerun has fits to do.
ROBOTS = ('r1', 'r2', 'r3', 'r4', 'r5', 'r6')


@pytest.fixture(scope='module')
def fleet_inputs(tmp_path_factory):
    """A model's config and 2 s of simulated data per robot."""
    folder = tmp_path_factory.mktemp('fleet_inputs')
    config = folder / 'dp.yaml'
    config.write_text(yaml.safe_dump(CONFIG))
    for k, robot in enumerate(ROBOTS):
        assert cli.main(['simulate', '--config', str(config), '--out',
                         str(folder / f'{robot}.npz'), '--duration', '2', '--noise', '0.002',
                         '--seed', str(k)]) == 0
    return folder


def test_bad_manifest_entries_give_one_message_each_and_the_rest_run(fleet_inputs, tmp_path):
    manifest = tmp_path / 'fleet.yaml'
    bag = tmp_path / 'bags' / 'r2_1201'
    bag.mkdir(parents=True)
    (bag / 'metadata.yaml').write_text('rosbag2_bagfile_information: {}\n')
    manifest.write_text(yaml.safe_dump({
        'models': {'dp': str(fleet_inputs / 'dp.yaml')},
        'fits': [{'robot': 'r1', 'model': 'dp', 'date': 'd1',
                  'data': [str(fleet_inputs / 'r1.npz')]},
                 {'robot': 'r1', 'model': 'dp', 'date': 'd1',
                  'data': [str(fleet_inputs / 'r2.npz')]},
                 {'robot': 'r2', 'model': 'ur10', 'date': 'd1', 'bag': str(bag)},
                 {'robot': 'r3', 'model': 'dp', 'bag': str(tmp_path / 'no_such_bag')},
                 {'robot': 'r4', 'model': 'dp', 'bags': str(tmp_path / 'bags')},
                 {'robot': 'r5', 'model': 'dp', 'date': 'd1', 'dataa': ['x.npz']}]}))
    read = fleet_manifest.read_manifest(manifest)
    assert [fit.key for fit in read.fits] == ['dp/r1/d1', 'dp/r4/r2_1201']
    assert len(read.problems) == 4
    for line, expected in zip(read.problems, ('duplicate of fits[0] (dp/r1/d1)',
                                              "unknown robot model 'ur10'",
                                              'no_such_bag not found', "unknown key 'dataa'")):
        assert expected in line, line
    # The same in a CSV manifest, paths relative to it.
    csv = tmp_path / 'fleet.csv'
    csv.write_text('robot,model,config,date,data\n'
                   f'r1,dp,{fleet_inputs / "dp.yaml"},d1,{fleet_inputs / "r1.npz"}\n'
                   f'r2,dp,{fleet_inputs / "dp.yaml"},d1,missing.npz\n')
    read = fleet_manifest.read_manifest(csv)
    assert [fit.key for fit in read.fits] == ['dp/r1/d1']
    assert read.problems == (f'{csv}: fits[1] (r2): data {tmp_path / "missing.npz"} not found',)
    # Bad arguments and a missing manifest: exit 2 before Ray starts.
    for bad in (['--workers', '0'], ['--retries', '-1']):
        assert cli.main(['fleet', '--manifest', str(manifest), '--out', str(tmp_path / 'o'),
                         *bad]) == 2
    assert cli.main(['fleet', '--manifest', str(tmp_path / 'none.yaml'), '--out',
                     str(tmp_path / 'o')]) == 2
    # A changed input changes the hash that resuming compares.
    fit = read.fits[0]
    assert fleet_manifest.input_hash(fit) != fleet_manifest.input_hash(fit, ['--method', 'nea'])


def test_a_fit_is_done_while_its_inputs_stamp_or_hash_the_same(fleet_inputs, tmp_path):
    data = tmp_path / 'r1.npz'
    data.write_bytes((fleet_inputs / 'r1.npz').read_bytes())
    fit = fleet_manifest.FleetFit('r1', 'dp', 'd1', str(fleet_inputs / 'dp.yaml'),
                                  data=(str(data),))
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'estimate.yaml').write_text('{}')
    assert not fleet_manifest.is_done(out, fit)
    (out / fleet_manifest.TASK_FILE).write_text(json.dumps(fleet_manifest.input_record(fit)))
    assert fleet_manifest.is_done(out, fit)
    assert not fleet_manifest.is_done(out, fit, ['--method', 'nea'])
    # Touched, not changed: the stamp differs, the content hash does not.
    stat = data.stat()
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert fleet_manifest.input_stamp(fit) != json.loads(
        (out / fleet_manifest.TASK_FILE).read_text())['input_stamp']
    assert fleet_manifest.is_done(out, fit)
    data.write_bytes(data.read_bytes() + b'\0')
    assert not fleet_manifest.is_done(out, fit)
    # Without its estimate a folder is not done, whatever its record says.
    data.write_bytes((fleet_inputs / 'r1.npz').read_bytes())
    (out / fleet_manifest.TASK_FILE).write_text(json.dumps(fleet_manifest.input_record(fit)))
    (out / 'estimate.yaml').unlink()
    assert not fleet_manifest.is_done(out, fit)


def _fleet(manifest, out, cache) -> subprocess.Popen:
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache), RAY_USAGE_STATS_ENABLED='0',
               PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen([sys.executable, '-m', 'sysid_ros.cli', 'fleet', '--manifest',
                             str(manifest), '--out', str(out), '--workers', '2'],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_a_killed_fleet_run_resumes_without_refitting_finished_fits(fleet_inputs, tmp_path):
    manifest = tmp_path / 'fleet.yaml'
    manifest.write_text(yaml.safe_dump({
        'models': {'dp': str(fleet_inputs / 'dp.yaml')},
        'fits': [{'robot': r, 'model': 'dp', 'date': 'd1',
                  'data': [str(fleet_inputs / f'{r}.npz')]} for r in ROBOTS]}))
    out, cache = tmp_path / 'out', tmp_path / 'jax_cache'
    run = _fleet(manifest, out, cache)
    done = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None:
        done = sorted(out.glob('dp/*/d1/fleet_task.json'))
        if done:
            break
        time.sleep(0.2)
    assert done, run.communicate()[0] if run.poll() is not None else 'no fit finished'
    os.killpg(run.pid, signal.SIGKILL)          # the driver, Ray and its workers
    run.wait(30)
    finished = {p.parent.parent.name: p.stat().st_mtime_ns
                for p in out.glob('dp/*/d1/fleet_task.json')}
    assert 1 <= len(finished) < len(ROBOTS)
    # Only complete fits are in place: a results folder without its task record is none.
    assert {p.parent.parent.name for p in out.glob('dp/*/d1/estimate.yaml')} == set(finished)
    again = _fleet(manifest, out, cache)
    output = again.communicate(timeout=600)[0]
    assert again.returncode in (0, 3), output
    # A worker of the killed run may still finish the fit it was in (renamed into place
    # whole) before it notices: at least the fits done before the kill are skipped.
    skipped = int(re.search(r'(\d+) already done from the same inputs', output).group(1))
    assert len(finished) <= skipped < len(ROBOTS), output
    for robot, mtime in finished.items():           # not refitted
        assert (out / 'dp' / robot / 'd1' / 'fleet_task.json').stat().st_mtime_ns == mtime
    assert not list(out.rglob('.*.tmp-*'))         # no results folder left half-written
    summary = yaml.safe_load((out / 'fleet.yaml').read_text())
    assert set(summary['fits'].values()) <= {'done', 'skipped'}
    model = summary['models']['dp']
    assert sorted(model['robots']) == list(ROBOTS)
    # The fleet posterior is `population`'s on the robots' own fits as their estimate.yaml
    # has them.
    names = model['parameters']
    own = np.array([[model['robots'][r]['own'][n] for n in names] for r in ROBOTS])
    for robot in ROBOTS:
        estimate = yaml.safe_load((out / 'dp' / robot / 'd1' / 'estimate.yaml').read_text())
        assert [estimate['parameters'][n]['mean'] for n in names] == \
            [model['robots'][robot]['own'][n][0] for n in names]
    _, flagged = population.outliers(own[..., 0], own[..., 1])
    fleet = population.fleet_distribution(own[..., 0], own[..., 1], ~flagged)
    np.testing.assert_allclose([model['fleet'][n]['mean'] for n in names], fleet.mean)
    np.testing.assert_allclose([model['fleet'][n]['spread'] for n in names], fleet.spread)
    assert [[n for n, f in zip(names, row) if f] for row in flagged] == \
        [model['robots'][r]['flagged'] for r in ROBOTS]
    page = (out / 'fleet.html').read_text()
    assert 'href="dp/r1/d1/report.html"' in page and 'link2.mass' in page
