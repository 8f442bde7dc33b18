"""The noisy double pendulum that DiffNEA's and NEA's tests identify, and its checks.

Double pendulum (builder rods, swinging about y): the identifiable set is both masses (COMs
along the rods known), link 2's COM offset across the rod, the inertia about the joint axis
(iyy) of both links and both joint dampings. Both links' six inertia entries are free; the
other five entries are invisible to planar motion and only have to stay consistent.
Tolerances: 5 % relative (damping and inertia), 2 % for masses, 2 mm for the COM offset, with
sensor noise 1e-3 on q [rad] and qd [rad/s].
"""

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.inference.kernels import nea
from sysid_ros.core.model import builders, parameters

DT = 0.005                  # 200 Hz
DURATION = 8.0              # [s]
NOISE = 1e-3
INTEGRATOR = 'semi_implicit_euler'
HORIZON = 25
ITERATIONS = 400

MODEL, NOMINAL = builders.double_pendulum()
INERTIA = parameters.INERTIA_ATTRIBUTES
ENTRIES = {
    'link1.mass': (0.1, 5.0),
    **{f'link1.{a}': (-0.5, 0.5) if a[-2] != a[-1] else (0.0, 2.0) for a in INERTIA},
    'link2.mass': (0.1, 5.0),
    'link2.com.x': (-0.2, 0.2),
    **{f'link2.{a}': (-0.5, 0.5) if a[-2] != a[-1] else (0.0, 2.0) for a in INERTIA},
    'joint1.damping': (0.0, 1.0),
    'joint2.damping': (0.0, 1.0),
}
SPEC = parameters.make_parameter_spec(MODEL, ENTRIES)
IDENTIFIABLE = {'link1.mass': 0.02, 'link2.mass': 0.02, 'link1.inertia.iyy': 0.05,
                'link2.inertia.iyy': 0.05, 'joint1.damping': 0.05, 'joint2.damping': 0.05}
COM_TOLERANCE = 2e-3        # [m]

ROLLOUT = jax.jit(integrators.rollout, static_argnames=('integrator', 'actuator', 'substeps'))
REGRESSOR_DATA = jax.jit(nea.make_regressor_data, static_argnums=0)


def truth_theta():
    """(M,) the true values: nominal, with link 2's COM offset and the dampings changed."""
    theta = np.asarray(SPEC.from_params(NOMINAL)).copy()
    theta[SPEC.index('link2.com.x')] = 0.04
    theta[SPEC.index('joint1.damping')] = 0.15
    theta[SPEC.index('joint2.damping')] = 0.08
    return theta


THETA_TRUE = truth_theta()
TRUE = SPEC.to_params(jnp.asarray(THETA_TRUE), NOMINAL)


def guess_theta(theta):
    """The initial guess: masses and iyy off by 20-30 %, damping by a factor 2, COM by 6 cm."""
    guess = theta.copy()
    for name, factor in (('link1.mass', 1.3), ('link2.mass', 0.75), ('link1.inertia.iyy', 1.25),
                         ('link2.inertia.iyy', 0.8), ('joint1.damping', 2.0),
                         ('joint2.damping', 0.5)):
        guess[SPEC.index(name)] *= factor
    guess[SPEC.index('link2.com.x')] -= 0.06
    return guess


THETA_GUESS = guess_theta(THETA_TRUE)


def excitation(t, scale, seed):
    rng = np.random.default_rng(seed)
    freq, phase = rng.uniform(0.1, 1.0, (5, 2)), rng.uniform(0, 2 * np.pi, (5, 2))
    amp = rng.uniform(0.5, 1.0, (5, 2))
    amp = amp / amp.sum(0) * scale
    return np.sum(amp * np.sin(2 * np.pi * freq * t[:, None, None] + phase), axis=1)


def simulate(integrator):
    """Noisy (q, qd, tau) of the true double pendulum, (T, 2) each."""
    num = int(DURATION / DT)
    controls = excitation(np.arange(num) * DT, np.array([14.0, 3.0]), seed=3)
    states = np.asarray(ROLLOUT(MODEL, TRUE, jnp.zeros(4), jnp.asarray(controls), DT,
                                integrator=integrator, actuator='viscous'))
    assert np.all(np.isfinite(states))
    rng = np.random.default_rng(4)
    states = states + rng.normal(0.0, NOISE, states.shape)
    tau = np.concatenate([controls, controls[-1:]])
    return states[:, :2], states[:, 2:], tau


def check_recovery(theta):
    """Assert the identifiable entries of theta (M,) within tolerance; returns the errors."""
    theta = np.asarray(theta)
    errors = {}
    for name, tol in IDENTIFIABLE.items():
        k = SPEC.index(name)
        errors[name] = (theta[k] - THETA_TRUE[k]) / THETA_TRUE[k]
        assert abs(errors[name]) < tol, (name, theta[k], THETA_TRUE[k])
    k = SPEC.index('link2.com.x')
    errors['link2.com.x'] = theta[k] - THETA_TRUE[k]
    assert abs(errors['link2.com.x']) < COM_TOLERANCE
    return errors


def inertia_block():
    """(M,) bool: the spec's inertia entries."""
    return np.asarray([a.startswith('inertia.') for a in SPEC.attributes])


ALL_CONSISTENT = jax.jit(jax.vmap(lambda theta: SPEC.is_consistent(theta, NOMINAL)))


def consistent(theta):
    """Whether every row of theta (M,) or (K, M) is physically consistent."""
    return bool(np.all(ALL_CONSISTENT(jnp.atleast_2d(jnp.asarray(theta)))))
