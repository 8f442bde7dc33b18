"""The payload hand-off's pure part: the estimate in the robot's frame, and the gate."""

import numpy as np
import pytest

from sysid_ros.io import model_io
from sysid_ros.io.payload_handoff import (expressed_in, frame_offset, GateLimits, held_payload,
                                          payload_bounds, refusals, robot_frame, SteadyMean)

NAMES = ('link1.mass', 'payload.mass', 'payload.com.x', 'payload.com.z')
LIMITS = GateLimits(max_mass_std=0.05, max_com_std=0.01, steady_windows=3)
BOUNDS = {'payload.mass': (0.0, 5.0), 'payload.com.x': (-0.2, 0.2),
          'payload.com.z': (-0.2, 0.2)}


@pytest.fixture(scope='module')
def panda():
    return model_io.load_pinocchio(model_io.example_robot_urdf('panda')[0])


def test_held_payload_takes_the_nominal_for_what_is_not_identified():
    payload = held_payload(NAMES, [3.0, 1.2, 0.01, 0.05], [0.1, 0.02, 0.003, 0.004],
                           'panda_link7', [0.5, 0.1, 0.2, 0.3] + [0.0] * 6)
    assert payload.mass == 1.2 and payload.mass_std == 0.02
    np.testing.assert_array_equal(payload.com, [0.01, 0.2, 0.05])
    np.testing.assert_array_equal(payload.com_std, [0.003, 0.0, 0.004])
    assert held_payload(('link1.mass',), [1.0], [0.1], 'a', [0] * 10) is None
    assert payload_bounds(NAMES, {**BOUNDS, 'link1.mass': (0, 9)}) == BOUNDS


def test_payload_moves_into_the_flange_frame_of_the_panda(panda):
    # panda_link8 (the flange) sits 0.107 m along link 7's z axis, unrotated.
    rotation, translation = frame_offset(panda, 'panda_link7', robot_frame(panda, '*_link8'))
    np.testing.assert_allclose(rotation, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(translation, [0.0, 0.0, -0.107], atol=1e-12)
    payload = held_payload(NAMES, [3.0, 1.2, 0.01, 0.15], [0.1, 0.02, 0.003, 0.004],
                           'panda_link7', [0] * 10)
    moved = expressed_in(payload, 'panda_link8', rotation, translation)
    np.testing.assert_allclose(moved.com, [0.01, 0.0, 0.043], atol=1e-12)
    np.testing.assert_allclose(moved.com_std, payload.com_std)
    assert moved.frame == 'panda_link8' and moved.mass == payload.mass


def test_expressed_in_rotates_the_centre_of_mass_and_its_spread():
    payload = held_payload(NAMES, [0, 2.0, 0.1, 0.0], [0, 0.01, 0.003, 0.0004], 'a',
                           [0] * 10)
    quarter_turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    moved = expressed_in(payload, 'b', quarter_turn, np.array([0.0, 0.0, 1.0]))
    np.testing.assert_allclose(moved.com, [0.0, 0.1, 1.0], atol=1e-12)
    np.testing.assert_allclose(moved.com_std, [0.0, 0.003, 0.0004], atol=1e-12)


def test_robot_frame_needs_exactly_one_match(panda):
    assert robot_frame(panda, 'panda_link8') == 'panda_link8'
    with pytest.raises(model_io.ModelError, match='matches no frame'):
        robot_frame(panda, 'tool0')
    with pytest.raises(model_io.ModelError, match='panda_link1, '):
        robot_frame(panda, 'panda_link?')


def test_frame_offset_refuses_frames_on_different_bodies(panda):
    with pytest.raises(model_io.ModelError, match='different moving bodies'):
        frame_offset(panda, 'panda_link7', 'panda_link6')


def test_steady_mean_needs_the_last_windows_within_one_std():
    steady = SteadyMean(3)
    std = np.array([0.1])
    assert not steady.update([1.0], std)
    assert not steady.update([1.05], std)
    assert steady.update([1.02], std)           # 1.0, 1.05, 1.02 all within 0.1 of 1.02
    assert not steady.update([1.5], std)        # a jump
    steady.reset()
    assert not steady.update([1.5], std)
    with pytest.raises(ValueError):
        SteadyMean(0)


def test_gate_names_each_reason():
    good = held_payload(NAMES, [0, 1.2, 0.01, 0.05], [0, 0.02, 0.003, 0.004], 'a', [0] * 10)
    assert refusals(good, True, LIMITS, BOUNDS) == []
    assert refusals(good, False, LIMITS, BOUNDS)[0].startswith('not converged')
    uncertain = good._replace(mass_std=0.2, com_std=np.array([0.0, 0.0, 0.03]))
    found = refusals(uncertain, True, LIMITS, BOUNDS)
    assert len(found) == 2 and 'mass std 0.2 kg' in found[0] and '0.03 m' in found[1]
    on_bound = good._replace(mass=4.99)
    assert 'payload.mass = 4.99 is on or outside its bounds' in refusals(
        on_bound, True, LIMITS, BOUNDS)[0]
    assert refusals(good._replace(mass_std=float('nan')), True, LIMITS, BOUNDS)


def test_gate_holds_a_load_change_of_the_wrong_sign_or_within_the_noise():
    estimate = held_payload(NAMES, [0, 1.2, 0.01, 0.05], [0, 0.02, 0.003, 0.004], 'a', [0] * 10)
    assert refusals(estimate, True, LIMITS, BOUNDS, previous_mass=0.5, change=1) == []
    assert refusals(estimate, True, LIMITS, BOUNDS, previous_mass=0.5, change=0) == []
    put_down, = refusals(estimate, True, LIMITS, BOUNDS, previous_mass=0.5, change=-1)
    assert 'not below the current load' in put_down and 'put down' in put_down
    assert refusals(estimate, True, LIMITS, BOUNDS, previous_mass=1.5, change=-1) == []
    # 1.2 kg after 1.17 kg is within two of its 0.02 kg stds: not evidently picked up
    within, = refusals(estimate, True, LIMITS, BOUNDS, previous_mass=1.17, change=1)
    assert "not above the current load's 1.17 kg by 2 stds" in within


RIGID = NAMES + ('payload.inertia.ixx', 'payload.inertia.ixy', 'payload.inertia.izz')


def test_a_rigid_payloads_inertia_turns_with_its_frame_and_must_be_a_bodys():
    nominal = [0.0] * 7 + [0.004, 0.0, 0.0]                     # iyy nominal, others identified
    payload = held_payload(RIGID, [0, 1.2, 0.01, 0.05, 0.002, 0.001, 0.003],
                           [0, 0.02, 0.003, 0.004, 1e-4, 1e-4, 1e-4], 'a', nominal)
    np.testing.assert_array_equal(
        payload.inertia, [[0.002, 0.001, 0.0], [0.001, 0.004, 0.0], [0.0, 0.0, 0.003]])
    quarter_turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    moved = expressed_in(payload, 'b', quarter_turn, np.zeros(3))
    np.testing.assert_allclose(
        moved.inertia, [[0.004, -0.001, 0.0], [-0.001, 0.002, 0.0], [0.0, 0.0, 0.003]],
        atol=1e-15)
    bounds = {**BOUNDS, 'payload.inertia.ixx': (0.0, 0.1), 'payload.inertia.ixy': (-0.1, 0.1),
              'payload.inertia.izz': (0.0, 0.1)}
    assert refusals(payload, True, LIMITS, bounds) == []
    # ixx beyond iyy + izz: no body has it.
    flat = held_payload(RIGID, [0, 1.2, 0.01, 0.05, 0.009, 0.0, 0.003],
                        [0, 0.02, 0.003, 0.004, 1e-4, 1e-4, 1e-4], 'a', nominal)
    (found,) = refusals(flat, True, LIMITS, bounds)
    assert 'not that of a real body' in found
    with pytest.raises(ValueError, match='nominal: expected 10 values'):
        held_payload(NAMES, [0, 1.2, 0.01, 0.05], [0] * 4, 'a', [0] * 4)
