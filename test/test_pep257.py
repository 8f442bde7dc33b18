"""ament_pep257 (pydocstyle) over the package: Google-style docstrings (STYLE.md)."""

import pathlib

from ament_pep257.main import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The summary-line rules that setup.cfg's [flake8] also leaves off; the D10x rules (missing
# docstrings) as ament's own convention leaves them off.
IGNORED = ('D100', 'D101', 'D102', 'D103', 'D104', 'D105', 'D106', 'D107',
           'D205', 'D209', 'D400', 'D401', 'D403', 'D415')


def test_pep257(monkeypatch):
    monkeypatch.chdir(ROOT)
    rc = main(argv=['--convention', 'google', '--add-ignore', *IGNORED, '--',
                    str(ROOT / 'sysid_ros'), str(ROOT / 'launch')])
    assert rc == 0, 'ament_pep257 found docstring problems (listed above)'
