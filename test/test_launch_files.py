"""Every launch file compiles, names only what exists, and, with ROS 2, loads."""

import ast
import importlib.util
import pathlib
import py_compile
from xml.etree import ElementTree

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
LAUNCH_FILES = sorted((REPO_ROOT / 'launch').glob('*.launch.py'))
EXPECTED_ARGUMENTS = {
    'sysid_fit.launch.py': {'config', 'bag', 'out'},
    'sysid.launch.py': {'config', 'namespace', 'use_sim_time'},
    'demo.launch.py': {'config', 'namespace'},
    'replay.launch.py': {'bag', 'config', 'namespace'},
}


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


# Without launch_ros (no pip wheel), the files are checked statically: every package, executable,
# configuration file and `sysid` option they name must exist.

def _launch_tree(path):
    return ast.parse(path.read_text())


def _constants(call):
    return [arg.value for arg in call.args if isinstance(arg, ast.Constant)]


def _calls(tree, name):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        getattr(node.func, 'id', None) == name or getattr(node.func, 'attr', None) == name)]


def _package_name():
    return ElementTree.parse(REPO_ROOT / 'package.xml').getroot().findtext('name')


def _console_scripts():
    tree = ast.parse((REPO_ROOT / 'setup.py').read_text())
    scripts = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and ' = ' in node.value:
            name, target = (part.strip() for part in node.value.split('=', 1))
            scripts[name] = target
    return scripts


def _node_calls(tree):
    """The Node(...) and LifecycleNode(...) actions of a launch file."""
    return _calls(tree, 'Node') + _calls(tree, 'LifecycleNode')


def _named_executables(tree):
    """Executables of (Lifecycle)Node(executable=...) and of os.path.join(prefix, 'lib',
    PACKAGE, NAME)."""
    names = [keyword.value.value for call in _node_calls(tree) for keyword in call.keywords
             if keyword.arg == 'executable' and isinstance(keyword.value, ast.Constant)]
    for call in _calls(tree, 'join'):
        constants = _constants(call)
        if 'lib' in constants:
            names.append(constants[-1])
    return names


def _named_configs(tree):
    return [_constants(call)[-1] for call in _calls(tree, 'join') if 'config' in _constants(call)]


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=_ids(LAUNCH_FILES))
def test_launch_file_names_only_what_exists(path):
    tree = _launch_tree(path)
    package = _package_name()
    packages = {node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(getattr(t, 'id', None) == 'PACKAGE' for t in node.targets)}
    assert packages == {package}, f'{path.name}: PACKAGE must be {package!r}, got {packages}'
    scripts = _console_scripts()
    executables = _named_executables(tree)
    assert executables, f'{path.name} starts no executable'
    for executable in executables:
        assert executable in scripts, f'{path.name}: no console script {executable!r} in setup.py'
        module, _, function = scripts[executable].partition(':')
        spec = importlib.util.find_spec(module)
        assert spec is not None, f'{path.name}: {executable!r} -> missing module {module}'
        assert f'def {function}(' in pathlib.Path(spec.origin).read_text()
    for config in _named_configs(tree):
        assert (REPO_ROOT / 'config' / config).is_file(), f'{path.name}: no config/{config}'


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=_ids(LAUNCH_FILES))
def test_launch_file_declares_its_arguments(path):
    declared = {_constants(call)[0]
                for call in _calls(_launch_tree(path), 'DeclareLaunchArgument')}
    assert EXPECTED_ARGUMENTS[path.name] <= declared
    used = {_constants(call)[0] for call in _calls(_launch_tree(path), 'LaunchConfiguration')}
    assert used <= declared, f'{path.name}: undeclared arguments {used - declared}'


def test_fit_launch_passes_options_the_cli_accepts():
    from sysid_ros import cli
    fit = cli.build_parser()._subparsers._group_actions[0].choices['fit']
    options = {option for action in fit._actions for option in action.option_strings}
    tree = _launch_tree(REPO_ROOT / 'launch' / 'sysid_fit.launch.py')
    passed = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
              and isinstance(node.value, str) and node.value.startswith('--')}
    assert passed and passed <= options, f'unknown `sysid fit` options: {passed - options}'


def test_fit_launch_passes_the_bag_argument_as_a_bag():
    """`bag:=PATH` reaches `sysid fit --bag PATH` (not --data, which takes .npz/.csv files)."""
    tree = _launch_tree(REPO_ROOT / 'launch' / 'sysid_fit.launch.py')
    [command] = [keyword.value for call in _calls(tree, 'ExecuteProcess')
                 for keyword in call.keywords if keyword.arg == 'cmd']
    pairs = {option.value: _constants(value)
             for option, value in zip(command.elts, command.elts[1:])
             if isinstance(option, ast.Constant) and str(option.value).startswith('--')}
    assert pairs['--bag'] == ['bag'] and '--data' not in pairs


def _estimator_namespaces(tree):
    """Default namespace of each estimator Node of a launch file (None: no namespace)."""
    defaults = {_constants(call)[0]: keyword.value.value
                for call in _calls(tree, 'DeclareLaunchArgument')
                for keyword in call.keywords if keyword.arg == 'default_value'
                and isinstance(keyword.value, ast.Constant)}
    namespaces = []
    for call in _node_calls(tree):
        keywords = {keyword.arg: keyword.value for keyword in call.keywords}
        if getattr(keywords.get('executable'), 'value', None) != 'estimator':
            continue
        namespace = keywords.get('namespace')
        namespaces.append(None if namespace is None else defaults[_constants(namespace)[0]])
    return namespaces


def test_the_estimate_client_default_topic_is_the_launched_estimators():
    pytest.importorskip('rclpy')
    from sysid_ros.ros import estimate_client

    namespaces = [ns for path in LAUNCH_FILES
                  for ns in _estimator_namespaces(_launch_tree(path))]
    assert namespaces and set(namespaces) == {'sysid'}
    assert estimate_client.DEFAULT_TOPIC == '/sysid/estimator/estimate'


def _estimator_calls(tree):
    return [call for call in _node_calls(tree)
            if any(keyword.arg == 'executable' and getattr(keyword.value, 'value', None)
                   == 'estimator' for keyword in call.keywords)]


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=_ids(LAUNCH_FILES))
def test_launch_files_drive_the_managed_estimator_through_its_transitions(path):
    """The estimator is a LifecycleNode with autostart off, and the file emits the
    configure-then-activate transition events for it (`ros.lifecycle_launch`)."""
    tree = _launch_tree(path)
    estimators = _estimator_calls(tree)
    if not estimators:
        pytest.skip(f'{path.name} starts no estimator')
    assert [call.func.id for call in estimators] == ['LifecycleNode']
    [parameters] = [keyword.value for keyword in estimators[0].keywords
                    if keyword.arg == 'parameters']
    overrides = [element for element in parameters.elts if isinstance(element, ast.Dict)]
    assert any(getattr(key, 'value', None) == 'autostart' and value.value is False
               for override in overrides for key, value in zip(override.keys, override.values))
    [driven] = list(_calls(tree, 'configure_then_activate'))
    assert [arg.id for arg in driven.args] == ['estimator']
