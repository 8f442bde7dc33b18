"""The package's import graph, read with `ast`: no import circle between any two modules of
sysid_ros, and no `_private` name of one module imported or used from another."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'sysid_ros'


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in PACKAGE.rglob('*.py')}


def _edges(modules):
    """{module: {imported module}} and [(module, other module, private name)]."""
    edges = {name: set() for name in modules}
    private = []
    for name, tree in modules.items():
        aliases = {}                       # local name -> sysid_ros module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        edges[name].add(alias.name)
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f'{node.module}.{alias.name}'
                    if full in modules:             # `from package import module`
                        edges[name].add(full)
                        aliases[alias.asname or alias.name] = full
                    elif node.module in modules:
                        edges[name].add(node.module)
                        if alias.name.startswith('_') and node.module != name:
                            private.append((name, node.module, alias.name))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith('_')
                    and not node.attr.startswith('__')):
                private.append((name, aliases[node.value.id], node.attr))
    for name in edges:
        edges[name].discard(name)
        # A package's own submodules import it implicitly; only explicit edges count.
    return edges, private


def _circles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    edges, _ = _edges(_modules())
    assert _circles(edges) == []


def test_no_private_names_across_modules():
    _, private = _edges(_modules())
    assert private == []


def test_the_walk_sees_the_package():
    edges, _ = _edges(_modules())
    assert 'sysid_ros.core.inference.registry' in edges['sysid_ros.core.inference.methods'] \
        or 'sysid_ros.core.inference.methods' in edges['sysid_ros.core.inference.registry']
    assert _circles({'a': {'b'}, 'b': {'a'}, 'c': set()}) == [['a', 'b']]
