"""The payload demo: a held payload identified beside a stand-in robot driver and handed to the
robot through the driver's own service, as an operator would do it on a real arm.

    sysid demo --robot ur          # stand-in UR: motor currents as efforts, ur_msgs SetPayload
    sysid demo --robot franka      # stand-in Franka: /franka/joint_states, franka_msgs SetLoad

In order:

1. `sysid excite`'s design for the robot's configuration (`excitation.design`, `EXCITATION`
   seconds), written to OUT/excite/trajectory.yaml.
2. `sim_robot` standing in for the driver (`ros.demo_robots.STAND_INS`): a payload of random
   mass and centre of mass held from the start, hidden friction, and for the UR true
   current-to-torque gains within `GAIN_TOLERANCE` of those the estimator is given; the
   estimator with the robot's configuration (the Franka's without a model file: it takes the
   URDF from `/robot_description`, published here as robot_state_publisher would).
3. Once the estimator estimates: `trajectory_publisher` runs the design through the
   stand-in's FollowJointTrajectory action and an IdentifyPayload goal (`apply: true`,
   `load_change: PICKED_UP`) goes to `/estimator/identify_payload`; the excitation is run
   again until the goal ends.
4. The payload the stand-in was handed against its truth, the seconds from the goal to the
   hand-off, and `~/restore_payload` handing the earlier load back.

Exit status 0 when the payload was applied and restored, 1 when it was not, 3 when a node
failed, 130 on Ctrl-C. Node logs go to OUT. DDS stays on loopback unless the caller set
otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
import time
from typing import Mapping

import numpy as np

__all__ = ['EXCITATION', 'GAIN_TOLERANCE', 'GOAL_TIMEOUT', 'PayloadCase', 'write_config',
           'design_excitation', 'run_case', 'run', 'EXIT_APPLIED', 'EXIT_NOT_APPLIED',
           'EXIT_NODE_FAILED', 'EXIT_INTERRUPTED']

EXCITATION = 10.0               # [s] length of the designed excitation (run again as needed)
GAIN_TOLERANCE = 0.03           # [-] true gains within this share of the given ones
GOAL_TIMEOUT = 90.0             # [s] the IdentifyPayload goal's wait for a gated estimate
COMPILE_TIMEOUT = 900.0         # [s] longest wait for the estimator's first estimate
EXIT_APPLIED = 0
EXIT_NOT_APPLIED = 1
EXIT_NODE_FAILED = 3
EXIT_INTERRUPTED = 130


@dataclasses.dataclass
class PayloadCase:
    """What one run found.

    Attributes:
      mass: the stand-in's true payload mass [kg].
      handed: the mass the stand-in was handed [kg], or None.
      estimated: the goal's last estimate [kg] (NaN: none).
      applied_s: goal to hand-off [s, wall] (NaN: not applied).
      rollback_ok: whether ~/restore_payload handed the earlier load back.
      excited: whether every excitation run succeeded.
      runs: excitation runs.
      message: the goal's result, in words.
    """

    mass: float
    handed: float | None = None
    estimated: float = float('nan')
    applied_s: float = float('nan')
    rollback_ok: bool = False
    excited: bool = False
    runs: int = 0
    message: str = ''

    def error_pct(self) -> float:
        """|handed - truth| / truth [%]; where nothing was handed, the last estimate's."""
        mass = self.handed if self.handed is not None else self.estimated
        return abs(mass - self.mass) / self.mass * 100.0


def write_config(stand_in, config: str, out_dir: pathlib.Path, model: bool = True) -> str:
    """`config` with the stand-in's `data` changes, as a ROS parameters file in `out_dir`
    (without `model.urdf` unless `model`)."""
    import yaml

    from sysid_ros.io import config as config_io
    tree = config_io.read_tree(config)
    data = {**tree.get('data', {}), **stand_in.data_changes}
    tree['data'] = {k: v for k, v in data.items() if v is not None}
    if not model:
        tree['model'] = {k: v for k, v in tree['model'].items() if k != 'urdf'}
    path = out_dir / f'{stand_in.name}{"" if model else "_no_model"}.yaml'
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': tree}}))
    return str(path)


def design_excitation(config: str, out_dir: pathlib.Path,
                      duration: float | None = EXCITATION) -> str:
    """`sysid excite`'s design for `config`, `duration` seconds long (None: the
    configuration's `excitation.duration`); the path of its trajectory.yaml in
    `out_dir`/excite."""
    from sysid_ros.io import config as config_io
    from sysid_ros.io import excitation, pipeline
    problem = pipeline.build_problem(config_io.load_yaml(config))
    design = excitation.design(problem, duration=duration)
    return excitation.write_excitation(str(out_dir / 'excite'), design)[0]


def _urdf(config: str) -> str:
    """The URDF XML of `config`'s model."""
    from sysid_ros.io import config as config_io
    from sysid_ros.io import model_io
    return model_io.urdf_text(config_io.load_yaml(config).model.urdf)


class _Operator:
    """The operator's node: the stand-in's ground truth, the goal and the restore call."""

    def __init__(self, urdf: str | None):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.action import ActionClient
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from std_srvs.srv import Trigger
        from sysid_ros_interfaces.action import IdentifyPayload

        from sysid_ros.ros import qos
        from sysid_ros.ros.probe import ProbeNode
        self.probe = ProbeNode('sysid_payload_demo')
        node = self.probe.node
        if urdf is not None:
            self.description = node.create_publisher(String, '/robot_description', qos.LATCHED)
            self.description.publish(String(data=urdf))
        self.truth: dict[str, str] = {}
        self.estimates = 0
        node.create_subscription(DiagnosticArray, '/sim_robot/ground_truth', self._on_truth,
                                 qos.LATCHED)
        node.create_subscription(JointState, '/estimator/estimate', self._on_estimate,
                                 qos.LATCHED)
        self.action = ActionClient(node, IdentifyPayload, '/estimator/identify_payload')
        self.restore = node.create_client(Trigger, '/estimator/restore_payload')

    def _on_estimate(self, msg) -> None:
        self.estimates += 1

    def _on_truth(self, msg) -> None:
        self.truth = {kv.key: kv.value for kv in msg.status[0].values}

    def handed(self) -> float | None:
        """The payload mass the stand-in was last handed [kg], or None."""
        value = self.truth.get('handed_payload_mass')
        return None if value is None else float(value)

    def wait(self, future, timeout: float):
        """The future's result, or None after `timeout` seconds."""
        self.probe.spin_until(future.done, timeout)
        return future.result() if future.done() else None

    def close(self) -> None:
        self.probe.close()


class NodeFailed(RuntimeError):
    """A node of the demo exited or never came up; the message holds its log's tail."""


def run_case(stand_in, config: str, seed: int, out_dir: pathlib.Path, trajectory: str,
             env: Mapping[str, str] | None = None, cwd: str | None = None) -> PayloadCase:
    """One stand-in run (module doc, steps 2-4) of `ros.demo_robots.StandIn` `stand_in` with
    the configuration file `config`; node logs in `out_dir`; `env`, `cwd`: of the node
    processes (None: this process's).

    Raises:
      NodeFailed: the estimator did not come up, or offers no identify_payload action.
    """
    from std_srvs.srv import Trigger
    from sysid_ros_interfaces.action import IdentifyPayload

    from sysid_ros.io import config as config_io
    from sysid_ros.ros.node_process import NodeProcess

    def start(module, args, log):
        return NodeProcess(module, args, out_dir / log, env=env, cwd=cwd)

    rng = np.random.default_rng(seed)
    given = write_config(stand_in, config, out_dir)
    cfg = config_io.load_yaml(given)
    mass = float(rng.uniform(*stand_in.mass_range))
    com = [float(rng.uniform(*box)) for box in stand_in.payload_com_box]
    args = [*stand_in.sim_args, '-p', f'config:={given}', '-p', f'seed:={seed}',
            '-p', f'payload_mass:={mass}', '-p', f'payload_position:={com}',
            '-p', 'payload_time:=0.0', '-p', 'effort_noise:=0.05']
    if cfg.data.torque_gains:
        gains = np.asarray(cfg.data.torque_gains, dtype=float)
        true = gains * (1.0 + rng.uniform(-GAIN_TOLERANCE, GAIN_TOLERANCE, gains.shape))
        args += ['-p', f'effort_gains:={true.tolist()}']
    operator = _Operator(_urdf(given) if stand_in.from_description else None)
    sim = start('sysid_ros.ros.sim_robot', args, f'{stand_in.name}_sim.log')
    estimator_args = ['--params-file', given]
    if stand_in.from_description:
        estimator_args = ['--params-file', write_config(stand_in, config, out_dir, model=False),
                          '-p', 'robot_description_topic:=/robot_description']
    estimator = start('sysid_ros.ros.estimator', estimator_args,
                      f'{stand_in.name}_estimator.log')
    out = PayloadCase(mass=mass)
    mover = None
    try:
        # Compilation first (minutes on a loaded machine): up once it estimates.
        if not operator.probe.spin_until(
                lambda: operator.estimates > 0 or not estimator.running(),
                COMPILE_TIMEOUT) or not estimator.running():
            raise NodeFailed('estimator not up:\n' + estimator.output()[-2000:])
        start_time = time.monotonic()

        def move(run):
            return start('sysid_ros.ros.trajectory_publisher',
                         ['-p', f'config:={given}', '-p', f'trajectory:={trajectory}'],
                         f'{stand_in.name}_trajectory_{run}.log')

        mover, runs, exits = move(0), 1, []
        if not operator.action.wait_for_server(timeout_sec=10.0):
            raise NodeFailed('no identify_payload action:\n' + estimator.output()[-2000:])
        goal = operator.wait(operator.action.send_goal_async(IdentifyPayload.Goal(
            apply=True, timeout=GOAL_TIMEOUT, load_change=IdentifyPayload.Goal.PICKED_UP)),
            10.0)
        future = goal.get_result_async()
        # As an operator would: the excitation again until the estimate passes the gate.
        while not operator.probe.spin_until(lambda: future.done() or not mover.running(),
                                            GOAL_TIMEOUT + 10.0) or not future.done():
            exits.append(mover.wait(10.0))
            mover, runs = move(runs), runs + 1
        result = future.result().result
        out.message, out.estimated, out.runs = result.message, result.mass, runs
        if result.applied:
            out.applied_s = time.monotonic() - start_time
            operator.probe.spin_until(lambda: operator.handed() is not None, 5.0)
            out.handed = operator.handed()
            response = operator.wait(operator.restore.call_async(Trigger.Request()), 10.0)
            restored = operator.probe.spin_until(lambda: operator.handed() == 0.0, 5.0)
            out.rollback_ok = bool(response and response.success) and restored
        exits.append(mover.wait(120.0))
        out.excited = all(code == 0 for code in exits)
    finally:
        operator.close()
        for process in (mover, estimator, sim):
            if process is not None:
                process.interrupt()
    return out


def run(stand_in, config: str, out_dir: str, seed: int = 0, fastdds_profile: str | None = None,
        out=sys.stdout) -> int:
    """The demo (module doc) of `ros.demo_robots.StandIn` `stand_in` with the configuration
    file `config`; returns its exit status (EXIT_*)."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if fastdds_profile:
        os.environ.setdefault('FASTDDS_DEFAULT_PROFILES_FILE', fastdds_profile)
    folder = pathlib.Path(out_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    print(f'sysid demo: designing a {EXCITATION:g} s excitation for {config}', file=out,
          flush=True)
    trajectory = design_excitation(config, folder)
    print(f'sysid demo: stand-in {stand_in.name} driver and estimator starting (compiling '
          f'takes minutes); logs in {folder}', file=out, flush=True)
    try:
        case = run_case(stand_in, config, seed, folder, trajectory)
    except NodeFailed as exc:
        print(f'sysid demo: {exc}', file=out)
        return EXIT_NODE_FAILED
    except KeyboardInterrupt:
        print('sysid demo: interrupted', file=out)
        return EXIT_INTERRUPTED
    handed = 'nothing' if case.handed is None else f'{case.handed:.3f} kg'
    print(f'payload: true {case.mass:.3f} kg, handed to the robot {handed} '
          f'({case.error_pct():.2f} % off) {case.applied_s:.1f} s after the goal, '
          f'{case.runs} excitation run(s); earlier load restored: '
          f'{"yes" if case.rollback_ok else "no"}\n{case.message}', file=out)
    return EXIT_APPLIED if case.handed is not None and case.rollback_ok else \
        EXIT_NOT_APPLIED
