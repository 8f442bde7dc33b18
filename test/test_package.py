"""Package plumbing: manifest, layering of the ROS-free layers, colcon and pip installs."""

import ast
import importlib.metadata
import os
import pathlib
import pkgutil
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = 'sysid_ros'
INTERFACES = 'sysid_ros_interfaces'

REQUIRED_EXEC_DEPENDS = {
    'rclpy', 'sensor_msgs', 'geometry_msgs', 'std_msgs', 'std_srvs', 'diagnostic_msgs',
    'rcl_interfaces', 'python3-numpy', 'python3-scipy', 'python3-yaml', 'pinocchio',
}
# Each ament linter declared here runs in the default test run (test/test_<linter>.py).
REQUIRED_TEST_DEPENDS = {'ament_flake8', 'ament_pep257', 'python3-pytest'}

# Modules that only a ROS 2 install provides; the core and io layers must load none of them.
ROS_MODULES = ('rclpy', 'rcl_interfaces', 'std_msgs', 'sensor_msgs', 'geometry_msgs',
               'std_srvs', 'diagnostic_msgs')


def _manifest():
    return ET.parse(REPO_ROOT / 'package.xml').getroot()


def _setup_keywords():
    """Keyword arguments of the `setup(...)` call in setup.py whose values are literals."""
    tree = ast.parse((REPO_ROOT / 'setup.py').read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'setup':
            return {kw.arg: kw.value for kw in node.keywords}
    raise AssertionError('setup.py has no setup(...) call')


def test_manifest_is_format_3_ament_python_with_required_depends():
    root = _manifest()
    assert root.tag == 'package'
    assert root.get('format') == '3'
    assert root.findtext('name') == PACKAGE
    assert root.findtext('license') == 'Apache-2.0'
    assert root.find('maintainer').get('email')
    assert root.findtext('export/build_type') == 'ament_python'
    exec_depends = {e.text for e in root.findall('exec_depend')}
    test_depends = {e.text for e in root.findall('test_depend')}
    assert REQUIRED_EXEC_DEPENDS <= exec_depends, REQUIRED_EXEC_DEPENDS - exec_depends
    assert REQUIRED_TEST_DEPENDS <= test_depends, REQUIRED_TEST_DEPENDS - test_depends


def test_every_declared_ament_linter_runs_in_the_tests():
    linters = {e.text for e in _manifest().findall('test_depend') if e.text.startswith('ament_')}
    missing = {name for name in linters
               if not (REPO_ROOT / 'test' / f'test_{name.removeprefix("ament_")}.py').exists()}
    assert not missing, f'declared in package.xml but run by no test: {sorted(missing)}'


# Modules the code imports -> their rosdep keys, where these differ; and the modules that
# come from PyPI only (no rosdep key; package.xml names them in a comment).
ROSDEP_KEYS = {'numpy': 'python3-numpy', 'scipy': 'python3-scipy', 'yaml': 'python3-yaml',
               'matplotlib': 'python3-matplotlib', 'jinja2': 'python3-jinja2',
               'tqdm': 'python3-tqdm'}
PYPI_ONLY = {'jax', 'optax', 'blackjax', 'emcee', 'rosbags', 'gtsam', 'corner', 'ray'}


def _imported_modules() -> set[str]:
    """Top-level modules that the package and its launch files import (not the standard
    library, not the package itself)."""
    paths = list((REPO_ROOT / PACKAGE).rglob('*.py')) + list((REPO_ROOT / 'launch').glob('*.py'))
    modules = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split('.')[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split('.')[0])
    return {m for m in modules if m not in sys.stdlib_module_names and m != PACKAGE}


def test_manifest_declares_everything_the_code_imports():
    exec_depends = {e.text for e in _manifest().findall('exec_depend')}
    comments = (REPO_ROOT / 'package.xml').read_text()
    imported = _imported_modules()
    assert imported >= {'rclpy', 'rosgraph_msgs', 'builtin_interfaces'}
    missing = {ROSDEP_KEYS.get(m, m) for m in imported - PYPI_ONLY} - exec_depends
    assert not missing, f'package.xml lacks exec_depends {sorted(missing)}'
    unnamed = [m for m in imported & PYPI_ONLY if m not in comments]
    assert not unnamed, f'package.xml does not name the PyPI modules {unnamed}'


def test_setup_py_agrees_with_manifest():
    keywords = _setup_keywords()
    assert ast.literal_eval(keywords['version']) == _manifest().findtext('version')
    scripts = ast.literal_eval(keywords['entry_points'])['console_scripts']
    assert 'sysid = sysid_ros.cli:main' in scripts


def test_fastdds_profile_binds_only_loopback():
    root = ET.parse(REPO_ROOT / 'config' / 'fastdds_localhost.xml').getroot()
    ns = {'dds': 'http://www.eprosima.com'}
    participant = root.find('dds:profiles/dds:participant', ns)
    assert participant.get('is_default_profile') == 'true'
    assert participant.findtext('dds:rtps/dds:useBuiltinTransports', namespaces=ns) == 'false'
    addresses = [a.text for a in root.iter('{http://www.eprosima.com}address')]
    assert addresses and set(addresses) == {'127.0.0.1'}


def test_core_and_io_do_not_load_ros():
    layers = [REPO_ROOT / PACKAGE / name for name in ('core', 'io')]
    if not any(list(pkgutil.iter_modules([str(path)])) for path in layers):
        pytest.skip('sysid_ros.core and sysid_ros.io have no modules yet')
    # A fresh interpreter imports both layers and every module under them.
    code = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        import sysid_ros.core, sysid_ros.io
        for package in (sysid_ros.core, sysid_ros.io):
            for module in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):
                importlib.import_module(module.name)
        assert 'rclpy' not in sys.modules
        print(sorted(m for m in sys.modules if m.split('.')[0] in {ROS_MODULES!r}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get('PYTHONPATH')])))
    result = subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[]', f'ROS modules loaded: {result.stdout}'


def test_pip_install_puts_sysid_script_beside_python():
    # setup.cfg sends scripts to lib/sysid_ros for colcon; pip must still put them in bin/.
    # Only pip records direct_url.json; this skips the sysid_ros.egg-info in the source tree
    # and colcon installs.
    if not any(dist.read_text('direct_url.json')
               for dist in importlib.metadata.distributions(name=PACKAGE)):
        pytest.skip('sysid_ros is not pip-installed in this interpreter')
    scripts_dir = pathlib.Path(sys.executable).parent
    assert (scripts_dir / 'sysid').is_file() or (scripts_dir / 'sysid.exe').is_file()


def _colcon():
    bin_dir = str(pathlib.Path(sys.executable).parent)
    return shutil.which('colcon', path=os.pathsep.join([bin_dir, os.environ.get('PATH', '')]))


@pytest.mark.skipif(_colcon() is None, reason='colcon is not installed')
def test_colcon_build_installs_package(tmp_path):
    # As `make colcon`: the package and its interfaces, against the prefix of this interpreter.
    bin_dir = pathlib.Path(sys.executable).parent          # cmake comes from PyPI there
    prefix_of_python = str(bin_dir.parent)
    env = dict(os.environ, COLCON_HOME=str(tmp_path / 'colcon_home'),  # ignore user defaults
               CMAKE_PREFIX_PATH=prefix_of_python, AMENT_PREFIX_PATH=prefix_of_python,
               PATH=os.pathsep.join([str(bin_dir), os.environ.get('PATH', '')]))
    result = subprocess.run(
        [_colcon(), '--log-base', str(tmp_path / 'log'), 'build',
         '--base-paths', str(REPO_ROOT), str(REPO_ROOT / 'interfaces' / INTERFACES),
         '--build-base', str(tmp_path / 'build'),
         '--install-base', str(tmp_path / 'install'),
         '--cmake-args', f'-Drosidl_core_generators_DIR={REPO_ROOT / "interfaces" / "cmake"}',
         '-DBUILD_TESTING=OFF'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Summary: 2 packages finished' in result.stdout, result.stdout
    interfaces = tmp_path / 'install' / INTERFACES
    for module in ('msg/_parameter_estimate.py', 'action/_identify_payload.py'):
        assert list(interfaces.glob(f'lib/python3*/site-packages/{INTERFACES}/{module}')), module

    prefix = tmp_path / 'install' / PACKAGE
    share = prefix / 'share' / PACKAGE
    assert (prefix / 'share/ament_index/resource_index/packages' / PACKAGE).is_file()
    assert (share / 'package.xml').is_file()
    # Built as ros.ament_python (not plain python): colcon-ros adds the AMENT_PREFIX_PATH hook.
    assert (share / 'hook' / 'ament_prefix_path.dsv').is_file()
    for pattern in ('launch/*.launch.py', 'config/*.yaml'):
        expected = sorted(path.relative_to(REPO_ROOT) for path in REPO_ROOT.glob(pattern))
        installed = sorted(path.relative_to(share) for path in share.glob(pattern))
        assert installed == expected, pattern
    # `ros2 run sysid_ros sysid` looks for the executable in lib/<package>.
    script = prefix / 'lib' / PACKAGE / 'sysid'
    assert script.is_file() and os.access(script, os.X_OK)
    assert list(prefix.glob(f'lib/python3*/site-packages/{PACKAGE}/core/__init__.py'))
    # Package data: the template of report.html.
    assert list(prefix.glob(f'lib/python3*/site-packages/{PACKAGE}/io/templates/report.html.j2'))


def _ament_prefix(root: pathlib.Path, package: str) -> pathlib.Path:
    """An install prefix whose ament index holds `package`; returns its share folder."""
    marker = root / 'share' / 'ament_index' / 'resource_index' / 'packages' / package
    marker.parent.mkdir(parents=True)
    marker.touch()
    share = root / 'share' / package
    share.mkdir()
    return share


def test_model_urdf_package_uri_resolves_through_the_ament_index(tmp_path, monkeypatch):
    pytest.importorskip('ament_index_python')
    from sysid_ros.io import config as config_io

    share = _ament_prefix(tmp_path / 'install', 'fake_description')
    (share / 'urdf').mkdir()
    urdf = share / 'urdf' / 'arm.urdf'
    urdf.write_text('<robot name="arm"/>')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'install'))

    def model(uri):
        return config_io.ModelConfig.from_dict({'urdf': uri}, 'problem.yaml')

    assert model('package://fake_description/urdf/arm.urdf').urdf == str(urdf)
    with pytest.raises(config_io.ConfigError, match=r'problem.yaml: model.urdf: expected an '
                       r'existing URDF file, got .package://fake_description/urdf/no.urdf.'):
        model('package://fake_description/urdf/no.urdf')
    with pytest.raises(config_io.ConfigError, match=r'problem.yaml: model.urdf: expected a '
                       r'package:// URI of an installed ROS 2 package, got .package://nowhere/'):
        model('package://nowhere/arm.urdf')
