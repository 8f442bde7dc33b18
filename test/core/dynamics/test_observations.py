"""Motion-capture observation model: points against Pinocchio's frame placements, geometry of
the axis points, the likelihood with mocap observations (by hand, gradients, validation) and
the state-dimension path left as it was."""

import dataclasses

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from sysid_ros.core.dynamics import integrators
from sysid_ros.core.dynamics import observations
from sysid_ros.core.likelihoods import likelihood as lk
from sysid_ros.core.likelihoods import shooting_windows
from sysid_ros.core.model import builders

CHAIN = builders.chain(4, lengths=[0.3, 0.4, 0.2, 0.5], masses=[1.0, 2.0, 1.0, 0.5],
                       axis=(0.0, 0.6, 0.8))
OFFSET = (0.05, -0.02, 0.1, 0.3, -0.2, 0.7)      # [m, rad] tracked frame in its body
DT, T, W = 0.01, 12, 3
NOISE = 0.01


def _pinocchio_points(model, params, q, frames):
    """Reference: Pinocchio's forward kinematics, the offset composed as an SE3."""
    pin = pytest.importorskip('pinocchio')
    from sysid_ros.io import model_io
    pmodel = model_io.to_pinocchio(model, params)
    pdata = pmodel.createData()
    pin.forwardKinematics(pmodel, pdata, model_io.pinocchio_configuration(model, q))
    out = []
    for frame in frames:
        offset = np.asarray(frame.offset)
        placement = pdata.oMi[frame.body + 1] * pin.SE3(pin.rpy.rpyToMatrix(offset[3:]),
                                                        offset[:3])
        R, p = placement.rotation, placement.translation
        out.append(np.concatenate([p, p + R[:, 0], p + R[:, 1], p + R[:, 2]]))
    return np.concatenate(out)


def test_all_names_import():
    for name in observations.__all__:
        assert hasattr(observations, name), name


@pytest.mark.parametrize('robot', ['chain', 'panda'])
def test_points_match_pinocchio_frame_placements(robot):
    if robot == 'chain':
        model, params = CHAIN
    else:
        model_io = pytest.importorskip('sysid_ros.io.model_io')
        model, params = model_io.load_urdf('example-robot-data:panda')
    last = model.num_bodies - 1
    frames = observations.make_mocap_frames(
        model, [model.link_names[last], (1, OFFSET), (last, OFFSET)])
    qs = np.random.default_rng(0).uniform(-1.5, 1.5, (5, model.nv))
    got = jax.jit(jax.vmap(observations.mocap_points, in_axes=(None, None, 0, None)),
                  static_argnums=3)(model, params, jnp.asarray(qs), frames)
    assert got.shape == (5, 36)
    for q, points in zip(qs, np.asarray(got)):
        np.testing.assert_allclose(points, _pinocchio_points(model, params, q, frames),
                                   atol=1e-9, rtol=0)


def test_axis_points_are_one_metre_out_and_orthogonal():
    model, params = CHAIN
    frames = observations.make_mocap_frames(model, [(2, OFFSET)])
    q = jnp.asarray(np.random.default_rng(1).normal(size=model.nv))
    points = np.asarray(observations.mocap_points(model, params, q, frames)).reshape(4, 3)
    axes = points[1:] - points[0]
    assert observations.AXIS_LENGTH == 1.0
    np.testing.assert_allclose(np.linalg.norm(axes, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(axes @ axes.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(axes), 1.0, atol=1e-12)    # right-handed


def test_mocap_trajectory_vmaps_over_leading_axes():
    model, params = CHAIN
    frames = observations.make_mocap_frames(model, ['link4'])
    states = jnp.asarray(np.random.default_rng(2).normal(size=(2, 3, 2 * model.nv)))
    got = observations.mocap_trajectory(model, params, states, frames)
    assert got.shape == (2, 3, 12)
    np.testing.assert_allclose(got[1, 2], observations.mocap_points(
        model, params, states[1, 2, :model.nv], frames), atol=1e-14)


def test_pose_points_match_mocap_points_at_the_true_states():
    # A measured pose (position, quaternion [x, y, z, w]) of a tracked frame becomes the same
    # points as the observation model predicts from forward kinematics; both signs of the
    # quaternion are the same rotation.
    rotation = pytest.importorskip('scipy.spatial.transform').Rotation
    model, params = CHAIN
    frames = observations.make_mocap_frames(model, ['link4', (1, OFFSET)])
    qs = jnp.asarray(np.random.default_rng(4).uniform(-1.5, 1.5, (6, model.nv)))
    placements = [jax.vmap(lambda q, f=f: observations.frame_placement(model, params, q, f))(qs)
                  for f in frames]
    position = np.stack([np.asarray(p) for _, p in placements], axis=1)          # (6, 2, 3)
    quaternion = np.stack([rotation.from_matrix(np.asarray(R)).as_quat()
                           for R, _ in placements], axis=1)                      # (6, 2, 4)
    quaternion[::2] *= -1.0
    got = observations.pose_points(position, quaternion)
    expected = jax.vmap(lambda q: observations.mocap_points(model, params, q, frames))(qs)
    assert got.shape == (6, 24)
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize('frames, match', [
    ([], 'at least one'),
    (['nope'], 'unknown link'),
    ([7], 'outside'),
    ([('link1', (0.0, 0.0))], 'offset'),
    ([('link1', (0.0,) * 5 + (np.nan,))], 'offset'),
    (['link1', 0], 'twice'),
    ([object()], 'link name'),
])
def test_bad_frames_are_rejected(frames, match):
    with pytest.raises(ValueError, match=match):
        observations.make_mocap_frames(CHAIN[0], frames)


# -- the likelihood with motion-capture observations -------------------------------------------

def _mocap_setting(num_windows=W, frames=('link4', ('link2', OFFSET))):
    return lk.make_shooting_likelihood(CHAIN[0], DT, num_windows, 'product',
                                       integrator='semi_implicit_euler', actuator='viscous',
                                       mocap=list(frames))


def _truth(params):
    model = CHAIN[0]
    x0 = jnp.asarray(np.concatenate([np.linspace(0.3, -0.4, model.nv), np.zeros(model.nv)]))
    controls = jnp.asarray(0.5 * np.sin(np.arange(T)[:, None] * 0.3
                                        + np.arange(model.nv)[None]))
    states = integrators.rollout(model, params, x0, controls, DT, actuator='viscous')
    return np.asarray(states), np.asarray(controls)


def _mocap_data(setting, params, noise=NOISE, seed=3):
    states, controls = _truth(params)
    points = np.asarray(observations.mocap_trajectory(setting.model, params,
                                                      jnp.asarray(states), setting.mocap))
    measured = points + noise * np.random.default_rng(seed).standard_normal(points.shape)
    return lk.make_trajectory_data(setting, states[None], controls[None], noise,
                                   observations=measured[None]), states, points


def test_mocap_log_likelihood_by_hand():
    model, params = CHAIN
    setting = _mocap_setting(num_windows=1)
    assert setting.observation_dim == 24
    data, states, _ = _mocap_data(setting, params)
    assert data.observations.shape == (1, T + 1, 24) and data.noise_std.shape == (24,)
    heavier = dataclasses.replace(params, inertial=params.inertial.at[3].multiply(1.3))
    log_likelihood = jax.jit(lk.log_likelihood, static_argnums=0)
    terms = log_likelihood(setting, heavier, jnp.zeros((1, 0, 2 * model.nv)), data)
    rollout = integrators.rollout(model, heavier, data.x0[0], data.controls[0], DT,
                                  actuator='viscous')
    predicted = np.concatenate([_pinocchio_points(model, heavier, q, setting.mocap)
                                for q in np.asarray(rollout)[:, :model.nv]]).reshape(T + 1, 24)
    residual = (predicted - np.asarray(data.observations[0])) / NOISE
    expected = -0.5 * np.sum(residual ** 2) - (T + 1) * 24 * np.log(np.sqrt(2 * np.pi) * NOISE)
    np.testing.assert_allclose(terms.log_lik, expected, rtol=1e-10)


def test_mocap_shooting_states_start_on_the_measured_states_without_defects():
    model, params = CHAIN
    setting = _mocap_setting()
    data, states, _ = _mocap_data(setting, params)
    shooting = lk.initial_shooting_states(setting, data)
    h = T // W
    np.testing.assert_allclose(shooting[0], states[h * np.arange(1, W)], atol=0)
    terms = lk.log_likelihood(setting, params, shooting, data)
    np.testing.assert_allclose(terms.defects, 0.0, atol=1e-12)
    # The constraint weight of csvgd uses the spread of the measured points.
    scale = setting.observation_scale(data)
    assert scale.shape == (24,) and np.all(np.asarray(scale) >= NOISE)


def test_mocap_likelihood_gradient_wrt_an_inertial_parameter():
    model, params = CHAIN
    setting = _mocap_setting()
    data, _, _ = _mocap_data(setting, params)
    shooting = lk.initial_shooting_states(setting, data)

    @jax.jit
    def log_lik(mass_moment):
        # The x first moment (m c_x) of the third body: an inertial parameter.
        inertial = params.inertial.at[2, 1].set(mass_moment)
        terms = lk.log_likelihood(setting, dataclasses.replace(params, inertial=inertial),
                                  shooting, data)
        return terms.log_lik + jnp.sum(terms.defects)

    x = jnp.asarray(float(params.inertial[2, 1]) + 0.05)
    check_grads(log_lik, (x,), order=1, modes=['rev'], eps=1e-5, atol=1e-5, rtol=1e-5)
    eps = 1e-6
    fd = (log_lik(x + eps) - log_lik(x - eps)) / (2 * eps)
    np.testing.assert_allclose(jax.grad(log_lik)(x), fd, rtol=1e-5)
    assert abs(float(fd)) > 1.0


def test_mocap_data_and_settings_are_rejected_before_compilation():
    model, params = CHAIN
    setting = _mocap_setting()
    states, controls = _truth(params)
    with pytest.raises(ValueError, match='motion-capture likelihood needs the measured'):
        lk.make_trajectory_data(setting, states[None], controls[None], NOISE)
    with pytest.raises(ValueError, match='12 per tracked frame'):
        lk.make_trajectory_data(setting, states[None], controls[None], NOISE,
                                observations=np.zeros((1, T + 1, 12)))
    with pytest.raises(ValueError, match='noise_std'):
        lk.make_trajectory_data(setting, states[None], controls[None], np.ones(3),
                                observations=np.zeros((1, T + 1, 24)))
    with pytest.raises(ValueError, match='unknown link'):
        lk.make_shooting_likelihood(model, DT, mocap=['gripper'])
    data, _, _ = _mocap_data(setting, params)
    with pytest.raises(ValueError, match='needs the measured states'):
        setting.check_data(data._replace(states=None))
    with pytest.raises(ValueError, match='noise_std'):
        setting.check_data(data._replace(noise_std=data.noise_std[:12]))


def test_state_dimension_path_is_unchanged():
    model, params = CHAIN
    setting = lk.make_shooting_likelihood(model, DT, W, 'sum', observed=(0, 5),
                                          actuator='viscous')
    assert setting.mocap == () and setting.observation_dim == 2
    states, controls = _truth(params)
    data = lk.make_trajectory_data(setting, states[None], controls[None], 0.1)
    np.testing.assert_array_equal(data.observations[0], states[:, [0, 5]])
    np.testing.assert_array_equal(shooting_windows.observe(setting, params, jnp.asarray(states)),
                                  states[:, [0, 5]])
    np.testing.assert_array_equal(setting.observation_scale(data),
                                  np.asarray(data.state_scale)[[0, 5]])
    shooting = lk.initial_shooting_states(setting, data)
    np.testing.assert_array_equal(shooting[0][:, [0, 5]], states[[T // W, 2 * T // W]][:, [0, 5]])
    np.testing.assert_array_equal(shooting[0][:, 1], np.broadcast_to(data.state_mean[1], W - 1))


def test_joint_states_and_mocap_observed_together():
    # observed state dims and tracked frames stack: O = len(observed) + 12 F, and the
    # log-likelihood is that of the states plus that of the points.
    model, params = CHAIN
    dims = tuple(range(2 * model.nv))
    both = lk.make_shooting_likelihood(model, DT, 1, 'product', observed=dims,
                                       actuator='viscous', mocap=['link4'])
    points_only = lk.make_shooting_likelihood(model, DT, 1, 'product', actuator='viscous',
                                              mocap=['link4'])
    states_only = lk.make_shooting_likelihood(model, DT, 1, 'product', actuator='viscous')
    assert both.observation_dim == 2 * model.nv + 12 and points_only.observed_dims == ()
    states, controls = _truth(params)
    noise = np.random.default_rng(5).normal(size=states.shape)
    measured = states + 0.01 * noise
    points = np.asarray(observations.mocap_trajectory(model, params, jnp.asarray(states),
                                                      both.mocap)) + 0.002
    state_noise, point_noise = np.full(2 * model.nv, 0.01), np.full(12, 0.003)
    data = lk.make_trajectory_data(both, measured[None], controls[None],
                                   np.concatenate([state_noise, point_noise]),
                                   observations=np.concatenate([measured, points], 1)[None])
    data_p = lk.make_trajectory_data(points_only, measured[None], controls[None], point_noise,
                                     observations=points[None])
    data_s = lk.make_trajectory_data(states_only, measured[None], controls[None], state_noise)
    np.testing.assert_allclose(shooting_windows.observe(both, params, jnp.asarray(states)),
                               np.concatenate([states, points - 0.002], 1), atol=1e-12)
    heavier = dataclasses.replace(params, inertial=params.inertial.at[3].multiply(1.3))
    empty = jnp.zeros((1, 0, 2 * model.nv))
    total = lk.log_likelihood(both, heavier, empty, data).log_lik
    parts = (lk.log_likelihood(points_only, heavier, empty, data_p).log_lik
             + lk.log_likelihood(states_only, heavier, empty, data_s).log_lik)
    np.testing.assert_allclose(total, parts, rtol=1e-12)
    scale = both.observation_scale(data)
    np.testing.assert_array_equal(scale[:2 * model.nv], data.state_scale)
    np.testing.assert_array_equal(scale[2 * model.nv:], points_only.observation_scale(data_p))
    with pytest.raises(ValueError, match=r'8 observed state dims \+ 12 per tracked frame'):
        lk.make_trajectory_data(both, measured[None], controls[None], 0.01,
                                observations=points[None])
