"""CSVGD on a small version of the seed's double pendulum (two unknown link lengths, one
trajectory of 40 steps in 4 shooting windows, 8 particles): the defects go to ~0, the
particles stay within their bounds and reach the true lengths, diverging particles are
re-seeded without poisoning the others, two host devices give the result of one, and bad
input fails on the host.

All tests share one problem shape, so `step` compiles once per session (plus once in the
sharding subprocess).
"""

import functools
import os
import pathlib
import subprocess
import sys
import textwrap

import csvgd_problems as dp
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from sysid_ros.core.inference import shooting
from sysid_ros.core.inference.base import KernelData
from sysid_ros.core.inference.kernels import csvgd
from sysid_ros.core.inference.kernels import svgd
from sysid_ros.core.inference.kernels.csvgd import CSVGDInfo, CSVGDState
from sysid_ros.core.inference.particles import sobol_particles
from sysid_ros.core.likelihoods import likelihood as lk

T, W, P = 40, 4, 8
TRUE_LENGTHS = (1.5, 2.0)
NOISE = 0.05
# Lengths below this poison the simulation (NaN masses): only the non-finite test puts
# particles there (Sobol points of the other tests stay above it).
POISON_BELOW = 0.52
SETTING = lk.make_shooting_likelihood(dp.MODEL, dp.DT, W, 'sum', integrator=dp.INTEGRATOR,
                                      actuator=dp.ACTUATOR)
ESTIMATOR = csvgd.build_kernel(SETTING, dp.SPEC, optax.adam(5e-2),
                               params_fn=dp.make_params_fn(POISON_BELOW), mesh=None)
STEP = jax.jit(ESTIMATOR.step)
THETA0 = sobol_particles(dp.SPEC, P, seed=1)


def _data(lengths=TRUE_LENGTHS):
    states = dp.simulate(*lengths, T)[None]
    return lk.make_trajectory_data(SETTING, states, np.zeros((1, T, 2)), NOISE)


@functools.lru_cache(maxsize=None)
def _run(lengths=TRUE_LENGTHS, num_steps=400):
    """Run CSVGD; return the final state, every info, and the theta of every step."""
    data = _data(lengths)
    state = ESTIMATOR.init(jax.random.key(0), THETA0, KernelData(data))
    infos, thetas = [], [np.asarray(state.theta)]
    for _ in range(num_steps):
        state, info = STEP(state, KernelData(data))
        infos.append(jax.device_get(info))
        thetas.append(np.asarray(state.theta))
    return state, infos, np.stack(thetas)


def test_all_names_import():
    for name in csvgd.__all__:
        assert hasattr(csvgd, name), name


def test_sobol_particles_are_seeded_scrambled_sobol_points_in_the_bounds():
    from scipy.stats import qmc
    theta = sobol_particles(dp.SPEC, 16, seed=3)
    expected = qmc.scale(qmc.Sobol(2, scramble=True, seed=3).random(16),
                         dp.SPEC.lower_bounds, dp.SPEC.upper_bounds)
    np.testing.assert_array_equal(theta, expected)
    assert np.all(dp.SPEC.within_bounds(theta))
    assert not np.array_equal(theta, sobol_particles(dp.SPEC, 16, seed=4))
    assert sobol_particles(dp.SPEC, 5).shape == (5, 2)     # no power of two: fine


def test_state_and_info_shapes():
    data = _data()
    state = ESTIMATOR.init(jax.random.key(0), THETA0, KernelData(data))
    assert isinstance(state, CSVGDState)
    c = 1 * (W - 1) * 4
    assert state.theta.shape == (P, 2) and state.particles.shape == (P, 2 + c)
    assert state.multipliers.shape == (P, c)
    np.testing.assert_allclose(state.theta, THETA0, rtol=1e-12)
    theta, states = shooting.split_particles(dp.SPEC, SETTING, state.particles, data)
    np.testing.assert_allclose(theta, THETA0, rtol=1e-12)
    np.testing.assert_allclose(states[0], lk.initial_shooting_states(SETTING, data),
                               atol=1e-12)
    state, info = STEP(state, KernelData(data))
    assert isinstance(info, CSVGDInfo)
    for field in ('log_lik', 'max_defect', 'grad_norm'):
        assert getattr(info, field).shape == (P,), field
    assert info.num_nonfinite.shape == () and int(state.iteration) == 1


def test_defects_vanish_and_particles_reach_the_truth():
    state, infos, thetas = _run()
    max_defect = np.array([np.max(i.max_defect) for i in infos])
    assert max_defect[0] > 0.1                     # Sobol lengths: windows disagree at first
    assert max_defect[-1] < 1e-2, max_defect[-10:]   # normalised units (state std)
    lengths = dp.lengths_from_theta(state.theta)
    assert np.all(np.linalg.norm(lengths - TRUE_LENGTHS, axis=1) < 0.3), lengths
    assert all(int(i.num_nonfinite) == 0 for i in infos)
    # Every particle's shooting states now lie on its own simulation: one rollout from x0
    # with its lengths passes through all of them.
    data = _data()
    _, states = shooting.split_particles(dp.SPEC, SETTING, state.particles, data)
    h = T // W
    for k in np.argsort(np.linalg.norm(lengths - TRUE_LENGTHS, axis=1))[:2]:
        rollout = dp.simulate(*lengths[k], T)
        scale = np.asarray(data.state_scale)
        np.testing.assert_allclose(states[k, 0] / scale, rollout[h::h][:W - 1] / scale,
                                   atol=2e-2)


def test_particles_never_leave_their_bounds():
    """Data made with l2 = 5.5 m, beyond the 5 m bound: particles press against it and
    stay inside at every step (the sigmoid bijection cannot leave the box)."""
    _, _, thetas = _run(lengths=(1.5, 5.5))
    assert np.all(dp.SPEC.within_bounds(thetas))
    lengths = dp.lengths_from_theta(thetas[-1])
    assert np.max(lengths[:, 1]) > 4.75 and np.median(lengths[:, 1]) > 4.0
    assert np.all(lengths[:, 1] < 5.0)


def test_diverging_particles_are_reseeded_without_poisoning_the_others():
    data = _data()
    theta0 = THETA0.copy()
    theta0[:2, 0] = -0.51                 # l1 = 0.51 m < POISON_BELOW: NaN simulation
    state = ESTIMATOR.init(jax.random.key(0), theta0, KernelData(data))
    new, info = STEP(state, KernelData(data))
    assert int(info.num_nonfinite) == 2 and int(new.num_reseeded) == 2
    assert np.all(np.isneginf(info.log_lik[:2])) and np.all(np.isfinite(info.log_lik[2:]))
    for leaf in (new.theta, new.particles, new.multipliers):
        assert np.all(np.isfinite(np.asarray(leaf)))
    # Re-seeded next to finite particles (jitter 0.05 in z), hence out of the poisoned band.
    assert np.all(dp.lengths_from_theta(new.theta)[:2, 0] > POISON_BELOW)
    # The others are untouched by the NaN: same log-likelihood as with healthy neighbours,
    # and Adam's first step moves each of their coordinates by the learning rate.
    healthy, healthy_info = STEP(ESTIMATOR.init(jax.random.key(0), THETA0, KernelData(data)),
                                 KernelData(data))
    np.testing.assert_allclose(info.log_lik[2:], healthy_info.log_lik[2:], rtol=1e-12)
    moved = np.abs(np.asarray(new.particles[2:] - state.particles[2:]))
    np.testing.assert_allclose(moved[:, :2], 5e-2, rtol=1e-3)


def test_bad_input_fails_before_compilation():
    data = _data()
    with pytest.raises(ValueError, match='particles'):
        sobol_particles(dp.SPEC, 0)
    with pytest.raises(ValueError, match='at least one particle'):
        ESTIMATOR.init(jax.random.key(0), np.zeros((0, 2)), KernelData(data))
    with pytest.raises(ValueError, match=r'\(P, 2\)'):
        ESTIMATOR.init(jax.random.key(0), np.zeros((4, 3)), KernelData(data))
    with pytest.raises(ValueError, match='does not divide'):
        other = lk.make_shooting_likelihood(dp.MODEL, dp.DT, 7)
        csvgd.build_kernel(other, dp.SPEC, optax.adam(0.1), base_params=dp.BASE).init(
            jax.random.key(0), THETA0, KernelData(data))
    with pytest.raises(ValueError, match='exactly one'):
        csvgd.build_kernel(SETTING, dp.SPEC, optax.adam(0.1))
    with pytest.raises(ValueError, match='kernel'):
        csvgd.build_kernel(SETTING, dp.SPEC, optax.adam(0.1), base_params=dp.BASE, kernel='x')


_SHARDED_SCRIPT = textwrap.dedent("""
    import sys
    import jax
    jax.config.update('jax_enable_x64', True)
    import numpy as np
    sys.path.insert(0, {test_dir!r})
    import test_csvgd as t
    from test_csvgd import _gaussian, _svgd_run
    from sysid_ros.core.inference.base import KernelData
    from sysid_ros.core.inference.kernels import csvgd
    from sysid_ros.core.inference.kernels import svgd
    import optax
    assert jax.device_count() == 2, jax.devices()
    estimator = csvgd.build_kernel(t.SETTING, t.dp.SPEC, optax.adam(5e-2),
                                   params_fn=t.dp.make_params_fn(t.POISON_BELOW), mesh='auto')
    step = jax.jit(estimator.step)
    data = t._data()
    state = estimator.init(jax.random.key(0), t.THETA0, KernelData(data))
    for _ in range(3):
        state, info = step(state, KernelData(data))
    assert len(state.particles.sharding.device_set) == 2, state.particles.sharding
    assert not state.particles.sharding.is_fully_replicated
    svgd_state = _svgd_run(svgd.build_kernel(_gaussian, optax.adam(0.1), mesh='auto'))
    assert len(svgd_state.particles.sharding.device_set) == 2
    np.savez({out!r}, theta=state.theta, particles=state.particles,
             multipliers=state.multipliers, log_lik=info.log_lik,
             svgd=svgd_state.particles)
""")


def _gaussian(x, data):
    return -0.5 * jnp.sum(jnp.square(x - 1.0))


def _svgd_run(estimator):
    """Five SVGD steps on a Gaussian from fixed particles (sharding check)."""
    state = estimator.init(jax.random.key(0), jax.random.normal(jax.random.key(1), (8, 3)),
                           None)
    step = jax.jit(estimator.step)
    for _ in range(5):
        state, _ = step(state, None)
    return state


@pytest.mark.slow  # two fresh XLA processes compile everything again (about 2 min)
def test_two_host_devices_give_the_result_of_one(tmp_path):
    """Same three CSVGD steps (and five SVGD steps on a Gaussian) with the particles sharded
    over two forced host devices (in a subprocess: the device count is fixed when JAX
    starts) and on one device here."""
    out = tmp_path / 'sharded.npz'
    test_dir = str(pathlib.Path(__file__).resolve().parent)
    env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=(
        os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=2'))
    env['PYTHONPATH'] = os.pathsep.join(sys.path)
    script = _SHARDED_SCRIPT.format(test_dir=test_dir, out=str(out))
    result = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    sharded = np.load(out)
    data = _data()
    state = ESTIMATOR.init(jax.random.key(0), THETA0, KernelData(data))
    for _ in range(3):
        state, info = STEP(state, KernelData(data))
    single = _svgd_run(svgd.build_kernel(_gaussian, optax.adam(0.1), mesh=None))
    for name, value in (('theta', state.theta), ('particles', state.particles),
                        ('multipliers', state.multipliers), ('log_lik', info.log_lik),
                        ('svgd', single.particles)):
        np.testing.assert_allclose(sharded[name], np.asarray(value), rtol=1e-10, atol=1e-10,
                                   err_msg=name)


def test_a_carried_start_profile_follows_the_profile_fitted_every_step():
    """`start: profiled` on noisy single-shooting data: CSVGD carries each particle's start
    profile (refreshed on the first step and after PROFILE_REFRESH evaluations); its first
    step equals the kernel that fits the start in every step (`carry_start=False`) and 12
    steps later (one refresh in between) the particles still agree to a small fraction of
    the distance they travelled. The particles start near the truth, where two Gauss-Newton
    steps have converged (far from it the carried profile's extra linearised step fits better)."""
    setting = lk.make_shooting_likelihood(dp.MODEL, dp.DT, 1, 'sum', integrator=dp.INTEGRATOR,
                                          actuator=dp.ACTUATOR, start='profiled')
    clean = dp.simulate(*TRUE_LENGTHS, T)[None]
    states = clean + 0.01 * np.random.default_rng(3).normal(size=clean.shape)
    data = lk.make_trajectory_data(setting, states, np.zeros((1, T, 2)), 0.01)
    kernels = [csvgd.build_kernel(setting, dp.SPEC, optax.adam(5e-2),
                                  params_fn=dp.make_params_fn(POISON_BELOW), mesh=None,
                                  carry_start=carry) for carry in (True, False)]
    offsets = np.random.default_rng(4).uniform(-0.03, 0.03, size=(P, 2))
    theta0 = np.stack([dp.theta_from_lengths(np.add(TRUE_LENGTHS, d)) for d in offsets])
    states_, infos = [], []
    for kernel in kernels:
        state = kernel.init(jax.random.key(0), theta0, KernelData(data))
        step = jax.jit(kernel.step)
        first = None
        for _ in range(12):
            state, info = step(state, KernelData(data))
            first = info if first is None else first
        states_.append(state)
        infos.append(first)
    carried, full = states_
    assert full.profile is None
    assert carried.profile.starts.shape == (P, 1, 4)
    np.testing.assert_array_equal(carried.profile.age, 2)
    np.testing.assert_allclose(infos[0].log_lik, infos[1].log_lik, rtol=1e-9)
    # Measured: 2.4e-3 apart at most, 0.041 travelled on average (each kernel fits the
    # starts to its own accuracy, and CSVGD's paths amplify the difference a little).
    travelled = np.mean(np.abs(np.asarray(full.theta) - theta0))
    np.testing.assert_array_less(np.abs(np.asarray(carried.theta - full.theta)),
                                 0.15 * travelled)
    # Data of another shape (two pieces, as a mini-batch brings): the carried profile is
    # fitted afresh for those pieces, not applied with the old pieces' shape (which failed
    # to trace). Traced only (`eval_shape`): compiling it would cost a third program.
    noisy = clean + 0.01 * np.random.default_rng(5).normal(size=clean.shape)
    two = lk.make_trajectory_data(setting, np.concatenate([states, noisy]),
                                  np.zeros((2, T, 2)), 0.01)
    moved, _ = jax.eval_shape(kernels[0].step, carried, KernelData(two))
    assert moved.profile.starts.shape == (P, 2, 4)
