"""Computed-torque control (core.dynamics.control): the command of a motion reproduces it
through the forward dynamics, and the closed loop tracks a reference."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import control, integrators
from sysid_ros.core.model import builders


def test_command_torque_inverts_the_forward_dynamics_with_friction():
    model, params = builders.double_pendulum(damping=0.3)
    params = dataclasses.replace(params, coulomb=jnp.array([0.2, 0.1]))
    q, qd, qdd = jnp.array([0.3, -0.5]), jnp.array([1.2, -0.7]), jnp.array([2.0, -3.0])
    u = control.command_torque(model, params, q, qd, qdd, 'coulomb_viscous')
    np.testing.assert_allclose(integrators.forward_dynamics(model, params, q, qd, u,
                                                            'coulomb_viscous'), qdd, atol=1e-10)


def test_track_follows_a_reference_with_an_exact_model():
    model, params = builders.double_pendulum(damping=0.1)
    dt = 0.005
    t = np.arange(401) * dt
    q_ref = np.stack([0.5 * np.sin(2 * t), 0.3 * np.sin(3 * t)], axis=1)
    qd_ref = np.stack([np.cos(2 * t), 0.9 * np.cos(3 * t)], axis=1)
    qdd_ref = np.stack([-2 * np.sin(2 * t), -2.7 * np.sin(3 * t)], axis=1)
    track = jax.jit(control.track, static_argnames=('integrator', 'actuator', 'substeps'))
    x0 = np.concatenate([q_ref[0], qd_ref[0]])
    states, u = track(model, params, params, x0, q_ref, qd_ref, qdd_ref, dt,
                      jnp.full(2, 100.0), 2 * np.pi * 5.0, integrator='rk4',
                      actuator='viscous', substeps=2)
    assert states.shape == (401, 4) and u.shape == (401, 2)
    error = np.abs(np.asarray(states[:, :2]) - q_ref)
    assert np.max(error) < 2e-3                      # held commands: an O(dt^2) error only
    # Two calls, the second from where the first stopped, are one simulation.
    half = [a[:201] for a in (q_ref, qd_ref, qdd_ref)]
    rest = [a[200:] for a in (q_ref, qd_ref, qdd_ref)]
    first, u1 = track(model, params, params, x0, *half, dt, jnp.full(2, 100.0), 2 * np.pi * 5.0,
                      integrator='rk4', actuator='viscous', substeps=2)
    second, u2 = track(model, params, params, first[-1], *rest, dt, jnp.full(2, 100.0),
                       2 * np.pi * 5.0, integrator='rk4', actuator='viscous', substeps=2)
    np.testing.assert_allclose(np.concatenate([first, second[1:]]), states, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([u1[:-1], u2]), u, atol=1e-9)
