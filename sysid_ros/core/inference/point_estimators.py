"""Point estimators of physical parameters: DiffNEA (Adam on virtual parameters), NEA and
consistent least squares.

These are the methods' own algorithms (`base.Kernel`s; `inference.methods` wraps them into
the estimator contract): a factory builds a NamedTuple of two pure functions,

    state = kernel.init(key, theta0)          # theta0 (P, M)
    state, info = kernel.step(state, data)

and the posterior is `state.theta`, particles (P, M) in physical units in the order of
`spec.names` (a point estimate is one particle; several particles are independent restarts).

  * `make_diffnea` (seed 001, Lutter et al. 2021, §3): gradient descent with an optax
    optimiser (Adam in the paper) on the unconstrained coordinates z of the `ParameterSpec`.
    Every z maps inside the bounds, and the six inertia entries of a link that is fully free
    go through DiffNEA's virtual inertia (square roots of the principal second moments and
    the principal axes' rpy), so those bodies are physically consistent by construction. The
    loss is any `loss_fn(params, data) -> ()`, e.g. `core.losses.make_loss_fn`.
  * `make_nea` (the "Newton-Euler algorithm" baseline of seed 001 §4.1.2; Atkeson, An and
    Hollerbach 1986): least squares on the joint-torque regressor. Inverse dynamics is linear
    in each body's inertial 10-vector, tau = Y(q, qd, qdd) pi (`rigid_body.regressor`), and the
    additive friction of the actuator model (viscous, Coulomb, armature) is linear in its
    coefficients, as is each joint's constant offset (a column of ones on that joint's rows).
    The regression is restricted to the spec: its columns are Y d pi/d theta (plus the
    friction, armature and offset columns), the torque of every parameter not in the spec sits
    on the right-hand side. Each `step` is one Gauss-Newton iteration of this least-squares
    problem, solved as a minimum-norm `lstsq` in bounds-scaled coordinates, so directions the
    data cannot see (the null space of the base parameters) keep their initial values. When
    theta -> pi is linear (masses with known COMs, inertia entries, friction: the classic
    case) the first step is the exact least-squares solution; for bilinear cases (mass and
    COM both free, where mc = m c) the following steps converge to it. With all ten
    attributes of a link free this is the classic solve for the 10-vector mapped to
    (m, c = mc / m, inertia about the COM).
    The raw solution may violate bounds or physical consistency, so it is projected
    (`project_consistent`): clip into the bounds, project fully free inertia blocks onto the
    consistent set through the virtual parameters (negative principal second moments set to
    zero), and if still inconsistent move back along the segment towards the (consistent)
    initial guess to the last consistent point (bisection; the consistent set is convex in
    theta). `NEAInfo` reports whether the raw solution was consistent.
  * `make_consistent_ls`: the same least-squares objective minimised over the spec's
    unconstrained (virtual) coordinates by Levenberg-Marquardt, so every iterate is within
    the bounds and consistent. The projection above only finds a consistent point, not the
    best-fitting one: when many base parameters are free (a full arm), the minimum-norm raw
    solution puts large values into directions the data cannot separate (e.g. -0.86 kg m^2
    on the KUKA's first link), and projecting each link on its own turns them into large
    inertias with a poor fit. Refining the projected solution (and the anchor) with
    `make_consistent_ls` fixes that (`io.pipeline.fit` does so when the raw one was
    inconsistent).

Everything here is pure JAX: jit `init`/`step` yourself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.model import parameters
from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'EstimatorState',
    'DiffNEAInfo',
    'NEAInfo',
    'RegressorData',
    'make_diffnea',
    'make_nea',
    'make_consistent_ls',
    'make_regressor_data',
    'project_consistent',
    'consistent_anchor',
    'make_regressor_loss',
]

# Actuator models whose friction is additive, u = tau_rigid + f(q, qd) + offset: usable by NEA.
ADDITIVE_ACTUATORS = frozenset({'ideal', 'viscous', 'coulomb_viscous', 'stribeck',
                                'nn_friction'})


class EstimatorState(NamedTuple):
    """State of a point estimator.

    Attributes:
      theta: (P, M) current particles in physical units (the posterior).
      z: (P, M) the optimiser's coordinates: DiffNEA's unconstrained z; NEA's raw
        (unprojected) Gauss-Newton iterate in physical units.
      aux: method state: DiffNEA's optax state (vmapped over particles); NEA's (P, M)
        projection anchor (the consistent initial guess).
      iteration: () int, steps taken.
    """

    theta: jax.Array
    z: jax.Array
    aux: Any
    iteration: jax.Array


class DiffNEAInfo(NamedTuple):
    """Diagnostics of one step (the loss and gradient are those at the state before it).

    Attributes:
      loss: (P,) loss of each particle [-].
      grad_norm: (P,) Euclidean norm of the loss gradient in the optimiser's coordinates.
      num_nonfinite: () number of particles whose loss or gradient was not finite (they were
        left unchanged).
    """

    loss: jax.Array
    grad_norm: jax.Array
    num_nonfinite: jax.Array


class NEAInfo(NamedTuple):
    """Diagnostics of one NEA (Gauss-Newton least-squares) step.

    Attributes:
      loss, grad_norm, num_nonfinite: as in `DiffNEAInfo`; the loss is the mean squared torque
        residual normalised per joint by the spread of the measured torques.
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


# ------------------------------------------------------------------------------------------
# Shared helpers
# ------------------------------------------------------------------------------------------

def _block_mask(spec: parameters.ParameterSpec) -> np.ndarray:
    """(M,) bool: entries that belong to a DiffNEA inertia block of the spec."""
    links = set(spec.diffnea_links)
    return np.asarray([b in links and a in parameters.INERTIA_ATTRIBUTES
                       for b, a in zip(spec.bodies, spec.attributes)], dtype=bool)


def _clip_and_project_blocks(spec, theta):
    """Clip into the bounds (except DiffNEA block entries) and project the blocks onto the
    consistent set through the virtual parameters."""
    block = _block_mask(spec)
    theta = jnp.where(block, theta, jnp.clip(theta, spec.lower.astype(theta.dtype),
                                             spec.upper.astype(theta.dtype)))
    if block.any():
        round_trip = spec.from_unconstrained(spec.to_unconstrained(theta))
        theta = jnp.where(block, round_trip, theta)
    return theta


def _within_bounds(spec, theta):
    """() bool: every entry within its bounds, DiffNEA block entries excepted."""
    inside = (theta >= spec.lower) & (theta <= spec.upper)
    return jnp.all(inside | _block_mask(spec), axis=-1)


def project_consistent(spec: parameters.ParameterSpec, base: Params, theta: jax.Array,
                       anchor: jax.Array, num_bisection: int = 50) -> jax.Array:
    """Map a parameter vector into the bounds and onto physically consistent values.

    1. Clip every entry into its bounds (entries of fully free inertia blocks excepted: their
       bounds only serve initialisation, see `ParameterSpec`).
    2. Project each fully free inertia block onto the consistent set: through DiffNEA's
       virtual parameters, negative principal second moments are set to zero
       (`inertia.virtual_from_inertia`); the inertia about the joint axis is kept where the
       other moments can absorb the change.
    3. If still inconsistent (e.g. a single free inertia entry outside the triangle
       inequalities of the fixed ones), return the last consistent point of the segment from
       `anchor` to the result of 2, found by bisection on the convex consistent set.

    Args:
      spec: the parameter spec.
      base: Params supplying the parameters not in the spec.
      theta: (M,) physical values.
      anchor: (M,) a consistent point within the bounds (e.g. the initial guess); if it is not
        consistent, neither may be the result.
      num_bisection: bisection steps (the distance to the boundary halves each step).

    Returns:
      (M,) projected values.
    """
    theta = _clip_and_project_blocks(spec, jnp.asarray(theta))
    anchor = jnp.asarray(anchor, theta.dtype)
    ok = spec.is_consistent(theta, base)

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        good = spec.is_consistent(anchor + mid * (theta - anchor), base)
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid)

    zero = jnp.zeros((), theta.dtype)
    lo, _ = jax.lax.fori_loop(0, num_bisection, bisect, (zero, zero + 1.0))
    return jnp.where(ok, theta, anchor + lo * (theta - anchor))


def consistent_anchor(spec: parameters.ParameterSpec, base: Params, theta: jax.Array
                      ) -> jax.Array:
    """A consistent point within the bounds to project towards (`project_consistent`).

    `theta` clipped into the bounds with its inertia blocks projected, if that is consistent;
    otherwise the nominal values `spec.from_params(base)` treated alike (e.g. when an initial
    guess moves one inertia entry of a thin rod outside the triangle inequalities).
    """
    theta = _clip_and_project_blocks(spec, jnp.asarray(theta))
    nominal = _clip_and_project_blocks(spec, spec.from_params(base).astype(theta.dtype))
    return jnp.where(spec.is_consistent(theta, base), theta, nominal)


# ------------------------------------------------------------------------------------------
# DiffNEA
# ------------------------------------------------------------------------------------------

def make_diffnea(base_params: Params, spec: parameters.ParameterSpec, loss_fn: Callable,
                 optimizer: optax.GradientTransformation,
                 grad_mode: str = 'reverse') -> Kernel:
    """DiffNEA: minimise `loss_fn` over the spec's unconstrained coordinates with `optimizer`.

    Args:
      base_params: Params supplying every value not in the spec.
      spec: the free parameters and their bounds.
      loss_fn: `loss_fn(params, data) -> ()` (e.g. `losses.make_loss_fn(...)`).
      optimizer: an optax optimiser, e.g. `optax.adam(1e-2)`; it runs independently per
        particle (vmapped), so global-norm transforms act per particle too.
      grad_mode: 'reverse' (`jax.value_and_grad`) or 'forward' (`jax.jacfwd`, M tangents
        pushed through the simulation at once): the same gradient; forward mode has no
        backward pass and compiles faster, which pays off for a few dozen parameters.

    Returns:
      Kernel with `init(key, theta0 (P, M)) -> EstimatorState` (P restarts, e.g. from
      `particles.initial_particles`) and `step(state, data) -> (state, DiffNEAInfo)`; `data`
      is passed to `loss_fn` unchanged.
    """
    if grad_mode not in ('reverse', 'forward'):
        raise ValueError(f'diffnea: grad_mode: expected reverse or forward, got {grad_mode!r}')

    def objective(z, data):
        theta = spec.from_unconstrained(z)
        return loss_fn(spec.to_params(theta, base_params), data)

    if grad_mode == 'reverse':
        value_and_grad = jax.value_and_grad(objective)
    else:
        def value_and_grad(z, data):
            grad, value = jax.jacfwd(lambda v: (objective(v, data),) * 2, has_aux=True)(z)
            return value, grad

    def init(key, theta0) -> EstimatorState:
        del key
        z = spec.to_unconstrained(jnp.atleast_2d(jnp.asarray(theta0)))
        return EstimatorState(theta=spec.from_unconstrained(z), z=z,
                              aux=jax.vmap(optimizer.init)(z),
                              iteration=jnp.zeros((), jnp.int32))

    def step(state: EstimatorState, data):
        loss, grad = jax.vmap(value_and_grad, in_axes=(0, None))(state.z, data)
        finite = jnp.isfinite(loss) & jnp.all(jnp.isfinite(grad), axis=-1)
        grad = jnp.where(finite[:, None], grad, 0.0)
        updates, opt_state = jax.vmap(optimizer.update)(grad, state.aux, state.z)
        z = jnp.where(finite[:, None], optax.apply_updates(state.z, updates), state.z)

        # A particle whose loss or gradient was not finite keeps its optimiser state too.
        def keep(new, old):
            mask = finite.reshape(finite.shape + (1,) * (jnp.ndim(new) - 1))
            return jnp.where(mask, new, old)

        opt_state = jax.tree_util.tree_map(keep, opt_state, state.aux)
        info = DiffNEAInfo(loss=loss, grad_norm=jnp.linalg.norm(grad, axis=-1),
                        num_nonfinite=jnp.sum(~finite))
        new_state = EstimatorState(theta=spec.from_unconstrained(z), z=z, aux=opt_state,
                                   iteration=state.iteration + 1)
        return new_state, info

    return Kernel(init=init, step=step)


# ------------------------------------------------------------------------------------------
# NEA
# ------------------------------------------------------------------------------------------

def _check_regression(spec, actuator, method: str) -> None:
    """Raise ValueError if torque regression cannot identify `spec` with `actuator`."""
    origins = [n for n, a in zip(spec.names, spec.attributes) if a.startswith('origin.')]
    if origins:
        raise ValueError(f'{method}: {origins[0]}: NEA needs known kinematics (joint origins); '
                         'use method diffnea to identify them')
    if not callable(actuator) and actuator not in ADDITIVE_ACTUATORS:
        raise ValueError(f'{method}: actuator {actuator!r} is not additive; expected one of '
                         f'{sorted(ADDITIVE_ACTUATORS)}')


def _params_residual(model: RobotModel, actuator) -> Callable:
    """`residual(params, data) -> (N nv,)`: measured minus predicted command torque, divided
    per joint by `data.torque_scale` [-], with u = Y pi + armature qdd + f(q, qd) + offset
    (`make_nea`)."""
    actuator_fn = actuators.get_actuator(actuator)

    def residual(params: Params, data: RegressorData):
        rigid = jnp.einsum('nij,j->ni', data.regressor, params.inertial.reshape(-1))

        def extra(q, qd, qdd):
            friction_and_offset = -actuator_fn(model, params, q, qd, jnp.zeros_like(q))
            return params.armature * qdd + friction_and_offset

        predicted = rigid + jax.vmap(extra)(data.q, data.qd, data.qdd)
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
      q, qd, qdd, tau: (N, nv) samples.
    """
    q, qd, qdd, tau = (jnp.asarray(a) for a in (q, qd, qdd, tau))
    regressor = jax.vmap(lambda a, b, c: rigid_body.regressor(model, params, a, b, c))(q, qd, qdd)
    spread = jnp.std(tau, axis=0)
    scale = jnp.maximum(spread, jnp.maximum(1e-3 * jnp.max(spread), 1e-9))
    return RegressorData(regressor=regressor, q=q, qd=qd, qdd=qdd, tau=tau, torque_scale=scale)


def make_regressor_loss(model: RobotModel, base_params: Params,
                        spec: parameters.ParameterSpec, actuator='viscous') -> Callable:
    """`loss(theta (M,), RegressorData) -> ()`: NEA's loss, the mean squared torque residual
    normalised per joint (`make_nea`)."""
    residual = _theta_residual(model, base_params, spec, actuator)
    return lambda theta, data: jnp.mean(jnp.square(residual(theta, data)))


def make_nea(model: RobotModel, base_params: Params, spec: parameters.ParameterSpec,
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
        stribeck.*, armature, offset. Joint origins are not allowed (NEA assumes known
        kinematics).
      actuator: actuator model with additive friction (`ADDITIVE_ACTUATORS`) or a callable.
      rcond: relative cut-off of small singular values in `lstsq` (minimum-norm solution).
      num_bisection: bisection steps of the consistency projection.

    Returns:
      Kernel with `init(key, theta0 (P, M))` and `step(state, RegressorData) ->
      (state, NEAInfo)`.

    Raises:
      ValueError: a joint origin in the spec, or a non-additive actuator model.
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

    def init(key, theta0) -> EstimatorState:
        del key
        theta = jnp.atleast_2d(jnp.asarray(theta0))
        anchor = jax.vmap(lambda t: consistent_anchor(spec, base_params, t))(theta)
        return EstimatorState(theta=anchor, z=theta, aux=anchor,
                              iteration=jnp.zeros((), jnp.int32))

    def step(state: EstimatorState, data: RegressorData):
        raw, loss, grad_norm, rank, step_norm, finite = jax.vmap(
            solve, in_axes=(0, 0, None))(state.z, state.aux, data)
        raw = jnp.where(finite[:, None], raw, state.z)
        raw_ok = jax.vmap(lambda t: spec.is_consistent(t, base_params)
                          & _within_bounds(spec, t))(raw)
        theta = jax.vmap(lambda t, a: project_consistent(spec, base_params, t, a,
                                                         num_bisection))(raw, state.aux)
        info = NEAInfo(loss=loss, grad_norm=grad_norm, num_nonfinite=jnp.sum(~finite),
                       rank=rank, raw_consistent=raw_ok, step_norm=step_norm)
        return EstimatorState(theta=theta, z=raw, aux=state.aux,
                              iteration=state.iteration + 1), info

    return Kernel(init=init, step=step)


# ------------------------------------------------------------------------------------------
# Physically consistent least squares
# ------------------------------------------------------------------------------------------

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

    Minimises NEA's loss, the mean squared normalised torque residual of `make_nea`, over the
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
      model, base_params, spec, actuator: as in `make_nea`.
      iterations: Levenberg-Marquardt iterations (accepted or rejected).
      z_limit: bound on |z| of bounded entries at the start.
      min_sqrt_moment: relative floor of the square roots of the second moments at the start.

    Returns:
      `refine(theta0 (P, M), data: RegressorData) -> (theta (P, M), loss (P,))`, jit-able:
      consistent, within-bounds parameters and their loss (NEA's definition).

    Raises:
      ValueError: as `make_nea`.
    """
    _check_regression(spec, actuator, 'consistent least squares')
    params_residual = _params_residual(model, actuator)
    sizes = [int(np.size(getattr(base_params, f))) for f in _LINEAR_FIELDS]
    has_lo = np.isfinite(np.asarray(spec.lower_bounds)) & ~_block_mask(spec)
    has_hi = np.isfinite(np.asarray(spec.upper_bounds)) & ~_block_mask(spec)
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
