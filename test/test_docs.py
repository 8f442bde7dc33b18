"""The documentation site builds strict (a warning, e.g. a broken link, fails it), its
generated references hold every configuration key and every declared ROS parameter, and the
files its pages name exist."""

import html
import importlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _load_reference():
    spec = importlib.util.spec_from_file_location('docs_reference',
                                                  REPO / 'docs' / 'hooks' / 'reference.py')
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module                 # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


reference = _load_reference()


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    """The site built strict into a temporary folder, and what the build printed."""
    out = tmp_path_factory.mktemp('site')
    # Material's banner about MkDocs 2.0 is not a warning of the build; it is left out.
    env = dict(os.environ, NO_MKDOCS_2_WARNING='1')
    build = subprocess.run(
        [sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir', str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    return out, build.stdout + build.stderr


def _text(site_dir: pathlib.Path, page: str) -> str:
    """A built page's text, tags stripped and entities decoded."""
    return html.unescape(re.sub(r'<[^>]+>', '', (site_dir / page / 'index.html').read_text()))


def test_site_builds_strict_without_warnings(site):
    _, log = site
    assert 'WARNING' not in log, log


def test_every_configuration_key_is_in_the_reference(site):
    text = _text(site[0], 'reference/configuration')
    missing = [key for key in reference.config_keys() if key not in text]
    assert not missing


def test_every_declared_ros_parameter_is_in_the_reference(site):
    from sysid_ros.io import config
    from sysid_ros.ros import params

    text = _text(site[0], 'reference/ros-interface')
    declared = set()
    for path in reference.packaged_configs():
        try:
            cfg = config.load_yaml(path)
        except config.ConfigError:          # a URDF outside the repository (shared data)
            continue
        declared |= {reference.generic_name(d.name) for d in params.config_parameters(cfg)}
    assert declared
    missing = sorted(name for name in declared if name not in text)
    # Each node's section opens with the line naming its source file.
    sections = {part.partition('.py')[0]: part
                for part in text.split('source sysid_ros/ros/')[1:]}
    for module in reference.node_modules():
        loaded = importlib.import_module(f'sysid_ros.ros.{module}')
        missing += [f'{module}: {p.name}' for p in getattr(loaded, 'PARAMETERS', ())
                    if p.name not in sections.get(module, '')]
    assert not missing


def test_design_index_links_every_design_page(site):
    text = (site[0] / 'design' / 'index.html').read_text()
    for page in (REPO / 'docs' / 'design').glob('*.md'):
        if page.name != 'index.md':
            assert f'href="{page.stem}/"' in text, page.name


def test_every_repository_path_named_in_the_pages_exists():
    named = re.compile(r'\b(?:sysid_ros|test|bench|config|launch)/[\w/.-]+\.(?:py|yaml)\b')
    pages = [REPO / 'README.md', *(REPO / 'docs').rglob('*.md')]
    missing = sorted({f'{page.relative_to(REPO)}: {path}' for page in pages
                      for path in named.findall(page.read_text())
                      if not (REPO / path).exists()})
    assert not missing
