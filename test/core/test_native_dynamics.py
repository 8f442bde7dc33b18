"""The native CPU ABA (XLA FFI around Pinocchio) against Pinocchio, the pure-JAX ABA and finite
differences.

The shared library is part of the build (`make .venv` compiles it after pip), so a missing one
is an error that says how to build it, not a skip: a silent skip would hide a broken build.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from jax.test_util import check_grads

from sysid_ros.core.dynamics import native, rigid_body
from sysid_ros.core.model import builders
from sysid_ros.io import model_io
from sysid_ros.io import native as native_io

TOLERANCE = 1e-9
SYSTEMS = {
    'double_pendulum': lambda: builders.double_pendulum(damping=0.1),
    'cartpole': builders.cartpole,                     # prismatic + revolute
    'chain4_unaligned': lambda: builders.chain(4, axis=(0.0, 0.6, 0.8)),
    'panda': lambda: model_io.load_urdf('example-robot-data:panda'),
}


@pytest.fixture(scope='module', autouse=True)
def _registered():
    native_io.register()


def _particles(params, num, seed):
    """`num` physically consistent perturbations of `params` (inertial, placement, armature)."""
    rng = np.random.default_rng(seed)
    nb = params.inertial.shape[0]
    scale = rng.uniform(0.8, 1.2, size=(num, nb, 1))
    offset = np.concatenate([rng.normal(0.0, 1e-2, (num, nb, 3)),
                             rng.normal(0.0, 1e-1, (num, nb, 3))], axis=-1)
    return dataclasses.replace(
        jax.tree.map(lambda x: jnp.broadcast_to(x, (num,) + x.shape), params),
        inertial=jnp.asarray(np.asarray(params.inertial) * scale),
        placement=jnp.asarray(np.asarray(params.placement) + offset),
        armature=jnp.asarray(rng.uniform(0.0, 0.1, (num, nb))))


def _states(nv, num, seed):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=(num, nv))) for _ in range(3))


@pytest.mark.parametrize('name', sorted(SYSTEMS))
def test_aba_matches_pinocchio_and_jax(name):
    model, nominal = SYSTEMS[name]()
    num = 40                                   # > 2 x 16: the kernel splits it over threads
    params = _particles(nominal, num, seed=1)
    q, qd, tau = _states(model.nv, num, seed=2)
    ours = jax.jit(jax.vmap(lambda p, a, b, c: native.aba(model, p, a, b, c)))(params, q, qd, tau)
    jax_aba = jax.jit(jax.vmap(lambda p, a, b, c: rigid_body.aba(model, p, a, b, c)))(
        params, q, qd, tau)
    np.testing.assert_allclose(ours, jax_aba, atol=TOLERANCE, rtol=0)
    for k in range(num):
        particle = jax.tree.map(lambda x: x[k], params)
        pmodel = model_io.to_pinocchio(model, particle)
        reference = pin.aba(pmodel, pmodel.createData(),
                            model_io.pinocchio_configuration(model, q[k]),
                            np.asarray(qd[k]), np.asarray(tau[k]))
        np.testing.assert_allclose(ours[k], reference, atol=TOLERANCE, rtol=0)


def test_aba_unbatched_nested_vmap_and_shared_params():
    model, params = builders.cartpole()
    q, qd, tau = _states(model.nv, 6, seed=3)
    expected = jax.vmap(lambda a, b, c: rigid_body.aba(model, params, a, b, c))(q, qd, tau)
    single = native.aba(model, params, q[0], qd[0], tau[0])
    assert single.shape == (model.nv,)
    np.testing.assert_allclose(single, expected[0], atol=TOLERANCE, rtol=0)
    # Params shared by the batch (in_axes None) and two nested batch axes.
    nested = jax.jit(jax.vmap(jax.vmap(lambda a, b, c: native.aba(model, params, a, b, c))))(
        *(x.reshape(2, 3, -1) for x in (q, qd, tau)))
    np.testing.assert_allclose(nested.reshape(6, -1), expected, atol=TOLERANCE, rtol=0)


def _loss(aba_fn, model, fixed_placement):
    """A scalar of a batch of accelerations, nonlinear in them so every cotangent differs."""
    def loss(params, q, qd, tau):
        if fixed_placement:
            params = dataclasses.replace(params, placement=jax.lax.stop_gradient(params.placement))
        qdd = jax.vmap(lambda p, a, b, c: aba_fn(model, p, a, b, c))(params, q, qd, tau)
        return jnp.sum(jnp.sin(0.1 * qdd) * jnp.arange(1, model.nv + 1))
    return loss


@pytest.mark.parametrize('fixed_placement', [False, True])
@pytest.mark.parametrize('name', ['cartpole', 'panda'])
def test_vjp_matches_jax_autodiff(name, fixed_placement):
    model, nominal = SYSTEMS[name]()
    params = _particles(nominal, 5, seed=4)
    states = _states(model.nv, 5, seed=5)
    grads = [jax.jit(jax.grad(_loss(fn, model, fixed_placement), argnums=(0, 1, 2, 3)))(
        params, *states) for fn in (native.aba, rigid_body.aba)]
    for ours, reference in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
        scale = 1.0 + float(jnp.abs(reference).max())
        np.testing.assert_allclose(ours, reference, atol=TOLERANCE * scale, rtol=0)


@pytest.mark.parametrize('name', ['double_pendulum', 'chain4_unaligned'])
def test_vjp_matches_finite_differences(name):
    model, nominal = SYSTEMS[name]()
    params = jax.tree.map(lambda x: x[0], _particles(nominal, 1, seed=6))
    q, qd, tau = (x[0] for x in _states(model.nv, 1, seed=7))
    check_grads(lambda p, a, b, c: native.aba(model, p, a, b, c), (params, q, qd, tau),
                order=1, modes=('rev',), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_missing_library_names_the_build(tmp_path):
    with pytest.raises(native_io.NativeError, match='make .venv'):
        native_io.register(str(tmp_path / 'absent.so'))
