"""JAX dynamics against Pinocchio, analytic cases, gradients, jit and vmap."""

import dataclasses

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.model import builders
from sysid_ros.io import model_io, verify

BUILT = {
    'double_pendulum': builders.double_pendulum(damping=0.1),
    'cartpole': builders.cartpole(),
    'furuta_pendulum': builders.furuta_pendulum(),
    'chain5': builders.chain(5, lengths=[0.3, 0.4, 0.2, 0.5, 0.3], masses=[1, 2, 1, 0.5, 0.3],
                             axis=(0.0, 0.6, 0.8)),
}


def _with_armature(model, params, seed=0):
    armature = np.random.default_rng(seed).uniform(0.0, 0.1, model.nv)
    return model, dataclasses.replace(params, armature=jnp.asarray(armature))


@pytest.mark.parametrize('name', sorted(BUILT))
def test_builders_match_pinocchio(name):
    model, params = _with_armature(*BUILT[name])
    report = verify.verify(model, params, num_samples=8)
    assert report.passed, report.table()


@pytest.mark.parametrize('robot', ['panda', 'ur5'])
def test_urdf_robots_match_pinocchio_parsed_urdf(robot):
    pmodel = model_io.load_pinocchio(f'example-robot-data:{robot}')
    model, params = model_io.from_pinocchio(pmodel)
    report = verify.verify(model, params, pmodel, num_samples=8)
    assert report.passed, report.table()


def test_single_pendulum_analytic():
    """A rod of length l about a horizontal axis: qdd = -(3 g / 2 l) sin q for I = m l^2 / 3."""
    model, params = builders.chain(1, lengths=0.8, masses=2.0, radius=0.0)
    q, qd = jnp.array([0.3]), jnp.array([0.0])
    qdd = rigid_body.aba(model, params, q, qd, jnp.zeros(1))
    np.testing.assert_allclose(qdd, -1.5 * 9.81 / 0.8 * np.sin(0.3), rtol=1e-12)
    M = rigid_body.crba(model, params, q)
    np.testing.assert_allclose(M, [[2.0 * 0.8**2 / 3.0]], rtol=1e-12)


def test_aba_inverts_rnea_and_mass_matrix():
    model, params = _with_armature(*BUILT['chain5'])
    rng = np.random.default_rng(1)
    q, qd, qdd = (jnp.asarray(rng.normal(size=model.nv)) for _ in range(3))
    tau = rigid_body.rnea(model, params, q, qd, qdd)
    np.testing.assert_allclose(rigid_body.aba(model, params, q, qd, tau), qdd, atol=1e-10)
    M = rigid_body.crba(model, params, q)
    bias = rigid_body.bias_forces(model, params, q, qd)
    np.testing.assert_allclose(M @ qdd + bias, tau, atol=1e-10)
    assert np.all(np.linalg.eigvalsh(M) > 0)


def test_regressor_times_parameters_is_rnea():
    model, params = BUILT['furuta_pendulum']
    rng = np.random.default_rng(2)
    q, qd, qdd = (jnp.asarray(rng.normal(size=model.nv)) for _ in range(3))
    Y = rigid_body.regressor(model, params, q, qd, qdd)
    assert Y.shape == (model.nv, 10 * model.nv)
    np.testing.assert_allclose(Y @ params.inertial.ravel(),
                               rigid_body.rnea(model, params, q, qd, qdd), atol=1e-12)


def test_gradients_match_finite_differences():
    """d ABA / d (state, torque, every Params leaf) against central differences."""
    model, params = _with_armature(*BUILT['double_pendulum'])
    rng = np.random.default_rng(3)
    q, qd, tau = (jnp.asarray(rng.normal(size=model.nv)) for _ in range(3))

    def f(params, q, qd, tau):
        return rigid_body.aba(model, params, q, qd, tau)

    check_grads(f, (params, q, qd, tau), order=1, modes=('fwd', 'rev'), eps=1e-6,
                atol=1e-6, rtol=1e-6)
    check_grads(lambda p, q: kinematics.forward_kinematics(model, p, q)[1], (params, q),
                order=1, modes=('rev',), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_vmap_over_particles_and_time():
    model, params = BUILT['double_pendulum']
    num_particles, num_steps = 3, 4
    scale = jnp.linspace(0.5, 1.5, num_particles)
    particles = dataclasses.replace(
        jax.tree.map(lambda x: jnp.broadcast_to(x, (num_particles,) + x.shape), params),
        inertial=params.inertial[None] * scale[:, None, None])
    rng = np.random.default_rng(4)
    q, qd, tau = (jnp.asarray(rng.normal(size=(num_steps, model.nv))) for _ in range(3))
    over_time = jax.vmap(lambda p, q, qd, t: rigid_body.aba(model, p, q, qd, t),
                         in_axes=(None, 0, 0, 0))
    batched = jax.jit(jax.vmap(over_time, in_axes=(0, None, None, None)))(particles, q, qd, tau)
    assert batched.shape == (num_particles, num_steps, model.nv)
    for k in range(num_particles):
        p_k = jax.tree.map(lambda x: x[k], particles)
        np.testing.assert_allclose(batched[k], over_time(p_k, q, qd, tau), atol=1e-12)


@pytest.mark.parametrize('axis', [(1.0, 0.0, 0.0), (0.0, -1.0, 0.0), (0.0, 0.0, -1.0),
                                  (0.0, 0.6, 0.8), (0.3, -0.2, 0.5)])
def test_canonical_rotation_takes_z_to_the_joint_axis(axis):
    model, _ = builders.chain(1, axis=axis)
    (C,) = kinematics.canonical_rotations(model)
    np.testing.assert_allclose(C[:, 2], np.asarray(axis) / np.linalg.norm(axis), atol=1e-15)
    np.testing.assert_allclose(C.T @ C, np.eye(3), atol=1e-15)
    assert np.linalg.det(C) == pytest.approx(1.0)


@pytest.mark.parametrize('name', ['chain5', 'cartpole'])
def test_aba_derivatives_by_identity_match_plain_autodiff(name):
    """ABA's custom JVP (M^-1 times RNEA's derivatives) against autodiff through the ABA
    passes themselves, in both modes, for tilted revolute axes and a prismatic joint; and the
    factorised M^-1 solve against CRBA."""
    model, params = _with_armature(*BUILT[name])
    rng = np.random.default_rng(5)
    q, qd, tau = (jnp.asarray(rng.normal(size=model.nv)) for _ in range(3))

    def plain(p, q, qd, tau):
        return rigid_body._articulated_body(model, p, q, qd, tau)[0]

    def identity(p, q, qd, tau):
        return rigid_body.aba(model, p, q, qd, tau)

    args = (params, q, qd, tau)
    expected = jax.jacrev(plain, argnums=(0, 1, 2, 3))(*args)
    for jacobian in (jax.jacrev, jax.jacfwd):
        got = jacobian(identity, argnums=(0, 1, 2, 3))(*args)
        for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-10)
    _, factor = rigid_body._articulated_body(model, params, q, qd, tau)
    np.testing.assert_allclose(rigid_body._mass_solve(model, factor, tau),
                               np.linalg.solve(rigid_body.crba(model, params, q), tau),
                               rtol=1e-12, atol=1e-12)
