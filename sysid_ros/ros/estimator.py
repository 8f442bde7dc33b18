"""`estimator`: live online identification beside a running robot.

    ros2 run sysid_ros estimator --ros-args --params-file config/double_pendulum_live.yaml
    python -m sysid_ros.ros.estimator --ros-args -p config:=config/double_pendulum_live.yaml

A managed (lifecycle) node. Configure reads the parameters, builds the model (from the
configuration, `robot_description` or its topic), checks it against Pinocchio, creates the
topics and services and compiles the estimator; a failure leaves the node unconfigured with
the reason logged. Activate consumes measurements (from an empty window buffer), publishes and
pushes; deactivate stops that and keeps the posterior; cleanup and shutdown write the
posterior to `online.save_path` (once it saw a window; also every `online.save_interval`
while it runs, and a restart resumes from that file: `io.online`) and release the topics. With
`autostart` the node configures and activates itself at start; without, it waits for a
lifecycle manager (`ros2 lifecycle set`, launch_ros's LifecycleNode as in
launch/sysid.launch.py).

Parameters, all read-only (read once, at configure): the node's own (`PARAMETERS`) and every
key of the configuration in use (`model.*`, `parameters.*`, `data.*`, `estimator.*`,
`online.*`; `io.config`), declared by `ros.params` with value, type, description and range.
Keys given as parameters override the `config` file; a parameter the node does not have is
refused.

Topics, services and the push client: `ENDPOINTS`. Subscriptions only append to the
`WindowBuffer`; one worker thread pops the newest window every `online.hop`, runs
`io.online.OnlineSession.update` and publishes. Stamps come from the messages, so
`use_sim_time` (bag replays with /clock) works; a jump back in time clears the buffer. With
`XLA_FLAGS=--xla_force_host_platform_device_count=N` CSVGD shards each window's particles over
N CPU devices (when the particle count is a multiple of N).

Exit status: 0 after Ctrl-C / SIGTERM (the posterior is written first), 2 for a bad
configuration or parameter, 3 for a model whose JAX dynamics disagree with Pinocchio
(`io.verify`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped
import jax
import numpy as np
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.task import Future
from sensor_msgs.msg import JointState, PointCloud2
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool, Trigger
from sysid_ros_interfaces.msg import ParameterEstimate
from trajectory_msgs.msg import JointTrajectory

from sysid_ros.io import config as config_io
from sysid_ros.io import config_sections
from sysid_ros.io import drivers, input_checks, model_io, online, payload_handoff, pipeline
from sysid_ros.io import problem as problem_io
from sysid_ros.io import verify
from sysid_ros.io.errors import InputError
from sysid_ros.io.window_buffer import WindowBuffer
from sysid_ros.ros import messages, parameter_push, params, payload_action, qos, trajectory_run
from sysid_ros.ros.estimator_diagnostics import EstimatorDiagnostics
from sysid_ros.ros.interfaces import (create, Endpoint, NodeParameter, PUBLISHER, SERVICE,
                                      SUBSCRIPTION)

__all__ = ['NODE_NAME', 'ENDPOINTS', 'PARAMETERS', 'EXIT_BAD_CONFIG', 'EXIT_MISMATCH',
           'ModelMismatch', 'EstimatorNode', 'main']

NODE_NAME = 'estimator'
EXIT_BAD_CONFIG = 2
EXIT_MISMATCH = 3
# Worker wake-up period while waiting for a window [s].
_POLL = 0.1

PARAMETERS = (
    NodeParameter('config', '', 'problem YAML file; configuration keys given as parameters '
                  'override it'),
    NodeParameter('robot_description', '', 'URDF XML that replaces model.urdf and '
                  'model.builder (the config then needs neither)'),
    NodeParameter('robot_description_topic', '', 'without robot_description: wait at start '
                  'for the URDF latched on this std_msgs/String topic (a relative name '
                  "resolves in the node's namespace: robot_description beside a namespaced "
                  'robot_state_publisher)'),
    NodeParameter('robot_description_timeout', 30.0, 'longest wait for '
                  'robot_description_topic [s]', 0.0),
    NodeParameter('verify_samples', 8, 'random states of the check against Pinocchio (0: '
                  'skip it)', 0),
    NodeParameter('autostart', True, 'configure and activate at start (false: wait in '
                  'unconfigured for a lifecycle manager)'),
    NodeParameter('steady_windows', 3, 'windows whose posterior means all lie within one std '
                  "of the latest: estimate_covariance's converged, the push and identify_payload "
                  'gates', 1),
    NodeParameter('payload_frame', '', 'the frame the robot takes a payload in (empty: the '
                  "driver profile's, data.driver)"),
    *payload_action.PARAMETERS,
)

_INPUT = ('; best effort (receives sensor-data and reliable publishers), volatile, depth '
          '1000, each policy overridable as qos_overrides.<topic>.subscription.<policy>')
JOINT_STATES = Endpoint(
    '{joint_states_topic}', JointState, SUBSCRIPTION,
    'data.joint_states_topic: positions, velocities and, with torque_source: '
    'joint_states.effort, efforts; joints matched by name' + _INPUT,
    qos.SENSOR_INPUT, qos.INPUT_OVERRIDES)
TORQUE_COMMANDS = Endpoint(
    '{torque_source}', Float64MultiArray, SUBSCRIPTION,
    'data.torque_source, where it names a topic: torques in model joint order [N m, N], '
    'stamped on receipt by the node clock' + _INPUT, qos.SENSOR_INPUT, qos.INPUT_OVERRIDES)
MOCAP_POSES = Endpoint(
    '{mocap_topic}', PoseStamped, SUBSCRIPTION,
    "one per entry of data.mocap_topics: a tracked body's pose, observed by the likelihood "
    'where data.mocap_frames names the tracked frames' + _INPUT,
    qos.SENSOR_INPUT, qos.INPUT_OVERRIDES)
ROBOT_DESCRIPTION_IN = Endpoint(
    '{robot_description_topic}', String, SUBSCRIPTION,
    'robot_description_topic, without robot_description: the URDF, waited for at configure '
    'for at most robot_description_timeout (latched, as robot_state_publisher publishes it)',
    qos.LATCHED)
_LATCHED = ("; stamped at the window's end in the data's time; latched (reliable, "
            'transient local, depth 1): a subscriber that starts later receives the latest')
ESTIMATE = Endpoint(
    '~/estimate', JointState, PUBLISHER,
    'name: the parameter names, position: the posterior means, velocity: the posterior '
    'standard deviations [physical units] (`ros.estimate_client` decodes it)' + _LATCHED,
    qos.LATCHED)
INERTIA = Endpoint(
    '~/inertia/{link}', InertiaStamped, PUBLISHER,
    'per link that a parameter names (and `payload` for model.payload), in the link frame: '
    'its mass, centre of mass and inertia about the centre of mass at the posterior means, '
    "as franka_msgs' SetLoad and the UR driver's payload interface take them" + _LATCHED,
    qos.LATCHED)
ESTIMATE_COVARIANCE = Endpoint(
    '~/estimate_covariance', ParameterEstimate, PUBLISHER,
    'sysid_ros_interfaces/msg/ParameterEstimate: the parameter names, posterior means and '
    "covariance (the window's Laplace fit, else the particles'), converged once the means "
    'stayed within one std over steady_windows windows' + _LATCHED, qos.LATCHED)
PARTICLES = Endpoint(
    '~/particles', PointCloud2, PUBLISHER,
    'one point per particle, one FLOAT64 field per parameter name' + _LATCHED, qos.LATCHED)
MEASURED = Endpoint(
    '~/measured', JointTrajectory, PUBLISHER,
    "the last window's positions and velocities, stamped at its start; latched",
    qos.LATCHED)
PREDICTED = Endpoint(
    '~/predicted', JointTrajectory, PUBLISHER,
    "the posterior mean simulated from the last window's first measured state, stamped at "
    'its start; latched', qos.LATCHED)
ROBOT_DESCRIPTION = Endpoint(
    '~/robot_description', String, PUBLISHER,
    'the URDF with the posterior means written in' + _LATCHED, qos.LATCHED)
DIAGNOSTICS = Endpoint(
    '/diagnostics', DiagnosticArray, PUBLISHER,
    "at online.diagnostics_rate of wall time, in diagnostic_updater's form (statuses "
    "'<node name>: <task>', hardware_id the model's name): per input topic (received, rate, "
    'seconds silent: WARN after online.silent_warn, STALE after online.silent_stale; WARN '
    'from the first window on where io.input_checks fail: joint states below data.rate, '
    'efforts that are not joint torques); the '
    'window buffer (fill, rejected messages by reason, ignored joint names, time jumps, '
    'dropped windows); the estimator (windows, iteration time, lag from window end to '
    'publish, predictive ESS, divergences, loss, noise scale, prior inflation; WARN when '
    'inference is slower than the hop or the last window diverged); with a push target, the '
    'push (WARN when the controller rejected the last push)', 10)
RESET = Endpoint('~/reset', Trigger, SERVICE, 'posterior back to its start')
SAVE = Endpoint('~/save', Trigger, SERVICE,
                'write the posterior to online.save_path (online.warm_start starts from it)')
PAUSE_PUSH = Endpoint('~/pause_push', SetBool, SERVICE,
                      'true: pause the push, false: resume it')
ENDPOINTS = (JOINT_STATES, TORQUE_COMMANDS, MOCAP_POSES, ROBOT_DESCRIPTION_IN, ESTIMATE,
             ESTIMATE_COVARIANCE, INERTIA, PARTICLES, MEASURED, PREDICTED, ROBOT_DESCRIPTION,
             DIAGNOSTICS, RESET, SAVE, PAUSE_PUSH, payload_action.IDENTIFY,
             payload_action.RESTORE,
             parameter_push.SET_PARAMETERS, parameter_push.GET_PARAMETERS,
             payload_action.SET_PAYLOAD,
             trajectory_run.FOLLOW_JOINT_TRAJECTORY)


class ModelMismatch(Exception):
    """The JAX model disagrees with Pinocchio on the URDF."""


class EstimatorNode(LifecycleNode):
    """The live estimator node (see the module doc for parameters, topics, services and its
    lifecycle)."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self._settings = params.node_parameters(self, PARAMETERS)
        self.autostart = self._settings['autostart']
        self.failure: Exception | None = None   # why the last configure failed
        self._owned: list = []                  # (destroy, entity) made by configure
        self._stop = threading.Event()
        self._active = threading.Event()
        self._worker: threading.Thread | None = None
        self._configured = False

    def start(self) -> None:
        """Configure and activate (what `autostart` does).

        Raises:
          The exception that made configure fail (InputError, ModelMismatch, ...).
        """
        if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            raise self.failure
        self.trigger_activate()

    # ------------------------------------------------------------------------------------------
    # Lifecycle transitions
    # ------------------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Read the configuration, build and check the model, compile the estimator."""
        try:
            self._configure()
        except Exception as exc:                # reported by `start` or logged here
            self.failure = exc
            self._release()
            if not self.autostart:
                self.get_logger().error(f'configure failed: {exc}')
            expected = isinstance(exc, (InputError, ModelMismatch))
            return TransitionCallbackReturn.FAILURE if expected else TransitionCallbackReturn.ERROR
        self.failure = None
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Consume measurements, publish and push (from new data: the buffer starts empty)."""
        self.buffer.clear()
        self._active.set()
        self.get_logger().info('active')
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop consuming, publishing and pushing; the posterior is kept."""
        self._active.clear()
        self.get_logger().info('inactive')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Save the posterior and release what configure made."""
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Save the posterior (if configured) and release everything."""
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def _own(self, destroy, entity):
        """Remember an entity made by configure, to destroy on cleanup; returns it."""
        self._owned.append((destroy, entity))
        return entity

    def _release(self) -> None:
        """Destroy what configure made (its parameters stay declared: they are read-only)."""
        for destroy, entity in reversed(self._owned):
            destroy(entity)
        self._owned.clear()

    def _configure(self) -> None:
        self.problem = problem = pipeline.build_problem(self._read_config())
        cfg = problem.config
        params.declare(self, params.config_parameters(cfg))
        self.session = online.OnlineSession(problem)
        if self.session.resumed:
            self.get_logger().info(f'resuming from {self.session.resumed}')
        elif self.session.not_resumed:
            self.get_logger().warning(f'starting afresh, not resuming: '
                                      f'{self.session.not_resumed}')
        self._online = cfg.online
        self._saved_at = time.monotonic()
        data = cfg.data
        from_command = data.torque_source != config_sections.TORQUE_FROM_JOINT_STATES
        self.buffer = WindowBuffer(problem.joint_names, data.rate, cfg.online.window_length,
                                   cfg.online.hop,
                                   torque_source='command' if from_command else 'effort',
                                   mocap_bodies=data.mocap_topics)

        self._topics = [data.joint_states_topic, *([data.torque_source] if from_command else []),
                        *data.mocap_topics]
        self._diagnostics = EstimatorDiagnostics(self.get_name(), problem.model.name,
                                                 self._topics, cfg.online)
        self._inputs_checked = False
        self._subscribe(JOINT_STATES, self._on_joint_state,
                        joint_states_topic=data.joint_states_topic)
        if from_command:
            self._subscribe(TORQUE_COMMANDS, self._on_command, torque_source=data.torque_source)
        for topic in data.mocap_topics:
            self._subscribe(MOCAP_POSES, lambda msg, body=topic: self._on_pose(body, msg),
                            mocap_topic=topic)
        params.check_given(self)            # every parameter given is now declared
        self._check_model(self._settings['verify_samples'])

        def publisher(endpoint, **names):
            return self._own(self.destroy_lifecycle_publisher,
                             create(self, endpoint, lifecycle=True, **names))

        self._estimate_pub = publisher(ESTIMATE)
        self._covariance_pub = publisher(ESTIMATE_COVARIANCE)
        self._steady = payload_handoff.SteadyMean(self._settings['steady_windows'])
        self._inertia_pubs = {
            body.name: publisher(INERTIA, link=body.name)
            for body in problem_io.identified_inertias(problem, self.session.estimate()[0])}
        self._particles_pub = publisher(PARTICLES)
        self._measured_pub = publisher(MEASURED)
        self._predicted_pub = publisher(PREDICTED)
        self._urdf_pub = publisher(ROBOT_DESCRIPTION)
        self._diag_pub = self._own(self.destroy_publisher, create(self, DIAGNOSTICS))
        for endpoint, callback in ((RESET, self._on_reset), (SAVE, self._on_save),
                                   (PAUSE_PUSH, self._on_pause_push)):
            self._own(self.destroy_service, create(self, endpoint, callback))
        self._push = None
        if cfg.online.push_node and cfg.online.push_parameters:
            self._push = parameter_push.ParameterPush(
                self, cfg.online.push_node, cfg.online.push_parameters, problem.names,
                cfg.parameters.bounds, cfg.online.push_max_std, cfg.online.push_rate)
            self._own(self._push.destroy, self)
        self._payload = self._payload_action()
        if self._payload is not None:
            self._own(lambda action: action.destroy(), self._payload)

        start = time.perf_counter()
        # Exactly one window: the prediction then reuses the rollout that simulated it, and
        # the input checks' inverse dynamics compile for the first window's shape.
        window = pipeline.simulate(problem,
                                   duration=(self.session.window_samples - 1) * problem.dt)
        self.session.warm_up(window)
        input_checks.effort_scales(problem, pipeline.prepare_trajectories(problem, [window])[0])
        self.get_logger().info(f'estimator compiled in {time.perf_counter() - start:.1f} s')
        if self.session.integration is not None:
            self.get_logger().info(self.session.integration.describe(self.session.problem))
        self._stop.clear()
        self._worker = threading.Thread(target=self._work, name='estimator-worker',
                                        daemon=True)
        self._worker.start()
        # Wall (steady) time: on sim time a paused or finished replay would stop the timer,
        # and with it the diagnostics that report the silence.
        self._own(self.destroy_timer, self.create_timer(
            1.0 / cfg.online.diagnostics_rate, self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME)))
        self._configured = True
        self.get_logger().info(
            f'{problem.model.name}: estimating {", ".join(problem.names)} with '
            f'{cfg.estimator.method} ({cfg.estimator.particles} particles, '
            f'{cfg.online.iterations_per_window} iterations per window of '
            f'{cfg.online.window_length:g} s every {cfg.online.hop:g} s, '
            f'{jax.device_count()} {jax.default_backend()} devices) from '
            f'{", ".join(self._topics)}')

    # ------------------------------------------------------------------------------------------
    # Start-up
    # ------------------------------------------------------------------------------------------

    def _payload_action(self) -> payload_action.PayloadAction | None:
        """identify_payload and restore_payload, where the driver profile has a payload
        service and `payload.*` parameters are identified on a URDF model."""
        problem, cfg = self.problem, self.problem.config
        profile = drivers.DRIVERS[cfg.data.driver]
        identified = payload_handoff.payload_bounds(problem.names, cfg.parameters.bounds)
        if not profile.payload_service or not identified:
            return None
        if cfg.model.urdf is None:
            self.get_logger().warning('no identify_payload: the payload frame needs a URDF '
                                      'model')
            return None
        pmodel = model_io.load_pinocchio(cfg.model.urdf)
        frame = payload_handoff.robot_frame(pmodel, self._settings['payload_frame'] or (
            (cfg.model.prefix or '') + profile.payload_frame))
        link = cfg.model.payload['link']
        return payload_action.PayloadAction(
            self, dataclasses.replace(profile, payload_frame=frame), problem.names, identified,
            link, problem.spec.payload.nominal,
            payload_handoff.frame_offset(pmodel, link, frame), self._settings, problem,
            self._current_positions)

    def _current_positions(self) -> np.ndarray | None:
        """The newest joint positions held (nv,) in model joint order, or None."""
        t, q = self.buffer.joint_positions()
        return q[-1] if len(t) else None

    def _subscribe(self, endpoint: Endpoint, callback, **names) -> None:
        """A measurement subscription, destroyed on cleanup."""
        self._own(self.destroy_subscription, create(self, endpoint, callback, **names))

    def _read_config(self) -> config_io.Config:
        """The configuration from `config` and the params-file keys (those override)."""
        flat = {name: value for name, value in params.given(self).items()
                if name.partition('.')[0] in config_io.SECTIONS}
        path = self._settings['config'] or None
        if path is None and not flat:
            raise config_io.ConfigError('no configuration: give a params file with model and '
                                        'parameters sections, or -p config:=FILE')
        tree = config_io.nest_flat(flat, path)
        if path is not None:
            from_file = config_io.read_tree(path)
            config_io.deep_merge(from_file, tree)
            tree = from_file
        description = self._settings['robot_description']
        topic = self._settings['robot_description_topic']
        if not description and topic:
            description = self._wait_for_description(
                topic, self._settings['robot_description_timeout'])
        if description:                 # the robot's model replaces any in the file
            model = tree.setdefault('model', {})
            for key in ('urdf', 'builder', 'builder_args', 'xacro_args'):
                model.pop(key, None)
            model['urdf'] = description
        return config_io.from_dict(tree, path)

    def _wait_for_description(self, topic: str, timeout: float) -> str:
        """The first URDF published on `topic` (latched), received by a helper node in this
        node's namespace and context (configure may run inside this node's executor)."""
        received = Future()

        def on_description(msg: String) -> None:
            if not received.done():
                received.set_result(msg.data)

        helper = rclpy.create_node(f'{self.get_name()}_robot_description',
                                   namespace=self.get_namespace(), context=self.context)
        try:
            create(helper, ROBOT_DESCRIPTION_IN, on_description, robot_description_topic=topic)
            executor = SingleThreadedExecutor(context=self.context)
            executor.add_node(helper)
            executor.spin_until_future_complete(received, timeout_sec=timeout)
            executor.shutdown()
        finally:
            helper.destroy_node()
        if not received.done() or not received.result().strip():
            raise config_io.ConfigError(f'robot_description_topic: no URDF on {topic} within '
                                        f'{timeout:g} s')
        self.get_logger().info(f'robot model from {topic} ({len(received.result())} bytes)')
        return received.result()

    def _check_model(self, samples: int) -> None:
        """Compare the JAX model with Pinocchio (on the URDF itself where there is one)."""
        if samples <= 0:
            return
        problem = self.problem
        pmodel = None
        if problem.config.model.urdf is not None:
            pmodel = model_io.load_pinocchio(problem.config.model.urdf,
                                             keep_joints=list(problem.joint_names))
        report = verify.verify(problem.model, problem.base_params, pmodel,
                               num_samples=samples)
        if not report.passed:
            raise ModelMismatch(report.table())
        self.get_logger().info(f'model matches Pinocchio at {samples} random states')

    # ------------------------------------------------------------------------------------------
    # Callbacks: append only
    # ------------------------------------------------------------------------------------------

    def _seen(self, topic: str) -> bool:
        """Count a message on `topic`; returns whether to consume it (active)."""
        self._diagnostics.seen(topic)
        return self._active.is_set()

    def _on_joint_state(self, msg: JointState) -> None:
        if not self._seen(self._topics[0]):
            return
        m = messages.joint_state_to_arrays(msg)
        self.buffer.add_joint_state(m.t, m.names, m.position, m.velocity, m.effort)

    def _on_command(self, msg: Float64MultiArray) -> None:
        if not self._seen(self._topics[1]):
            return
        now = self.get_clock().now().nanoseconds * 1e-9
        self.buffer.add_torque_command(now, messages.torque_command_to_array(msg))

    def _on_pose(self, body: str, msg: PoseStamped) -> None:
        if not self._seen(body):
            return
        p = messages.pose_to_arrays(msg)
        self.buffer.add_pose(body, p.t, p.position, p.orientation)

    def _on_reset(self, request, response):
        self.session.reset()
        self.buffer.clear()
        self._steady.reset()
        response.success, response.message = True, 'posterior reset'
        return response

    def _on_pause_push(self, request, response):
        if self._push is None:
            response.success, response.message = False, 'online.push_node is not set'
            return response
        self._push.pause(request.data)
        response.success = True
        response.message = 'push paused' if request.data else 'push resumed'
        return response

    def _on_save(self, request, response):
        path = self._online.save_path
        if not path:
            response.success, response.message = False, 'online.save_path is not set'
            return response
        try:
            npz, yml = self.session.save(path)
        except OSError as exc:
            response.success, response.message = False, f'{path}: {exc}'
            return response
        response.success, response.message = True, f'saved {npz} and {yml}'
        return response

    # ------------------------------------------------------------------------------------------
    # Worker
    # ------------------------------------------------------------------------------------------

    def _work(self) -> None:
        """While active, estimate on each newest ready window and publish."""
        try:
            while not self._stop.is_set():
                if not self._active.wait(_POLL) or not self.buffer.wait_ready(_POLL):
                    continue
                window = self.buffer.pop_window(latest=True)
                if window is None or self._stop.is_set():
                    continue
                if not self._inputs_checked:
                    self._check_inputs(window)
                steps = self.session.problem.substeps
                result = self.session.update(window)
                if self.session.problem.substeps != steps:
                    self.get_logger().info(self.session.integration.describe(
                        self.session.problem) + f' (window {result.index})')
                if result.diverged:
                    self.get_logger().warning(
                        f'window {result.index} ({window.t[0]:.3f} to {result.t_end:.3f} s) '
                        'diverged; the posterior went back to the last good one')
                if self._active.is_set():       # not deactivated meanwhile
                    self._publish(result, window, result.predicted)
                self._save_on_interval()
        except Exception as exc:                 # report, keep the node (and its files) alive
            if not self._stop.is_set():
                self.get_logger().error(f'estimator worker stopped: {exc!r}')

    def _save_on_interval(self) -> None:
        """Write the posterior to `online.save_path` once `online.save_interval` has passed
        since the last write (module doc: a killed node resumes from it)."""
        interval = self._online.save_interval
        if interval is None or time.monotonic() - self._saved_at < interval:
            return
        try:
            self.session.save(self._online.save_path)
        except OSError as exc:
            self.get_logger().warning(f'posterior not saved to {self._online.save_path}: '
                                      f'{exc}')
        self._saved_at = time.monotonic()

    def _check_inputs(self, window) -> None:
        """The input checks (`io.input_checks`) on the first window: each failed one WARNs
        on its topic's status and is logged once."""
        self._inputs_checked = True
        data = self.problem.config.data
        from_command = data.torque_source != config_sections.TORQUE_FROM_JOINT_STATES
        torque_topic = data.torque_source if from_command else data.joint_states_topic
        try:
            traj = online.window_trajectory(self.problem, window)
            found = {data.joint_states_topic: [
                input_checks.rate_warning(self.buffer.stats().input_rate, data.rate,
                                          data.joint_states_topic),
                input_checks.repeat_warning(self.buffer.joint_positions()[1],
                                            data.joint_states_topic)]}
            found.setdefault(torque_topic, []).append(input_checks.effort_warning(
                self.problem, traj, torque_topic if from_command else f'{torque_topic} (effort)'))
        except Exception as exc:                 # a check is no reason to stop estimating
            self.get_logger().warning(f'input checks failed: {exc!r}')
            return
        for topic, lines in found.items():
            lines = [line for line in lines if line]
            self._diagnostics.checked(topic, lines)
            for line in lines:
                self.get_logger().warning(line)

    def _publish(self, result: online.WindowResult, window, predicted) -> None:
        problem, t = self.problem, result.t_end
        self._estimate_pub.publish(messages.arrays_to_joint_state(
            t, problem.names, position=result.mean, velocity=result.std))
        steady = not result.diverged and self._steady.update(result.mean, result.std)
        summary = self.session.summary
        covariance = (summary[1] if summary is not None
                      else np.cov(self.session.particles, rowvar=False, ddof=0))
        self._covariance_pub.publish(messages.arrays_to_estimate(
            t, problem.names, result.mean, covariance, steady))
        for body in problem_io.identified_inertias(problem, result.mean):
            self._inertia_pubs[body.name].publish(messages.arrays_to_inertia(
                t, body.frame, body.mass, body.com, body.inertia))
        self._particles_pub.publish(messages.particles_to_cloud(t, problem.names,
                                                                self.session.particles))
        nv = len(problem.joint_names)
        self._measured_pub.publish(messages.arrays_to_trajectory(
            window.t, problem.joint_names, window.q, window.qd))
        self._predicted_pub.publish(messages.arrays_to_trajectory(
            window.t, problem.joint_names, predicted[:, :nv], predicted[:, nv:]))
        self._urdf_pub.publish(String(data=problem.identified_urdf(result.mean)))
        now = self.get_clock().now().nanoseconds * 1e-9
        self._diagnostics.published(result, now - result.t_end)
        if self._push is not None:
            self._push.offer(result.mean, result.std, result.diverged, steady)
        if self._payload is not None and not result.diverged:
            self._payload.offer(result.index, result.mean, result.std, steady)

    def _publish_diagnostics(self) -> None:
        self._diag_pub.publish(self._diagnostics.array(
            self.buffer.stats(), self.session, self._active.is_set(), self._push,
            self.get_clock().now().to_msg()))

    # ------------------------------------------------------------------------------------------
    # Shutdown
    # ------------------------------------------------------------------------------------------

    def teardown(self) -> str | None:
        """Undo configure (cleanup, shutdown, and at exit where the context is already shut
        down): stop the worker, release what configure made and write the posterior to
        `online.save_path` (if set and it saw a window). Returns the .npz path written; does
        nothing unless configured."""
        if not self._configured:
            return None
        self._configured = False
        self._active.clear()
        self._stop.set()
        self._worker.join(timeout=2.0)
        self._release()
        path = self._online.save_path
        if not path or not self.session.windows:    # keep a file from an earlier session
            return None
        saved = self.session.save(path, timeout=2.0)[0]
        self.get_logger().info(f'posterior written to {saved}')
        return saved

    def worker_busy(self) -> bool:
        """Whether the worker is still inside a window (after `teardown`'s wait)."""
        return self._worker is not None and self._worker.is_alive()


def main(args=None) -> int:
    """Run the node until Ctrl-C / SIGTERM, then save the posterior; exit status 2 for a bad
    configuration, 3 for a model that disagrees with Pinocchio."""
    jax.config.update('jax_enable_x64', True)
    node = None
    try:
        with rclpy.init(args=args):
            try:
                node = EstimatorNode()
                if node.autostart:
                    node.start()
                rclpy.spin(node)
            except (KeyboardInterrupt, ExternalShutdownException):
                pass
            except Exception:
                if rclpy.ok():                  # a real failure, not the shutdown racing spin
                    raise
            finally:
                if node is not None:
                    saved = node.teardown()     # not a transition: the context may be down
                    if saved:
                        print(f'estimator: posterior written to {saved}', file=sys.stderr,
                              flush=True)
                    node.destroy_node()
    except InputError as exc:
        print(f'estimator: error: {exc}', file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    except ModelMismatch as exc:
        print(f'estimator: error: the JAX model disagrees with Pinocchio:\n{exc}',
              file=sys.stderr, flush=True)
        return EXIT_MISMATCH
    except KeyboardInterrupt:
        pass
    if node is not None and node.worker_busy():
        # The worker is inside a JAX call, which the interpreter's finalisation would abort
        # (SIGABRT, "exception not rethrown"). Everything is saved: leave without finalising.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == '__main__':
    sys.exit(main())
