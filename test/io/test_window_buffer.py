"""Sliding-window buffer: resampling by name, windows on the grid, bad input counted (never
raised), jumps back in time, gaps, lag and overflow, mocap poses, statistics, threads."""

import threading

import numpy as np
import pytest

from sysid_ros.io import window_buffer
from sysid_ros.io.window_buffer import Window, WindowBuffer

JOINTS = ('joint1', 'joint2')
FREQ = np.array([0.7, 1.3])


def _signals(t):
    """Smooth q, qd, tau (len(t), 2) of two joints."""
    t = np.asarray(t, float)[..., None]
    q = np.sin(2 * np.pi * FREQ * t)
    qd = 2 * np.pi * FREQ * np.cos(2 * np.pi * FREQ * t)
    return q, qd, 0.5 * q + 0.1 * qd


def _feed(buf, stamps, names=JOINTS):
    """Joint states at `stamps`, with the message columns in the order of `names`."""
    order = [JOINTS.index(n) for n in names]
    q, qd, tau = _signals(stamps)
    for k, t in enumerate(stamps):
        assert buf.add_joint_state(t, names, q[k, order], qd[k, order], tau[k, order])


def _buffer(**kwargs):
    args = {'joint_names': JOINTS, 'rate': 100.0, 'window_length': 0.5, 'hop': 0.25}
    args.update(kwargs)
    return WindowBuffer(**args)


def test_all_names_importable():
    for name in window_buffer.__all__:
        assert hasattr(window_buffer, name)


def test_windows_are_resampled_on_the_grid_and_hop():
    buf = _buffer()
    rng = np.random.default_rng(0)
    stamps = 10.0003 + np.cumsum(rng.uniform(0.8e-3, 1.2e-3, 1500))   # ~1 kHz with jitter
    _feed(buf, stamps)
    windows = []
    while buf.ready():
        windows.append(buf.pop_window())
    assert buf.pop_window() is None
    first = np.ceil(stamps[0] * 100.0) / 100.0   # 10.01: the first grid time with data
    assert len(windows) == int((stamps[-1] - first - 0.49) // 0.25) + 1 == 5
    for k, w in enumerate(windows):
        assert isinstance(w, Window)
        assert w.t.shape == (50,) and w.q.shape == w.qd.shape == w.tau.shape == (50, 2)
        assert w.mocap_position is None and w.mocap_orientation is None
        np.testing.assert_allclose(np.diff(w.t), 0.01, atol=1e-12)
        np.testing.assert_allclose(w.t * 100.0, np.round(w.t * 100.0), atol=1e-9)  # on k / rate
        assert w.t[0] >= stamps[0] and w.t[-1] <= stamps[-1]
        q, qd, tau = _signals(w.t)
        # Linear interpolation of 1 kHz samples: error <= h^2 / 8 max|f''|.
        np.testing.assert_allclose(w.q, q, atol=2e-5)
        np.testing.assert_allclose(w.qd, qd, atol=2e-4)
        np.testing.assert_allclose(w.tau, tau, atol=5e-5)
        if k:
            assert w.t[0] == pytest.approx(windows[k - 1].t[0] + 0.25)
    stats = buf.stats()
    assert stats.windows_emitted == 5
    assert stats.accepted['joint_states'] == 1500
    assert sum(stats.rejected.values()) == 0
    assert stats.input_rate == pytest.approx(1000.0, rel=0.05)


def test_joint_order_of_messages_does_not_matter():
    stamps = np.arange(200) * 0.005
    buf_a, buf_b = _buffer(), _buffer()
    _feed(buf_a, stamps)
    _feed(buf_b, stamps, names=('joint2', 'joint1'))
    wa, wb = buf_a.pop_window(), buf_b.pop_window()
    for field in ('t', 'q', 'qd', 'tau'):
        np.testing.assert_array_equal(getattr(wa, field), getattr(wb, field))


def test_extra_joints_are_ignored_and_counted_or_rejected_when_strict():
    names = ('finger', 'joint2', 'joint1')
    lenient, strict = _buffer(), _buffer(strict_joint_names=True)
    for buf in (lenient, strict):
        buf.add_joint_state(0.0, names, [9.0, 2.0, 1.0], [0.0, 0.2, 0.1], [0.0, 0.0, 0.0])
    assert lenient.stats().accepted['joint_states'] == 1
    assert lenient.stats().ignored_joint_names == 1
    assert strict.stats().accepted['joint_states'] == 0
    assert strict.stats().rejected['unknown_joint'] == 1


@pytest.mark.parametrize('reason, args', [
    ('nonfinite', (0.51, JOINTS, [np.nan, 0.0], [0.0, 0.0], [0.0, 0.0])),
    ('nonfinite', (0.51, JOINTS, [0.0, 0.0], [np.inf, 0.0], [0.0, 0.0])),
    ('nonfinite', (0.51, JOINTS, [0.0, 0.0], [0.0, 0.0], [0.0, -np.inf])),
    ('nonfinite', (np.nan, JOINTS, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
    ('nonfinite', (None, JOINTS, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
    ('wrong_length', (0.51, JOINTS, [0.0], [0.0, 0.0], [0.0, 0.0])),
    ('wrong_length', (0.51, JOINTS, [0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0])),
    ('wrong_length', (0.51, JOINTS, [0.0, 0.0], [0.0, 0.0], [])),
    ('wrong_length', (0.51, JOINTS, [[0.0, 0.0]], [0.0, 0.0], [0.0, 0.0])),
    ('wrong_length', (0.51, JOINTS, 'ab', [0.0, 0.0], [0.0, 0.0])),
    ('missing_joint', (0.51, ('joint1',), [0.0], [0.0], [0.0])),
    ('missing_joint', (0.51, ('joint1', 'joint3'), [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
    ('duplicate_joint', (0.51, ('joint1', 'joint2', 'joint1'), [0.0] * 3, [0.0] * 3,
                         [0.0] * 3)),
    ('duplicate_stamp', (0.5, JOINTS, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
    ('out_of_order', (0.45, JOINTS, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
])
def test_bad_joint_states_are_counted_not_raised_and_leave_the_window_intact(reason, args):
    stamps = np.arange(101) * 0.005               # 0 .. 0.5 s
    clean, buf = _buffer(), _buffer()
    _feed(clean, stamps)
    _feed(buf, stamps)
    assert buf.add_joint_state(*args) is False
    stats = buf.stats()
    assert stats.rejected[reason] == 1
    assert sum(stats.rejected.values()) == 1
    assert stats.received['joint_states'] == len(stamps) + 1
    assert stats.accepted['joint_states'] == len(stamps)
    np.testing.assert_array_equal(buf.pop_window().q, clean.pop_window().q)


def test_jump_back_in_time_clears_the_window_and_is_counted():
    buf = _buffer(jump_threshold=1.0)
    _feed(buf, 100.0 + np.arange(80) * 0.005)       # 0.4 s: not yet a window
    assert not buf.ready()
    assert buf.stats().fill > 0.7
    _feed(buf, 10.0 + np.arange(101) * 0.005)       # the bag restarts 90 s earlier
    stats = buf.stats()
    assert stats.time_jumps == 1
    assert sum(stats.rejected.values()) == 0
    w = buf.pop_window()
    assert w.t[0] == pytest.approx(10.0) and w.t[-1] == pytest.approx(10.49)
    np.testing.assert_allclose(w.q, _signals(w.t)[0], atol=1e-3)


def test_a_lone_future_stamp_is_dropped_and_a_step_forward_is_kept():
    """A message stamped far ahead (a clock glitch) is held back and dropped once the stream
    goes on as before: the windows are the clean ones. A stream that stays ahead (a driver
    back after a restart, the clock stepping forward) is kept from its first sample on."""
    stamps = np.arange(120) * 0.005
    clean, buf = _buffer(jump_threshold=1.0), _buffer(jump_threshold=1.0)
    _feed(clean, stamps)
    q, qd, tau = _signals(stamps)
    for k, t in enumerate(stamps):
        buf.add_joint_state(t, JOINTS, q[k], qd[k], tau[k])
        if k in (40, 41, 90):                   # future-stamped: poisoned values
            assert not buf.add_joint_state(t + 100.0, JOINTS, q[k] + 5.0, qd[k], tau[k])
    stats = buf.stats()
    assert stats.rejected['future_stamp'] == 3 and stats.time_jumps == 0
    np.testing.assert_array_equal(buf.pop_window().q, clean.pop_window().q)

    later = 50.0 + np.arange(101) * 0.005       # the stream steps 50 s forward and stays
    q, qd, tau = _signals(later)
    assert not buf.add_joint_state(later[0], JOINTS, q[0], qd[0], tau[0])
    _feed(buf, later[1:])
    stats = buf.stats()
    assert stats.time_jumps == 1 and stats.rejected['future_stamp'] == 3
    assert stats.accepted['joint_states'] == len(stamps) + len(later)
    w = buf.pop_window()
    assert w.t[0] == pytest.approx(50.0)
    np.testing.assert_allclose(w.q, _signals(w.t)[0], atol=1e-3)


def test_gap_inside_a_window_skips_it():
    buf = _buffer(max_gap=0.05)
    stamps = np.concatenate([np.arange(0.0, 0.6, 0.005), np.arange(0.9, 2.0, 0.005)])
    _feed(buf, stamps)
    windows = []
    while (w := buf.pop_window()) is not None:
        windows.append(w)
    for w in windows:                               # none spans 0.6 .. 0.9
        assert w.t[-1] < 0.6 or w.t[0] >= 0.9 - 1e-12
    assert buf.stats().windows_dropped['gap'] >= 1
    assert [w.t[0] for w in windows[:2]] == pytest.approx([0.0, 1.0])


def test_latest_skips_stale_windows_and_counts_lag():
    buf = _buffer()
    _feed(buf, np.arange(0.0, 2.0, 0.005))
    w = buf.pop_window(latest=True)
    assert w.t[0] == pytest.approx(1.5)             # the last start with 1.5 + 0.49 <= 1.995
    assert buf.stats().windows_dropped['lag'] == 6  # 0, 0.25, ..., 1.25
    assert not buf.ready()


def test_old_windows_fall_out_of_max_buffer():
    buf = _buffer(max_buffer=1.0)
    _feed(buf, np.arange(0.0, 3.0, 0.005))
    assert buf.stats().windows_dropped['overflow'] > 0
    w = buf.pop_window()
    assert w.t[0] >= 3.0 - 0.005 - 1.0 - 1e-9


def test_torques_from_a_command_stream():
    buf = _buffer(torque_source='command')
    stamps = np.arange(0.0, 0.6, 0.005)
    q, qd, _ = _signals(stamps)
    for k, t in enumerate(stamps):                  # joint states without efforts
        assert buf.add_joint_state(t, JOINTS, q[k], qd[k])
    assert not buf.ready()                          # no commands yet
    commands = np.arange(0.0, 0.3, 0.01)
    for t in commands:
        assert buf.add_torque_command(t, [t, -t])
    assert not buf.ready()                          # commands do not cover 0.49 s yet
    for t in np.arange(0.3, 0.6, 0.01):
        assert buf.add_torque_command(t, [-t, t], names=('joint2', 'joint1'))
    w = buf.pop_window()
    np.testing.assert_allclose(w.tau[:, 0], w.t, atol=1e-12)
    np.testing.assert_allclose(w.tau[:, 1], -w.t, atol=1e-12)
    assert buf.add_torque_command(0.7, [1.0]) is False
    assert buf.add_torque_command(0.7, [1.0, np.nan]) is False
    assert buf.add_torque_command(0.7, [1.0, 2.0], names=('joint1', 'x')) is False
    rejected = buf.stats().rejected
    assert (rejected['wrong_length'], rejected['nonfinite'], rejected['missing_joint']) == (
        1, 1, 1)
    effort_only = _buffer()
    assert effort_only.add_torque_command(0.0, [0.0, 0.0]) is False
    assert effort_only.stats().rejected['unused_stream'] == 1


@pytest.mark.parametrize('stream', ['command', 'mocap'])
def test_a_torque_or_mocap_stream_that_drops_out_skips_the_windows_it_misses(stream):
    """Joint states go on while the torque commands (or the mocap poses) stop for 2 s: no
    window reaches into the silence (none interpolates across it), the windows it held back
    are counted as dropped, and those after it are whole again."""
    mocap = stream == 'mocap'
    buf = _buffer(**({'mocap_bodies': ('box',)} if mocap else {'torque_source': 'command'}))
    stamps = np.arange(800) * 0.005                 # 4 s of joint states at 200 Hz
    q, qd, tau = _signals(stamps)
    windows = []
    for k, t in enumerate(stamps):
        buf.add_joint_state(t, JOINTS, q[k], qd[k], tau[k])
        if k % 2 == 0 and not 1.0 <= t < 3.0:       # the other stream at 100 Hz, silent 1-3 s
            if mocap:
                buf.add_pose('box', t, [t, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0])
            else:
                buf.add_torque_command(t, tau[k])
        window = buf.pop_window()
        if window is not None:
            windows.append(window)
    assert all(w.t[-1] <= 0.99 + 1e-9 or w.t[0] >= 3.0 - 1e-9 for w in windows)
    assert any(w.t[0] >= 3.0 - 1e-9 for w in windows)
    dropped = buf.stats().windows_dropped
    assert dropped['gap'] + dropped['overflow'] == 9    # those starting 0.75 to 2.75 s
    for w in windows:
        if mocap:
            np.testing.assert_allclose(w.mocap_position[:, 0, 0], w.t, atol=1e-12)
        else:                                       # commands held linearly between samples
            np.testing.assert_allclose(w.tau, _signals(w.t)[2], atol=2e-3)


def test_mocap_poses_are_interpolated_with_unit_quaternions():
    buf = _buffer(mocap_bodies=('box', 'tool'))
    stamps = np.arange(0.0, 0.6, 0.005)
    _feed(buf, stamps)
    assert not buf.ready()                          # mocap is required once configured
    for k, t in enumerate(np.arange(0.0, 0.6, 0.01)):
        angle = 0.5 * t
        quat = np.array([0.0, 0.0, np.sin(angle / 2), np.cos(angle / 2)])
        sign = -1.0 if k % 2 else 1.0               # the same rotation, alternating sign
        assert buf.add_pose('box', t, [t, 2 * t, 0.0], 2.0 * sign * quat)
        assert buf.add_pose('tool', t, [0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0])
    assert buf.add_pose('cup', 0.7, [0.0] * 3, [0.0, 0.0, 0.0, 1.0]) is False
    assert buf.add_pose('box', 0.7, [0.0] * 3, [0.0] * 4) is False
    assert buf.add_pose('box', 0.7, [0.0] * 2, [0.0, 0.0, 0.0, 1.0]) is False
    rejected = buf.stats().rejected
    assert (rejected['unknown_body'], rejected['nonfinite'], rejected['wrong_length']) == (
        1, 1, 1)
    w = buf.pop_window()
    assert w.mocap_position.shape == (50, 2, 3) and w.mocap_orientation.shape == (50, 2, 4)
    np.testing.assert_allclose(w.mocap_position[:, 0, 0], w.t, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(w.mocap_orientation, axis=-1), 1.0)
    angle = 2 * np.arctan2(w.mocap_orientation[:, 0, 2], w.mocap_orientation[:, 0, 3])
    np.testing.assert_allclose(np.abs(angle), 0.5 * w.t, atol=1e-5)


def test_fill_grows_until_a_window_is_ready():
    buf = _buffer()
    assert buf.stats().fill == 0.0 and np.isnan(buf.stats().latest_stamp)
    fills = []
    for t in np.arange(0.0, 0.55, 0.05):
        _feed(buf, [t])
        fills.append(buf.stats().fill)
    assert fills == sorted(fills) and fills[-1] == pytest.approx(1.0)
    assert buf.ready() and buf.stats().latest_stamp == pytest.approx(0.5)


def test_clear_forgets_samples_but_keeps_counters():
    buf = _buffer()
    _feed(buf, np.arange(0.0, 0.6, 0.005))
    buf.clear()
    assert not buf.ready()
    assert buf.stats().accepted['joint_states'] == 120


@pytest.mark.parametrize('kwargs, key', [
    ({'joint_names': ()}, 'joint_names'),
    ({'joint_names': ('a', 'a')}, 'joint_names'),
    ({'rate': 0.0}, 'rate'),
    ({'window_length': 0.01}, 'window_length'),
    ({'hop': 0.001}, 'hop'),
    ({'torque_source': 'joint_states.effort'}, 'torque_source'),
    ({'mocap_bodies': ('a', 'a')}, 'mocap_bodies'),
    ({'max_gap': 0.0}, 'max_gap'),
    ({'jump_threshold': -1.0}, 'jump_threshold'),
    ({'max_buffer': 0.2}, 'max_buffer'),
])
def test_bad_configuration_raises_naming_the_argument(kwargs, key):
    with pytest.raises(ValueError, match=key):
        _buffer(**kwargs)


def test_a_producer_thread_and_a_consumer_thread():
    buf = _buffer(max_buffer=100.0)
    stamps = np.arange(0.0, 5.0, 0.002)
    windows, errors = [], []

    def produce():
        try:
            _feed(buf, stamps)
        except Exception as exc:                    # pragma: no cover - reported below
            errors.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    while producer.is_alive() or buf.ready():
        if buf.wait_ready(timeout=0.05):
            windows.append(buf.pop_window())
    producer.join()
    assert not errors
    starts = np.array([w.t[0] for w in windows])
    np.testing.assert_allclose(starts, 0.25 * np.arange(len(windows)), atol=1e-9)
    assert len(windows) == 19                       # starts 0 .. 4.5: 4.5 + 0.49 <= 4.998
    assert sum(buf.stats().windows_dropped.values()) == 0


def test_the_received_positions_are_kept_as_received_in_model_order():
    buf = _buffer()
    stamps = 2.0 + np.arange(40) * 4e-3
    _feed(buf, stamps, names=('joint2', 'joint1'))
    t, q = buf.joint_positions()
    np.testing.assert_array_equal(t, stamps)
    np.testing.assert_array_equal(q, _signals(stamps)[0])
