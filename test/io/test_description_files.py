"""Identified values in the description package's own files (io.description_files):
franka_description's inertials.yaml, checked against Pinocchio's inertias of the same model."""

import dataclasses

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


UR_JOINTS = ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
             'wrist_2_joint', 'wrist_3_joint']
UR_LINKS = ['shoulder', 'upper_arm', 'forearm', 'wrist_1', 'wrist_2', 'wrist_3']


def _ur_problem(physical_params=None):
    problem = pipeline.build_problem(from_dict({
        'model': {'urdf': 'example-robot-data:ur5', 'joints': UR_JOINTS,
                  'payload': {'link': 'wrist_3_link', 'mass': 0.0}},
        'parameters': {'upper_arm_link': {'mass': {'min': 5.0, 'max': 12.0}},
                       'payload': {'mass': {'min': 0.0, 'max': 5.0}}},
        'data': {'driver': 'ur', 'torque_gains': [13.0, 13.0, 13.0, 9.0, 9.0, 9.0]}}))
    if physical_params:     # ur5 here is URDF, not xacro: the driver's file named as a UR
        cfg = problem.config     # description's xacro takes it (physical_params:=FILE)
        model = dataclasses.replace(cfg.model, xacro_args={'physical_params': physical_params})
        problem = dataclasses.replace(problem, config=dataclasses.replace(cfg, model=model))
    return problem


def _ur_theta(problem):
    names = list(problem.names)
    theta = np.zeros(len(names))
    theta[names.index('upper_arm_link.mass')] = 9.5
    theta[names.index('payload.mass')] = 1.5              # held: not in the arm's file
    return theta


def test_the_ur_physical_parameters_are_pinocchios_without_the_payload():
    problem = _ur_problem()
    (name, content), = description_files.description_files(problem, _ur_theta(problem)).items()
    assert name == 'physical_parameters.yaml'
    section = yaml.safe_load(yaml.safe_dump(content))['inertia_parameters']
    pmodel = model_io.load_pinocchio('example-robot-data:ur5', keep_joints=UR_JOINTS)
    assert section['upper_arm_mass'] == pytest.approx(9.5, rel=1e-9)
    for i, link in enumerate(UR_LINKS, start=1):
        inertia = pmodel.inertias[i]
        if link != 'upper_arm':
            assert section[f'{link}_mass'] == pytest.approx(inertia.mass, rel=1e-9)
        cog = section['center_of_mass'][f'{link}_cog']
        np.testing.assert_allclose([cog['x'], cog['y'], cog['z']], inertia.lever, atol=1e-9)
        t = section['tensor'][link]
        matrix = np.array([[t['ixx'], t['ixy'], t['ixz']], [t['ixy'], t['iyy'], t['iyz']],
                           [t['ixz'], t['iyz'], t['izz']]])
        np.testing.assert_allclose(matrix, inertia.inertia, atol=1e-9)
        assert section['rotation'][link] == {'roll': 0.0, 'pitch': 0.0, 'yaw': 0.0}


def test_the_ur_file_named_by_xacro_args_keeps_what_is_not_identified(tmp_path):
    original = {'offsets': {'shoulder_offset': 0.138, 'elbow_offset': 0.007},
                'inertia_parameters': {
                    'base_mass': 4.0, 'shoulder_mass': 3.761, 'upper_arm_mass': 8.058,
                    'shoulder_radius': 0.06, 'links': {'base': {'radius': 0.06,
                                                                'length': 0.05}},
                    'rotation': {'upper_arm': {'roll': 0, 'pitch': 1.5708, 'yaw': 0}}}}
    path = tmp_path / 'physical_parameters.yaml'
    path.write_text(yaml.safe_dump(original))
    problem = _ur_problem(str(path))
    content, = description_files.description_files(problem, _ur_theta(problem)).values()
    section = content['inertia_parameters']
    assert content['offsets'] == original['offsets']
    assert (section['base_mass'], section['shoulder_radius'], section['links']) == (
        4.0, 0.06, {'base': {'radius': 0.06, 'length': 0.05}})
    assert section['upper_arm_mass'] == pytest.approx(9.5, rel=1e-9)
    assert section['rotation']['upper_arm']['pitch'] == 0.0   # the tensor is in link axes
    assert yaml.safe_load(path.read_text()) == original        # the driver's file untouched
