"""Identified values in the description package's own files (io.description_files):
franka_description's inertials.yaml, checked against Pinocchio's inertias of the same model."""

import numpy as np
import pytest
import yaml

from sysid_ros.io import description_files, model_io, pipeline
from sysid_ros.io.config import from_dict

JOINTS = [f'panda_joint{i}' for i in range(1, 8)]


def _problem(driver='franka'):
    return pipeline.build_problem(from_dict({
        'model': {'urdf': 'example-robot-data:panda', 'joints': JOINTS, 'prefix': 'panda_',
                  'payload': {'link': 'panda_link7', 'mass': 0.0}},
        'parameters': {'panda_link3': {'mass': {'min': 1.0, 'max': 5.0}},
                       'payload': {'mass': {'min': 0.0, 'max': 3.0}}},
        'data': {'driver': driver}}))


def test_the_franka_inertials_are_pinocchios_without_the_payload():
    problem = _problem()
    names = list(problem.names)
    theta = np.array([0.0, 0.0])
    theta[names.index('panda_link3.mass')] = 3.25
    theta[names.index('payload.mass')] = 2.0             # held: not in the arm's file
    (name, content), = description_files.description_files(problem, theta).items()
    assert name == 'inertials.yaml'
    content = yaml.safe_load(yaml.safe_dump(content))   # as written
    assert list(content) == [f'link{i}' for i in range(1, 8)]
    pmodel = model_io.load_pinocchio('example-robot-data:panda', keep_joints=JOINTS)
    assert content['link3']['mass'] == pytest.approx(3.25, rel=1e-9)
    for i in (1, 2, 4, 5, 6, 7):                        # the links left at their nominal values
        entry, inertia = content[f'link{i}'], pmodel.inertias[i]
        assert entry['mass'] == pytest.approx(inertia.mass, rel=1e-9)
        com = [float(v) for v in entry['origin']['xyz'].split()]
        np.testing.assert_allclose(com, inertia.lever, atol=1e-9)
        about_com = entry['inertia']
        matrix = np.array([[about_com['xx'], about_com['xy'], about_com['xz']],
                           [about_com['xy'], about_com['yy'], about_com['yz']],
                           [about_com['xz'], about_com['yz'], about_com['zz']]])
        np.testing.assert_allclose(matrix, inertia.inertia, atol=1e-9)
        assert entry['origin']['rpy'] == '0 0 0'


def test_other_drivers_write_no_description_file():
    assert description_files.description_files(_problem('generic'), np.zeros(2)) == {}
