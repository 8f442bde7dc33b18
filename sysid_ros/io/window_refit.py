"""Single-shooting windows refitted from a point estimate: parameters and start states
together by Levenberg-Marquardt, with the noise re-estimated at the joint fit.

The Bayesian methods that start from a point fit (`start_fit`) and the live session's
Laplace updates (`io.online`) take the refitted windows' start states, noise and Laplace
posterior from here.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.inference import methods
from sysid_ros.core.inference.base import GaussianPrior, KernelData
from sysid_ros.core.inference.kernels import lm
from sysid_ros.core.likelihoods import likelihood as lik
from sysid_ros.core.likelihoods import profiled_start
from sysid_ros.io import estimator_data
from sysid_ros.io.compile_cache import cached, params_digest
from sysid_ros.io.problem import Problem

__all__ = ['WindowRefit', 'refit_windows']

# Rounds of (joint fit, noise estimate), each fit weighting the residuals by the noise of
# the round before, and the most Levenberg-Marquardt steps of each fit.
REFIT_ROUNDS = 3
REFIT_STEPS = 20


class WindowRefit(NamedTuple):
    """`refit_windows`' result: `prepared` the Bayesian windows' data, `theta` (M,) their
    joint fit [physical units] and `covariance` (M, M) its Laplace covariance under their
    likelihood (`lm.posterior_covariance`, the starts profiled out) [physical units^2];
    theta and covariance None where nothing was refitted or the fit is not finite."""

    prepared: estimator_data.MethodData
    theta: np.ndarray | None
    covariance: np.ndarray | None


def refit_windows(problem: Problem, prepared: estimator_data.MethodData, theta,
                  prior: GaussianPrior | None = None) -> WindowRefit:
    """The shooting data of single-shooting windows refitted from a point estimate `theta`
    (M,) (unchanged for multiple shooting, whose later windows start at free states):
    Levenberg-Marquardt on these windows, parameters and start states together, from theta
    and the starts that fit it (at most REFIT_STEPS steps; REFIT_ROUNDS of them when the
    noise is estimated, each weighting the residuals by the previous refit round's noise
    estimate), then

      * each window's start state the fitted one instead of the noisy measurement, which
        the Bayesian likelihood would hold fixed (errors in variables narrow the intervals);
      * an estimated noise std (no `data.noise_std` configured) replaced by that of the
        residuals at the joint fit (`likelihood.residual_noise_std`), since third
        differences of fast motion hold signal (docs/design/io.md);
      * the joint fit and its Laplace covariance with that noise: the Gaussian approximation
        of the posterior the Bayesian methods sample, where they start (`start_fit`).

    `prior` (a `GaussianPrior` in physical units, e.g. the live session's sequential prior)
    joins the fit and its covariance: then they approximate prior x windows' likelihood.
    """
    setting = prepared.target.likelihood
    if setting.num_windows != 1:
        return WindowRefit(prepared, None, None)
    estimated = prepared.info.get('noise_std_source') == 'estimated'
    key = ('refit_windows', problem.model, problem.spec, setting, estimated,
           params_digest(problem.base_params))
    spec, base = problem.spec, problem.base_params

    def build():
        kernel = lm.build_kernel(methods.window_residual_fn(prepared.target), spec.lower,
                                 spec.upper)

        def refit_round(_, carry):
            t, data, prior = carry
            joint = lm.run(kernel, (t, data.x0), KernelData(data, prior), REFIT_STEPS)
            data = data._replace(x0=joint.starts)
            if estimated:    # non-finite residuals (a diverged window) keep the last estimate
                free = spec.num_params + data.x0.size
                noise = lik.residual_noise_std(setting, spec.to_params(joint.theta, base),
                                               data, free)
                data = data._replace(noise_std=jnp.where(
                    jnp.isfinite(noise) & (noise > 0.0), noise, data.noise_std))
            return joint.theta, data, prior

        def refit(t, data, prior):
            data = data._replace(x0=profiled_start.fit_window_starts(
                setting, spec.to_params(t, base), data))
            t, data, _ = jax.lax.fori_loop(0, REFIT_ROUNDS if estimated else 1, refit_round,
                                           (t, data, prior))
            # The kernel's own linearisation at the final noise (traced once, with its steps').
            covariance = lm.posterior_covariance(
                kernel.init(None, (t, data.x0), KernelData(data, prior)).lin)
            return data.x0, data.noise_std, t, covariance

        return jax.jit(refit)

    x0, noise, joint, covariance = cached(key, build)(jnp.asarray(theta), prepared.data, prior)
    data, info = prepared.data._replace(x0=x0), dict(prepared.info, window_starts='fitted')
    if estimated:
        data = data._replace(noise_std=noise)
        info.update(noise_std=[float(v) for v in noise], noise_std_source='residuals')
    joint, covariance = np.asarray(joint, float), np.asarray(covariance, float)
    if not (np.all(np.isfinite(joint)) and np.all(np.isfinite(covariance))):
        joint = covariance = None
    return WindowRefit(prepared._replace(data=data, info=info), joint, covariance)
