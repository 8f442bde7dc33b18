"""What the dynamics benchmarks share: per-particle parameters, the rollout loss, timing.

No Pinocchio here, so `dynamics_accelerator.py` runs on machines without it.
"""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators

ROLLOUT_STEPS = 100
DT = 1e-3                                 # [s]
MIN_REPEATS = 3


def particles(params, num, rng):
    """`num` physically consistent perturbations of `params`, stacked on a leading axis."""
    nb = params.inertial.shape[0]
    # Scaling a body's whole inertial vector by a positive factor keeps it physical.
    scale = rng.uniform(0.8, 1.2, size=(num, nb, 1))
    offset = np.concatenate([rng.normal(0.0, 1e-3, (num, nb, 3)),
                             rng.normal(0.0, 1e-2, (num, nb, 3))], axis=-1)
    return dataclasses.replace(
        params,
        inertial=jnp.asarray(np.asarray(params.inertial) * scale),
        placement=jnp.asarray(np.asarray(params.placement) + offset),
        armature=jnp.asarray(rng.uniform(0.0, 0.1, (num, nb))),
        damping=jnp.asarray(rng.uniform(0.0, 0.5, (num, nb))),
        coulomb=jnp.zeros((num, nb)),
        stribeck=jnp.zeros((num, nb, 2)),
        offset=jnp.zeros((num, nb)),
        gain=jnp.ones((num, nb)),
        load_coulomb=jnp.zeros((num, nb)))


def rollout_loss(model):
    """Squared joint-position error of a ROLLOUT_STEPS semi-implicit Euler rollout (viscous
    actuator, DT) against a target trajectory: `loss(params, x0, controls, target)`."""
    nv = model.nv

    def loss(params, x0, controls, target):
        states = integrators.rollout(model, params, x0, controls, DT,
                                     integrator='semi_implicit_euler', actuator='viscous')
        return jnp.sum((states[1:, :nv] - target) ** 2)
    return loss


def compile_and_time(jitted, args, min_time_s):
    """(compile seconds, median seconds per call, outputs) of `jitted(*args)`, the calls
    repeated until `min_time_s` passed (at least MIN_REPEATS)."""
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    compile_s = time.perf_counter() - start
    out = jax.block_until_ready(compiled(*args))
    times = []
    while len(times) < MIN_REPEATS or sum(times) < min_time_s:
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return compile_s, float(np.median(times)), out


def table_lines(rows, groups, batch_width):
    """One line per row dict: its system and batch, then each group of (key, format)
    columns, ' | ' between groups; '-' where a row has no such key."""
    lines = []
    for row in rows:
        cells = [' '.join('-' if row.get(key) is None else format(row[key], spec)
                          for key, spec in group) for group in groups]
        lines.append(f'{row["system"]:<16}{row["batch"]:>{batch_width}} | '
                     + ' | '.join(cells))
    return lines
