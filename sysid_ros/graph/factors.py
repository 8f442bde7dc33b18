"""Multibody factors (Blanco-Claraco et al. 2021, section 6) as `gtsam.CustomFactor`s.

Residuals and their Jacobians come from JAX.

Every variable is a `gtsam` vector. A factor is a residual function `r(*variables, *constants)`
written in JAX; `jax.jacfwd` gives its Jacobians, and one jitted call returns the residual and
all Jacobians flattened into a single array (one device-to-host copy per linearisation).

Variable keys: `key(kind, step)` with kind 'q' (dependent positions, (n,) [m]), 'v' (velocities
[m/s]), 'a' (accelerations [m/s^2]), 'z', 'w', 'b' (independent angle, rate, acceleration,
(nz,) [rad, rad/s, rad/s^2]), 'u' (angle-bar torques (nz,) [N m]), 'p' (identified parameters).
"""

from __future__ import annotations

import functools

import gtsam
import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.constrained import mechanisms as mm


def key(kind: str, step: int) -> int:
    """GTSAM key of variable `kind` ('q', 'v', 'a', 'z', 'w', 'b', 'u', 'p') at time `step`."""
    return gtsam.symbol(kind, step)


# ----------------------------------------------------------------------------- residuals
# Each takes the variables first, then the constants; `mech` is bound by FactorLibrary.


def prior_residual(x, mean):
    """Eq 21: x - mean."""
    return x - mean


def equality_residual(x0, x1):
    """Soft equality between consecutive states (the paper's section 5.2): x1 - x0."""
    return x1 - x0


def euler_residual(x0, x1, dx0, dt):
    """Eq 22: x1 - x0 - dt dx0."""
    return x1 - x0 - dt * dx0


def trapezoidal_residual(x0, x1, dx0, dx1, dt):
    """Eq 23: x1 - x0 - dt/2 (dx0 + dx1)."""
    return x1 - x0 - 0.5 * dt * (dx0 + dx1)


def position_residual(mech, q):
    """Eq 24: Phi(q) (m,) [m^2]."""
    return mm.constraints(mech, q)


def velocity_residual(mech, q, v):
    """Eq 25: Phi_q q' (m,) [m^2/s]."""
    return jax.jvp(lambda x: mm.constraints(mech, x), (q,), (v,))[1]


def dynamics_dependent_residual(mech, q, v, a, params, u):
    """Eq 26: q'' - fd(q, q', u) (n,), forward dynamics with known torques u (nz,)."""
    return a - mm.forward_dynamics_dependent(mech, params, q, v, u)


def inverse_dynamics_dependent_residual(mech, q, v, a, u, params):
    """Eq 28: as eq 26 with the torques u a variable."""
    return a - mm.forward_dynamics_dependent(mech, params, q, v, u)


def dynamics_independent_residual(mech, q, v, z, w, b, params, u):
    """Eq 27: z'' - fi(q, q', z, z', u) (nz,)."""
    return b - mm.forward_dynamics_independent(mech, params, q, v, z, w, u)


def inverse_dynamics_independent_residual(mech, q, v, z, w, b, u, params):
    """Eq 29: as eq 27 with the torques u a variable."""
    return b - mm.forward_dynamics_independent(mech, params, q, v, z, w, u)


def link_position_residual(mech, q, z):
    """Eq 30: G(q, z) = [Phi(q); H(q, z)] (m + nz,)."""
    return mm.link_constraints(mech, q, z)


def link_velocity_residual(mech, q, v, z, w):
    """Eq 31: G' = G_q q' + G_z z' (m + nz,)."""
    return jax.jvp(lambda x, y: mm.link_constraints(mech, x, y), (q, z), (v, w))[1]


def link_acceleration_residual(mech, q, v, a, z, w, b):
    """Eq 32: G'' = G_q q'' + G_z z'' + (G_q q' + G_z z')' (m + nz,)."""
    def rate(x, y):
        return jax.jvp(lambda xx, yy: mm.link_constraints(mech, xx, yy), (x, y), (v, w))[1]
    first = jax.jvp(lambda x, y: mm.link_constraints(mech, x, y), (q, z), (a, b))[1]
    return first + jax.jvp(rate, (q, z), (v, w))[1]


def encoder_residual(mech, q, measured):
    """Angle-bar encoders: bar angle(q) - measured (nz,) [rad], wrapped to (-pi, pi]."""
    err = mm.bar_angles(mech, q) - measured
    return jnp.arctan2(jnp.sin(err), jnp.cos(err))


def gyro_residual(mech, bars, q, v, measured):
    """Gyroscopes on the bars `bars` (static tuple of bar indices): their angular velocities
    minus the readings measured (len(bars),) [rad/s]."""
    return mm.bar_angular_velocities(mech, q, v)[np.array(bars, dtype=int)] - measured


# ----------------------------------------------------------------------------- plumbing


@functools.lru_cache(maxsize=None)
def compile_residual(residual, num_vars: int):
    """Jitted (residual only, residual and Jacobians flattened) for `residual(*vars, *consts)`.

    `residual` must be hashable (a module function or a functools.partial of hashables) so that
    the compiled functions are shared by every factor and graph that uses it.
    """
    argnums = tuple(range(num_vars))

    def value_and_jacobians(*args):
        err = residual(*args)
        jacs = jax.jacfwd(residual, argnums=argnums)(*args)
        return jnp.concatenate([err] + [j.ravel() for j in jacs])

    return jax.jit(residual), jax.jit(value_and_jacobians)


@functools.lru_cache(maxsize=None)
def bind(residual, *static):
    """`functools.partial(residual, *static)`, one object per distinct (hashable) arguments, so
    that `compile_residual` compiles it once."""
    return functools.partial(residual, *static)


def custom_factor(residual, keys, dims, dim, sigmas, consts=(), affine=False
                  ) -> gtsam.CustomFactor:
    """A `gtsam.CustomFactor` on vector variables `keys` (of sizes `dims`) for `residual`.

    Args:
      residual: hashable JAX function `(*variables, *consts) -> (d,)`.
      keys: GTSAM keys of the variables, in the residual's argument order.
      dims: size of each variable.
      dim: size of the residual.
      sigmas: scalar or (d,) standard deviations of the residual, or its (d, d) covariance
        (Gaussian noise model).
      consts: arrays or pytrees passed after the variables (known data, parameters).
      affine: the residual is affine in the variables (priors, integrators): its JAX Jacobians
        and offset are evaluated once, and each linearisation is then a NumPy product.
    """
    value_fn, jac_fn = compile_residual(residual, len(keys))
    keys = [int(k) for k in keys]
    sigmas = np.atleast_1d(np.asarray(sigmas, dtype=float))
    d = int(dim)
    if sigmas.ndim == 2:
        noise = gtsam.noiseModel.Gaussian.Covariance(sigmas)
    elif sigmas.size == 1:
        noise = gtsam.noiseModel.Isotropic.Sigma(d, float(sigmas[0]))
    else:
        noise = gtsam.noiseModel.Diagonal.Sigmas(sigmas)
    splits = np.cumsum([d] + [d * n for n in dims])[:-1]

    def value_and_jacobians(xs):
        flat = np.split(np.asarray(jac_fn(*xs, *consts)), splits)
        return flat[0], [block.reshape(d, n) for block, n in zip(flat[1:], dims)]

    if affine:
        offset, blocks = value_and_jacobians([np.zeros(n) for n in dims])

        def error(_, values, jacobians):
            xs = [values.atVector(k) for k in keys]
            if jacobians is not None:
                for i, block in enumerate(blocks):
                    jacobians[i] = block
            return offset + sum(block @ x for block, x in zip(blocks, xs))
    else:
        # LM evaluates the error again at the point it has just linearised at: reuse it.
        last = {'xs': None, 'err': None}

        def error(_, values, jacobians):
            xs = [values.atVector(k) for k in keys]
            if jacobians is None:
                if last['xs'] is not None and all(map(np.array_equal, xs, last['xs'])):
                    return last['err']
                return np.asarray(value_fn(*xs, *consts))
            err, blocks = value_and_jacobians(xs)
            last.update(xs=xs, err=err)
            for i, block in enumerate(blocks):
                jacobians[i] = block
            return err

    return gtsam.CustomFactor(noise, keys, error)


def stacked_residual(parts, *args):
    """Residuals of several factors on shared variables, concatenated.

    Args:
      parts: static tuple of (residual, variable indices, number of constants), one per factor.
      args: the shared variables, then each part's constants in order.
    """
    num_vars = 1 + max(i for _, indices, _ in parts for i in indices)
    variables, consts = args[:num_vars], args[num_vars:]
    out, start = [], 0
    for residual, indices, num_consts in parts:
        out.append(residual(*(variables[i] for i in indices), *consts[start:start + num_consts]))
        start += num_consts
    return jnp.concatenate(out)


def stacked_factor(keys, dims, parts, sigmas) -> gtsam.CustomFactor:
    """One `gtsam.CustomFactor` for several factors on the variables `keys` (sizes `dims`): one
    jitted call returns all their residuals and Jacobians, instead of one call per factor.

    Args:
      keys: GTSAM keys of the variables the factor connects.
      dims: size of each variable in `keys`, in the same order.
      parts: sequence of (residual, variable indices into keys, constants, residual size).
      sigmas: (sum of sizes,) standard deviations, the parts' in order.
    """
    spec = tuple((residual, tuple(indices), len(consts)) for residual, indices, consts, _ in parts)
    consts = tuple(c for _, _, part_consts, _ in parts for c in part_consts)
    dim = sum(size for *_, size in parts)
    return custom_factor(bind(stacked_residual, spec), keys, dims, dim, sigmas, consts)


class FactorLibrary:
    """The factors of one mechanism; each method returns a `gtsam.CustomFactor`.

    Sigmas are the standard deviations of each residual in its own units.
    """

    def __init__(self, mech: mm.Mechanism):
        self.mech = mech
        self.n = mech.num_coords
        self.m = mech.num_constraints
        self.nz = mech.num_independent

    def _bound(self, residual):
        return bind(residual, self.mech)

    def prior(self, k, mean, sigma):
        mean = np.asarray(mean, dtype=float)
        return custom_factor(prior_residual, [k], [mean.size], mean.size, sigma, (mean,),
                             affine=True)

    def equality(self, k0, k1, dim, sigma):
        return custom_factor(equality_residual, [k0, k1], [dim, dim], dim, sigma, affine=True)

    def euler(self, x0, x1, dx0, dim, dt, sigma):
        return custom_factor(euler_residual, [x0, x1, dx0], [dim] * 3, dim, sigma, (float(dt),),
                             affine=True)

    def trapezoidal(self, x0, x1, dx0, dx1, dim, dt, sigma):
        return custom_factor(trapezoidal_residual, [x0, x1, dx0, dx1], [dim] * 4, dim, sigma,
                             (float(dt),), affine=True)

    def position(self, q, sigma):
        return custom_factor(self._bound(position_residual), [q], [self.n], self.m, sigma)

    def velocity(self, q, v, sigma):
        return custom_factor(self._bound(velocity_residual), [q, v], [self.n] * 2, self.m,
                             sigma)

    def dynamics_dependent(self, q, v, a, params, u, sigma):
        return custom_factor(self._bound(dynamics_dependent_residual), [q, v, a], [self.n] * 3,
                             self.n, sigma, (params, np.asarray(u, dtype=float)))

    def inverse_dynamics_dependent(self, q, v, a, u, params, sigma):
        return custom_factor(self._bound(inverse_dynamics_dependent_residual), [q, v, a, u],
                             [self.n] * 3 + [self.nz], self.n, sigma, (params,))

    def dynamics_independent(self, q, v, z, w, b, params, u, sigma):
        return custom_factor(self._bound(dynamics_independent_residual), [q, v, z, w, b],
                             [self.n] * 2 + [self.nz] * 3, self.nz, sigma,
                             (params, np.asarray(u, dtype=float)))

    def inverse_dynamics_independent(self, q, v, z, w, b, u, params, sigma):
        return custom_factor(self._bound(inverse_dynamics_independent_residual),
                             [q, v, z, w, b, u], [self.n] * 2 + [self.nz] * 4, self.nz, sigma,
                             (params,))

    def link_position(self, q, z, sigma):
        return custom_factor(self._bound(link_position_residual), [q, z], [self.n, self.nz],
                             self.m + self.nz, sigma)

    def link_velocity(self, q, v, z, w, sigma):
        return custom_factor(self._bound(link_velocity_residual), [q, v, z, w],
                             [self.n] * 2 + [self.nz] * 2, self.m + self.nz, sigma)

    def link_acceleration(self, q, v, a, z, w, b, sigma):
        return custom_factor(self._bound(link_acceleration_residual), [q, v, a, z, w, b],
                             [self.n] * 3 + [self.nz] * 3, self.m + self.nz, sigma)

    def encoder(self, q, measured, sigma):
        return custom_factor(self._bound(encoder_residual), [q], [self.n], self.nz, sigma,
                             (np.atleast_1d(np.asarray(measured, dtype=float)),))

    def gyro(self, q, v, bars, measured, sigma):
        """Gyroscopes on the bars `bars` (an index or a sequence of indices)."""
        bars = tuple(int(b) for b in np.atleast_1d(bars))
        return custom_factor(bind(gyro_residual, self.mech, bars), [q, v], [self.n] * 2,
                             len(bars), sigma, (np.atleast_1d(np.asarray(measured, dtype=float)),))
