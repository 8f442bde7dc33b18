"""Pure-JAX core, grouped by concept; the names users reach for, importable flat:

    from sysid_ros.core import aba, make_parameter_spec, make_estimator, Target, Options

  * `model/`: static trees and parameter pytrees, spatial algebra, inertia, ParameterSpec,
    builders of canonical systems, Params edits.
  * `dynamics/`: kinematics, RNEA/ABA/CRBA/regressor, actuators, integrators (explicit and
    variational), observation models.
  * `likelihoods/`: shooting likelihoods, DiffNEA losses, trajectory metrics.
  * `inference/`: the estimator contract, the registry, every method (`methods`) and their
    kernels (`kernels/`, one module per algorithm).
  * `constrained/`: holonomic constraints, adjoint gradients, planar mechanisms, ball in cup.

No rclpy, no files, no global `jax.config` changes (entry points and tests enable float64).
"""

from sysid_ros.core.dynamics.integrators import rollout
from sysid_ros.core.dynamics.kinematics import forward_kinematics
from sysid_ros.core.dynamics.rigid_body import aba, crba, regressor, rnea
from sysid_ros.core.inference.base import (Estimator, GaussianPrior, Kernel, KernelData,
                                           StepInfo)
from sysid_ros.core.inference.methods import (make_cem, make_csvgd, make_diffnea, make_emcee,
                                              make_nea, make_nuts, make_sgld, make_svgd,
                                              Options, Target)
from sysid_ros.core.inference.particles import initial_particles, sobol_particles
from sysid_ros.core.inference.registry import make_estimator, METHODS
from sysid_ros.core.likelihoods.likelihood import (log_likelihood, make_shooting_likelihood,
                                                   make_trajectory_data, ShootingLikelihood,
                                                   TrajectoryData)
from sysid_ros.core.model.builders import BUILDERS
from sysid_ros.core.model.edits import add_point_mass, perturb_params
from sysid_ros.core.model.parameters import make_parameter_spec, ParameterSpec
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'RobotModel', 'Params', 'ParameterSpec', 'make_parameter_spec', 'BUILDERS',
    'perturb_params', 'add_point_mass',
    'forward_kinematics', 'rnea', 'aba', 'crba', 'regressor', 'rollout',
    'ShootingLikelihood', 'TrajectoryData', 'make_shooting_likelihood',
    'make_trajectory_data', 'log_likelihood',
    'Estimator', 'Kernel', 'KernelData', 'StepInfo', 'GaussianPrior', 'Target', 'Options',
    'METHODS', 'make_estimator', 'initial_particles', 'sobol_particles',
    'make_csvgd', 'make_svgd', 'make_sgld', 'make_nuts', 'make_emcee', 'make_cem',
    'make_diffnea', 'make_nea',
]
