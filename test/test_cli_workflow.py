"""The payload workflow on recordings through the command line: `sysid fit` of the robot
without its load, `sysid fit --prior` of the load on that posterior, and `sysid predict` of a
fit's joint torques on a recording beside the nominal model's."""

import json

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline, results
from sysid_ros.io import trajectory as trajectory_io

LINKS = {'link2': {'mass': {'min': 0.2, 'max': 3.0}, 'com': {'z': {'min': -0.5, 'max': 0.0}}},
         'joint1': {'damping': {'min': 0.0, 'max': 0.5}},
         'joint2': {'damping': {'min': 0.0, 'max': 0.5}}}
TRUTH = np.array([1.4, -0.22, 0.1, 0.06])                # LINKS' parameters
PAYLOAD = 0.8                                            # [kg]


def _config(payload: bool, dt: float) -> dict:
    d = {'model': {'builder': 'double_pendulum', 'integrator': 'rk4', 'dt': dt},
         'parameters': dict(LINKS), 'data': {'rate': 100.0}}
    if payload:
        d['model']['payload'] = {'link': 'link2', 'mass': 0.01, 'com': [0.0, 0.0, -0.3]}
        d['parameters']['payload'] = {'mass': {'min': 0.0, 'max': 3.0}}
    return d


def _recording(path, payload: bool, seed: int):
    """4 s of the double pendulum (with the payload) integrated at 1 ms."""
    problem = pipeline.build_problem(config_io.from_dict(_config(payload, 1e-3)))
    truth = np.append(TRUTH, PAYLOAD) if payload else TRUTH
    traj = pipeline.simulate(problem, problem.spec.to_params(truth, problem.base_params),
                             duration=4.0, noise=1e-4, seed=seed, torque_scale=3.0)
    trajectory_io.save_trajectory(path, traj)
    return path


@pytest.fixture(scope='module')
def fits(tmp_path_factory):
    """(folder, stderr of the second fit): `robot/` fitted on the unloaded recording, `load/`
    on the loaded one with `--prior robot`; both recordings and configs in the folder."""
    tmp_path = tmp_path_factory.mktemp('workflow')
    paths = {}
    for name, payload in (('unloaded', False), ('loaded', True)):
        paths[name] = tmp_path / f'{name}.yaml'
        paths[name].write_text(yaml.safe_dump(_config(payload, 2.5e-3)))
    unloaded = _recording(tmp_path / 'unloaded.npz', False, 3)
    loaded = _recording(tmp_path / 'loaded.npz', True, 4)
    assert cli.main(['fit', '--config', str(paths['unloaded']), '--data', str(unloaded),
                     '--out', str(tmp_path / 'robot')]) == 0
    assert cli.main(['fit', '--config', str(paths['loaded']), '--data', str(loaded),
                     '--out', str(tmp_path / 'load'), '--prior', str(tmp_path / 'robot')]) == 0
    return tmp_path


def test_the_load_is_fitted_on_the_posterior_of_the_robot_without_it(fits):
    """The links start at and are held to their earlier posterior."""
    tmp_path = fits
    first, second = (results.read_estimate(tmp_path / d) for d in ('robot', 'load'))
    assert second['prior'] == str(tmp_path / 'robot')
    payload = second['parameters']['payload.mass']
    assert abs(payload['mean'] - PAYLOAD) < 0.01 * PAYLOAD
    for name, entry in first['parameters'].items():
        assert second['parameters'][name]['initial'] == pytest.approx(entry['mean'])
        # The new data add information: no wider than the prior.
        assert second['parameters'][name]['std'] <= entry['std'] * (1 + 1e-6)


def test_predict_scores_a_fits_torques_beside_the_nominal_models(fits, capsys):
    out = fits / 'predicted.json'
    assert cli.main(['predict', '--posterior', str(fits / 'robot'), '--data',
                     str(fits / 'unloaded.npz'), '--out', str(out)]) == 0
    table = capsys.readouterr().out
    assert 'joint2' in table and 'pooled' in table
    scores = json.loads(out.read_text())
    assert scores['joints'] == ['joint1', 'joint2']
    # The fit recovers the truth: its torques are the recording's up to the filtered
    # accelerations' error; the nominal links' (double_pendulum builder values) are not.
    assert scores['fitted']['nrmse'] < 0.02 < scores['nominal']['nrmse']
