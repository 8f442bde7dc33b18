"""`sysid fit --bag` and `sysid evaluate` on a small simulated double-pendulum bag."""

import dataclasses
import json
import os

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.io import bag_writer, bags, config as config_io, pipeline, results

TRUE = {'link1.mass': 1.0, 'link2.mass': 1.0, 'joint1.damping': 0.15, 'joint2.damping': 0.08}


def _config(**data):
    return {'/**': {'ros__parameters': {
        'model': {'builder': 'double_pendulum', 'builder_args': {'damping': [0.15, 0.08]},
                  'joints': ['joint1', 'joint2'], 'actuator': 'viscous', 'integrator': 'rk4'},
        'parameters': {
            'link1': {'mass': {'min': 0.5, 'max': 2.0, 'init': 1.3}},
            'link2': {'mass': {'min': 0.5, 'max': 2.0, 'init': 0.7}},
            'joint1': {'damping': {'min': 0.0, 'max': 0.5, 'init': 0.3}},
            'joint2': {'damping': {'min': 0.0, 'max': 0.5, 'init': 0.04}},
        },
        'data': {'rate': 100.0, 'holdout': 0.25, **data},
        'estimator': {'method': 'nea', 'iterations': 50, 'rollout_horizon': 20},
    }}}


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    """A config and a bag of four simulated runs at 200 Hz (resampled to 100 Hz on reading)."""
    root = tmp_path_factory.mktemp('cli_bags')
    config = root / 'dp.yaml'
    config.write_text(yaml.safe_dump(_config(), sort_keys=False))
    cfg = config_io.load_yaml(config)
    fine = pipeline.build_problem(dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, rate=200.0)))
    runs = [pipeline.simulate(fine, duration=2.0, noise=1e-4, seed=s) for s in range(4)]
    bag_writer.write_trajectory_bag(root / 'runs', runs, storage='mcap',
                                    custom_data={'source': 'pipeline.simulate, seeds 0-3'})
    return root, config


def test_fit_from_bag_writes_results_and_metrics(workdir, tmp_path, capsys):
    root, config = workdir
    out = tmp_path / 'out'
    assert cli.main(['fit', '--config', str(config), '--bag', str(root / 'runs'),
                     '--out', str(out)]) == 0
    captured = capsys.readouterr()
    assert '4 trajectories (3 fitted, 1 held out)' in captured.err
    # nea: a point estimate without covariance, so no posterior sample for posterior.png.
    for name in ('estimate.yaml', 'posterior.npz', 'metrics.json', 'convergence.png',
                 'report.html', 'robot_identified.urdf', 'trajectory_density.png'):
        assert (out / name).is_file(), name
    assert 'Measured vs predicted (held-out)' in (out / 'report.html').read_text()
    estimate = results.read_estimate(out)
    assert estimate['bag'] == str(root / 'runs')
    # The command's JAX programs: compiled, or loaded from the persistent cache of an earlier
    # run in this test session.
    compiled = estimate['diagnostics']
    assert compiled['programs_compiled'] + compiled['programs_loaded'] > 0
    assert compiled['compile_s'] >= 0.0 and compiled['trace_s'] > 0.0
    for name, truth in TRUE.items():
        entry = estimate['parameters'][name]
        assert set(entry) >= {'mean', 'std', 'min', 'max'}
        assert entry['mean'] == pytest.approx(truth, rel=0.02, abs=2e-3), name
    metrics = json.loads((out / 'metrics.json').read_text())
    assert metrics['evaluated_on'] == 'held-out' and metrics['num_trajectories'] == 1
    # Held-out run 2 s at 100 Hz in segments of 20 steps; the true model predicts it.
    assert metrics['num_segments'] == 10 and metrics['horizon'] == 20
    assert metrics['nmse'] < 1e-3
    assert all(np.isfinite(metrics[k]) for k in ('kl_real_sim', 'kl_sim_real', 'mmd',
                                                 'log_likelihood'))

    # `sysid evaluate` on the same recording: every run now counts.
    scores = tmp_path / 'scores.json'
    assert cli.main(['evaluate', '--posterior', str(out), '--bag', str(root / 'runs'),
                     '--out', str(scores)]) == 0
    again = json.loads(scores.read_text())
    assert again['num_trajectories'] == 4 and again['num_segments'] == 40
    assert again['nmse'] < 1e-3
    page = (out / results.EVALUATION_REPORT).read_text()
    assert 'sysid evaluate on runs' in page and 'Measured vs predicted (evaluation bag)' in page
    assert page.count('src="data:image/png;base64,') == 2      # convergence, prediction


@pytest.mark.parametrize('case, message', [
    ('missing', 'bag not found'),
    ('topic', 'topic /joints not in the bag'),
    ('joint', "no joint 'joint1'"),
])
def test_bad_bag_exits_non_zero_and_keeps_earlier_results(workdir, tmp_path, capsys, case,
                                                          message):
    root, config = workdir
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'estimate.yaml').write_text('earlier: result\n')
    bag = root / 'runs'
    if case == 'missing':
        bag = tmp_path / 'no_bag'
    elif case == 'topic':
        config = tmp_path / 'topic.yaml'
        config.write_text(yaml.safe_dump(_config(joint_states_topic='/joints')))
    else:
        bag = tmp_path / 'renamed'
        traj = bags.read_bag(root / 'runs', ('joint1', 'joint2'),
                             config_io.load_yaml(config).data)[0].trajectory
        renamed = dataclasses.replace(traj, joint_names=('hip', 'knee'))
        bag_writer.write_trajectory_bag(bag, [renamed])
    assert cli.main(['fit', '--config', str(config), '--bag', str(bag),
                     '--out', str(out)]) != 0
    err = capsys.readouterr().err
    assert message in err and str(bag) in err
    assert len(err.strip().splitlines()) == 1                  # one message, no traceback
    assert os.listdir(out) == ['estimate.yaml']
    assert (out / 'estimate.yaml').read_text() == 'earlier: result\n'
