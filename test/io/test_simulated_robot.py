"""`io.simulated_robot` without ROS: settings checks that name the field, seeded and
deterministic samples, their times and shapes, the payload schedule and its truths, trajectory
following, the mocap pose, and the ground truth's perturbation."""

import pathlib

import numpy as np
import pytest

from sysid_ros.core.model import builders, inertia
from sysid_ros.core.model.edits import add_point_mass, perturb_params
from sysid_ros.io.errors import InputError
from sysid_ros.io.problem import build_problem
from sysid_ros.io.simulated_robot import SimulatedRobot, SimulatedRobotSettings

CONFIG = pathlib.Path(__file__).resolve().parents[2] / 'config' / 'double_pendulum.yaml'
RATE = 250.0                                    # [Hz]; 1 kHz / 4
PAYLOAD = 0.5                                   # [kg]


@pytest.fixture(scope='module')
def problem():
    return build_problem(str(CONFIG))


@pytest.fixture(scope='module')
def settings():
    return SimulatedRobotSettings(publish_rate=RATE, seed=3, payload_mass=PAYLOAD,
                                  payload_time=0.1, mocap_link='link2', effort_noise=0.01)


@pytest.fixture(scope='module')
def robot(problem, settings):
    """A compiled robot; tests that step it build a fresh one through `fresh`."""
    return SimulatedRobot(problem, settings, batch=3)


def fresh(robot):
    """A robot like `robot` from its start, reusing its problem and settings."""
    return SimulatedRobot(robot.problem, robot.settings, batch=robot.batch)


@pytest.mark.parametrize('changes, field', [
    ({'publish_rate': 300.0}, 'publish_rate'),          # 1 kHz / 300 Hz is not whole
    ({'excitation': 'chirp'}, 'excitation'),
    ({'perturbation': 1.0}, 'perturbation'),
    ({'noise': -1.0}, 'noise'),
    ({'num_sines': 0}, 'num_sines'),
    ({'payload_position': (0.0, 1.0)}, 'payload_position'),
    ({'payload_inertia': (0.1,) * 5}, 'payload_inertia'),
])
def test_a_bad_setting_names_its_field(changes, field):
    with pytest.raises(InputError, match=f'^parameter {field}: expected'):
        SimulatedRobotSettings(**changes)


def test_a_link_that_the_model_lacks_is_refused(problem):
    with pytest.raises(InputError, match='parameter mocap_link: expected one of'):
        SimulatedRobot(problem, SimulatedRobotSettings(mocap_link='gripper'))


def test_ticks_are_seeded_timed_and_shaped(robot):
    a, b = fresh(robot), fresh(robot)
    ticks = [a.step() for _ in range(4)]
    again = [b.step() for _ in range(4)]
    for one, other in zip(ticks, again):
        for x, y in zip(one, other):
            np.testing.assert_array_equal(x, y)
    nv, batch = robot.nv, robot.batch
    tick = ticks[1]
    shape = (batch, nv)
    assert tick.q.shape == tick.qd.shape == tick.effort.shape == tick.command.shape == shape
    assert tick.start == pytest.approx(batch / RATE)
    np.testing.assert_allclose(tick.t, (batch + np.arange(1, batch + 1)) / RATE)
    assert a.ticks == 4 and a.time == pytest.approx(4 * batch / RATE)
    # Effort noise only on the measured effort; the commands stay within the effort limits.
    assert 0.0 < np.abs(tick.effort - tick.command).max() < 0.1
    assert np.all(np.isfinite(tick.q)) and not tick.diverged


def test_mocap_pose_is_the_link_frame(robot):
    tick = fresh(robot).step()
    assert tick.mocap_position.shape == (robot.batch, 3)
    np.testing.assert_allclose(np.linalg.norm(tick.mocap_orientation, axis=1), 1.0)
    # link2's frame sits at the end of link1 (1 m), which swings about the origin.
    np.testing.assert_allclose(np.linalg.norm(tick.mocap_position, axis=1), 1.0, atol=1e-9)


def test_payload_is_picked_up_at_payload_time_and_changes_the_truth(robot):
    sim = fresh(robot)
    before = sim.truth()
    picked = [sim.step().picked_up for _ in range(12)]
    first = picked.index(True)
    assert picked.count(True) == 1
    assert first * robot.batch / RATE == pytest.approx(0.1, abs=robot.batch / RATE)
    after = sim.truth()
    assert after['link2.mass'] == pytest.approx(before['link2.mass'] + PAYLOAD)
    assert after['link1.mass'] == before['link1.mass']
    assert not sim.set_payload(True)                    # already held
    assert sim.set_payload(False) and sim.truth() == before
    assert sim.truth_outside_bounds() == []


def test_following_a_held_trajectory_stays_at_it(problem):
    sim = SimulatedRobot(problem, SimulatedRobotSettings(follows=True, noise=0.0), batch=2)
    assert sim.reference.startswith('a trajectory of 2 points')
    with pytest.raises(InputError, match='trajectory: expected the joints joint1, joint2'):
        sim.follow(['joint1', 'elbow'], [0.0, 1.0], np.zeros((2, 2)), np.zeros((2, 2)),
                   np.zeros((2, 2)))
    target = np.array([[0.3, -0.2], [0.3, -0.2]])
    zero = np.zeros_like(target)
    sim.follow(['joint2', 'joint1'], [0.0, 0.5], target[:, ::-1], zero, zero)
    ticks = [sim.step() for _ in range(150)]            # 1.5 s at 200 Hz, 2 per tick
    np.testing.assert_allclose(ticks[-1].q[-1], target[0], atol=0.02)


def test_ground_truth_is_a_seeded_consistent_perturbation():
    _, nominal = builders.double_pendulum()
    truth = perturb_params(nominal, seed=3, perturbation=0.2, true_damping=0.1)
    again = perturb_params(nominal, seed=3, perturbation=0.2, true_damping=0.1)
    other = perturb_params(nominal, seed=4, perturbation=0.2, true_damping=0.1)
    np.testing.assert_array_equal(truth.inertial, again.inertial)
    assert not np.allclose(truth.inertial, other.inertial)
    ratio = np.asarray(truth.inertial[:, 0] / nominal.inertial[:, 0])
    assert np.all((ratio >= 0.8) & (ratio <= 1.2)) and not np.allclose(ratio, 1.0)
    # One factor per body: the centre of mass stays, the body stays consistent.
    _, com_true, _ = inertia.physical_from_inertial(truth.inertial)
    _, com_nominal, _ = inertia.physical_from_inertial(nominal.inertial)
    np.testing.assert_allclose(com_true, com_nominal, atol=1e-12)
    nonzero = np.asarray(nominal.inertial) != 0.0
    divisor = np.where(nonzero, nominal.inertial, 1.0)
    row_ratio = np.where(nonzero, np.asarray(truth.inertial) / divisor, ratio[:, None])
    np.testing.assert_allclose(row_ratio, np.broadcast_to(ratio[:, None], row_ratio.shape))
    assert np.all(np.asarray(inertia.is_physically_consistent(truth.inertial)))
    # Nominal damping 0: the truth draws 0.1 * U(0.5, 1.5).
    assert np.all((np.asarray(truth.damping) >= 0.05) & (np.asarray(truth.damping) <= 0.15))
    np.testing.assert_array_equal(
        perturb_params(nominal, seed=3, perturbation=0.0, true_damping=0.0).inertial,
        nominal.inertial)


def test_add_point_mass():
    _, params = builders.double_pendulum()
    loaded = add_point_mass(params, 1, 0.5, [0.0, 0.0, -1.0])
    delta = np.asarray(loaded.inertial - params.inertial)
    np.testing.assert_array_equal(delta[0], 0.0)
    # [m, m c, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] of 0.5 kg at (0, 0, -1) about the body origin.
    np.testing.assert_allclose(delta[1], [0.5, 0.0, 0.0, -0.5, 0.5, 0.0, 0.5, 0.0, 0.0, 0.0],
                               atol=1e-15)
