"""Particles sharded over two host devices (`inference.sharding`) give the samplers' results
on one device."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from sampler_targets import (CEM, CEM_STEPS, GAUSSIAN, KEY, NUTS, nuts_state, NUTS_STEPS, run,
                             SGLD, SGLD_STEPS, start)


_TWO_DEVICES = """
import sys
import jax
import numpy as np
jax.config.update('jax_enable_x64', True)
sys.path.insert(0, sys.argv[2])
import sampler_targets as T
assert len(jax.devices()) == 2
sgld, _, _ = T.run(T.SGLD, T.SGLD.init(T.KEY, T.start(32), None), T.GAUSSIAN,
                   T.SGLD_STEPS)
assert len(sgld.particles.sharding.device_set) == 2
nuts, _, _ = T.run(T.NUTS, T.nuts_state(T.start(8)), T.GAUSSIAN, T.NUTS_STEPS)
cem, _, _ = T.run(T.CEM, T.CEM.init(T.KEY, T.start(128), None), T.GAUSSIAN, T.CEM_STEPS)
np.savez(sys.argv[1], sgld=sgld.particles, nuts=nuts.particles, cem=cem.particles)
"""


@pytest.mark.slow
def test_particles_sharded_over_two_devices_give_the_same_result(tmp_path):
    env = dict(os.environ, XLA_FLAGS=(os.environ.get('XLA_FLAGS', '')
                                      + ' --xla_force_host_platform_device_count=2'))
    out = tmp_path / 'two.npz'
    subprocess.run([sys.executable, '-c', _TWO_DEVICES, str(out),
                    str(pathlib.Path(__file__).parent)], check=True, env=env, timeout=600)
    two = np.load(out)
    one = {'sgld': run(SGLD, SGLD.init(KEY, start(32), None), GAUSSIAN, SGLD_STEPS)[0],
           'nuts': run(NUTS, nuts_state(start(8)), GAUSSIAN, NUTS_STEPS)[0],
           'cem': run(CEM, CEM.init(KEY, start(128), None), GAUSSIAN, CEM_STEPS)[0]}
    for name, state in one.items():
        np.testing.assert_allclose(two[name], state.particles, atol=1e-12, err_msg=name)
