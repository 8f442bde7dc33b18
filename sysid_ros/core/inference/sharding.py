"""Placing particle arrays on several JAX devices: a one-axis mesh over the particle axis.

With more than one device, `particle_mesh` builds the mesh and `shard_particles` places every
array with a leading particle axis on it; `jax.jit` then runs the vmapped per-particle work on
all devices and XLA gathers what a kernel needs. With one device every function is a no-op.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

__all__ = ['PARTICLE_AXIS', 'particle_mesh', 'shard_particles', 'replicate', 'resolve_mesh',
           'place_chains']

PARTICLE_AXIS = 'particles'


def particle_mesh(num_particles: int, devices=None) -> Mesh | None:
    """A one-axis mesh ('particles',) over `devices` (default: all), or None.

    None when there is a single device or when `num_particles` is not a multiple of the
    device count (the particles then stay on one device).
    """
    devices = jax.devices() if devices is None else list(devices)
    if len(devices) < 2 or num_particles % len(devices):
        return None
    return Mesh(np.asarray(devices), (PARTICLE_AXIS,))


def shard_particles(tree, mesh: Mesh | None, num_particles: int, constrain: bool = False):
    """Split every leaf of leading size `num_particles` (and ndim >= 1) along the mesh.

    Args:
      tree: pytree of arrays whose particle-indexed leaves have the particle axis first
        (particles, optimiser moments, multipliers). Pass other leaves through `replicate`.
      mesh: a one-axis mesh from `particle_mesh`, or None (no-op).
      num_particles: P.
      constrain: True inside `jax.jit` (adds sharding constraints), False outside it
        (moves the arrays with `jax.device_put`).
    """
    if mesh is None:
        return tree
    split = NamedSharding(mesh, PartitionSpec(PARTICLE_AXIS))
    whole = NamedSharding(mesh, PartitionSpec())
    put = jax.lax.with_sharding_constraint if constrain else jax.device_put

    def place(leaf):
        by_particle = jnp.ndim(leaf) >= 1 and leaf.shape[0] == num_particles
        return put(leaf, split if by_particle else whole)

    return jax.tree_util.tree_map(place, tree)


def replicate(tree, mesh: Mesh | None, constrain: bool = False):
    """Replicate every leaf over the mesh (no-op for `mesh=None`); see `shard_particles`."""
    if mesh is None:
        return tree
    whole = NamedSharding(mesh, PartitionSpec())
    put = jax.lax.with_sharding_constraint if constrain else jax.device_put
    return jax.tree_util.tree_map(lambda leaf: put(leaf, whole), tree)


def resolve_mesh(mesh, num_particles: int):
    """'auto' -> `particle_mesh(num_particles)`; None or a Mesh unchanged."""
    if isinstance(mesh, str):
        if mesh != 'auto':
            raise ValueError(f"mesh: expected 'auto', None or a jax.sharding.Mesh, got {mesh!r}")
        return particle_mesh(num_particles)
    return mesh


def place_chains(mesh, num_chains: int, positions: np.ndarray, key, *settings):
    """Shard the (C, D) chain positions over `mesh` ('auto', None or a Mesh) and replicate
    beside them the key, each setting (cast to the positions' dtype) and an int32 zero
    iteration counter.

    Returns (positions, key, *settings, counter).
    """
    x = jnp.asarray(positions)
    active_mesh = resolve_mesh(mesh, num_chains)
    x = shard_particles(x, active_mesh, num_chains)
    replicated = replicate(
        (key, *(jnp.asarray(value, x.dtype) for value in settings), jnp.zeros((), jnp.int32)),
        active_mesh)
    return (x, *replicated)
