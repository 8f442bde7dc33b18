"""ament_flake8 over the package, its tests, benchmarks and launch files (setup.cfg's [flake8])."""

import pathlib

from ament_flake8.main import main_with_errors

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKED = ('sysid_ros', 'test', 'bench', 'launch', 'docs', 'setup.py')


def test_flake8(monkeypatch):
    monkeypatch.chdir(ROOT)
    paths = [str(ROOT / p) for p in CHECKED if (ROOT / p).exists()]
    rc, errors = main_with_errors(argv=['--config', str(ROOT / 'setup.cfg'), *paths])
    assert rc == 0, f'{len(errors)} flake8 findings:\n' + '\n'.join(errors)
