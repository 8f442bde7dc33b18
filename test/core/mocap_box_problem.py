"""Seed 000 experiment 3 (§2.5, phase II): the Panda shaking a box with two unknown weights.

The problem (model, truth, data) and its CSVGD run live in `bench/experiment_mocap_box.py`,
which the benchmark script `bench/inference.py` imports too; this module makes them
importable from the tests as `mocap_box_problem`, beside `csvgd_problems`.
"""

import importlib.util
import pathlib
import sys

_PATH = pathlib.Path(__file__).resolve().parents[2] / 'bench' / 'experiment_mocap_box.py'
_SPEC = importlib.util.spec_from_file_location('experiment_mocap_box', _PATH)
_MODULE = sys.modules.get('experiment_mocap_box')
if _MODULE is None:
    _MODULE = importlib.util.module_from_spec(_SPEC)
    sys.modules['experiment_mocap_box'] = _MODULE
    _SPEC.loader.exec_module(_MODULE)

globals().update({name: getattr(_MODULE, name) for name in dir(_MODULE)
                  if not name.startswith('__')})
