"""CPU cores as JAX devices, so that the particle methods shard their particles over them.

XLA runs a small computation (one particle's simulation step) on one core; with the host
platform split into one device per core, CSVGD and SVGD place the particle axis across them
(`core.svgd.particle_mesh`: when the particle count is a multiple of the device count) and
use every core. The split must happen before JAX initialises its backends (the first array
or `jax.devices()` call); it only touches the CPU platform.
"""

from __future__ import annotations

import os

__all__ = ['FLAG', 'split_host_devices']

FLAG = '--xla_force_host_platform_device_count'


def split_host_devices(count: int | None = None) -> int:
    """Ask XLA for `count` CPU devices (default: the cores this process may run on) unless
    XLA_FLAGS already sets the count (the user's choice wins); returns the count asked for,
    or 0 when XLA_FLAGS had one."""
    flags = os.environ.get('XLA_FLAGS', '')
    if FLAG in flags:
        return 0
    count = len(os.sched_getaffinity(0)) if count is None else int(count)
    os.environ['XLA_FLAGS'] = f'{flags} {FLAG}={max(count, 1)}'.strip()
    return max(count, 1)
