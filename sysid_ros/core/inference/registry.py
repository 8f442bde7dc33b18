"""The one table from `estimator.method` to an estimator factory (`inference.methods`).

Nothing else in the package switches on method names: the offline fit, the live node, the
benchmarks and the tests look a method up here and read what it needs from its `Method`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from sysid_ros.core.inference import methods
from sysid_ros.core.inference.base import Estimator

__all__ = ['DATA_KINDS', 'Method', 'METHODS', 'DEFAULT_POINT_METHOD', 'BAYESIAN_METHODS', 'POINT_METHODS',
           'lookup', 'make_estimator']

# What a method's step takes as data: the shooting likelihood's `TrajectoryData`, DiffNEA's
# `losses.Segments` or NEA's `point_estimators.RegressorData`.
DATA_KINDS = ('shooting', 'segments', 'regressor')


class Method(NamedTuple):
    """A registered method.

    Attributes:
      factory: `factory(methods.Target, methods.Options) -> Estimator`.
      data: one of DATA_KINDS.
      bayesian: its particles are a posterior sample (else point estimates / restarts, of
        which a fit keeps each restart's best iterate).
      jittable: its `step` may be jitted (Emcee's runs on the host).
      minibatch: its step may see a mini-batch of the data's pieces (`io.minibatch`):
        stochastic-gradient methods; not those with an accept/reject step (NUTS, emcee),
        a population's ranking (CEM) or a Gauss-Newton model (lm).
      particles: what a Bayesian method's particles are, for their intervals
        (`intervals.KINDS`): 'draws' (chains, walkers, a population) or 'quadrature'
        (SVGD's repelling points).
    """

    factory: Callable
    data: str
    bayesian: bool
    jittable: bool = True
    minibatch: bool = False
    particles: str = 'draws'


METHODS: dict[str, Method] = {
    'csvgd': Method(methods.make_csvgd, 'shooting', True, minibatch=True,
                    particles='quadrature'),
    'svgd': Method(methods.make_svgd, 'shooting', True, minibatch=True,
                   particles='quadrature'),
    'sgld': Method(methods.make_sgld, 'shooting', True, minibatch=True),
    'nuts': Method(methods.make_nuts, 'shooting', True),
    'emcee': Method(methods.make_emcee, 'shooting', True, jittable=False),
    'cem': Method(methods.make_cem, 'shooting', True),
    'diffnea': Method(methods.make_diffnea, 'segments', False),
    'nea': Method(methods.make_nea, 'regressor', False),
    'lm': Method(methods.make_lm, 'shooting', False),
}
DEFAULT_POINT_METHOD = 'lm'
BAYESIAN_METHODS = tuple(name for name, m in METHODS.items() if m.bayesian)
POINT_METHODS = tuple(name for name, m in METHODS.items() if not m.bayesian)


def lookup(method: str) -> Method:
    """The registered `Method` of a name.

    Raises:
      ValueError: an unknown name (the message lists the known ones).
    """
    try:
        return METHODS[method]
    except KeyError:
        raise ValueError(f'expected one of {" | ".join(METHODS)}, got {method!r}') from None


def make_estimator(method: str, target: methods.Target, options: methods.Options
                   ) -> Estimator:
    """The Estimator of `method` for `target` (see `lookup` for errors)."""
    return lookup(method).factory(target, options)
