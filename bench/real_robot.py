"""Beside a real robot's ROS graph: stand-in UR and Franka drivers, and the real Panda log.

  (a) UR: `sim_robot` standing in for the UR driver (`driver:=ur`, the UR5 of
      config/ur5_live.yaml): efforts are motor currents, the true current-to-torque gains
      drawn within +-3 % of the gains the estimator is given (a datasheet's tolerance), a
      payload of random mass and centre of mass held from the start, hidden viscous friction.
      `sysid excite`'s trajectory goes through `trajectory_publisher` to the stand-in's
      scaled_joint_trajectory_controller action; at the same moment an IdentifyPayload goal
      (apply) goes to the estimator, as `sysid demo --robot ur` runs it (`ros.payload_demo`).
      Scored: the payload mass the stand-in was handed through ur_msgs/srv/SetPayload against
      its truth, the seconds from the goal to the hand-off, and whether ~/restore_payload
      handed the earlier load back.
  (b) Franka: the same with `driver:=franka` and config/panda_live.yaml's Panda with
      `data.driver: franka` (1 kHz /franka/joint_states beside the 30 Hz /joint_states
      republish; franka_msgs/srv/SetLoad in the flange frame; hidden Coulomb friction too).
  (c) Day one: the five ways a first run beside a real robot goes wrong, each probed: efforts
      that are currents (a UR config without torque gains is refused), the 30 Hz republish
      (a Franka config reading /joint_states is refused), a model from the robot (the
      Franka's estimator in (b) has no model file and takes the URDF from /robot_description),
      the excitation through ros2_control and the payload handed to the robot (both arms).
  (d) The real Panda log (bench/experiment_panda_log.py): the live estimator's held-out torque
      nRMSE against the offline fit's.

Every process binds to loopback only (config/fastdds_localhost.xml,
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) on a domain derived from this process id. The last
line is `RESULT real_robot key=value ...`.

Usage:
  python -m bench.real_robot [--quick] [--seed N]

`--quick`: one truth per robot and the short part of the Panda log.
"""

import argparse
import os
import pathlib
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ['FASTDDS_DEFAULT_PROFILES_FILE'] = str(REPO_ROOT / 'config' / 'fastdds_localhost.xml')
os.environ['ROS_DOMAIN_ID'] = str(100 + (os.getpid() + 53) % 100)

import jax                                                      # noqa: E402
import numpy as np                                              # noqa: E402

from bench.experiment_panda_log import panda_log_case           # noqa: E402
from sysid_ros.io import config as config_io                    # noqa: E402
from sysid_ros.io.errors import InputError                      # noqa: E402
from sysid_ros.ros import payload_demo                          # noqa: E402
from sysid_ros.ros.demo_robots import STAND_INS                 # noqa: E402


def day_one_probes() -> dict[str, bool]:
    """Whether a configuration that repeats a day-one mistake is refused at load, by name."""
    found = {}
    for name, path, changes in (
            ('current_as_torque', 'config/ur5_live.yaml', {'torque_gains': []}),
            ('republished_stream', 'config/panda_live.yaml',
             {'driver': 'franka', 'joint_states_topic': '/joint_states'})):
        tree = config_io.read_tree(str(REPO_ROOT / path))
        tree['data'] = {**tree['data'], **changes}
        try:
            config_io.from_dict(tree, str(REPO_ROOT / path))
            found[name] = False
        except InputError:
            found[name] = True
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    jax.config.update('jax_enable_x64', True)
    work = pathlib.Path(tempfile.mkdtemp(prefix='real_robot_'))
    print(f'logs in {work}')
    scores = {}
    for robot in STAND_INS.values():
        config = str(REPO_ROOT / 'config' / robot.config)
        folder = work / robot.name
        folder.mkdir()
        trajectory = payload_demo.design_excitation(
            payload_demo.write_config(robot, config, folder), folder,
            duration=payload_demo.EXCITATION if args.quick else None)
        case = payload_demo.run_case(robot, config, args.seed, folder, trajectory)
        error = case.error_pct()
        print(f'{robot.name}: payload {case.mass:.3f} kg, handed {case.handed}, last '
              f'estimate {case.estimated:.3f} kg, error {error:.2f} %, applied after '
              f'{case.applied_s:.1f} s ({case.runs} excitation runs), rollback '
              f'{int(case.rollback_ok)}; {case.message}')
        scores[robot.name] = (error, case.applied_s, int(case.rollback_ok), case.excited)
    probes = day_one_probes()
    # The other three, in the runs: the Franka's model from its robot_description, the
    # excitation through both arms' actions, both payloads handed over.
    caught = (sum(probes.values()) + int(np.isfinite(scores['franka'][1]))
              + int(scores['ur'][3] and scores['franka'][3])
              + int(np.isfinite(scores['ur'][1]) and np.isfinite(scores['franka'][1])))
    panda = panda_log_case(quick=args.quick)
    print(f'day one: {probes}; panda log: {panda}')
    print(f'RESULT real_robot ur_payload_err_pct={scores["ur"][0]:.2f} '
          f'ur_applied_s={scores["ur"][1]:.1f} ur_rollback_ok={scores["ur"][2]} '
          f'franka_payload_err_pct={scores["franka"][0]:.2f} '
          f'franka_applied_s={scores["franka"][1]:.1f} day_one_caught={caught}/5 '
          f'panda_log_nrmse_ratio={panda["ratio"]:.3f}')


if __name__ == '__main__':
    main()
