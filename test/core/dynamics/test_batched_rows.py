"""Batched evaluation past 16,384 rows equals row-by-row evaluation.

jax/jaxlib 0.10.2 miscompiled on CPU a vmapped matrix-vector product followed by a reduction
once a batch passed 16,384 float64 rows (jax-ml/jax#39103): under `jit`, the rows from index
16,384 on came back wrong, silently (eager 268435456, jit 266342400 for the issue's example).
Particles x time steps pass that size in ordinary fits, so the batched dynamics are checked
here at such a size against an evaluation that has no batch axis.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.dynamics import rigid_body, variational
from sysid_ros.core.model import builders

# Past 16,384 and not a multiple of a SIMD width; on 0.10.2 every row from 16,384 on was wrong.
ROWS = 20_001

# Compiled at XLA's default backend optimisation level (3, `DebugOptions`), what users run:
# the test session's conftest lowers it for speed, and a miscompile may depend on it.
PRODUCTION = {'xla_backend_optimization_level': 3}


def _production_jit(function, *args):
    """`jax.jit(function)(*args)`, compiled with the PRODUCTION options."""
    return jax.jit(function).lower(*args).compile(compiler_options=PRODUCTION)(*args)


# Tilted joint axes: rotations and inertias with every 3x3 entry non-zero.
MODEL, PARAMS = builders.chain(3, lengths=[0.3, 0.4, 0.2], masses=[1.0, 2.0, 0.5],
                               axis=(0.0, 0.6, 0.8))


def test_vmapped_matvec_then_sum_matches_numpy():
    """The pattern of jax-ml/jax#39103 itself: jit(vmap(row -> |A row|^2))."""
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(3, 3))
    rows = rng.normal(size=(ROWS, 3))
    batched = _production_jit(jax.vmap(lambda row: jnp.sum((matrix @ row) ** 2)), rows)
    np.testing.assert_allclose(batched, np.sum((rows @ matrix.T) ** 2, axis=1), rtol=1e-13)


def _kinetic_energy(model, params, q, qd, _):
    return variational.kinetic_energy(model, params, q, qd)


@pytest.mark.parametrize('function', [rigid_body.aba, rigid_body.rnea, _kinetic_energy],
                         ids=['aba', 'rnea', 'kinetic_energy'])
def test_batched_dynamics_match_row_by_row(function):
    """jit(vmap(f)) over ROWS states against jit(lax.map(f)), which evaluates one row at a time.

    The two differ only in the order of floating-point operations: a few ulps of each row's
    largest entry (ABA's accelerations reach 1e3 at random states, with small entries beside).
    """
    one_row = functools.partial(function, MODEL, PARAMS)
    rng = np.random.default_rng(1)
    q, qd, third = (rng.normal(size=(ROWS, MODEL.nv)) for _ in range(3))
    batched = np.asarray(_production_jit(jax.vmap(one_row), q, qd, third)).reshape(ROWS, -1)
    row_by_row = np.asarray(_production_jit(
        lambda *states: jax.lax.map(lambda state: one_row(*state), states), q, qd, third))
    row_by_row = row_by_row.reshape(ROWS, -1)
    row_scale = np.abs(row_by_row).max(axis=1)
    assert np.all(row_scale > 0)
    relative = np.abs(batched - row_by_row).max(axis=1) / row_scale
    assert relative.max() < 1e-13, (
        f'{np.count_nonzero(relative >= 1e-13)} of {ROWS} rows differ, first at '
        f'{np.argmax(relative >= 1e-13)}, worst {relative.max():.3g}')
