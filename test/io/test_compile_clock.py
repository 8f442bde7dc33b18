"""CompileClock: a program compiled once is loaded from the persistent cache the next time."""

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.io.compile_clock import CompileClock


def test_a_program_compiles_once_then_loads_from_the_persistent_cache(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    jax.config.update('jax_compilation_cache_dir', str(tmp_path))
    try:
        # A constant no other test uses: the program is new to this cache.
        shift = float(np.random.default_rng().uniform(1.0, 2.0))
        with CompileClock() as first:
            jax.jit(lambda x: jnp.sin(x) * shift)(jnp.ones(3)).block_until_ready()
        # The same program from a new function: traced again, its executable on disk.
        with CompileClock() as second:
            jax.jit(lambda x: jnp.sin(x) * shift)(jnp.ones(3)).block_until_ready()
    finally:
        jax.config.update('jax_compilation_cache_dir', before)
    assert first.summary()['programs_compiled'] >= 1
    assert second.summary()['programs_compiled'] == 0
    assert second.summary()['programs_loaded'] >= 1
    assert first.summary()['trace_s'] > 0.0
