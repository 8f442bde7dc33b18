"""Units of parameters and states (io.units): every attribute has one, joint types decide."""

from sysid_ros.core.model import parameters
from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline, units


def test_every_attribute_has_a_unit():
    assert set(units.ATTRIBUTE_UNITS) == set(parameters.ATTRIBUTES)
    assert units.attribute_unit('inertia.ixy') == 'kg m^2'
    assert units.attribute_unit('damping') == 'N m s/rad'
    assert units.attribute_unit('damping', prismatic=True) == 'N s/m'


def test_units_follow_the_joint_type_of_a_cartpole():
    # joint1 moves the cart (prismatic), joint2 the pole (revolute).
    cfg = config_io.from_dict({
        'model': {'builder': 'cartpole', 'joints': ['joint1', 'joint2'],
                  'actuator': 'coulomb_viscous'},
        'parameters': {
            'link1': {'mass': {'min': 0.5, 'max': 2.0}},
            'link2': {'com': {'z': {'min': -0.5, 'max': 0.5}},
                      'inertia': {'iyy': {'min': 0.0, 'max': 0.1}}},
            'joint1': {'damping': {'min': 0.0, 'max': 1.0}, 'coulomb': {'min': 0.0, 'max': 1.0}},
            'joint2': {'damping': {'min': 0.0, 'max': 1.0}, 'armature': {'min': 0.0, 'max': 1.0}},
        }})
    problem = pipeline.build_problem(cfg)
    assert dict(zip(problem.names, units.parameter_units(problem))) == {
        'link1.mass': 'kg', 'link2.com.z': 'm', 'link2.inertia.iyy': 'kg m^2',
        'joint1.damping': 'N s/m', 'joint1.coulomb': 'N',
        'joint2.damping': 'N m s/rad', 'joint2.armature': 'kg m^2'}
    assert units.state_labels(problem) == ('q joint1 [m]', 'q joint2 [rad]',
                                           'qd joint1 [m/s]', 'qd joint2 [rad/s]')
    assert units.labelled(['link1.mass', 'x'], ['kg', '']) == ['link1.mass [kg]', 'x']
