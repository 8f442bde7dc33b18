"""Compiled estimators and other jitted functions, cached per problem structure.

A key holds what fixes the compiled program: the method, the target's model, spec,
likelihood, loss and actuator, the options the method reads (`registry.Method.options_read`)
and a digest of the nominal parameters. At most `CACHE_SIZE` programs are kept (least
recently used dropped), so the live node's windows and repeated fits compile once.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Callable

import jax
import numpy as np

from sysid_ros.core.inference import methods, registry
from sysid_ros.core.inference.base import Estimator
from sysid_ros.core.model.types import Params
from sysid_ros.io.config import config_error
from sysid_ros.io.problem import Problem

__all__ = [
    'CACHE_SIZE',
    'params_digest',
    'cached',
    'method_options',
    'compiled_estimator',
    'method_error',
]

CACHE_SIZE = 16
_CACHE: collections.OrderedDict = collections.OrderedDict()


def params_digest(params: Params) -> str:
    """A hex digest of every leaf of `params` (cache keys of compiled functions)."""
    digest = hashlib.sha1()
    for leaf in jax.tree_util.tree_leaves(params):
        digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return digest.hexdigest()


def cached(key, build: Callable):
    """`build()` once per hashable `key` (most recently used kept, CACHE_SIZE in all)."""
    if key in _CACHE:
        _CACHE.move_to_end(key)
    else:
        _CACHE[key] = build()
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return _CACHE[key]


def method_options(problem: Problem, iterations: int) -> methods.Options:
    """The method options of the problem's `estimator` section for `iterations` steps."""
    cfg = problem.config.estimator
    return methods.Options(num_particles=cfg.particles, learning_rate=cfg.learning_rate,
                           iterations=iterations)


def compiled_estimator(problem: Problem, method: str, target: methods.Target,
                       options: methods.Options) -> Estimator:
    """The registry's Estimator of `method`, its step and posterior jitted (unless the
    method runs on the host), cached per problem structure and the options it reads
    (`registry.Method.options_read`).

    Raises:
      ConfigError: a method that cannot run this problem (naming `estimator.method` or
        `estimator.particles`).
    """
    entry = registry.lookup(method)
    options = entry.options_read(options)
    key = (method, target.model, target.spec, target.likelihood, target.loss_fn,
           target.actuator, options, params_digest(problem.base_params))

    def build():
        try:
            est = entry.factory(target, options)
        except ValueError as exc:
            raise method_error(problem, exc) from exc
        if not entry.jittable:
            return est
        return est._replace(step=jax.jit(est.step), posterior=jax.jit(est.posterior),
                            laplace=est.laplace and jax.jit(est.laplace))

    return cached(key, build)


def method_error(problem: Problem, exc: ValueError):
    """The ConfigError of a method's ValueError: naming `estimator.particles` where the
    message starts 'particles: ', else `estimator.method`."""
    message = str(exc)
    if message.startswith('particles: '):
        return config_error(problem.config, 'estimator.particles',
                            message[len('particles: '):])
    return config_error(problem.config, 'estimator.method', message)
