"""The one table from `estimator.method` to an estimator factory (`inference.methods`).

What a caller needs to know of a method (its data kind, whether it is Bayesian, jittable or
takes mini-batches, what its particles are, where its intervals come from, how many
particles it needs) is a field of its `Method` here, not a test of its name: the offline fit,
the live node and the benchmarks build estimators with `make_estimator` and read the rest
from `lookup`. The factor-graph method of planar mechanisms (`graph/`) is no `Estimator`
and is not in this table (`io.config_sections.GRAPH_METHODS`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from sysid_ros.core.inference import methods
from sysid_ros.core.inference.base import Estimator

__all__ = ['DATA_KINDS', 'Method', 'METHODS', 'DEFAULT_POINT_METHOD', 'BAYESIAN_METHODS',
           'POINT_METHODS', 'lookup', 'make_estimator']

# What a method's step takes as data: the shooting likelihood's `TrajectoryData`, DiffNEA's
# `losses.Segments` or NEA's `kernels.nea.RegressorData`.
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
      reads: the `methods.Options` fields its factory reads (`options_read`).
      intervals: what a fit's intervals are read from: 'particles' (the posterior's
        particles) or 'laplace' (the Laplace approximation at a Gauss-Newton estimate).
      particles_per_dim: least particles per dimension D of the method's positions
        (parameters and shooting states): emcee's red-blue moves need 2 D walkers.
    """

    factory: Callable
    data: str
    bayesian: bool
    jittable: bool = True
    minibatch: bool = False
    particles: str = 'draws'
    reads: tuple[str, ...] = ()
    intervals: str = 'particles'
    particles_per_dim: int = 0

    def options_read(self, options: methods.Options) -> methods.Options:
        """`options` with the fields the factory does not read set to None: two fits whose
        options differ only there share one compiled estimator (`io.compile_cache`, e.g. lm
        for a Bayesian method's start and for its own fit), and a factory that reads an
        undeclared field fails rather than compiling a stale value."""
        return options._replace(**{f: None for f in options._fields if f not in self.reads})


METHODS: dict[str, Method] = {
    'csvgd': Method(methods.make_csvgd, 'shooting', True, minibatch=True,
                    particles='quadrature', reads=('learning_rate', 'iterations', 'whiten')),
    'svgd': Method(methods.make_svgd, 'shooting', True, minibatch=True,
                   particles='quadrature', reads=('learning_rate', 'iterations')),
    'sgld': Method(methods.make_sgld, 'shooting', True, minibatch=True,
                   reads=('learning_rate', 'num_particles')),
    'nuts': Method(methods.make_nuts, 'shooting', True, reads=('num_particles', 'iterations')),
    'emcee': Method(methods.make_emcee, 'shooting', True, jittable=False,
                    reads=('num_particles',), particles_per_dim=2),
    'cem': Method(methods.make_cem, 'shooting', True, reads=('num_particles',)),
    'diffnea': Method(methods.make_diffnea, 'segments', False,
                      reads=('learning_rate', 'iterations')),
    'nea': Method(methods.make_nea, 'regressor', False),
    'lm': Method(methods.make_lm, 'shooting', False, intervals='laplace'),
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
    entry = lookup(method)
    return entry.factory(target, entry.options_read(options))
