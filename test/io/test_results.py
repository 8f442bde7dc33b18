"""Result files: content, round trip and atomic replacement."""

import dataclasses
import os

import numpy as np
import pytest
import yaml

from sysid_ros.io import results
from sysid_ros.io.pipeline import FitResult


def _result(value=1.0, method='nea'):
    particles = np.array([[value, 0.1, 0.02]])
    return FitResult(method=method, names=('link1.mass', 'joint1.damping', 'link2.com.x'),
                     particles=particles, initial=particles * 1.5,
                     lower=np.array([0.1, 0.0, -np.inf]), upper=np.array([5.0, 1.0, np.inf]),
                     loss_history=np.array([1.0, 0.1, 0.01]), iterations=3, final_loss=0.01,
                     wall_time=1.5, consistent=np.array([True]),
                     info={'rank': np.int64(3), 'raw_consistent': np.bool_(False)},
                     converged=True, convergence='tolerance')


def test_write_results_files_and_content(tmp_path):
    urdf = '<robot name="identified"/>'
    out = results.write_results(tmp_path / 'out', _result(), extra={'data': ['a.npz']},
                                urdf=urdf)
    assert sorted(os.listdir(out)) == sorted(results.BASE_FILES)
    with open(os.path.join(out, 'robot_identified.urdf')) as f:
        assert f.read() == urdf
    estimate = results.read_estimate(out)
    assert estimate['method'] == 'nea' and estimate['iterations'] == 3
    assert estimate['final_loss'] == 0.01 and estimate['consistent'] is True
    assert estimate['diagnostics'] == {'rank': 3, 'raw_consistent': False}
    assert estimate['data'] == ['a.npz']
    mass = estimate['parameters']['link1.mass']
    assert mass == {'mean': 1.0, 'std': 0.0, 'min': 0.1, 'max': 5.0, 'initial': 1.5}
    assert estimate['parameters']['link2.com.x']['min'] == -np.inf
    with np.load(os.path.join(out, 'posterior.npz')) as npz:
        np.testing.assert_array_equal(npz['particles'], [[1.0, 0.1, 0.02]])
        assert list(npz['names']) == ['link1.mass', 'joint1.damping', 'link2.com.x']
        np.testing.assert_array_equal(npz['loss_history'], [1.0, 0.1, 0.01])
    history = np.loadtxt(os.path.join(out, 'history.csv'), delimiter=',', skiprows=1)
    np.testing.assert_allclose(history, [[1, 1.0], [2, 0.1], [3, 0.01]])
    with open(os.path.join(out, 'convergence.png'), 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_failed_write_leaves_previous_results_untouched(tmp_path, monkeypatch):
    out = tmp_path / 'out'
    results.write_results(out, _result(1.0))
    (out / 'notes.txt').write_text('mine')
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}

    def broken(*args, **kwargs):
        raise RuntimeError('disk full')

    monkeypatch.setattr(results, 'plot_convergence', broken)
    with pytest.raises(RuntimeError, match='disk full'):
        results.write_results(out, _result(2.0))
    after = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert after == before
    assert sorted(os.listdir(tmp_path)) == ['out']                # no temporary folders left
    monkeypatch.undo()
    results.write_results(out, _result(2.0))                      # a good run replaces them
    assert results.read_estimate(out)['parameters']['link1.mass']['mean'] == 2.0
    assert (out / 'notes.txt').read_text() == 'mine'              # other files carried over
    assert sorted(os.listdir(tmp_path)) == ['out']


def test_out_must_be_a_folder(tmp_path):
    target = tmp_path / 'file'
    target.write_text('x')
    with pytest.raises(results.ResultsError, match='not a folder'):
        results.write_results(target, _result())


def test_all_names_importable():
    for name in results.__all__:
        assert hasattr(results, name)


def test_the_controller_parameters_file_maps_estimates_to_controller_names(tmp_path):
    result = _result(1.25)
    values = results.pushed_values(result.names, result.estimate,
                                   {'link1.mass': 'payload.mass', 'joint1.damping': 'damping'})
    assert values == {'payload.mass': 1.25, 'damping': pytest.approx(0.1)}
    controller = results.controller_parameters_file(values, '/arm_controller')
    # Dotted names nested, as rcl joins them back.
    assert controller == {'/arm_controller': {'ros__parameters': {
        'payload': {'mass': 1.25}, 'damping': pytest.approx(0.1)}}}
    assert list(results.controller_parameters_file(values, None)) == ['/**']
    out = tmp_path / 'out'
    urdf = '<robot name="identified"/>'
    results.write_results(out, result, urdf=urdf, controller=controller)
    assert sorted(os.listdir(out)) == sorted(results.BASE_FILES + (results.CONTROLLER_FILE,))
    with open(out / results.CONTROLLER_FILE) as f:
        assert yaml.safe_load(f) == controller
    # A later fit without a push mapping does not carry a stale file over.
    results.write_results(out, result, urdf=urdf)
    assert sorted(os.listdir(out)) == sorted(results.BASE_FILES)


def test_a_result_that_did_not_converge_says_so_in_every_file(tmp_path):
    result = dataclasses.replace(_result(), converged=False,
                                 convergence='iteration budget (3) spent')
    controller = results.controller_parameters_file({'mass': 1.0}, '/ctrl')
    out = results.write_results(tmp_path / 'out', result, urdf='<?xml version="1.0"?>\n<robot/>',
                                controller=controller)
    note = results.unconverged_note(result)
    assert note.startswith('NOT CONVERGED (iteration budget (3) spent): nea ')
    urdf = open(os.path.join(out, 'robot_identified.urdf')).read().splitlines()
    assert urdf[:2] == ['<?xml version="1.0"?>', f'<!-- {note} -->']
    params = open(os.path.join(out, results.CONTROLLER_FILE)).read()
    assert params.startswith(f'# {note}\n')
    assert yaml.safe_load(params) == controller                  # still a parameters file
    assert results.read_estimate(out)['converged'] is False
    with np.load(os.path.join(out, 'posterior.npz')) as npz:
        assert not npz['converged'] and str(npz['convergence']).startswith('iteration budget')
