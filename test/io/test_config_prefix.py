"""`model.prefix`: one configuration for every prefixed copy of a robot (a UR driver's
`tf_prefix`, a namespaced description)."""

import re

import pytest

from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline, urdf_export


@pytest.fixture(scope='module')
def prefixed_urdf():
    """The double pendulum's URDF with every link and joint named `left_<name>`."""
    problem = pipeline.build_problem(config_io.from_dict({
        'model': {'builder': 'double_pendulum'},
        'parameters': {'link2': {'mass': {'min': 0.1, 'max': 2.0}}}}))
    urdf = urdf_export.model_to_urdf(problem.model, problem.base_params)
    return re.sub(r'(name|link)="((?:link|joint)\d)"', r'\1="left_\2"', urdf)


def _config(urdf, prefix='left_'):
    return {'model': {'urdf': urdf, 'prefix': prefix, 'joints': ['joint1', 'left_joint2'],
                      'payload': {'link': 'link2', 'mass': 0.2}},
            'parameters': {'link2': {'mass': {'min': 0.1, 'max': 2.0}},
                           'joint1': {'damping': {'min': 0.0, 'max': 1.0, 'init': 0.1}},
                           'payload': {'mass': {'min': 0.0, 'max': 1.0}}},
            'online': {'push_parameters': {'link2': {'mass': 'arm_mass'}}}}


def test_names_without_the_prefix_match_the_prefixed_robot(prefixed_urdf):
    cfg = config_io.from_dict(_config(prefixed_urdf))
    assert cfg.model.joints == ('left_joint1', 'left_joint2')      # given with it: kept
    assert cfg.model.payload['link'] == 'left_link2'
    assert cfg.online.push_parameters == {'left_link2.mass': 'arm_mass'}
    problem = pipeline.build_problem(cfg)
    assert problem.joint_names == ('left_joint1', 'left_joint2')
    assert set(problem.names) == {'left_link2.mass', 'left_joint1.damping', 'payload.mass'}
    assert cfg.parameters.init == {'left_joint1.damping': 0.1}
    # Written out and read again (results folders, the node's parameters): not prefixed twice.
    again = config_io.from_dict(config_io.to_dict(cfg))
    assert again.parameters.bounds == cfg.parameters.bounds
    assert again.model.joints == cfg.model.joints


def test_without_the_prefix_the_names_are_not_the_robots(prefixed_urdf):
    with pytest.raises(config_io.ConfigError, match='joint1'):
        pipeline.build_problem(config_io.from_dict(_config(prefixed_urdf, prefix=None)))
