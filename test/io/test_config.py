"""Configuration: every shipped file loads; bad input stops with the file, key and expectation."""

import copy
import math
import pathlib

import pytest
import yaml

from sysid_ros.core.model.types import RobotModel
from sysid_ros.io import config
from sysid_ros.io.config import ConfigError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG_FILES = sorted((REPO_ROOT / 'config').glob('*.yaml'))


def _missing_external_urdf(path) -> str | None:
    """The URDF that a real-data config reads in place from outside the repository (e.g.
    ../shared/data, never copied in), if this machine does not have it; else None."""
    model = yaml.safe_load(path.read_text())['/**']['ros__parameters']['model']
    urdf = model.get('urdf')
    if not urdf or ':' in urdf:                 # a builder, or example-robot-data:NAME
        return None
    target = (path.parent / urdf).resolve()
    outside = REPO_ROOT.resolve() not in target.parents
    return str(target) if outside and not target.exists() else None


MINIMAL = {
    'model': {'builder': 'double_pendulum', 'joints': ['joint1', 'joint2']},
    'parameters': {'link2': {'mass': {'min': 0.05, 'max': 0.5},
                             'com': {'x': {'min': -0.2, 'max': 0.2, 'init': 0.1}}},
                   'joint1': {'damping': {'min': 0.0, 'max': 0.5}}},
}

MODEL = RobotModel(name='dp', link_names=('link1', 'link2'), joint_names=('joint1', 'joint2'),
                   parents=(-1, 0), joint_types=('revolute', 'revolute'),
                   continuous=(False, False), axis=((0.0, 0.0, 1.0), (0.0, 0.0, 1.0)))


def _with(path: str, value, base=MINIMAL):
    """A deep copy of `base` with the dotted `path` set to `value` (None: removed)."""
    d = copy.deepcopy(base)
    *heads, last = path.split('.')
    node = d
    for head in heads:
        node = node.setdefault(head, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return d


def _write(tmp_path, d, name='cfg.yaml'):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(d))
    return path


def test_all_names_import():
    for name in config.__all__:
        assert hasattr(config, name), name


def test_config_files_exist():
    names = {p.name for p in CONFIG_FILES}
    assert {'double_pendulum.yaml', 'panda.yaml'} <= names


@pytest.mark.parametrize('path', CONFIG_FILES, ids=lambda p: p.name)
def test_every_config_file_loads_and_is_a_ros_parameters_file(path):
    if _missing_external_urdf(path):
        pytest.skip(f'{path.name} reads {_missing_external_urdf(path)}, not on this machine')
    cfg = config.load_yaml(path)
    assert cfg.source == str(path)
    assert cfg.parameters.bounds
    raw = yaml.safe_load(path.read_text())
    assert list(raw) == ['/**'] and list(raw['/**']) == ['ros__parameters']

    def check(node, key):                    # ROS 2's parser: no dotted keys, no empty lists
        if isinstance(node, dict):
            for k, v in node.items():
                assert '.' not in str(k), f'{key}.{k}'
                check(v, f'{key}.{k}')
        elif isinstance(node, list):
            assert node, f'{key}: empty list'
    check(raw, '')


def test_double_pendulum_config():
    cfg = config.load_yaml(REPO_ROOT / 'config' / 'double_pendulum.yaml')
    assert cfg.model.builder == 'double_pendulum' and cfg.model.urdf is None
    assert cfg.model.joints == ('joint1', 'joint2')
    assert cfg.estimator.method == 'diffnea'
    assert set(cfg.parameters.names) >= {'link1.mass', 'link2.mass', 'link2.com.x',
                                         'joint1.damping', 'joint2.damping'}
    spec = config.parameter_spec(cfg, MODEL)
    assert spec.names == cfg.parameters.names


def test_panda_config_keeps_the_example_robot_reference():
    cfg = config.load_yaml(REPO_ROOT / 'config' / 'panda.yaml')
    assert cfg.model.urdf == 'example-robot-data:panda'
    assert len(cfg.model.joints) == 7


def test_minimal_dict_defaults_and_flattening():
    cfg = config.from_dict(MINIMAL)
    assert cfg.parameters.bounds == {'link2.mass': (0.05, 0.5), 'link2.com.x': (-0.2, 0.2),
                                     'joint1.damping': (0.0, 0.5)}
    assert cfg.parameters.init == {'link2.com.x': 0.1}
    assert cfg.model.actuator == 'viscous' and cfg.model.integrator == 'rk4'
    assert cfg.data.rate == 100.0 and cfg.data.joint_states_topic == '/joint_states'
    assert cfg.estimator.particles == 1 and cfg.source is None
    assert cfg.dt == pytest.approx(0.01)
    assert config.from_dict(_with('model.dt', 0.002)).dt == 0.002


def test_missing_bounds_default_to_infinite_or_zero():
    d = _with('parameters.joint1', {'origin': {'z': {'init': 0.1}}, 'coulomb': {'max': 1.0},
                                    'offset': {'min': -20.0}})
    bounds = config.from_dict(_with('model.actuator', 'stribeck', d)).parameters.bounds
    assert bounds['joint1.origin.z'] == (-math.inf, math.inf)
    assert bounds['joint1.coulomb'] == (0.0, 1.0)
    assert bounds['joint1.offset'] == (-20.0, math.inf)                 # signed


@pytest.mark.parametrize('wrapper', ['/**', 'sysid_node', '/robot/sysid_node'])
def test_ros_parameters_wrapper_equals_plain(tmp_path, wrapper):
    plain = config.load_yaml(_write(tmp_path, MINIMAL, 'plain.yaml'))
    wrapped = config.load_yaml(_write(tmp_path, {wrapper: {'ros__parameters': MINIMAL}},
                                      'wrapped.yaml'))
    assert dataclass_fields(plain) == dataclass_fields(wrapped)


def dataclass_fields(cfg):
    return cfg.model, cfg.parameters, cfg.data, cfg.estimator


def test_node_section_overrides_wildcard(tmp_path):
    d = {'/**': {'ros__parameters': MINIMAL},
         'sysid_node': {'ros__parameters': {'estimator': {'particles': 8}}}}
    path = _write(tmp_path, d)
    assert config.load_yaml(path, node='sysid_node').estimator.particles == 8
    assert config.load_yaml(path, node='other').estimator.particles == 1
    with pytest.raises(ConfigError, match='pass the node name'):
        config.load_yaml(path)


def test_relative_urdf_resolves_against_the_config_folder(tmp_path):
    (tmp_path / 'robots').mkdir()
    (tmp_path / 'robots' / 'arm.urdf').write_text('<robot name="arm"/>')
    d = _with('model', {'urdf': 'robots/arm.urdf'})
    cfg = config.load_yaml(_write(tmp_path, d))
    assert cfg.model.urdf == str(tmp_path / 'robots' / 'arm.urdf')
    # package:// references: test_package.py
    for ref in ('example-robot-data:panda', '<robot name="x"/>'):
        assert config.from_dict(_with('model', {'urdf': ref})).model.urdf == ref


def test_to_dict_round_trips():
    cfg = config.from_dict(_with('data.mocap_topics', ['/mocap/box/pose']))
    again = config.from_dict(config.to_dict(cfg))
    assert dataclass_fields(again) == dataclass_fields(cfg)
    for path in CONFIG_FILES:
        if _missing_external_urdf(path):
            continue
        cfg = config.load_yaml(path)
        assert dataclass_fields(config.from_dict(config.to_dict(cfg), str(path))) == \
            dataclass_fields(cfg)


def test_from_flat_dict_accepts_ros_parameter_names():
    flat = {'model.builder': 'double_pendulum', 'model.joints': ['joint1', 'joint2'],
            'parameters.link2.mass.min': 0.05, 'parameters.link2.mass.max': 0.5,
            'estimator.particles': 4}
    cfg = config.from_flat_dict(flat)
    assert cfg.parameters.bounds == {'link2.mass': (0.05, 0.5)}
    assert cfg.estimator.particles == 4


def test_scientific_notation_strings_are_numbers():
    # PyYAML reads `1e-3` (no dot) as a string; accept it where a number is expected.
    cfg = config.from_dict(_with('estimator.learning_rate', '1e-3'))
    assert cfg.estimator.learning_rate == 1e-3


BAD = [
    ('estimator.particles', 0, 'estimator.particles: expected int >= 1, got 0'),
    ('estimator.particles', 2.0, 'estimator.particles: expected int >= 1, got 2.0'),
    ('estimator.particles', True, 'estimator.particles: expected int >= 1, got True'),
    ('estimator.iterations', -5, 'estimator.iterations: expected int >= 1'),
    ('estimator.shooting_windows', 0, 'estimator.shooting_windows: expected int >= 1'),
    ('estimator.learning_rate', 0.0, 'estimator.learning_rate: expected number > 0'),
    ('estimator.seed', 'x', 'estimator.seed: expected int'),
    ('estimator.method', 'magic', 'estimator.method: expected one of csvgd | svgd'),
    ('estimator.loss', 'l2', 'estimator.loss: expected one of one_step | rollout'),
    ('estimator.rollout_horizon', 0, 'estimator.rollout_horizon: expected int >= 1'),
    ('estimator.particle', 3, 'estimator.particle: unknown key; expected one of method'),
    ('data.rate', 0.0, 'data.rate: expected number > 0, got 0.0'),
    ('data.rate', 'fast', "data.rate: expected number > 0, got 'fast'"),
    ('data.rate', math.inf, 'data.rate: expected a finite number'),
    ('data.joint_states_topic', 'joint states', 'data.joint_states_topic: expected a ROS '
                                                'topic name'),
    ('data.torque_source', '9torques', 'data.torque_source: expected'),
    ('data.mocap_topics', '/mocap', 'data.mocap_topics: expected list of topic names'),
    ('data.mocap_topics', ['/a', '/a'], 'data.mocap_topics: expected unique entries'),
    ('data.noise_std', [0.1, -0.1], r'data.noise_std\[1\]: expected number > 0'),
    ('data', [1], 'data: expected a map'),
    ('data.torque_samples', 'sampled', 'data.torque_samples: expected one of held | '
     'instantaneous'),
    ('model.actuator', 'magic', 'model.actuator: expected one of ideal | viscous'),
    ('model.integrator', 'euler', 'model.integrator: expected one of semi_implicit_euler'),
    ('model.dt', -0.1, 'model.dt: expected number > 0'),
    ('model.joints', ['joint1', ''], r'model.joints\[1\]: expected a non-empty string'),
    ('model.joints', 'joint1', 'model.joints: expected list of non-empty strings'),
    ('model.urdf', 'robot.urdf', 'model: expected exactly one of urdf and builder, got both'),
    ('model.builder', None, 'model: expected exactly one of urdf and builder, got neither'),
    ('model.builder', 'triple_pendulum', 'model.builder: expected one of'),
    ('model.builder_args', {'wings': 2}, 'model.builder_args.wings: unknown argument'),
    ('model.colour', 'red', 'model.colour: unknown key'),
    ('model.payload', {'mass': 1.0}, 'model.payload.link: expected the name of the link'),
    ('model.payload', {'link': 'link2', 'mass': -1.0}, r'model.payload.mass: expected number '
                                                       r'>= 0 \[kg\]'),
    ('model.payload', {'link': 'link2', 'com': [0.0, 1.0]}, 'model.payload.com: expected 3 '
                                                            'numbers'),
    ('model.payload', {'link': 'link2', 'size': 1}, 'model.payload.size: unknown key'),
    ('model.payload', {'link': 'link2', 'inertia': [0.1] * 6}, 'model.payload.inertia: '
                                                               'expected a map of ixx, ixy'),
    ('model.payload', {'link': 'link2', 'inertia': {'ixz': 0.1, 'i': 1}},
     'model.payload.inertia.i: unknown key'),
    ('model.payload', {'link': 'link2', 'inertia': {'ixx': 0.3, 'iyy': 0.1, 'izz': 0.1}},
     'model.payload.inertia: not the inertia of a real body'),
    ('model', None, 'model: missing section'),
    ('parameters', None, 'parameters: missing section'),
    ('parameters', {}, 'parameters: expected a non-empty map'),
    ('solver', {}, 'solver: unknown section'),
    ('parameters.link2.mass', 0.3, 'parameters.link2.mass: expected a map with min/max'),
    ('parameters.link2.mass', {'min': 0.5, 'max': 0.1},
     'parameters.link2.mass.max: expected number > min = 0.5, got 0.1'),
    ('parameters.link2.mass', {'min': -0.5, 'max': 0.1},
     r'parameters.link2.mass.min: expected number >= 0 \(mass cannot be negative\)'),
    ('parameters.link2.mass', {'min': 'a', 'max': 0.1}, 'parameters.link2.mass.min: expected '
                                                        'number'),
    ('parameters.link2.mass', {'min': 0.1, 'max': 0.5, 'init': 0.9},
     r'parameters.link2.mass.init: expected number in \[0.1, 0.5\], got 0.9'),
    ('parameters.link2.mass', {'min': 0.1, 'mx': 0.5}, 'parameters.link2.mass.mx: unknown key; '
                                                       'expected one of min, max, init'),
    ('parameters.link2.colour', {'min': 0, 'max': 1},
     "parameters.link2.colour: unknown attribute 'colour'; expected one of mass"),
    ('parameters.link2.com.w', {'min': 0, 'max': 1},
     "parameters.link2.com.w: unknown attribute 'com.w'"),
    ('parameters.joint1.coulomb', {'min': 0, 'max': 1},
     "parameters.joint1.coulomb: coulomb is not part of actuator 'viscous'"),
]


@pytest.mark.parametrize('key, value, match', BAD, ids=[f'{k}={v!r}' for k, v, _ in BAD])
def test_errors_name_file_key_and_expectation(tmp_path, key, value, match):
    d = _with(key, value)
    if key == 'model.urdf':
        (tmp_path / 'robot.urdf').write_text('<robot name="r"/>')
    path = _write(tmp_path, d)
    with pytest.raises(ConfigError, match=f'^{path}: {match}'):
        config.load_yaml(path)
    if key != 'model.urdf':
        with pytest.raises(ConfigError, match=f'^{match}'):
            config.from_dict(d)


def test_missing_urdf_file_names_the_key(tmp_path):
    path = _write(tmp_path, _with('model', {'urdf': 'nowhere.urdf'}))
    with pytest.raises(ConfigError, match=f'^{path}: model.urdf: expected an existing URDF '
                                          'file, got .nowhere.urdf.'):
        config.load_yaml(path)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match='missing.yaml: cannot read'):
        config.load_yaml(tmp_path / 'missing.yaml')
    bad = tmp_path / 'bad.yaml'
    bad.write_text('model: [unclosed\n')
    with pytest.raises(ConfigError, match='bad.yaml: invalid YAML'):
        config.load_yaml(bad)
    empty = tmp_path / 'empty.yaml'
    empty.write_text('')
    with pytest.raises(ConfigError, match='empty.yaml: empty file'):
        config.load_yaml(empty)
    assert issubclass(ConfigError, ValueError)


def test_parameter_spec_errors_name_file_and_key(tmp_path):
    path = _write(tmp_path, _with('parameters.link9', {'mass': {'min': 0.1, 'max': 1.0}}))
    cfg = config.load_yaml(path)
    match = f"^{path}: parameters.link9.mass: unknown link 'link9'.*valid links: link1, link2"
    with pytest.raises(ConfigError, match=match):
        config.parameter_spec(cfg, MODEL)
