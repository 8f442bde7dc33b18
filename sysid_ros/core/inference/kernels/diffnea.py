"""DiffNEA (seed 001, Lutter et al. 2021, §3): gradient descent with an optax optimiser (Adam
in the paper) on the unconstrained coordinates z of a `ParameterSpec`.

Every z maps inside the bounds, and the six inertia entries of a link that is fully free go
through DiffNEA's virtual inertia (square roots of the principal second moments and the
principal axes' rpy), so those bodies are physically consistent by construction. The loss is
any `loss_fn(params, data) -> ()`, e.g. `likelihoods.losses.make_loss_fn`. The particles
theta (P, M) are independent restarts in physical units, in the order of `spec.names`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from sysid_ros.core.inference.base import Kernel
from sysid_ros.core.model import parameters
from sysid_ros.core.model.types import Params

__all__ = ['DiffNEAState', 'DiffNEAInfo', 'build_kernel']


class DiffNEAState(NamedTuple):
    """State of DiffNEA.

    Attributes:
      theta: (P, M) current particles in physical units (the estimate).
      z: (P, M) the optimiser's unconstrained coordinates of theta.
      opt_state: the optax state, vmapped over the particles.
      iteration: () int, steps taken.
    """

    theta: jax.Array
    z: jax.Array
    opt_state: Any
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


def build_kernel(base_params: Params, spec: parameters.ParameterSpec, loss_fn: Callable,
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
      Kernel with `init(key, theta0 (P, M), data) -> DiffNEAState` (P restarts, e.g. from
      `particles.initial_particles`; `key` and `data` unused) and `step(state, data) ->
      (DiffNEAState, DiffNEAInfo)`; `data` is passed to `loss_fn` unchanged.
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

    def init(key, theta0, data) -> DiffNEAState:
        del key, data
        z = spec.to_unconstrained(jnp.atleast_2d(jnp.asarray(theta0)))
        return DiffNEAState(theta=spec.from_unconstrained(z), z=z,
                            opt_state=jax.vmap(optimizer.init)(z),
                            iteration=jnp.zeros((), jnp.int32))

    def step(state: DiffNEAState, data):
        loss, grad = jax.vmap(value_and_grad, in_axes=(0, None))(state.z, data)
        finite = jnp.isfinite(loss) & jnp.all(jnp.isfinite(grad), axis=-1)
        grad = jnp.where(finite[:, None], grad, 0.0)
        updates, opt_state = jax.vmap(optimizer.update)(grad, state.opt_state, state.z)
        z = jnp.where(finite[:, None], optax.apply_updates(state.z, updates), state.z)

        # A particle whose loss or gradient was not finite keeps its optimiser state too.
        def keep(new, old):
            mask = finite.reshape(finite.shape + (1,) * (jnp.ndim(new) - 1))
            return jnp.where(mask, new, old)

        opt_state = jax.tree_util.tree_map(keep, opt_state, state.opt_state)
        info = DiffNEAInfo(loss=loss, grad_norm=jnp.linalg.norm(grad, axis=-1),
                           num_nonfinite=jnp.sum(~finite))
        new_state = DiffNEAState(theta=spec.from_unconstrained(z), z=z, opt_state=opt_state,
                                 iteration=state.iteration + 1)
        return new_state, info

    return Kernel(init=init, step=step)
