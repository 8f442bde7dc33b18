"""Beside a real robot's ROS graph: stand-in UR and Franka drivers, and the real Panda log.

  (a) UR: `sim_robot` standing in for the UR driver (`driver:=ur`, the UR5 of
      config/ur5_live.yaml): efforts are motor currents, the true current-to-torque gains
      drawn within +-3 % of the gains the estimator is given (a datasheet's tolerance), a
      payload of random mass and centre of mass held from the start, hidden viscous friction.
      `sysid excite`'s trajectory goes through `trajectory_publisher` to the stand-in's
      scaled_joint_trajectory_controller action; at the same moment an IdentifyPayload goal
      (apply) goes to the estimator. Scored: the payload mass the stand-in was handed through
      ur_msgs/srv/SetPayload against its truth, the seconds from the goal to the hand-off,
      and whether ~/restore_payload handed the earlier load back.
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
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
os.environ['FASTDDS_DEFAULT_PROFILES_FILE'] = str(REPO_ROOT / 'config' / 'fastdds_localhost.xml')
os.environ['ROS_DOMAIN_ID'] = str(100 + (os.getpid() + 53) % 100)

from diagnostic_msgs.msg import DiagnosticArray                # noqa: E402
import jax                                                      # noqa: E402
import numpy as np                                              # noqa: E402
from rclpy.action import ActionClient                           # noqa: E402
from sensor_msgs.msg import JointState                          # noqa: E402
from std_msgs.msg import String                                 # noqa: E402
from std_srvs.srv import Trigger                                # noqa: E402
from sysid_ros_interfaces.action import IdentifyPayload         # noqa: E402
import yaml                                                     # noqa: E402

from bench.experiment_panda_log import panda_log_case           # noqa: E402
from sysid_ros.io import config as config_io                    # noqa: E402
from sysid_ros.io import excitation, model_io, pipeline         # noqa: E402
from sysid_ros.io.errors import InputError                      # noqa: E402
from sysid_ros.ros import qos                                   # noqa: E402
from sysid_ros.ros.node_process import NodeProcess              # noqa: E402
from sysid_ros.ros.probe import ProbeNode                       # noqa: E402

GAIN_TOLERANCE = 0.03           # [-] true gains within this share of the given ones
GOAL_TIMEOUT = 90.0             # [s] the IdentifyPayload goal's wait for a gated estimate


class Robot:
    """One stand-in robot case: what differs between the UR and the Franka.

    Attributes:
      config: the packaged configuration; `data` entries in `data_changes` replace its own
        (None: the key is removed).
      from_description: the estimator's configuration names no model: it takes the URDF
        from the robot's `/robot_description` (the bench publishes it, as
        robot_state_publisher does).
    """

    def __init__(self, name, config, sim_args, payload_com_box, mass_range, data_changes=None,
                 from_description=False):
        self.name, self.config, self.sim_args = name, config, sim_args
        self.payload_com_box, self.mass_range = payload_com_box, mass_range
        self.data_changes = data_changes or {}
        self.from_description = from_description

    def write_config(self, work: pathlib.Path, model: bool = True) -> str:
        """The configuration of the case as a ROS parameters file in `work` (without
        `model.urdf` unless `model`)."""
        tree = config_io.read_tree(str(REPO_ROOT / self.config))
        data = {**tree['data'], **self.data_changes}
        tree['data'] = {k: v for k, v in data.items() if v is not None}
        if not model:
            tree['model'] = {k: v for k, v in tree['model'].items() if k != 'urdf'}
        path = work / f'{self.name}{"" if model else "_no_model"}.yaml'
        path.write_text(yaml.safe_dump({'/**': {'ros__parameters': tree}}))
        return str(path)

    def urdf(self) -> str:
        """The URDF XML of the packaged configuration's model."""
        urdf = config_io.load_yaml(str(REPO_ROOT / self.config)).model.urdf
        scheme, _, name = urdf.partition(':')
        path = model_io.example_robot_urdf(name)[0] if scheme == 'example-robot-data' else urdf
        return pathlib.Path(path).read_text()


ROBOTS = {
    'ur': Robot('ur', 'config/ur5_live.yaml',
                ['-p', 'driver:=ur', '-p', 'publish_rate:=500.0', '-p', 'sim_rate:=2000.0',
                 '-p', 'true_damping:=0.3'],
                ((-0.03, 0.03), (0.04, 0.12), (-0.03, 0.03)), (1.0, 4.0)),
    'franka': Robot('franka', 'config/panda_live.yaml',
                    ['-p', 'driver:=franka', '-p', 'publish_rate:=1000.0',
                     '-p', 'sim_rate:=4000.0', '-p', 'true_damping:=0.3',
                     '-p', 'true_coulomb:=0.5'],
                    ((-0.03, 0.03), (-0.03, 0.03), (0.05, 0.15)), (0.5, 2.5),
                    {'driver': 'franka', 'joint_states_topic': None}, from_description=True),
}


def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                      os.environ.get('PYTHONPATH')]))
    return env


def _start(module, args, log):
    return NodeProcess(module, args, log, env=_env(), cwd=REPO_ROOT)


class Bench:
    """The bench's own node: the stand-in's ground truth, the action and the restore call."""

    def __init__(self, urdf: str | None = None):
        self.probe = ProbeNode('real_robot_bench')
        if urdf is not None:
            self.description = self.probe.node.create_publisher(String, '/robot_description',
                                                                qos.LATCHED)
            self.description.publish(String(data=urdf))
        self.truth: dict[str, str] = {}
        self.estimates = 0
        self.probe.node.create_subscription(DiagnosticArray, '/sim_robot/ground_truth',
                                            self._on_truth, qos.LATCHED)
        self.probe.node.create_subscription(JointState, '/estimator/estimate',
                                            self._on_estimate, qos.LATCHED)
        self.action = ActionClient(self.probe.node, IdentifyPayload,
                                   '/estimator/identify_payload')
        self.restore = self.probe.node.create_client(Trigger, '/estimator/restore_payload')

    def _on_estimate(self, msg: JointState) -> None:
        self.estimates += 1

    def _on_truth(self, msg: DiagnosticArray) -> None:
        self.truth = {kv.key: kv.value for kv in msg.status[0].values}

    def handed(self) -> float | None:
        """The payload mass the stand-in was last handed, or None."""
        value = self.truth.get('handed_payload_mass')
        return None if value is None else float(value)

    def wait(self, future, timeout):
        """The future's result, or None after `timeout` seconds."""
        self.probe.spin_until(future.done, timeout)
        return future.result() if future.done() else None

    def close(self) -> None:
        self.probe.close()


def robot_case(robot: Robot, seed: int, work: pathlib.Path, trajectory: str) -> dict:
    """One stand-in run; returns the scores of (a) or (b)."""
    rng = np.random.default_rng(seed)
    config = robot.write_config(work)
    cfg = config_io.load_yaml(config)
    mass = float(rng.uniform(*robot.mass_range))
    com = [float(rng.uniform(*box)) for box in robot.payload_com_box]
    args = [*robot.sim_args, '-p', f'config:={config}', '-p', f'seed:={seed}',
            '-p', f'payload_mass:={mass}', '-p', f'payload_position:={com}',
            '-p', 'payload_time:=0.0', '-p', 'effort_noise:=0.05']
    if cfg.data.torque_gains:
        given = np.asarray(cfg.data.torque_gains, dtype=float)
        true = given * (1.0 + rng.uniform(-GAIN_TOLERANCE, GAIN_TOLERANCE, given.shape))
        args += ['-p', f'effort_gains:={true.tolist()}']
    bench = Bench(robot.urdf() if robot.from_description else None)
    sim = _start('sysid_ros.ros.sim_robot', args, work / f'{robot.name}_sim.log')
    estimator_args = ['--params-file', config]
    if robot.from_description:
        estimator_args = ['--params-file', robot.write_config(work, model=False),
                          '-p', 'robot_description_topic:=/robot_description']
    estimator = _start('sysid_ros.ros.estimator', estimator_args,
                       work / f'{robot.name}_estimator.log')
    out = {'mass': mass, 'handed': None, 'applied_s': float('nan'), 'rollback_ok': 0,
           'message': '', 'excited': False}
    mover = None
    try:
        # Compilation first (minutes on a loaded machine): up once it estimates.
        if not bench.probe.spin_until(lambda: bench.estimates > 0 or not estimator.running(),
                                      900.0) or not estimator.running():
            raise RuntimeError('estimator not up:\n' + estimator.output()[-2000:])
        start = time.monotonic()

        def move(run):
            return _start('sysid_ros.ros.trajectory_publisher',
                          ['-p', f'config:={config}', '-p', f'trajectory:={trajectory}'],
                          work / f'{robot.name}_trajectory_{run}.log')

        mover, runs, exits = move(0), 1, []
        if not bench.action.wait_for_server(timeout_sec=10.0):
            raise RuntimeError('no identify_payload action: ' + estimator.output()[-2000:])
        goal = bench.wait(bench.action.send_goal_async(
            IdentifyPayload.Goal(apply=True, timeout=GOAL_TIMEOUT)), 10.0)
        future = goal.get_result_async()
        # As an operator would: the excitation again until the estimate passes the gate.
        while not bench.probe.spin_until(lambda: future.done() or not mover.running(),
                                         GOAL_TIMEOUT + 10.0) or not future.done():
            exits.append(mover.wait(10.0))
            mover, runs = move(runs), runs + 1
        result = future.result().result
        out.update(message=result.message, estimated=result.mass, runs=runs)
        if result.applied:
            out['applied_s'] = time.monotonic() - start
            bench.probe.spin_until(lambda: bench.handed() is not None, 5.0)
            out['handed'] = bench.handed()
            response = bench.wait(bench.restore.call_async(Trigger.Request()), 10.0)
            restored = bench.probe.spin_until(lambda: bench.handed() == 0.0, 5.0)
            out['rollback_ok'] = int(bool(response and response.success) and restored)
        exits.append(mover.wait(120.0))
        out['excited'] = all(code == 0 for code in exits)
    finally:
        bench.close()
        for process in (mover, estimator, sim):
            if process is not None:
                process.interrupt()
    return out


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
    for robot in ROBOTS.values():
        design = excitation.design(
            pipeline.build_problem(config_io.load_yaml(robot.write_config(work))),
            duration=10.0 if args.quick else None)
        trajectory = excitation.write_excitation(str(work / f'{robot.name}_excite'),
                                                 design)[0]
        case = robot_case(robot, args.seed, work, trajectory)
        # The mass handed to the robot; where none was, the last estimate's.
        mass = case['handed'] if case['handed'] is not None else case.get('estimated', np.nan)
        error = abs(mass - case['mass']) / case['mass'] * 100.0
        print(f'{robot.name}: payload {case["mass"]:.3f} kg, handed {case["handed"]}, last '
              f'estimate {case.get("estimated", np.nan):.3f} kg, error {error:.2f} %, applied '
              f'after {case["applied_s"]:.1f} s ({case.get("runs", 0)} excitation runs), '
              f'rollback {case["rollback_ok"]}; {case["message"]}')
        scores[robot.name] = (error, case['applied_s'], case['rollback_ok'], case['excited'])
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
