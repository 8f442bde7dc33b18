"""3-vector and 3x3-block algebra with the component axes first and any batch axes last.

A 3-vector is an array `(3, *batch)` and a 3x3 matrix `(3, 3, *batch)` (row, column, batch).
Every product is written out as broadcast multiplies and adds over the component axes, so XLA
sees element-wise work over the batch (no small `dot`s, which XLA:CPU runs slowly one matrix
at a time) and a batch put last by the caller is the contiguous, vectorised axis. Spatial
quantities are pairs of 3-vectors (linear, angular) and spatial inertias three 3x3 blocks, as
in Featherstone's RBDA §2.
"""

import jax
import jax.numpy as jnp
import numpy as np


def cross(a, b):
    """a x b for 3-vectors (3, *batch)."""
    return jnp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                      a[0] * b[1] - a[1] * b[0]])


def matvec(m, v):
    """M v for M (3, 3, *batch), v (3, *batch)."""
    return m[:, 0] * v[0] + m[:, 1] * v[1] + m[:, 2] * v[2]


def rmatvec(m, v):
    """M^T v for M (3, 3, *batch), v (3, *batch)."""
    return m[0] * v[0] + m[1] * v[1] + m[2] * v[2]


def matmul(a, b):
    """A B for 3x3 blocks (3, 3, *batch)."""
    return a[:, 0, None] * b[None, 0] + a[:, 1, None] * b[None, 1] + a[:, 2, None] * b[None, 2]


def transpose(m):
    """M^T of a 3x3 block (3, 3, *batch)."""
    return jnp.swapaxes(m, 0, 1)


def outer(a, b):
    """a b^T (3, 3, *batch) of 3-vectors."""
    return a[:, None] * b[None]


def skew(p):
    """[p] (3, 3, *batch) with [p] v = p x v, for p (3, *batch)."""
    zero = jnp.zeros_like(p[0])
    return jnp.stack([jnp.stack([zero, -p[2], p[1]]), jnp.stack([p[2], zero, -p[0]]),
                      jnp.stack([-p[1], p[0], zero])])


def const_matmul(c, x):
    """C X for a constant NumPy C (3, 3) and X (3, *rest): only C's non-zero entries cost work,
    so a signed permutation (an axis-aligned change of frame) only reorders rows."""
    c = np.asarray(c, dtype=float)
    if np.array_equal(c, np.eye(3)):
        return x
    rows = []
    for r in range(3):
        terms = [x[k] if c[r, k] == 1.0 else -x[k] if c[r, k] == -1.0 else c[r, k] * x[k]
                 for k in range(3) if c[r, k] != 0.0]
        rows.append(sum(terms[1:], terms[0]))
    return jnp.stack(rows)


def rpy_matrix(rpy):
    """URDF roll-pitch-yaw (3, *batch) [rad] -> R = Rz(yaw) Ry(pitch) Rx(roll) (3, 3, *batch)."""
    cr, sr = jnp.cos(rpy[0]), jnp.sin(rpy[0])
    cp, sp = jnp.cos(rpy[1]), jnp.sin(rpy[1])
    cy, sy = jnp.cos(rpy[2]), jnp.sin(rpy[2])
    return jnp.stack([jnp.stack([cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr]),
                      jnp.stack([sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr]),
                      jnp.stack([-sp, cp * sr, cp * cr])])


@jax.custom_jvp
def materialize(tree):
    """Ask XLA to compute `tree` once and keep it (an optimisation barrier).

    XLA fuses cheap element-wise producers into every consumer; across a chain of 3x3 products
    that recomputes each entry many times over. A barrier at the end of each stage keeps the
    kernels small."""
    return jax.lax.optimization_barrier(tree)


@materialize.defjvp
def _materialize_jvp(primals, tangents):
    # The tangents pass through unchanged: JAX cannot transpose a barrier whose inputs mix
    # linear and constant values inside a checkpointed scan (jax 0.12, "no attribute accum"
    # in `_opt_barrier_fancy_transpose`).
    (tree,), (tangent,) = primals, tangents
    return materialize(tree), tangent
