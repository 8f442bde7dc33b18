"""Load-dependent friction identified from torques: the Coulomb torque that grows with what a
joint transmits (`Params.load_coulomb`), beside the load-free Coulomb and viscous terms."""

import numpy as np
import pytest

from sysid_ros.io import pipeline
from sysid_ros.io.config import ConfigError, from_dict

FRICTION = {'damping': {'min': 0.0, 'max': 1.0}, 'coulomb': {'min': 0.0, 'max': 1.0},
            'load_coulomb': {'min': 0.0, 'max': 0.5}}


def _problem(actuator='coulomb_viscous', friction=FRICTION):
    return pipeline.build_problem(from_dict({
        'model': {'builder': 'double_pendulum', 'actuator': actuator},
        'parameters': {'joint1': friction, 'joint2': friction},
        'data': {'rate': 100.0},
        'estimator': {'residual': 'equation_error'}}))


def test_the_equation_error_recovers_friction_that_grows_with_the_load():
    problem = _problem()
    truth = np.array([0.1, 0.2, 0.08, 0.05, 0.1, 0.04])      # per joint: d, c, k
    traj = pipeline.simulate(problem, problem.spec.to_params(truth, problem.base_params),
                             duration=10.0, noise=1e-4, seed=4, torque_scale=2.0)
    fitted = pipeline.fit(problem, [traj])
    free = {k: v for k, v in FRICTION.items() if k != 'load_coulomb'}
    without = pipeline.fit(_problem(friction=free), [traj])
    misses = np.abs(fitted.estimate - truth) / fitted.std
    print(f'estimate {np.round(fitted.estimate, 4)} std {np.round(fitted.std, 4)}; without '
          f'the load term {np.round(without.estimate, 4)}, warnings {without.warnings}')
    assert fitted.converged, fitted.warnings
    assert np.all(misses < 3.0), misses
    np.testing.assert_allclose(fitted.estimate[[2, 5]], truth[[2, 5]], rtol=0.1)
    # Without it the residuals keep the load's share, correlated from sample to sample.
    assert any('correlated' in w for w in without.warnings), without.warnings


def test_load_friction_needs_a_friction_model():
    with pytest.raises(ConfigError, match='joint1.load_coulomb: load_coulomb is not part of '
                                          "actuator 'viscous'"):
        _problem(actuator='viscous', friction={'load_coulomb': FRICTION['load_coulomb']})
