"""`sysid simulate` and `sysid fit` with `estimator.method: factor_graph` on the packaged
four-bar configuration, end to end in process: simulated data with known truth (rocker mass
4 kg, crank friction 0.5 N m s/rad), and the configuration errors that name the key."""

import pathlib

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.io import config as config_io
from sysid_ros.io import results

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = REPO_ROOT / 'config' / 'four_bar_factor_graph.yaml'
TRUTH = {'rocker.mass': 4.0, 'crank.damping': 0.5}


def _raw():
    return yaml.safe_load(CONFIG.read_text())['/**']['ros__parameters']


@pytest.fixture(scope='module')
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp('four_bar')
    data, out = root / 'run.csv', root / 'fit'
    assert cli.main(['simulate', '--config', str(CONFIG), '--out', str(data),
                     '--duration', '1.0', '--noise', '0.001', '--seed', '2']) == 0
    assert cli.main(['fit', '--config', str(CONFIG), '--data', str(data),
                     '--out', str(out)]) == 0
    return data, out


def test_simulated_data_are_the_crank_encoder_gyro_and_torque(fitted):
    data, _ = fitted
    header = data.read_text().splitlines()[0]
    assert header.split(',') == ['t', 'q_crank', 'qd_crank', 'tau_crank']
    table = np.loadtxt(data, delimiter=',', skiprows=1)
    assert table.shape == (201, 4)
    assert np.ptp(table[:, 1]) > 0.3          # the crank really swings [rad]


def test_estimate_recovers_truth_within_two_sigma(fitted):
    _, out = fitted
    estimate = results.read_estimate(out)
    assert estimate['method'] == 'factor_graph'
    assert estimate['consistent']
    for name, truth in TRUTH.items():
        entry = estimate['parameters'][name]
        prior_std = (entry['max'] - entry['min']) / 4
        assert entry['std'] < 0.05 * prior_std, (name, entry)
        assert abs(entry['mean'] - truth) < 2 * entry['std'], (name, entry)
    cov = np.asarray(estimate['diagnostics']['covariance'])
    np.testing.assert_allclose(np.sqrt(np.diag(cov)),
                               [estimate['parameters'][n]['std'] for n in TRUTH], rtol=1e-9)


def test_posterior_and_marginals_files(fitted):
    _, out = fitted
    assert {'estimate.yaml', 'posterior.npz', 'history.csv', 'convergence.png',
            'marginals.csv', 'marginals.png', 'report.html'} == {p.name for p in out.iterdir()}
    page = (out / 'report.html').read_text()
    assert all(name in page for name in TRUTH)
    with np.load(out / 'posterior.npz') as saved:
        particles, names = saved['particles'], [str(n) for n in saved['names']]
    assert names == list(TRUTH)
    estimate = results.read_estimate(out)['parameters']
    # the sigma points carry the Gaussian posterior's mean and std exactly
    np.testing.assert_allclose(particles.mean(axis=0), [estimate[n]['mean'] for n in names])
    np.testing.assert_allclose(particles.std(axis=0), [estimate[n]['std'] for n in names])
    table = np.loadtxt(out / 'marginals.csv', delimiter=',', skiprows=1)
    std = table[:, 3:]
    assert table[0, 0] == 0.0 and np.all(np.diff(table[:, 0]) > 0)
    assert np.all(std[-1] < 0.1 * std[0])      # the marginal std shrinks as data arrive


def _write(tmp_path, section, changes, remove=()):
    raw = _raw()
    for key in remove:
        raw[section].pop(key)
    raw[section].update(changes)
    path = tmp_path / 'cfg.yaml'
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': raw}}))
    return path


@pytest.mark.parametrize('section,changes,remove,match', [
    ('model', {'builder': 'double_pendulum'}, ('mechanism', 'builder_args', 'joints'),
     'estimator.method: factor_graph runs on a planar mechanism'),
    ('estimator', {'method': 'nea'}, ('lag',),
     "estimator.method: model.mechanism 'four_bar' is identified by factor_graph only"),
    ('model', {'mechanism': 'five_bar'}, (), 'model.mechanism: expected one of four_bar'),
    ('model', {'builder_args': {'length': 2.0}}, (),
     "model.builder_args.length: unknown argument of mechanism 'four_bar'"),
])
def test_config_errors_name_the_key(tmp_path, section, changes, remove, match):
    with pytest.raises(config_io.ConfigError, match=match):
        config_io.load_yaml(_write(tmp_path, section, changes, remove))


def test_fit_errors_name_the_key(tmp_path, capsys):
    raw = _raw()
    raw['parameters']['crank'] = {'damping': {'min': 0.0}}
    path = tmp_path / 'cfg.yaml'
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': raw}}))
    assert cli.main(['fit', '--config', str(path), '--data', 'none.csv', '--out',
                     str(tmp_path / 'out')]) == 2
    assert ('parameters.crank.damping: factor_graph needs finite min and max'
            in capsys.readouterr().err)
    raw['parameters']['crank'] = {'damping': {'min': 0.0, 'max': 1.0}}
    raw['parameters']['coupler'] = {'damping': {'min': 0.0, 'max': 1.0}}
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': raw}}))
    assert cli.main(['fit', '--config', str(path), '--data', 'none.csv', '--out',
                     str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert "parameters.coupler.damping: not a parameter of mechanism 'four_bar'" in err


def test_other_methods_are_refused_on_a_mechanism(fitted, tmp_path, capsys):
    data, _ = fitted
    assert cli.main(['fit', '--config', str(CONFIG), '--data', str(data), '--out',
                     str(tmp_path / 'out'), '--method', 'csvgd']) == 2
    assert ("estimator.method: model.mechanism 'four_bar' is identified by factor_graph only, "
            "got 'csvgd'") in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()
