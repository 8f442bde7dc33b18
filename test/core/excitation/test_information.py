"""The Fisher and equation-error information (`excitation.information`) against closed
forms."""

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.excitation import information
from sysid_ros.core.model import builders
from sysid_ros.core.model.parameters import make_parameter_spec

ACCEL_STD = 0.3         # [rad/s^2]


def test_fisher_information_of_a_damping_is_the_closed_form():
    """One link swinging about y with its damping free: u = rnea + d qd, so
    F = weight sum (qd / I)^2 / s^2 with I the inertia about the joint."""
    model, base = builders.chain(1, lengths=0.8, masses=1.5)
    spec = make_parameter_spec(model, {'joint1.damping': (0.0, 1.0)})
    t = np.linspace(0.0, 2.0, 50)
    q, qd, qdd = np.sin(3 * t)[:, None], 3 * np.cos(3 * t)[:, None], -9 * np.sin(3 * t)[:, None]
    info = information.fisher_information(model, spec, base, jnp.array([0.2]), q, qd, qdd,
                                          ACCEL_STD, weight=4.0, actuator='viscous')
    inertia = float(base.inertial[0, 6])          # Iyy about the joint origin
    expected = 4.0 * np.sum((qd[:, 0] / inertia) ** 2) / ACCEL_STD ** 2
    np.testing.assert_allclose(np.asarray(info), [[expected]], rtol=1e-10)


def test_equation_error_information_of_a_damping_is_the_closed_form():
    """Configured torque noise sigma and exact states: u = rnea + d qd, so
    F = weight sum qd^2 / sigma^2; velocity noise s adds d^2 s^2 to every residual's variance
    and the sandwich F G^-1 F is then F sigma^2 / (sigma^2 + d^2 s^2)."""
    model, base = builders.chain(1, lengths=0.8, masses=1.5)
    spec = make_parameter_spec(model, {'joint1.damping': (0.0, 1.0)})
    t = np.linspace(0.0, 2.0, 50)
    q, qd, qdd = np.sin(3 * t)[:, None], 3 * np.cos(3 * t)[:, None], -9 * np.sin(3 * t)[:, None]
    sigma, damping, s = 0.2, 0.4, 0.1

    def info(qd_var):
        return float(information.equation_error_information(
            model, spec, base, jnp.array([damping]), q, qd, qdd,
            jnp.array([[0.0], [qd_var], [0.0]]), jnp.array([sigma ** 2]), jnp.array([sigma]),
            weight=4.0, actuator='viscous')[0, 0])

    expected = 4.0 * np.sum(qd[:, 0] ** 2) / sigma ** 2
    np.testing.assert_allclose(info(0.0), expected, rtol=1e-10)
    np.testing.assert_allclose(info(s ** 2), expected * sigma ** 2
                               / (sigma ** 2 + damping ** 2 * s ** 2), rtol=1e-10)


def test_equation_error_information_with_estimated_noise_is_the_fisher_information():
    """Without a configured std the weights are the residuals' mean variance; with the qdd
    noise alone on one joint that variance is I^2 s_a^2, constant, so the information is
    weight sum (qd / (I s_a))^2: the acceleration-space form."""
    model, base = builders.chain(1, lengths=0.8, masses=1.5)
    spec = make_parameter_spec(model, {'joint1.damping': (0.0, 1.0)})
    t = np.linspace(0.0, 2.0, 50)
    q, qd, qdd = np.sin(3 * t)[:, None], 3 * np.cos(3 * t)[:, None], -9 * np.sin(3 * t)[:, None]
    info = information.equation_error_information(
        model, spec, base, jnp.array([0.2]), q, qd, qdd,
        jnp.array([[0.0], [0.0], [ACCEL_STD ** 2]]), jnp.zeros(1), None, weight=4.0)
    expected = information.fisher_information(model, spec, base, jnp.array([0.2]), q, qd, qdd,
                                              ACCEL_STD, weight=4.0)
    np.testing.assert_allclose(np.asarray(info), np.asarray(expected), rtol=1e-10)
