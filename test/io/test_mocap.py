"""Motion capture in the likelihood: `data.mocap_frames` and its errors,
poses carried by `Trajectory` (validation, slicing, resampling, files), the observations they
become, live windows, and a payload identified from joint states and its mocap pose through
`sysid fit --bag`."""

import dataclasses

import numpy as np
import pytest
import yaml

from sysid_ros import cli
from sysid_ros.core.dynamics import observations
from sysid_ros.io import bag_writer, bags, estimator_data, online, pipeline, results
from sysid_ros.io import config as config_io
from sysid_ros.io import trajectory as trajectory_io
from sysid_ros.io.config import ConfigError
from sysid_ros.io.trajectory import DataError, Trajectory
from sysid_ros.io.window_buffer import Window

TOPIC = '/mocap/payload/pose'
OFFSET = [0.0, 0.0, -0.5, 0.0, 0.0, 0.3]       # [m, rad] the held object at link2's tip
TRUTH = np.array([0.6, -0.4])                  # payload.mass [kg], payload.com.z [m]
JOINT_NOISE, MOCAP_NOISE = 0.01, 0.005         # [rad, rad/s], [m]


def _config(**data):
    """A double pendulum of 0.5 m links whose link2 holds a payload of unknown mass and
    centre of mass, tracked by motion capture at the link's tip."""
    return {
        'model': {'builder': 'double_pendulum',
                  'builder_args': {'l1': 0.5, 'l2': 0.5, 'damping': [0.1, 0.05]},
                  'actuator': 'viscous', 'integrator': 'semi_implicit_euler',
                  'dt': 0.01,           # the step that simulates the data (else a finer one)
                  'payload': {'link': 'link2', 'mass': 0.3, 'com': [0.0, 0.0, -0.3]}},
        'parameters': {'payload': {'mass': {'min': 0.0, 'max': 2.0},
                                   'com': {'z': {'min': -0.6, 'max': 0.0}}}},
        'data': {'rate': 100.0, 'noise_std': [JOINT_NOISE], 'mocap_topics': [TOPIC],
                 'mocap_frames': ['link2'], 'mocap_offsets': OFFSET,
                 'mocap_noise_std': MOCAP_NOISE, **data},
        'estimator': {'method': 'lm'}}


@pytest.fixture(scope='module')
def problem():
    return pipeline.build_problem(config_io.from_dict(_config()))


@pytest.fixture(scope='module')
def recording(problem):
    """3 s of joint states and payload poses at the true payload, with noise."""
    params = problem.spec.to_params(TRUTH, problem.base_params)
    return pipeline.simulate(problem, params, duration=3.0, noise=JOINT_NOISE, seed=3,
                             torque_scale=2.0, mocap_noise=MOCAP_NOISE)


# -- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize('key, value, match', [
    ('mocap_frames', ['link1', 'link2'], r'data\.mocap_frames: expected one link per entry '
                                         r'of data\.mocap_topics \(1'),
    ('mocap_offsets', [0.0] * 5, r'data\.mocap_offsets: expected 6 numbers .* \(6\), got 5'),
    ('mocap_noise_std', 0.0, r'data\.mocap_noise_std: expected number > 0'),
])
def test_config_errors_name_the_key(key, value, match):
    with pytest.raises(ConfigError, match=match):
        config_io.from_dict(_config(**{key: value}))


def test_unknown_tracked_link_is_a_config_error():
    cfg = config_io.from_dict(_config(mocap_frames=['gripper']))
    with pytest.raises(ConfigError, match=r"data\.mocap_frames\[0\]: no link named 'gripper'"):
        pipeline.build_problem(cfg)


def test_topics_without_frames_are_not_observed():
    d = _config()
    for key in ('mocap_frames', 'mocap_offsets', 'mocap_noise_std'):
        del d['data'][key]
    assert pipeline.build_problem(config_io.from_dict(d)).mocap == ()


def test_a_fixed_urdf_frame_is_placed_on_the_body_that_carries_it(mixed_urdf):
    # `tool` hangs 0.15 m along z of link `b` (fixed joint): the tracked frame is b's body
    # frame moved by that placement, then by the configured offset.
    d = {'model': {'urdf': mixed_urdf}, 'parameters': {'b': {'mass': {'min': 0.1, 'max': 2}}},
         'data': {'mocap_topics': ['/tool', '/b'], 'mocap_frames': ['tool', 'b'],
                  'mocap_offsets': [0.1, 0, 0, 0, 0, 0.5] + [0.0] * 6}}
    problem = pipeline.build_problem(config_io.from_dict(d))
    b = problem.model.link_names.index('b')
    assert [frame.body for frame in problem.mocap] == [b, b]
    np.testing.assert_allclose(problem.mocap[0].offset, [0.1, 0, 0.15, 0, 0, 0.5], atol=1e-12)
    assert problem.mocap[1].offset == (0.0,) * 6


# -- trajectories with poses -----------------------------------------------------------------

def _posed(num=50, flip=True):
    """A trajectory with the poses of two frames turning about z, the quaternion signs of
    every other sample flipped (the same rotations)."""
    t = np.arange(num) * 0.01
    angle = np.stack([t, -2 * t], axis=1)                                       # (T, 2)
    quat = np.stack([0 * angle, 0 * angle, np.sin(angle / 2), np.cos(angle / 2)], -1)
    if flip:
        quat[1::2] *= -1.0
    position = np.stack([t, 2 * t, 0 * t], axis=1)[:, None].repeat(2, axis=1)
    q = np.stack([t, t], axis=1)
    return Trajectory(t=t, q=q, qd=q, tau=q, joint_names=('joint1', 'joint2'),
                      mocap_position=position, mocap_orientation=quat)


def test_poses_are_validated_sliced_resampled_and_saved(tmp_path):
    traj = trajectory_io.validate_trajectory(_posed())
    assert traj.num_tracked == 2
    smooth = _posed(flip=False).mocap_orientation
    np.testing.assert_allclose(traj.mocap_orientation, smooth, atol=1e-12)  # signs continuous
    part = traj.sample_range(10, 20)
    assert part.mocap_position.shape == (10, 2, 3) and part.mocap_orientation.shape == (10, 2, 4)
    np.testing.assert_array_equal(part.mocap_position, traj.mocap_position[10:20])
    fine = trajectory_io.resample(traj, 200.0)
    assert fine.mocap_orientation.shape == (fine.num_samples, 2, 4)
    np.testing.assert_allclose(np.linalg.norm(fine.mocap_orientation, axis=-1), 1.0)
    np.testing.assert_allclose(fine.mocap_position[1, 0], [0.005, 0.01, 0.0], atol=1e-12)
    # Halfway between samples: the rotation by the mean angle (to second order in the step).
    half = np.array([0.0, 0.0, np.sin(0.0025), np.cos(0.0025)])
    assert abs(fine.mocap_orientation[1, 0] @ half) == pytest.approx(1.0, abs=1e-9)
    trajectory_io.save_trajectory(tmp_path / 'run.npz', traj)
    loaded = trajectory_io.load_trajectory(tmp_path / 'run.npz', ('joint1', 'joint2'))
    np.testing.assert_array_equal(loaded.mocap_position, traj.mocap_position)
    np.testing.assert_array_equal(loaded.mocap_orientation, traj.mocap_orientation)
    with pytest.raises(DataError, match=r'run\.csv: a \.csv holds no motion-capture poses'):
        trajectory_io.save_trajectory(tmp_path / 'run.csv', traj)


@pytest.mark.parametrize('change, match', [
    ({'mocap_orientation': None}, 'mocap_orientation: missing beside mocap_position'),
    ({'mocap_position': np.zeros((50, 3))}, r'mocap_position: expected shape \(50, K, 3\)'),
    ({'mocap_orientation': np.zeros((50, 2, 4))}, 'mocap_orientation: zero quaternion at row 0'),
    ({'mocap_position': np.full((50, 2, 3), np.nan)}, 'mocap_position: non-finite value'),
])
def test_bad_poses_name_the_key(change, match):
    with pytest.raises(DataError, match=match):
        trajectory_io.validate_trajectory(dataclasses.replace(_posed(), source='run', **change))


# -- observations ----------------------------------------------------------------------------

def test_measured_poses_become_the_predicted_points_at_the_true_states(problem):
    params = problem.spec.to_params(TRUTH, problem.base_params)
    clean = pipeline.simulate(problem, params, duration=0.5, seed=1)
    points = estimator_data.mocap_points(problem, [clean])[0]
    states = np.concatenate([clean.q, clean.qd], axis=1)
    expected = observations.mocap_trajectory(problem.model, params, states, problem.mocap)
    assert points.shape == (clean.num_samples, 12)
    np.testing.assert_allclose(points, expected, atol=1e-12)


def test_shooting_data_observes_joint_states_then_points(problem, recording):
    sp = estimator_data.shooting_problem(problem, [recording])
    nv = problem.model.nv
    assert sp.likelihood.observation_dim == 2 * nv + 12
    assert sp.data.observations.shape[-1] == 2 * nv + 12
    np.testing.assert_array_equal(sp.data.observations[..., :2 * nv], sp.data.states)
    np.testing.assert_allclose(sp.data.noise_std, [JOINT_NOISE] * 2 * nv + [MOCAP_NOISE] * 12)
    assert sp.info['mocap_frames'] == ['link2'] and sp.info['noise_std_source'] == 'config'
    # Left empty, the mocap noise is estimated from the poses: near the simulated one.
    cfg = problem.config
    estimated = dataclasses.replace(problem, config=dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, mocap_noise_std=None)))
    info = estimator_data.shooting_problem(estimated, [recording]).info
    assert info['noise_std_source'] == 'estimated'
    assert 0.5 * MOCAP_NOISE < info['mocap_noise_std'] < 2.0 * MOCAP_NOISE
    bare = dataclasses.replace(recording, mocap_position=None, mocap_orientation=None)
    with pytest.raises(DataError, match=r'simulate: mocap_position: expected the poses of 1 '
                                        r'tracked frame\(s\) \(data.mocap_topics: /mocap'):
        estimator_data.shooting_problem(problem, [bare])


def _live(problem):
    """The problem as the live node runs it: csvgd, 4 particles, 1 s windows."""
    cfg = problem.config
    session = online.OnlineSession(dataclasses.replace(problem, config=dataclasses.replace(
        cfg, estimator=dataclasses.replace(cfg.estimator, method='csvgd', particles=4),
        online=dataclasses.replace(cfg.online, window_length=1.0, iterations_per_window=2))))
    return session, session.window_samples


def _window(recording, samples):
    return Window(t=recording.t[:samples], q=recording.q[:samples], qd=recording.qd[:samples],
                  tau=recording.tau[:samples],
                  mocap_position=recording.mocap_position[:samples],
                  mocap_orientation=recording.mocap_orientation[:samples])


def test_live_windows_carry_the_poses_into_the_likelihood(problem, recording):
    session, samples = _live(problem)
    window = _window(recording, samples)
    traj = online.window_trajectory(session.problem, window)
    np.testing.assert_array_equal(traj.mocap_position, window.mocap_position)
    prepared = estimator_data.method_data(session.problem, [traj], 'shooting')
    assert prepared.data.observations.shape == (1, samples, 2 * problem.model.nv + 12)


@pytest.mark.slow
def test_online_session_steps_on_windows_with_poses(problem, recording):
    session, samples = _live(problem)
    result = session.update(_window(recording, samples))
    assert session.windows == 1 and np.all(np.isfinite(result.mean)) and not result.diverged


# -- a payload identified from its pose and the joint states, through `sysid fit --bag` --------

def test_fit_from_a_bag_with_a_mocap_topic_identifies_the_payload(problem, recording,
                                                                  tmp_path):
    bag = tmp_path / 'runs'
    bag_writer.write_trajectory_bag(bag, [recording], mocap_topics=[TOPIC])
    segments = bags.read_bag(bag, problem.joint_names, problem.config.data)
    read = segments[0].trajectory
    np.testing.assert_allclose(read.mocap_position, recording.mocap_position, atol=1e-9)
    same = np.abs(np.sum(read.mocap_orientation * recording.mocap_orientation, axis=-1))
    np.testing.assert_allclose(same, 1.0, atol=1e-9)
    config = tmp_path / 'payload.yaml'
    config.write_text(yaml.safe_dump({'/**': {'ros__parameters': _config()}}, sort_keys=False))
    out = tmp_path / 'out'
    assert cli.main(['fit', '--config', str(config), '--bag', str(bag),
                     '--out', str(out)]) == 0
    estimate = results.read_estimate(out)
    for name, truth in zip(problem.names, TRUTH):
        entry = estimate['parameters'][name]
        print(f'{name}: {entry["mean"]:.5f} +- {entry["std"]:.2g} (truth {truth})')
        assert abs(entry['mean'] - truth) < 3.0 * entry['std'] < 0.01 * abs(truth), name
