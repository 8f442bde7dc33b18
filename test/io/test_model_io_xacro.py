"""`model.urdf: robot.xacro`: expanded by the `xacro` package at validation into the URDF the
model is built from; a broken xacro is refused naming the key."""

import pytest

from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline

pytest.importorskip('xacro')

# Two links made by one macro, their masses from properties and an argument's default.
XACRO = """<?xml version="1.0"?>
<robot name="xacro_chain" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:arg name="tip_mass" default="0.7"/>
  <xacro:property name="length" value="0.5"/>
  <xacro:macro name="link_and_joint" params="name parent mass z">
    <link name="${name}">
      <inertial>
        <origin xyz="0 0 ${-length / 2}"/>
        <mass value="${mass}"/>
        <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.001"/>
      </inertial>
    </link>
    <joint name="${name}_joint" type="revolute">
      <parent link="${parent}"/>
      <child link="${name}"/>
      <origin xyz="0 0 ${z}"/>
      <axis xyz="0 1 0"/>
      <limit lower="-3" upper="3" effort="10" velocity="10"/>
    </joint>
  </xacro:macro>
  <link name="base"/>
  <xacro:link_and_joint name="upper" parent="base" mass="1.2" z="0"/>
  <xacro:link_and_joint name="lower" parent="upper" mass="$(arg tip_mass)" z="${-length}"/>
</robot>
"""


def _config(urdf: str) -> dict:
    return {'model': {'urdf': urdf, 'joints': ['upper_joint', 'lower_joint']},
            'parameters': {'lower': {'mass': {'min': 0.1, 'max': 2.0}}}}


def test_a_xacro_file_is_expanded_into_the_model(tmp_path):
    (tmp_path / 'chain.urdf.xacro').write_text(XACRO)
    config_path = str(tmp_path / 'problem.yaml')
    cfg = config_io.from_dict(_config('chain.urdf.xacro'), config_path)  # relative to the file
    assert cfg.model.urdf.lstrip().startswith('<') and 'xacro:' not in cfg.model.urdf
    problem = pipeline.build_problem(cfg)
    assert problem.joint_names == ('upper_joint', 'lower_joint')
    masses = [float(m) for m in problem.base_params.inertial[:, 0]]
    assert masses == pytest.approx([1.2, 0.7])


def test_a_broken_xacro_names_the_key(tmp_path):
    (tmp_path / 'broken.xacro').write_text(XACRO.replace('${-length}', '${-lenght}'))
    with pytest.raises(config_io.ConfigError, match=r'model\.urdf.*broken\.xacro: xacro: .*'
                       'lenght'):
        config_io.from_dict(_config(str(tmp_path / 'broken.xacro')), str(tmp_path / 'p.yaml'))


def test_xacro_arguments_come_from_the_config_and_a_missing_one_says_where(tmp_path):
    # As FR3's and UR's descriptions need arm_id / ur_type: an argument with no value.
    (tmp_path / 'arm.urdf.xacro').write_text(
        XACRO.replace('  <xacro:arg name="tip_mass" default="0.7"/>\n', ''))
    config = _config('arm.urdf.xacro')
    with pytest.raises(config_io.ConfigError, match=r'model\.urdf: .*tip_mass.*give it in '
                       r'model\.xacro_args'):
        config_io.from_dict(config, str(tmp_path / 'p.yaml'))
    config['model']['xacro_args'] = {'tip_mass': 0.45}
    problem = pipeline.build_problem(config_io.from_dict(config, str(tmp_path / 'p.yaml')))
    masses = [float(m) for m in problem.base_params.inertial[:, 0]]
    assert masses == pytest.approx([1.2, 0.45])


@pytest.mark.parametrize('model, key', [
    ({'builder': 'double_pendulum', 'xacro_args': {'a': 1}}, 'model.xacro_args'),
    ({'urdf': 'example-robot-data:panda', 'xacro_args': {'a': 1}}, 'model.xacro_args'),
])
def test_xacro_arguments_without_a_xacro_file_are_refused(model, key):
    with pytest.raises(config_io.ConfigError, match=f'{key}: only allowed with a .xacro'):
        config_io.from_dict({'model': model, 'parameters': {}})
