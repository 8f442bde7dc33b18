"""Every launch file compiles, defines `generate_launch_description` and, with ROS 2, loads."""

import ast
import importlib.util
import pathlib
import py_compile

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
LAUNCH_FILES = sorted((REPO_ROOT / 'launch').glob('*.launch.py'))
EXPECTED_ARGUMENTS = {'sysid_fit.launch.py': {'config', 'data', 'out'}}


def _ids(paths):
    return [path.name for path in paths]


def test_launch_files_exist():
    assert LAUNCH_FILES


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=_ids(LAUNCH_FILES))
def test_launch_file_compiles_and_defines_entry_point(path, tmp_path):
    py_compile.compile(str(path), cfile=str(tmp_path / 'launch.pyc'), doraise=True)
    functions = {node.name for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.FunctionDef)}
    assert 'generate_launch_description' in functions


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=_ids(LAUNCH_FILES))
def test_launch_file_builds_description(path):
    # Without ROS 2, `import launch` finds this repository's launch/ folder as a namespace
    # package; only a real install has LaunchDescription.
    try:
        from launch import LaunchDescription
    except ImportError:
        pytest.skip('needs the ROS 2 `launch` package (there is no pip wheel)')
    packages = pytest.importorskip('ament_index_python.packages')
    spec = importlib.util.spec_from_file_location(path.name.replace('.', '_'), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        description = module.generate_launch_description()
    except packages.PackageNotFoundError:
        pytest.skip('sysid_ros is not installed in an ament prefix (source the colcon install)')
    assert isinstance(description, LaunchDescription)
    declared = {argument.name for argument in description.get_launch_arguments()}
    assert EXPECTED_ARGUMENTS.get(path.name, set()) <= declared
