"""Ball in a cup (core/ball_in_cup.py): anchor kinematics, the taut string in simulation and
the identification of string length and cup anchor from noisy ball positions (known truth)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.constrained import ball_in_cup as bic

DT = 0.01
SAMPLES = 600
NOISE = 1e-3  # motion-capture noise [m]
CUP = bic.ceiling_arm()
TRUTH = bic.StringParams(jnp.asarray(0.4), jnp.array([0.04, -0.03, -0.06]),
                         jnp.asarray(0.05))
AMPLITUDE, FREQUENCY = (0.5, 0.35, 0.35), (0.23, 0.31, 0.37)


@pytest.fixture(scope='module')
def clean_data():
    return bic.synthetic_data(CUP, TRUTH, SAMPLES, DT, AMPLITUDE, FREQUENCY, 0.0,
                              jax.random.PRNGKey(0))


def test_anchor_motion_matches_finite_differences():
    """Anchor velocity and acceleration (nested jvps of FK) vs differences of its position
    along the cosine excitation."""
    t = jnp.array([0.8 - 1e-4, 0.8, 0.8 + 1e-4])
    q, qd, qdd = bic.cosine_excitation(t, AMPLITUDE, FREQUENCY)
    joints = jnp.concatenate([q, qd, qdd], axis=1)
    motion = bic.anchor_motions(CUP, TRUTH.anchor, joints)
    p = motion[:, 0]
    h = 1e-4
    np.testing.assert_allclose(motion[1, 1], (p[2] - p[0]) / (2 * h), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(motion[1, 2], (p[2] - 2 * p[1] + p[0]) / h**2, rtol=1e-4,
                               atol=1e-5)


def test_simulated_string_stays_taut_and_inextensible(clean_data):
    """The ball swings (decimetres) while |ball - anchor| stays within 0.5 mm of length."""
    joints = jnp.concatenate([clean_data.q, clean_data.qd, clean_data.qdd], axis=1)
    anchor = bic.anchor_motions(CUP, TRUTH.anchor, joints)[:, 0]
    distance = np.linalg.norm(np.asarray(clean_data.ball - anchor), axis=1)
    assert np.abs(distance - float(TRUTH.length)).max() < 5e-4
    swing = np.ptp(np.asarray(clean_data.ball), axis=0)
    assert swing[:2].min() > 0.1


def test_identifies_string_length_and_anchor(clean_data):
    """From a 17 % short length and a 7 cm anchor error, Levenberg-Marquardt with free window
    starts recovers length and anchor within 4 mm (and within 4 reported sigmas), and the
    residual drops to the noise level."""
    noise = NOISE * jax.random.normal(jax.random.PRNGKey(1), clean_data.ball.shape)
    data = clean_data._replace(ball=clean_data.ball + noise)
    windows = bic.make_windows(data, DT, 30)
    start = bic.StringParams(jnp.asarray(0.33), jnp.zeros(3), jnp.asarray(0.2))
    fit = jax.jit(lambda s: bic.fit_string(CUP, windows, s, DT, 20))(start)
    length_error = abs(float(fit.string.length - TRUTH.length))
    anchor_error = np.abs(np.asarray(fit.string.anchor - TRUTH.anchor))
    assert length_error < 4e-3 and length_error < 4 * float(fit.std.length)
    assert anchor_error.max() < 4e-3
    assert np.all(anchor_error < 4 * np.asarray(fit.std.anchor))
    assert float(fit.rms0) > 20 * NOISE
    assert float(fit.rms) < 1.1 * NOISE


def test_bad_data_rejected(clean_data):
    with pytest.raises(ValueError, match='too few for one window'):
        bic.make_windows(jax.tree_util.tree_map(lambda a: a[:20], clean_data), DT, 30)
    with pytest.raises(ValueError, match='same T'):
        bic.make_windows(clean_data._replace(ball=clean_data.ball[:-1]), DT, 30)
