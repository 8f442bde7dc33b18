"""MkDocs hook: reference tables generated from the code, so that they cannot drift from it.

A page holds a marker line `<!-- generated: NAME -->`; the hook replaces it with the table
NAME at build time:

- `configuration`: every key of the problem configuration, from `sysid_ros.io.config_sections`'
  section dataclasses (field metadata of `config_schema.option`: kind, unit, choices, range;
  defaults; the `Attributes:` entries of each section's docstring, parsed by griffe).
- `packaged-configs`: the files of `config/`, each with the first line of its comment.
- `ros-config-parameters`: the ROS parameters a node declares for a configuration
  (`sysid_ros.ros.params.config_parameters` on every packaged `config/*.yaml`).
- `ros-interfaces`: per node module in `sysid_ros/ros/`, its own parameters, topics and
  services, from the module-level `NODE_NAME`, `PARAMETERS` and `ENDPOINTS` that the node
  creates them from (`sysid_ros.ros.interfaces`).
- `cli`: the `sysid` command line, from its argparse parser.
- `design-pages`: a link to every page of `docs/design/` but the index.

It also adds one API reference page per package of `sysid_ros` (`on_files`, rendered by
mkdocstrings) and, as a griffe extension (`EscapeBrackets`), keeps the units in brackets of
the docstrings as text. `test/test_docs.py` imports this module to check that every
configuration key and every declared ROS parameter is in the generated text.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import pathlib
import re
import typing

import griffe

REPO = pathlib.Path(__file__).resolve().parents[2]
ROS_PACKAGE = REPO / 'sysid_ros' / 'ros'
_BRACKETS = re.compile(r'\[([^\[\]\n]*)\](?!\()')
_MARKER = re.compile(r'^<!-- generated: ([\w-]+) -->$', re.MULTILINE)
# Executables of setup.py's console_scripts, by module (the node modules that have one).
_EXECUTABLE = re.compile(r"'(\w+) = sysid_ros\.ros\.(\w+):main'")
_PARAMETER_KINDS = {'float': 'double', 'int': 'integer', 'str': 'string', 'topic': 'string',
                    'str_list': 'string array', 'topic_list': 'string array',
                    'float_list': 'double array', 'map': 'map (nested keys)'}


def escape_brackets(text: str) -> str:
    """`text` with, outside code, every `[...]` that is not an inline link escaped, and `<`
    written as an entity: units and shapes in brackets (`rate [Hz]`, `[N m] [rad/s]`) and
    placeholders (`<topic>`) are text, not Markdown references or HTML tags."""
    parts = re.split(r'(```.*?```|`[^`]*`)', text, flags=re.DOTALL)
    parts[::2] = [_BRACKETS.sub(r'\\[\1\\]', part).replace('<', '&lt;')
                  for part in parts[::2]]
    return ''.join(parts)


def _cell(text: str) -> str:
    """`text` on one line, safe inside a Markdown table cell."""
    return escape_brackets(' '.join(str(text).split()).replace('|', '\\|'))


def _code(value) -> str:
    return f'`{value}`' if value not in ('', None) else ''


# ------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------

def _attribute_docs(cls) -> dict[str, str]:
    """{field: description} from the `Attributes:` section of `cls`'s Google docstring."""
    docstring = griffe.Docstring(typing.cast(str, cls.__doc__ or ''), lineno=1)
    docs = {}
    for section in docstring.parse('google', warnings=False):
        if section.kind is griffe.DocstringSectionKind.attributes:
            docs.update({attr.name: attr.description for attr in section.value})
    return docs


def config_sections() -> list[tuple[str, type]]:
    """(section name, dataclass) of every section of `io.config.Config`, in file order."""
    from sysid_ros.io import config

    hints = typing.get_type_hints(config.Config)
    return [(name, hints[name]) for name in config.SECTIONS]


def _allowed(meta: typing.Mapping) -> str:
    parts = []
    if meta.get('choices'):
        parts.append(' \\| '.join(f'`{c}`' for c in meta['choices']))
    if meta.get('words'):
        parts.append(' \\| '.join(f'`{w}`' for w in meta['words']))
    if meta.get('gt') is not None:
        parts.append(f'> {meta["gt"]:g}')
    elif meta.get('ge') is not None:
        parts.append(f'>= {meta["ge"]:g}')
    if meta.get('optional'):
        parts.append('empty')
    return ', '.join(parts)


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return ''
    if value in (None, (), {}):
        return 'empty'
    return f'`{list(value) if isinstance(value, tuple) else value}`'


def config_keys() -> list[str]:
    """Every documented configuration key: `section.field`, and the bounds of a parameter
    as `parameters.<object>.<attribute>.min|max|init`."""
    keys = []
    for section, cls in config_sections():
        if section == 'parameters':
            keys += [f'parameters.<object>.<attribute>.{leaf}' for leaf in ('min', 'max', 'init')]
        else:
            keys += [f'{section}.{f.name}' for f in dataclasses.fields(cls)]
    return keys


def _parameters_table() -> list[str]:
    from sysid_ros.core.model import parameters
    from sysid_ros.io import units

    lines = [
        '| key | type | default | description |', '|---|---|---|---|',
        '| `parameters.<object>.<attribute>.min` | double | `-inf` (`0` where the attribute '
        'cannot be negative) | lower bound in physical units |',
        '| `parameters.<object>.<attribute>.max` | double | `inf` | upper bound in physical '
        'units |',
        "| `parameters.<object>.<attribute>.init` | double | the nominal model's | starting "
        'value, within the bounds |', '',
        f'`<object>` is a link or joint of the model, or `{parameters.PAYLOAD}` for '
        '`model.payload`; the flat name of a parameter is `<object>.<attribute>`, e.g. '
        '`link2.com.x`. Bayesian methods need finite bounds.', '',
        '| attribute | of | unit (revolute / prismatic joint) | cannot be negative |',
        '|---|---|---|---|']
    for attribute in parameters.ATTRIBUTES:
        of = 'link' if attribute in parameters.LINK_ATTRIBUTES else 'joint'
        if attribute in parameters.PAYLOAD_ATTRIBUTES:
            of += ', payload'
        unit = ' / '.join(dict.fromkeys(units.attribute_unit(attribute, prismatic)
                                        for prismatic in (False, True)))
        lines.append(f'| `{attribute}` | {of} | {unit} | '
                     f'{"yes" if attribute in parameters.NONNEGATIVE_ATTRIBUTES else ""} |')
    return lines + ['']


def configuration_markdown() -> str:
    """One table per configuration section."""
    lines = []
    for section, cls in config_sections():
        lines += [f'## `{section}`', '', _cell((cls.__doc__ or '').split('\n')[0]), '']
        if section == 'parameters':
            lines += _parameters_table()
            continue
        docs = _attribute_docs(cls)
        lines += ['| key | type | unit | default | allowed | description |',
                  '|---|---|---|---|---|---|']
        for f in dataclasses.fields(cls):
            meta = f.metadata
            text = meta.get('doc') or docs.get(f.name, '')
            lines.append(f'| `{section}.{f.name}` | {_PARAMETER_KINDS[meta["kind"]]} | '
                         f'{_cell(meta.get("unit", ""))} | {_default(f)} | {_allowed(meta)} | '
                         f'{_cell(text)} |')
        lines.append('')
    return '\n'.join(lines)


def packaged_configs_markdown() -> str:
    """The packaged configurations, each with the first line of its leading comment."""
    lines = ['| file | describes |', '|---|---|']
    for path in packaged_configs():
        first = path.read_text().partition('\n')[0]
        text = first.lstrip('#').strip() if first.startswith('#') else ''
        ending = '' if text.endswith('.') else ' …'
        lines.append(f'| `config/{path.name}` | {_cell(text)}{ending} |')
    return '\n'.join(lines) + '\n'


# ------------------------------------------------------------------------------------------
# ROS parameters declared for a configuration
# ------------------------------------------------------------------------------------------

def packaged_configs() -> list[pathlib.Path]:
    return sorted((REPO / 'config').glob('*.yaml'))


def generic_name(name: str) -> str:
    """A declared parameter name as the reference writes it: a parameter's bounds as
    `parameters.<object>.<attribute>.min`, an entry of a map key as `<key>.<entry>`."""
    section, _, rest = name.partition('.')
    if section == 'parameters':
        return 'parameters.<object>.<attribute>.' + name.rpartition('.')[2]
    maps = {f'{s}.{f.name}' for s, cls in config_sections() if s != 'parameters'
            for f in dataclasses.fields(cls) if f.metadata['kind'] == 'map'}
    for key in maps:
        if name.startswith(key + '.'):
            return key + '.<entry>'
    return name


def declared_config_parameters() -> dict[str, tuple[str, str]]:
    """{generic name: (ROS type, constraints)} of what `ros.params.config_parameters`
    declares for the packaged configurations."""
    from rclpy.parameter import Parameter

    from sysid_ros.io import config
    from sysid_ros.ros import params

    out = {}
    for path in packaged_configs():
        try:
            cfg = config.load_yaml(path)
        except config.ConfigError:          # a URDF outside the repository (shared data)
            continue
        for declaration in params.config_parameters(cfg):
            value = declaration.value
            kind = (value if isinstance(value, Parameter.Type)
                    else Parameter.Type.from_parameter_value(value))
            out.setdefault(generic_name(declaration.name), (
                kind.name.lower().replace('_', ' '),
                declaration.descriptor.additional_constraints))
    return dict(sorted(out.items()))


def ros_config_parameters_markdown() -> str:
    lines = ['| parameter | ROS type | constraints |', '|---|---|---|']
    for name, (kind, constraints) in declared_config_parameters().items():
        lines.append(f'| `{name}` | {kind} | {_cell(constraints)} |')
    return '\n'.join(lines) + '\n'


# ------------------------------------------------------------------------------------------
# ROS nodes
# ------------------------------------------------------------------------------------------

class Row(typing.NamedTuple):
    """One line of a node's table: a topic or service (name, type, description)."""

    name: str
    kind: str
    doc: str


class ParameterRow(typing.NamedTuple):
    """One of a node's own parameters: name, ROS type, default, description."""

    name: str
    kind: str
    default: str
    doc: str


@dataclasses.dataclass
class Interfaces:
    """What one node declares."""

    node_name: str = ''
    parameters: list = dataclasses.field(default_factory=list)
    endpoints: dict = dataclasses.field(default_factory=dict)    # kind -> [Row]


def _from_tables(module, found: Interfaces) -> None:
    """Read a node module's `NODE_NAME`, `PARAMETERS` and `ENDPOINTS` (`ros.interfaces`)."""
    from rclpy.parameter import Parameter

    from sysid_ros.ros import interfaces

    found.node_name = getattr(module, 'NODE_NAME', '')
    for p in getattr(module, 'PARAMETERS', ()):
        unset = isinstance(p.default, Parameter.Type)       # declared without a value
        kind = p.default if unset else Parameter.Type.from_parameter_value(p.default)
        minimum = '' if p.minimum is None else f' (>= {p.minimum:g})'
        found.parameters.append(ParameterRow(
            p.name, kind.name.lower().replace('_', ' '), 'unset' if unset else repr(p.default),
            p.description + minimum))
    for e in getattr(module, 'ENDPOINTS', ()):
        kind = '' if e.msg_type is None else interfaces.type_name(e.msg_type)
        found.endpoints.setdefault(e.kind, []).append(Row(e.name, kind, e.doc))


def executables() -> dict[str, str]:
    """{module: executable} of setup.py's console scripts."""
    return {module: name for name, module in _EXECUTABLE.findall(
        (REPO / 'setup.py').read_text())}


def node_modules() -> list[str]:
    """The modules of `sysid_ros/ros/` that are nodes: an executable, or a module that lists
    its `ENDPOINTS` or `PARAMETERS`."""
    listed = {p.stem for p in ROS_PACKAGE.glob('*.py')
              if re.search(r'^(ENDPOINTS|PARAMETERS)\b', p.read_text(), re.MULTILINE)}
    return sorted(listed | set(executables()))


def read_interfaces(module: str) -> Interfaces:
    """The declarations of `sysid_ros/ros/<module>.py`; an executable without its tables is
    reported as a build warning (which fails the strict build)."""
    import importlib

    found = Interfaces()
    loaded = importlib.import_module(f'sysid_ros.ros.{module}')
    if not (hasattr(loaded, 'ENDPOINTS') or hasattr(loaded, 'PARAMETERS')):
        logging.getLogger('mkdocs').warning(
            'sysid_ros/ros/%s.py: an executable without ENDPOINTS or PARAMETERS '
            '(sysid_ros.ros.interfaces); its interface cannot be documented', module)
    _from_tables(loaded, found)
    return found


def _table(title: str, header: str, rows: list[Row]) -> list[str]:
    if not rows:
        return []
    lines = [f'**{title}**', '', header, '|---|---|---|']
    lines += [f'| `{r.name}` | {_code(r.kind)} | {_cell(r.doc)} |' for r in rows]
    return lines + ['']


def ros_interfaces_markdown() -> str:
    from sysid_ros.ros import interfaces

    titles = {interfaces.PUBLISHER: ('Publishes', 'topic'),
              interfaces.SUBSCRIPTION: ('Subscribes', 'topic'),
              interfaces.SERVICE: ('Services', 'service'),
              interfaces.CLIENT: ('Service clients', 'service'),
              interfaces.ACTION_SERVER: ('Actions', 'action'),
              interfaces.ACTION_CLIENT: ('Action clients', 'action')}
    names = executables()
    lines = []
    for module in node_modules():
        found = read_interfaces(module)
        title = (f'`{names[module]}`' if module in names else f'`sysid_ros.ros.{module}`')
        lines += [f'### {title}', '']
        run = f'`ros2 run sysid_ros {names[module]}`; ' if module in names else ''
        node = f'node name `{found.node_name}`; ' if found.node_name else ''
        lines += [f'{run}{node}source `sysid_ros/ros/{module}.py`.', '']
        if found.parameters:
            lines += ['**Parameters**', '', '| name | type | default | description |',
                      '|---|---|---|---|']
            lines += [f'| `{p.name}` | {p.kind} | {_code(p.default)} | {_cell(p.doc)} |'
                      for p in found.parameters]
            lines.append('')
        for kind, rows in found.endpoints.items():
            title, what = titles.get(kind, (kind, 'name'))
            lines += _table(title, f'| {what} | type | description |', rows)
    return '\n'.join(lines)


# ------------------------------------------------------------------------------------------
# Command line and design pages
# ------------------------------------------------------------------------------------------

def cli_markdown() -> str:
    """`sysid --help` and every subcommand's, as the parser prints them."""
    from sysid_ros import cli

    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = ['```text', parser.format_help().rstrip(), '```', '']
    for name, sub in subparsers.choices.items():
        lines += [f'## `sysid {name}`', '', '```text', sub.format_help().rstrip(), '```', '']
    return '\n'.join(lines)


def design_pages_markdown(docs_dir: pathlib.Path) -> str:
    lines = []
    for path in sorted((docs_dir / 'design').glob('*.md')):
        if path.name == 'index.md':
            continue
        heading = next((line[2:].strip() for line in path.read_text().splitlines()
                        if line.startswith('# ')), path.stem)
        lines.append(f'- [{heading}]({path.name})')
    return '\n'.join(lines) + '\n'


# ------------------------------------------------------------------------------------------
# MkDocs events
# ------------------------------------------------------------------------------------------

def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace each `<!-- generated: NAME -->` line with the table NAME."""
    docs_dir = pathlib.Path(config['docs_dir'])
    makers = {'configuration': configuration_markdown,
              'packaged-configs': packaged_configs_markdown,
              'ros-config-parameters': ros_config_parameters_markdown,
              'ros-interfaces': ros_interfaces_markdown,
              'cli': cli_markdown,
              'design-pages': lambda: design_pages_markdown(docs_dir)}

    def generate(match: re.Match) -> str:
        name = match.group(1)
        if name not in makers:
            logging.getLogger('mkdocs').warning('%s: unknown generated table %r',
                                                page.file.src_uri, name)
            return match.group(0)
        return makers[name]()

    return _MARKER.sub(generate, markdown)


def api_pages() -> dict[str, str]:
    """{page path under reference/api/: markdown}: one page per package of `sysid_ros`, with
    every public module in it (modules that move or split are picked up at the next build)."""
    root = REPO / 'sysid_ros'
    pages = {}
    for package in sorted(p.parent for p in root.rglob('__init__.py')):
        dotted = '.'.join(package.relative_to(REPO).parts)
        modules = [f'{dotted}.{m.stem}' for m in sorted(package.glob('*.py'))
                   if not m.stem.startswith('_')]
        # The package itself: its docstring only (what it re-exports is documented where it
        # is defined).
        body = [f'# `{dotted}`', '', f'::: {dotted}\n    options:\n      members: false\n']
        body += [f'::: {m}\n    options:\n      show_submodules: false\n' for m in modules]
        pages[f'reference/api/{dotted}.md'] = '\n'.join(body)
    return pages


def on_files(files, config):
    """Add the generated API reference pages."""
    from mkdocs.structure.files import File

    for path, content in api_pages().items():
        files.append(File.generated(config, path, content=content))
    return files


class EscapeBrackets(griffe.Extension):
    """Griffe extension (mkdocs.yml, mkdocstrings' `extensions`): escapes the brackets of
    every docstring as griffe loads it (`escape_brackets`)."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escape_brackets(obj.docstring.value)
