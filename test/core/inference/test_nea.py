"""NEA (`kernels.nea`) and its consistent least squares recover known parameters from noisy
simulated data (`point_problems`; a Panda, 7 DoF from example-robot-data: masses of links 5-7
with known COMs and all seven dampings, on an analytic excitation), and every returned
parameter set is physically consistent.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from point_problems import (check_recovery, consistent, DT, INERTIA, MODEL, NOISE, NOMINAL,
                            REGRESSOR_DATA, simulate, SPEC, THETA_GUESS)
import pytest

from sysid_ros.core.dynamics import actuators
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.inference.kernels import nea
from sysid_ros.core.inference.kernels.nea import NEAInfo
from sysid_ros.core.model import parameters


@pytest.fixture(scope='module')
def measured_rk4():
    """Data close to the continuous-time dynamics that NEA's regression assumes. (A first-order
    integrator's own error acts like extra joint damping and would bias NEA.)"""
    return simulate('rk4')


def _regression_samples(q, qd, tau, dt, edge=5):
    """Savitzky-Golay q, qd, qdd and the torque acting around each sample (the mean of the
    zero-order-held commands either side), as `io.pipeline` prepares NEA data."""
    from scipy.signal import savgol_filter
    n = 11
    q, qd, qdd = (savgol_filter(q, n, 3, axis=0), savgol_filter(qd, n, 3, axis=0),
                  savgol_filter(qd, n, 3, deriv=1, delta=dt, axis=0))
    tau = np.concatenate([tau[:1], 0.5 * (tau[1:] + tau[:-1])])
    inner = slice(edge, len(q) - edge)
    return q[inner], qd[inner], qdd[inner], tau[inner]


def _nea_fit(model, base, spec, q, qd, qdd, tau, theta0, steps=10, actuator='viscous'):
    est = nea.build_kernel(model, base, spec, actuator)
    data = REGRESSOR_DATA(model, base, q, qd, qdd, tau)
    step = jax.jit(est.step)
    if theta0 is None:
        theta0 = spec.initial_theta(base)
    state = jax.jit(est.init)(None, jnp.asarray(theta0), data)
    infos = []
    for _ in range(steps):
        state, info = step(state, data)
        infos.append(info)
        if float(info.step_norm[0]) < 1e-10:
            break
    return state, infos


def test_nea_recovers_double_pendulum(measured_rk4):
    samples = _regression_samples(*measured_rk4, DT)
    state, infos = _nea_fit(MODEL, NOMINAL, SPEC, *samples, THETA_GUESS)
    assert isinstance(infos[0], NEAInfo)
    assert int(infos[-1].rank[0]) == 7            # the seven identifiable parameters
    assert len(infos) <= 10 and float(infos[-1].step_norm[0]) < 1e-8
    errors = check_recovery(state.theta[0])
    print('NEA errors:', {k: f'{v:+.2e}' for k, v in errors.items()})
    assert consistent(state.theta[0])
    # The unidentifiable inertia entries keep their (minimum-norm) initial values, up to the
    # consistency projection that makes room for the new iyy.
    k = SPEC.index('link1.inertia.ixy')
    assert float(state.z[0, k]) == pytest.approx(THETA_GUESS[k], abs=1e-12)


def test_nea_recovers_joint_offsets():
    """Viscous and Coulomb friction plus a signed constant offset per joint (FloBaRoID's
    friction model): from noisy torques u = rnea + d qd + c sgn(qd) + offset, NEA recovers the
    offsets with the masses and the friction, and the consistent least squares (from the
    nominal start, no offsets) reaches the same solution."""
    truth = {'link1.mass': 1.2, 'link2.mass': 0.7, 'joint1.damping': 0.15,
             'joint2.damping': 0.08, 'joint1.coulomb': 0.3, 'joint2.coulomb': 0.2,
             'joint1.offset': 0.6, 'joint2.offset': -0.4}
    bounds = {'mass': (0.1, 5.0), 'damping': (0.0, 1.0), 'coulomb': (0.0, 1.0),
              'offset': (-2.0, 2.0)}
    spec = parameters.make_parameter_spec(
        MODEL, {name: bounds[name.rsplit('.', 1)[1]] for name in truth})
    theta_true = np.asarray(list(truth.values()))
    params = spec.to_params(jnp.asarray(theta_true), NOMINAL)
    rng = np.random.default_rng(5)
    q, qd, qdd = (rng.normal(size=(400, 2)) for _ in range(3))
    rigid = jax.vmap(lambda a, b, c: rigid_body.rnea(MODEL, params, a, b, c))(q, qd, qdd)
    tau = (np.asarray(rigid) + np.asarray(params.damping) * qd
           + np.asarray(params.coulomb) * np.tanh(qd / actuators.DEFAULT_EPS)
           + np.asarray(params.offset) + 0.01 * rng.normal(size=q.shape))
    state, infos = _nea_fit(MODEL, NOMINAL, spec, q, qd, qdd, tau, None,
                            actuator='coulomb_viscous')
    estimate = np.asarray(state.theta[0])
    assert int(infos[-1].rank[0]) == spec.num_params and bool(infos[-1].raw_consistent[0])
    np.testing.assert_allclose(estimate, theta_true, rtol=0.01, atol=2e-3)
    refine = jax.jit(nea.make_consistent_ls(MODEL, NOMINAL, spec,
                                            'coulomb_viscous'))
    data = REGRESSOR_DATA(MODEL, NOMINAL, q, qd, qdd, tau)
    refined, _ = refine(spec.initial_theta(NOMINAL)[None], data)
    np.testing.assert_allclose(refined[0], estimate, atol=1e-6)


def test_nea_projection_of_an_inconsistent_raw_solution():
    """Only iyy of a thin rod free: the triangle inequality pins it to ixx +- izz. The raw
    least-squares value of a heavier rod violates it and is projected back to the boundary."""
    spec = parameters.make_parameter_spec(MODEL, {'link1.inertia.iyy': (0.0, 2.0),
                                                  'link1.mass': (0.1, 5.0)})
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.normal(size=(200, 2)) for _ in range(3))
    heavy = np.asarray(spec.from_params(NOMINAL)) * np.array([1.2, 1.0])      # iyy + 20 %
    truth = spec.to_params(jnp.asarray(heavy), NOMINAL)
    tau = jax.vmap(lambda a, b, c: rigid_body.rnea(MODEL, truth, a, b, c))(q, qd, qdd)
    state, infos = _nea_fit(MODEL, NOMINAL, spec, q, qd, qdd, tau, None, steps=2)
    raw, projected = np.asarray(state.z[0]), np.asarray(state.theta[0])
    np.testing.assert_allclose(raw, heavy, rtol=1e-8)             # exact LS on clean data
    assert not bool(infos[0].raw_consistent[0])
    assert bool(spec.is_consistent(jnp.asarray(projected), NOMINAL))
    ixx, izz = (float(NOMINAL.inertial[0, 4]) - 0.25, 2e-4)       # about the COM
    assert projected[0] == pytest.approx(ixx + izz, rel=1e-4)     # on the boundary
    assert projected[1] == pytest.approx(1.0, rel=1e-8)


def test_consistent_ls_fixes_an_inconsistent_nea_solution():
    """All ten inertial entries of both thin rods free (as on the real KUKA data): the
    minimum-norm NEA solution is inconsistent (link 1's iyy exceeds ixx + izz) and its COMs lie
    beyond the rods' ends (the bounds; the true COMs are at the ends), and projecting it (COMs
    clipped, masses kept) costs far more than the noise. The consistent least squares from the
    projection and from the anchor fits to the noise floor and recovers the identifiable
    parameters."""
    entries = {}
    for link in ('link1', 'link2'):
        entries[f'{link}.mass'] = (0.0, 5.0)
        entries.update({f'{link}.com.{axis}': (-0.5, 0.5) for axis in 'xyz'})   # rod ends
        entries.update({f'{link}.{a}': (-0.5, 0.5) if a[-2] != a[-1] else (0.0, 1.0)
                        for a in INERTIA})
    entries.update({'joint1.damping': (0.0, 1.0), 'joint2.damping': (0.0, 1.0)})
    spec = parameters.make_parameter_spec(MODEL, entries)
    truth_theta = np.asarray(spec.from_params(NOMINAL)).copy()
    truth_theta[spec.index('link2.mass')] = 1.3
    truth_theta[spec.index('joint1.damping')] = 0.2
    truth_theta[spec.index('joint2.damping')] = 0.1
    truth = spec.to_params(jnp.asarray(truth_theta), NOMINAL)
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.normal(size=(200, 2)) for _ in range(3))
    tau = jax.vmap(lambda a, b, c: rigid_body.rnea(MODEL, truth, a, b, c))(q, qd, qdd)
    tau = np.asarray(tau + truth.damping * qd) + 0.01 * rng.normal(size=tau.shape)
    state, infos = _nea_fit(MODEL, NOMINAL, spec, q, qd, qdd, tau, None)
    assert not bool(infos[-1].raw_consistent[0])

    data = REGRESSOR_DATA(MODEL, NOMINAL, q, qd, qdd, tau)
    residual = nea._theta_residual(MODEL, NOMINAL, spec, 'viscous')

    def loss(theta):
        return float(jnp.mean(jnp.square(residual(jnp.asarray(theta), data))))

    refine = jax.jit(nea.make_consistent_ls(MODEL, NOMINAL, spec))
    torques = jax.jit(jax.vmap(lambda p, a, b, c: rigid_body.rnea(MODEL, p, a, b, c)
                               + p.damping * b, in_axes=(None, 0, 0, 0)))
    held_out = [jnp.asarray(rng.normal(size=(100, 2))) for _ in range(3)]
    refined, refined_loss = refine(jnp.concatenate([state.theta, state.anchor]), data)
    for theta, value in zip(np.asarray(refined), np.asarray(refined_loss)):
        assert bool(spec.is_consistent(jnp.asarray(theta), NOMINAL))
        assert bool(spec.within_bounds(jnp.asarray(theta)))
        assert value == pytest.approx(loss(theta), rel=1e-9)
        assert value <= loss(truth_theta)                          # the noise floor
        params = spec.to_params(jnp.asarray(theta), NOMINAL)
        # Identifiable: link 2's m c_z and Iyy (about the joint), the dampings, and the
        # torques of new samples (the masses and link 1's entries only in combinations).
        for entry in (3, 6):
            assert float(params.inertial[1, entry]) == pytest.approx(
                float(truth.inertial[1, entry]), rel=0.01), entry
        np.testing.assert_allclose(params.damping, truth.damping, rtol=0.01)
        predicted, expected = (np.asarray(torques(p, *held_out)) for p in (params, truth))
        assert np.sqrt(np.mean(np.square(predicted - expected))) < 0.01 * np.std(expected)
    assert loss(state.theta[0]) > 10.0 * loss(truth_theta)          # the projection alone


def test_nea_rejects_kinematics_gains_and_non_additive_actuators():
    spec = parameters.make_parameter_spec(MODEL, {'joint2.origin.z': (-2.0, 0.0)})
    with pytest.raises(ValueError, match='joint2.origin.z'):
        nea.build_kernel(MODEL, NOMINAL, spec)
    spec = parameters.make_parameter_spec(MODEL, {'joint1.gain': (0.9, 1.1)})
    with pytest.raises(ValueError, match='joint1.gain: a joint gain scales'):
        nea.build_kernel(MODEL, NOMINAL, spec)
    with pytest.raises(ValueError, match='not additive'):
        nea.build_kernel(MODEL, NOMINAL, SPEC, actuator='ff_nn')


PANDA_JOINTS = tuple(f'panda_joint{i}' for i in range(1, 8))


@pytest.fixture(scope='module')
def panda():
    model_io = pytest.importorskip('sysid_ros.io.model_io')
    model, params = model_io.load_urdf('example-robot-data:panda')
    assert model.joint_names == PANDA_JOINTS
    return model, params


def test_nea_recovers_panda_masses_and_damping(panda):
    model, nominal = panda
    entries = {**{f'panda_link{i}.mass': (0.1, 5.0) for i in (5, 6, 7)},
               **{f'{j}.damping': (0.0, 2.0) for j in PANDA_JOINTS}}
    spec = parameters.make_parameter_spec(model, entries)
    theta_true = np.asarray(spec.from_params(nominal)).copy()
    theta_true[3:] = np.linspace(0.3, 0.9, 7)
    truth = spec.to_params(jnp.asarray(theta_true), nominal)
    # Analytic excitation within the joint limits: q, qd, qdd exact, torques by RNEA.
    rng = np.random.default_rng(0)
    dt, t = 0.01, np.arange(0.0, 20.0, 0.01)
    lo, hi = np.asarray(model.q_min), np.asarray(model.q_max)
    w = 2 * np.pi * rng.uniform(0.1, 0.6, (4, 7))
    phase = rng.uniform(0, 2 * np.pi, (4, 7))
    amp = rng.uniform(0.5, 1.0, (4, 7))
    amp = amp / amp.sum(0) * 0.3 * (hi - lo)
    arg = w * t[:, None, None] + phase
    q = 0.5 * (lo + hi) + np.sum(amp * np.sin(arg), 1)
    qd = np.sum(amp * w * np.cos(arg), 1)
    qdd = -np.sum(amp * w ** 2 * np.sin(arg), 1)
    tau = jax.jit(jax.vmap(lambda a, b, c: rigid_body.rnea(model, truth, a, b, c)
                           + truth.damping * b))(q, qd, qdd)
    # Noisy sensors; accelerations from the noisy velocities.
    q_n = q + rng.normal(0, NOISE, q.shape)
    qd_n = qd + rng.normal(0, NOISE, q.shape)
    tau_n = np.asarray(tau) + rng.normal(0, 0.05, q.shape)
    guess = theta_true.copy()
    guess[:3] *= np.array([1.4, 0.7, 1.3])
    guess[3:] = 1.0
    # The torques here are instantaneous (not held), so no half-sample shift is applied.
    from scipy.signal import savgol_filter
    smooth = functools.partial(savgol_filter, window_length=11, polyorder=3, axis=0)
    inner = slice(5, -5)
    state, infos = _nea_fit(model, nominal, spec, smooth(q_n)[inner], smooth(qd_n)[inner],
                            smooth(qd_n, deriv=1, delta=dt)[inner], tau_n[inner], guess)
    est = np.asarray(state.theta[0])
    rel = (est - theta_true) / theta_true
    print('Panda NEA relative errors:', dict(zip(spec.names, np.round(rel, 5))))
    assert np.all(np.abs(rel) < 0.02), dict(zip(spec.names, rel))
    assert int(infos[-1].rank[0]) == spec.num_params
    assert bool(infos[-1].raw_consistent[0])
    assert bool(spec.is_consistent(jnp.asarray(est), nominal))


def test_all_names_importable():
    for name in nea.__all__:
        assert hasattr(nea, name), name
