"""The posterior log density of a shooting-likelihood problem over CSVGD's flat particle.

A particle is x = [z, s_hat] (D = M + K (W - 1) S,): z the spec's unconstrained coordinates
of theta (`unconstrained`), s_hat the normalised shooting states s = state_mean +
state_scale * s_hat of every window start after the first (seed §1.3). For multiple shooting
the defect constraints become a Gaussian likelihood term (seed §2.3: N(s^s | s,
sigma_def^2)), so that samplers without a constraint solver can sample them; CSVGD handles
them as constraints instead (`kernels.csvgd`).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from sysid_ros.core.inference.checks import check_positions, check_positive
from sysid_ros.core.inference.unconstrained import log_abs_det_jacobian
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.model import parameters
from sysid_ros.core.model.types import Params

__all__ = ['split_particles', 'make_shooting_log_prob', 'shooting_positions']


def split_particles(spec: parameters.ParameterSpec, likelihood: lik.ShootingLikelihood,
                    particles: jax.Array, data: lik.TrajectoryData):
    """Flat particles (P, D) -> (theta (P, M), shooting states (P, K, W - 1, S) physical)."""
    num = particles.shape[0]
    m = spec.num_params
    theta = spec.from_unconstrained(particles[:, :m])
    shape = likelihood.shooting_shape(data)
    shooting = data.state_mean + data.state_scale * particles[:, m:].reshape((num,) + shape)
    return theta, shooting


def make_shooting_log_prob(likelihood: lik.ShootingLikelihood,
                           spec: parameters.ParameterSpec, *,
                           base_params: Params | None = None,
                           params_fn: Callable | None = None,
                           log_prior_fn: Callable | None = None, defect_std: float = 0.1,
                           jacobian: bool = True) -> Callable:
    """The posterior log density of a shooting-likelihood problem for the baselines.

    Over CSVGD's flat particle x = [z, s_hat] (D = M + K (W - 1) S; module doc):

      log p(x | data) = log-likelihood(theta, shooting states)   (`likelihood.log_likelihood`)
                        + log prior(theta) + log |det d theta / d z|
                        - 1/2 |defects / defect_std|^2,

    the last term being the seed's defect likelihood N(s^s | s, sigma_def^2) (§2.3) on the
    normalised defects, which makes the multiple-shooting constraints a soft penalty that
    MCMC can sample (single shooting, W = 1: x = z and no defect term).

    Args:
      likelihood: simulator, windows, observation model, sum/product form.
      spec: the free parameters and their bounds.
      base_params, params_fn: exactly one: theta -> Params is `spec.to_params(theta,
        base_params)` or `params_fn(theta)` (for tied parameters), as in
        `kernels.csvgd.build_kernel`.
      log_prior_fn: `log_prior_fn(theta) -> ()` (default: uniform within the bounds).
      defect_std: sigma_def > 0 of the normalised defects (the seed tunes sigma_def^2 to
        about 1e-2).
      jacobian: include log |det d theta / d z| (the posterior in physical space).

    Returns:
      `log_prob_fn(x, data) -> ()` with `data` a `likelihood.TrajectoryData`; start it at
      `shooting_positions(...)` and decode samples with `split_particles`.

    Raises:
      ValueError: neither or both of base_params / params_fn, defect_std <= 0.
    """
    if (base_params is None) == (params_fn is None):
        raise ValueError('shooting log prob: give exactly one of base_params and params_fn')
    check_positive('shooting log prob', 'defect_std', defect_std)
    if params_fn is None:
        def params_fn(theta):
            return spec.to_params(theta, base_params)
    m = spec.num_params

    def log_prob_fn(x, data: lik.TrajectoryData):
        z = x[:m]
        theta = spec.from_unconstrained(z)
        shooting = data.state_mean + data.state_scale * x[m:].reshape(
            likelihood.shooting_shape(data))
        terms = lik.log_likelihood(likelihood, params_fn(theta), shooting, data)
        value = terms.log_lik - 0.5 * jnp.sum(jnp.square(terms.defects / defect_std))
        if jacobian:
            value = value + log_abs_det_jacobian(spec, z)
        if log_prior_fn is not None:
            value = value + log_prior_fn(theta)
        return value

    return log_prob_fn


def shooting_positions(likelihood: lik.ShootingLikelihood, spec: parameters.ParameterSpec,
                       theta, data: lik.TrajectoryData) -> jax.Array:
    """(P, D) starting positions [z, s_hat] for `make_shooting_log_prob`.

    theta (P, M) physical values (e.g. `particles.sobol_particles`) map to z; the shooting states
    start on the measured data (`likelihood.initial_shooting_states`), as in CSVGD's `init`.

    Raises:
      ValueError: theta not (P, M) or not finite, or data that does not fit the likelihood.
    """
    theta = check_positions('shooting positions', theta, None, 'P')
    if theta.shape[1] != spec.num_params:
        raise ValueError(f'shooting positions: theta: expected (P, {spec.num_params}) for '
                         f'parameters {", ".join(spec.names)}, got {theta.shape}')
    likelihood.check_data(data)
    z = spec.to_unconstrained(jnp.asarray(theta))
    s_hat = ((lik.initial_shooting_states(likelihood, data) - data.state_mean)
             / data.state_scale).reshape(1, -1)
    s_hat = jnp.broadcast_to(s_hat, (theta.shape[0], s_hat.shape[1])).astype(z.dtype)
    return jnp.concatenate([z, s_hat], axis=1)
