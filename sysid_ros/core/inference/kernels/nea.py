"""NEA (the "Newton-Euler algorithm" baseline of seed 001 §4.1.2; Atkeson, An and Hollerbach
1986): least squares on the joint-torque regressor, and its consistent refinement.

Inverse dynamics is linear in each body's inertial 10-vector, tau = Y(q, qd, qdd) pi
(`rigid_body.regressor`), and the additive friction of the actuator model (viscous, Coulomb,
armature) is linear in its coefficients, as is each joint's constant offset. The regression is
restricted to the spec: its columns are Y d pi/d theta (plus the friction, armature and offset
columns), the torque of every parameter not in the spec sits on the right-hand side. Each
`step` is one Gauss-Newton iteration of this least-squares problem, solved as a minimum-norm
`lstsq` in bounds-scaled coordinates, so directions the data cannot see keep their initial
values; when theta -> pi is linear the first step is the exact least-squares solution. The raw
solution is projected onto the bounds and the physically consistent set
(`consistency.project_consistent`); `NEAInfo` reports whether it was consistent already.

`make_consistent_ls` minimises the same objective over the spec's unconstrained (virtual)
coordinates by Levenberg-Marquardt, so every iterate is within the bounds and consistent: the
projection only finds a consistent point, not the best-fitting one, and with many base
parameters free the minimum-norm raw solution puts large values into directions the data
cannot separate.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.inference.consistency import (block_mask, consistent_anchor,
                                                  project_consistent, within_bounds)
from sysid_ros.core.model import parameters
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'ADDITIVE_ACTUATORS',
    'NEAState',
    'NEAInfo',
    'RegressorData',
    'build_kernel',
    'make_consistent_ls',
    'make_regressor_data',
    'make_regressor_loss',
]

# Actuator models whose friction is additive, u = tau_rigid + f(q, qd) + offset: usable by NEA.
ADDITIVE_ACTUATORS = frozenset({'ideal', 'viscous', 'coulomb_viscous', 'stribeck',
                                'nn_friction'})


class NEAState(NamedTuple):
    """State of NEA.

    Attributes:
      theta: (P, M) current particles in physical units, projected (the estimate).
      z: (P, M) the raw (unprojected) Gauss-Newton iterate in physical units.
      anchor: (P, M) the consistent initial guess that the projection moves towards.
      iteration: () int, steps taken.
    """

    theta: jax.Array
    z: jax.Array
    anchor: jax.Array
    iteration: jax.Array


class NEAInfo(NamedTuple):
    """Diagnostics of one NEA (Gauss-Newton least-squares) step.

    Attributes:
      loss, grad_norm, num_nonfinite: as in `diffnea.DiffNEAInfo`; the loss is the mean squared
        torque residual normalised per joint by the spread of the measured torques.
      rank: (P,) numerical rank of the (scaled) regression matrix.
      raw_consistent: (P,) whether the raw least-squares solution was within bounds and
        physically consistent (before projection).
      step_norm: (P,) size of the Gauss-Newton step in bounds-scaled coordinates.
    """

    loss: jax.Array
    grad_norm: jax.Array
    num_nonfinite: jax.Array
    rank: jax.Array
    raw_consistent: jax.Array
    step_norm: jax.Array


class RegressorData(NamedTuple):
    """Stacked inverse-dynamics samples for NEA (build with `make_regressor_data`).

    Attributes:
      regressor: (N, nv, 10 nb) joint-torque regressor Y of each sample.
      q, qd, qdd: (N, nv) joint positions, velocities, accelerations.
      tau: (N, nv) measured commanded torques [N m, N].
      torque_scale: (nv,) normalising spread of each joint's torque [N m, N].
    """

    regressor: jax.Array
    q: jax.Array
    qd: jax.Array
    qdd: jax.Array
    tau: jax.Array
    torque_scale: jax.Array


def _check_regression(spec, actuator, method: str) -> None:
    """Raise ValueError if torque regression cannot identify `spec` with `actuator`."""
    origins = [n for n, a in zip(spec.names, spec.attributes) if a.startswith('origin.')]
    if origins:
        raise ValueError(f'{method}: {origins[0]}: NEA needs known kinematics (joint origins); '
                         'use method diffnea to identify them')
    gains = [n for n, a in zip(spec.names, spec.attributes) if a == 'gain']
    if gains:
        raise ValueError(f'{method}: {gains[0]}: a joint gain scales every other term of the '
                         'regression (not linear); use method diffnea or lm to identify it')
    loads = [n for n, a in zip(spec.names, spec.attributes) if a == 'load_coulomb']
    if loads:
        raise ValueError(f'{method}: {loads[0]}: load-dependent friction scales with the rigid '
                         'torque (not linear); use method diffnea or lm to identify it')
    if not callable(actuator) and actuator not in ADDITIVE_ACTUATORS:
        raise ValueError(f'{method}: actuator {actuator!r} is not additive; expected one of '
                         f'{sorted(ADDITIVE_ACTUATORS)}')


def _params_residual(model: RobotModel, actuator) -> Callable:
    """`residual(params, data) -> (N nv,)`: measured minus predicted command torque, divided
    per joint by `data.torque_scale` [-], with u = Y pi + armature qdd + f(q, qd) + offset
    (`build_kernel`)."""
    actuator_fn = actuators.get_actuator(actuator)

    def residual(params: Params, data: RegressorData):
        rigid = jnp.einsum('nij,j->ni', data.regressor, params.inertial.reshape(-1))

        def extra(q, qd, qdd):
            friction_and_offset = -actuator_fn(model, params, q, qd, jnp.zeros_like(q))
            return params.armature * qdd + friction_and_offset

        predicted = (rigid + jax.vmap(extra)(data.q, data.qd, data.qdd)) / params.gain
        return ((data.tau - predicted) / data.torque_scale).reshape(-1)

    return residual


def _theta_residual(model, base_params, spec, actuator) -> Callable:
    """`residual(theta, data) -> (N nv,)`, `_params_residual` of the spec's (M,) theta."""
    residual = _params_residual(model, actuator)
    return lambda theta, data: residual(spec.to_params(theta, base_params), data)


def make_regressor_data(model: RobotModel, params: Params, q, qd, qdd, tau) -> RegressorData:
    """Stack the joint-torque regressor over samples (jit-able; vmaps `rigid_body.regressor`).

    The regressor depends on the kinematics only (joint placements of `params`).

    Args:
      model: static tree.
      params: Params whose placements are used.
      q: (N, nv) joint positions.
      qd: (N, nv) joint velocities.
      qdd: (N, nv) joint accelerations.
      tau: (N, nv) measured commanded torques.
    """
    q, qd, qdd, tau = (jnp.asarray(a) for a in (q, qd, qdd, tau))
    regressor = jax.vmap(lambda a, b, c: rigid_body.regressor(model, params, a, b, c))(q, qd, qdd)
    spread = jnp.std(tau, axis=0)
    scale = jnp.maximum(spread, jnp.maximum(1e-3 * jnp.max(spread), 1e-9))
    return RegressorData(regressor=regressor, q=q, qd=qd, qdd=qdd, tau=tau, torque_scale=scale)


def make_regressor_loss(model: RobotModel, base_params: Params,
                        spec: parameters.ParameterSpec, actuator='viscous') -> Callable:
    """`loss(theta (M,), RegressorData) -> ()`: NEA's loss, the mean squared torque residual
    normalised per joint (`build_kernel`)."""
    residual = _theta_residual(model, base_params, spec, actuator)
    return lambda theta, data: jnp.mean(jnp.square(residual(theta, data)))


def build_kernel(model: RobotModel, base_params: Params, spec: parameters.ParameterSpec,
                 actuator='viscous', rcond: float = 1e-10, num_bisection: int = 50) -> Kernel:
    """NEA: Gauss-Newton least squares on the joint-torque regressor (see the module doc).

    The predicted command torque of a sample is

      u = Y(q, qd, qdd) pi(theta) + armature qdd + f(q, qd) + offset,
      f + offset = -actuator(q, qd, u=0),

    with `pi(theta)` the bodies' inertial 10-vectors (`spec.to_params(theta, base).inertial`),
    f the additive friction of the actuator model and offset the joints' constant torques.

    Args:
      model: static tree.
      base_params: Params supplying every value not in the spec (and the kinematics).
      spec: the free parameters: link inertials (mass, com, inertia), damping, coulomb,
        stribeck.*, armature, offset. Joint origins (NEA assumes known kinematics) and
        gains (they scale the other terms) are not allowed.
      actuator: actuator model with additive friction (`ADDITIVE_ACTUATORS`) or a callable.
      rcond: relative cut-off of small singular values in `lstsq` (minimum-norm solution).
      num_bisection: bisection steps of the consistency projection.

    Returns:
      Kernel with `init(key, theta0 (P, M), data) -> NEAState` (`key` and `data` unused) and
      `step(state, RegressorData) -> (NEAState, NEAInfo)`.

    Raises:
      ValueError: a joint origin or gain in the spec, or a non-additive actuator model.
    """
    _check_regression(spec, actuator, 'nea')
    residual = _theta_residual(model, base_params, spec, actuator)
    lower, upper = np.asarray(spec.lower_bounds), np.asarray(spec.upper_bounds)
    width = np.where(np.isfinite(lower) & np.isfinite(upper), upper - lower, np.nan)

    def column_scale(anchor):
        return jnp.where(jnp.isfinite(width), width, jnp.maximum(jnp.abs(anchor), 1.0))

    def solve(theta, anchor, data):
        r = residual(theta, data)
        jac = jax.jacfwd(residual)(theta, data)                  # (N nv, M) = -d u / d theta
        scale = column_scale(anchor)
        a = -jac * scale
        dz, _, rank, _ = jnp.linalg.lstsq(a, r, rcond=rcond)
        n = r.shape[0]
        finite = jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(a)) & jnp.all(
            jnp.isfinite(dz))
        return (theta + scale * dz, jnp.mean(jnp.square(r)),
                jnp.linalg.norm(a.T @ r) * 2.0 / n, rank, jnp.linalg.norm(dz), finite)

    def init(key, theta0, data) -> NEAState:
        del key, data
        theta = jnp.atleast_2d(jnp.asarray(theta0))
        anchor = jax.vmap(lambda t: consistent_anchor(spec, base_params, t))(theta)
        return NEAState(theta=anchor, z=theta, anchor=anchor,
                        iteration=jnp.zeros((), jnp.int32))

    def step(state: NEAState, data: RegressorData):
        raw, loss, grad_norm, rank, step_norm, finite = jax.vmap(
            solve, in_axes=(0, 0, None))(state.z, state.anchor, data)
        raw = jnp.where(finite[:, None], raw, state.z)
        raw_ok = jax.vmap(lambda t: spec.is_consistent(t, base_params)
                          & within_bounds(spec, t))(raw)
        theta = jax.vmap(lambda t, a: project_consistent(spec, base_params, t, a,
                                                         num_bisection))(raw, state.anchor)
        info = NEAInfo(loss=loss, grad_norm=grad_norm, num_nonfinite=jnp.sum(~finite),
                       rank=rank, raw_consistent=raw_ok, step_norm=step_norm)
        return NEAState(theta=theta, z=raw, anchor=state.anchor,
                        iteration=state.iteration + 1), info

    return Kernel(init=init, step=step)


# Fields of Params in which the torque of an additive actuator model is (typically) linear.
_LINEAR_FIELDS = ('inertial', 'damping', 'coulomb', 'stribeck', 'armature', 'offset')


def _sqrt_second_moment_slots(spec: parameters.ParameterSpec) -> np.ndarray:
    """(B, 3) z slots of the square roots of the principal second moments of each DiffNEA
    block (the first three of the block's six slots in the order of `spec.names`)."""
    where = {(b, a): k for k, (b, a) in enumerate(zip(spec.bodies, spec.attributes))}
    slots = [sorted(where[(b, a)] for a in parameters.INERTIA_ATTRIBUTES)[:3]
             for b in spec.diffnea_links]
    return np.asarray(slots, dtype=np.int32).reshape(-1, 3)


def make_consistent_ls(model: RobotModel, base_params: Params,
                       spec: parameters.ParameterSpec, actuator='viscous',
                       iterations: int = 100, z_limit: float = 8.0,
                       min_sqrt_moment: float = 1e-2) -> Callable:
    """Physically consistent least squares on the joint-torque regressor (NEA's objective).

    Over 100 lines because its Levenberg-Marquardt loop and start are closures over the
    factory's settings, and the choices of its Gauss-Newton model are documented here.

    Minimises NEA's loss, the mean squared normalised torque residual of `build_kernel`, over the
    spec's unconstrained coordinates z (`spec.from_unconstrained`): every z is within the
    bounds and, for links whose six inertia entries are free, physically consistent through
    DiffNEA's virtual inertia. The solver is Levenberg-Marquardt: exact loss and gradient; the
    Gauss-Newton matrix J^T J is built from the Gram matrix of the residual's Jacobian with
    respect to the Params fields of `_LINEAR_FIELDS` (computed once, at the first start),
    chained with d fields / dz; it is exact for actuators linear in those fields (ideal,
    viscous, coulomb_viscous) and an approximation, corrected by the exact gradient and the
    accept test, otherwise. The damping is a multiple of the identity, scaled by the mean
    curvature (Levenberg: Marquardt's per-coordinate scaling takes huge steps along nearly flat
    virtual coordinates); steps that do not lower the loss are rejected (damping x 4,
    accepted: / 3).

    Use it after NEA when the raw least-squares solution is inconsistent: starting from the
    projected NEA solution and from the consistent anchor, it finds the consistent parameters
    that fit the torques, where the projection alone only finds a consistent point.

    Starting points are moved slightly inside: bounded entries to |z| <= `z_limit` (a
    relative distance of about 3e-4 from the bound for the default 8, where the sigmoid and
    softplus maps still have a usable slope), and each block's square roots of principal
    second moments to at least `min_sqrt_moment` times the block's largest one (a principal
    second moment of exactly zero is a saddle point of z -> loss).

    Args:
      model, base_params, spec, actuator: as in `build_kernel`.
      iterations: Levenberg-Marquardt iterations (accepted or rejected).
      z_limit: bound on |z| of bounded entries at the start.
      min_sqrt_moment: relative floor of the square roots of the second moments at the start.

    Returns:
      `refine(theta0 (P, M), data: RegressorData) -> (theta (P, M), loss (P,))`, jit-able:
      consistent, within-bounds parameters and their loss (NEA's definition).

    Raises:
      ValueError: as `build_kernel`.
    """
    _check_regression(spec, actuator, 'consistent least squares')
    params_residual = _params_residual(model, actuator)
    sizes = [int(np.size(getattr(base_params, f))) for f in _LINEAR_FIELDS]
    has_lo = np.isfinite(np.asarray(spec.lower_bounds)) & ~block_mask(spec)
    has_hi = np.isfinite(np.asarray(spec.upper_bounds)) & ~block_mask(spec)
    sqrt_slots = _sqrt_second_moment_slots(spec)

    def fields(theta):
        params = spec.to_params(theta, base_params)
        return jnp.concatenate([getattr(params, f).reshape(-1) for f in _LINEAR_FIELDS])

    def params_from_fields(flat):
        parts = jnp.split(flat, np.cumsum(sizes)[:-1])
        return dataclasses.replace(base_params, **{
            f: part.reshape(np.shape(getattr(base_params, f))).astype(flat.dtype)
            for f, part in zip(_LINEAR_FIELDS, parts)})

    def loss_of_z(z, data):
        theta = spec.from_unconstrained(z)
        return jnp.mean(jnp.square(params_residual(spec.to_params(theta, base_params), data)))

    loss_and_grad = jax.value_and_grad(loss_of_z)

    def start(theta):
        z = spec.to_unconstrained(theta)
        z = jnp.where(has_lo, jnp.maximum(z, -z_limit), z)
        z = jnp.where(has_hi, jnp.minimum(z, z_limit), z)
        if sqrt_slots.size:
            roots = z[sqrt_slots]
            floor = min_sqrt_moment * jnp.max(jnp.abs(roots), axis=-1, keepdims=True) + 1e-6
            z = z.at[sqrt_slots].set(jnp.maximum(jnp.abs(roots), floor))
        return z

    def one(theta0, gram, data):
        n = data.tau.size

        def model_at(z):
            loss, grad = loss_and_grad(z, data)
            jac = jax.jacfwd(lambda v: fields(spec.from_unconstrained(v)))(z)   # (K, M)
            return loss, grad, 2.0 / n * jac.T @ gram @ jac

        def iterate(_, carry):
            z, loss, grad, hess, damping = carry
            shift = damping * jnp.maximum(jnp.mean(jnp.diag(hess)), jnp.finfo(z.dtype).tiny)
            dz = -jnp.linalg.solve(hess + shift * jnp.eye(z.shape[-1], dtype=z.dtype), grad)
            candidate = model_at(z + dz)
            better = jnp.isfinite(candidate[0]) & (candidate[0] < loss)
            new = (z + dz,) + candidate
            z, loss, grad, hess = (jnp.where(better, a, b)
                                   for a, b in zip(new, (z, loss, grad, hess)))
            return z, loss, grad, hess, jnp.where(better, damping / 3.0, damping * 4.0)

        z = start(theta0)
        carry = (z,) + model_at(z) + (jnp.asarray(1e-3, z.dtype),)
        z, loss = jax.lax.fori_loop(0, iterations, iterate, carry)[:2]
        return spec.from_unconstrained(z), loss

    def refine(theta0, data: RegressorData):
        theta0 = jnp.asarray(theta0)
        jac = jax.jacfwd(lambda f: params_residual(params_from_fields(f), data))(
            fields(theta0[0]))                                           # (N nv, K)
        gram = jac.T @ jac
        return jax.vmap(one, in_axes=(0, None, None))(theta0, gram, data)

    return refine
