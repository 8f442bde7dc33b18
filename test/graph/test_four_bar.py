"""Four-bar forward dynamics (fixed-lag smoother) and inverse dynamics (batch, four stages)
against references that are not factor graphs (RK4 in independent coordinates; eq 15)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import mechanisms as mm
from sysid_ros.graph import smoother as sm

MECH, PARAMS, Q0 = mm.four_bar()
DT = 0.01
STEPS = 40


@pytest.fixture(scope='module')
def reference():
    """RK4 at dt/50 with the position problem solved at every stage."""
    q, qd, _, _ = jax.jit(lambda u: mm.simulate_independent_rk4(
        MECH, PARAMS, Q0, jnp.zeros(1), jnp.zeros(1), u, DT, substeps=50))(
            jnp.zeros((STEPS, 1)))
    return np.asarray(q), np.asarray(qd)


@pytest.mark.parametrize('coordinates', ['dependent', 'independent'])
def test_free_fall_matches_rk4_reference(reference, coordinates):
    res = sm.forward_dynamics(MECH, PARAMS, Q0, np.zeros(4), np.zeros((STEPS, 1)), DT, 3,
                              coordinates)
    q_ref, qd_ref = reference
    assert res.q.shape == (STEPS + 1, 4)
    # the mechanism really moves (point 1 falls by tens of cm) ...
    assert q_ref[-1, 1] < -0.2
    # ... and the trapezoidal factor graph follows it within the seed's accuracy (Table 1:
    # 2.4 mm RMSE over the whole motion; the trapezoidal rule's error grows with dt^2 t)
    err_q, err_v = np.abs(res.q - q_ref).max(), np.abs(res.v - qd_ref).max()
    assert err_q < 2.4e-3, err_q
    assert err_v < 2.4e-2, err_v
    assert np.sqrt(np.mean((res.q - q_ref) ** 2)) < 1e-3
    lengths = np.linalg.norm(jax.vmap(lambda q: mm.bar_vectors(MECH, q))(res.q), axis=-1)
    assert np.abs(lengths - np.array(MECH.bar_lengths)).max() < 2e-4  # soft constraints [m]
    assert res.iterations.max() <= 15


def test_bad_initial_state_is_rejected_before_solving():
    with pytest.raises(mm.MechanismError, match="bar 'crank' has length"):
        sm.forward_dynamics(MECH, PARAMS, Q0 * 1.1, np.zeros(4), np.zeros((3, 1)), DT, 2)


def test_inverse_dynamics_follows_trajectory_and_matches_eq15():
    steps = 30
    t = np.arange(steps + 1) * DT
    w = 2 * np.pi
    z = (0.3 * (1 - np.cos(w * t)))[:, None]
    zd = (0.3 * w * np.sin(w * t))[:, None]
    zdd = (0.3 * w**2 * np.cos(w * t))[:, None]
    res = sm.inverse_dynamics(MECH, PARAMS, z, Q0, np.zeros(4), DT)
    assert np.abs(res.z - z).max() < 1e-3  # seed: following error below 1 mrad

    def exact(zk, zdk, zddk, q_guess):
        q = mm.solve_position(MECH, zk, q_guess)
        qd = mm.velocity_transform(MECH, q, zk) @ zdk
        return mm.inverse_dynamics_independent(MECH, PARAMS, q, qd, zk, zdk, zddk)
    u_ref = np.asarray(jax.vmap(exact)(z, zd, zdd, jnp.asarray(res.q)))
    interior = slice(5, -5)  # trapezoidal accelerations ring for a few steps at the ends
    np.testing.assert_allclose(res.u[interior], u_ref[interior], atol=0.02 * np.abs(u_ref).max())
    assert res.stage_errors.shape == (4,) and np.all(np.isfinite(res.stage_errors))
