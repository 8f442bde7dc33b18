"""`estimator`: live online identification beside a running robot.

    ros2 run sysid_ros estimator --ros-args --params-file config/double_pendulum_live.yaml
    python -m sysid_ros.ros.estimator --ros-args -p config:=config/double_pendulum_live.yaml

Lifecycle (a managed node, rclpy.lifecycle): configure reads the parameters, builds the model
(from the config, `robot_description` or its topic), checks it against Pinocchio, creates
the topics and services below and compiles the estimator (tens of seconds; a failure leaves
the node unconfigured with the reason logged); activate consumes the measurements (from an
empty window buffer), publishes and pushes; deactivate stops that, keeping the posterior;
cleanup and shutdown write the posterior to `online.save_path` (once it saw a window) and
release the topics. With `autostart` (bool, default true) the node configures and activates
itself at start, and a configure failure exits (status 2 or 3, below); with
`autostart:=false` it waits unconfigured for a lifecycle manager (`ros2 lifecycle set
/sysid/estimator configure`, launch_ros's LifecycleNode with ChangeState events as in
launch/sysid.launch.py).

Parameters (read once, at configure, so all declared read-only):
  * the configuration contract (`model.*`, `parameters.*`, `data.*`, `estimator.*`,
    `online.*`; see ARCHITECTURE.md and `io.config.OnlineConfig`) from a params file, and/or
  * `config` (string): a problem YAML file; keys given as ROS parameters override it;
  * `robot_description` (string): URDF XML that replaces `model.urdf` / `model.builder`;
  * `robot_description_topic` (string, ''): without `robot_description`, wait at start for
    the URDF on this std_msgs/String topic (transient local, as `robot_state_publisher`
    publishes `/robot_description`) for at most `robot_description_timeout` (float, 30 s);
  * `verify_samples` (int, 8): random states of the Pinocchio check (0: skip it);
  * `qos_overrides.<topic>.subscription.<policy>` (see Subscriptions).
Every key of the configuration in use is declared (`ros.params`) with its value, type,
description (from `io.config`) and range, so `ros2 param get/describe` show what the node
runs with; `ros2 param set` is refused ('read-only', or 'undeclared' for an unknown name).
A bad configuration, or a parameter given that the node does not have (a typo), prints one
message naming the file and key and exits with status 2; a model whose JAX dynamics
disagree with Pinocchio (`io.verify`) is refused (status 3).

Subscriptions (names as configured, remappable; QoS `ros.qos.SENSOR_INPUT`: best effort, so
that both sensor-data and reliable publishers are received, volatile, depth 1000, each policy
overridable as `qos_overrides.<topic>.subscription.{reliability,durability,depth,history}`):
`data.joint_states_topic`
(sensor_msgs/JointState: positions, velocities and, with `torque_source:
joint_states.effort`, efforts; joints matched by name); `data.torque_source` when it names a
topic (std_msgs/Float64MultiArray in model joint order, stamped on receipt by the node clock);
`data.mocap_topics` (geometry_msgs/PoseStamped; observed by the likelihood where
`data.mocap_frames` names the tracked frames).
Callbacks only append to the `WindowBuffer`; one worker thread pops the newest window every
`online.hop`, runs `OnlineSession.update` (CSVGD by default, warm-started, see `io.online`) and
publishes.

Publications (under the node's namespace), stamped in the data's time, all latched
(`ros.qos.LATCHED`: reliable, transient local, depth 1) so that a controller or monitor
started later receives the latest at once:
  * `~/estimate` (sensor_msgs/JointState): `name` = the parameter names, `position` = the
    posterior means, `velocity` = the posterior standard deviations [physical units]; plot
    e.g. `/sysid/estimator/estimate/link2.mass/position`; `ros.estimate_client` decodes it;
  * `~/inertia/<link>` (geometry_msgs/InertiaStamped, frame the link): per link that a
    parameter names, its mass, centre of mass and inertia about the centre of mass with the
    posterior means (`io.problem.identified_inertias`), as franka_msgs' SetLoad and the UR
    driver's payload interface take them; `~/inertia/payload` for `model.payload`;
  * `~/particles` (sensor_msgs/PointCloud2): one point per particle, one FLOAT64 field per
    parameter name;
  * `~/measured`, `~/predicted` (trajectory_msgs/JointTrajectory): the last window (positions
    and velocities, stamped at its start); the prediction simulates the posterior mean from
    the window's first measured state;
  * `~/robot_description` (std_msgs/String): the URDF with the posterior means written in
    (`io.problem.Problem.identified_urdf`).
Diagnostics (not latched):
  * `/diagnostics` (diagnostic_msgs/DiagnosticArray, where `diagnostic_aggregator` and
    `rqt_robot_monitor` listen) at `online.diagnostics_rate` of wall time (also on sim time,
    where a finished replay stops the clock), in diagnostic_updater's form: each status named
    '<node name>: <task>', its hardware_id the model's name. One status
    per input topic (received, rate, seconds silent in wall time: WARN after
    `online.silent_warn`, STALE after `online.silent_stale`), one for the window buffer
    (fill, rejected messages by reason, ignored joint names, time jumps, dropped windows) and
    one for the estimator (windows, iteration time, lag from window end to publish in the
    node clock, predictive ESS, divergences, loss, the noise scale and the last window's
    prior inflation of `io.online`; WARN when inference is slower than the
    hop or the last window diverged), and with a push target one for the push (WARN when
    the controller rejected the last push).
Services (std_srvs/Trigger): `~/reset` (posterior back to its start), `~/save` (write the
posterior to `online.save_path`); (std_srvs/SetBool) `~/pause_push` (true: pause the push,
false: resume it). On Ctrl-C / SIGTERM the posterior is written to `online.save_path` before
exit; `online.warm_start` starts from such a file.
Push (`ros.parameter_push`): with `online.push_node`, the means of `online.push_parameters`
(estimate name -> parameter name) go to `<push_node>/set_parameters_atomically` in one
request, at most `online.push_rate` times a second, from windows that did not diverge and
whose pushed parameters' stds are below `online.push_max_std` of their bounds widths; the
diagnostics status 'push' counts them sent, accepted and rejected (with the last reason) and
what was held back by reason.
Time: stamps come from the messages, so `use_sim_time` (bag replays with /clock) works; a
jump back in time (a bag restarted) clears the window buffer.
Cores: with `XLA_FLAGS=--xla_force_host_platform_device_count=N` in its environment the
node sees N CPU devices and CSVGD shards each window's particles over them (when the particle
count is a multiple of N): on 2 cores 64 particles ran 2x faster per window, 16 particles only
1.25x, and the first compilation took twice as long (66 s against 35 s), so it is not the
default.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import InertiaStamped, PoseStamped
import jax
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.task import Future
from sensor_msgs.msg import JointState, PointCloud2
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from sysid_ros.io import config as config_io
from sysid_ros.io import model_io, online, pipeline, verify
from sysid_ros.io import problem as problem_io
from sysid_ros.io.errors import InputError
from sysid_ros.io.window_buffer import WindowBuffer
from sysid_ros.ros import messages, params, parameter_push, qos

__all__ = ['EXIT_BAD_CONFIG', 'EXIT_MISMATCH', 'ModelMismatch', 'EstimatorNode', 'main']

EXIT_BAD_CONFIG = 2
EXIT_MISMATCH = 3
# Worker wake-up period while waiting for a window [s].
_POLL = 0.1
# The node's own parameters (params.node_parameters): name, default, description, minimum.
_NODE_PARAMETERS = (
    ('config', '', 'problem YAML file; configuration keys given as parameters override it',
     None),
    ('robot_description', '', 'URDF XML that replaces model.urdf and model.builder', None),
    ('robot_description_topic', '', 'without robot_description: wait at start for the URDF '
     'latched on this std_msgs/String topic', None),
    ('robot_description_timeout', 30.0, 'longest wait for robot_description_topic [s]', 0.0),
    ('verify_samples', 8, 'random states of the check against Pinocchio (0: skip it)', 0),
    ('autostart', True, 'configure and activate at start (false: wait in unconfigured for a '
     'lifecycle manager)', None),
)


class ModelMismatch(Exception):
    """The JAX model disagrees with Pinocchio on the URDF."""


class EstimatorNode(LifecycleNode):
    """The live estimator node (see the module doc for parameters, topics, services and its
    lifecycle)."""

    def __init__(self, **kwargs):
        super().__init__('estimator', **kwargs)
        self._settings = params.node_parameters(self, _NODE_PARAMETERS)
        self.autostart = self._settings['autostart']
        self.failure: Exception | None = None   # why the last configure failed
        self._owned: list = []                  # (destroy, entity) made by configure
        self._stats_lock = threading.Lock()
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
        self._online = cfg.online
        data = cfg.data
        from_command = data.torque_source != config_io.TORQUE_FROM_JOINT_STATES
        self.buffer = WindowBuffer(problem.joint_names, data.rate, cfg.online.window_length,
                                   cfg.online.hop,
                                   torque_source='command' if from_command else 'effort',
                                   mocap_bodies=data.mocap_topics)

        self._last_seen: dict[str, float | None] = {}
        self._counts: dict[str, int] = {}
        self._topics = [data.joint_states_topic]
        self._subscribe(JointState, data.joint_states_topic, self._on_joint_state)
        if from_command:
            self._topics.append(data.torque_source)
            self._subscribe(Float64MultiArray, data.torque_source, self._on_command)
        for topic in data.mocap_topics:
            self._topics.append(topic)
            self._subscribe(PoseStamped, topic, lambda msg, body=topic: self._on_pose(body, msg))
        for topic in self._topics:
            self._last_seen[topic] = None
            self._counts[topic] = 0
        params.check_given(self)            # every parameter given is now declared
        self._check_model(self._settings['verify_samples'])

        def publisher(msg_type, topic):
            return self._own(self.destroy_lifecycle_publisher,
                             self.create_lifecycle_publisher(msg_type, topic, qos.LATCHED))

        self._estimate_pub = publisher(JointState, '~/estimate')
        self._inertia_pubs = {
            body.name: publisher(InertiaStamped, f'~/inertia/{body.name}')
            for body in problem_io.identified_inertias(problem, self.session.estimate()[0])}
        self._particles_pub = publisher(PointCloud2, '~/particles')
        self._measured_pub = publisher(JointTrajectory, '~/measured')
        self._predicted_pub = publisher(JointTrajectory, '~/predicted')
        self._urdf_pub = publisher(String, '~/robot_description')
        self._diag_pub = self._own(self.destroy_publisher,
                                   self.create_publisher(DiagnosticArray, '/diagnostics', 10))
        for srv_type, name, callback in ((Trigger, '~/reset', self._on_reset),
                                         (Trigger, '~/save', self._on_save),
                                         (SetBool, '~/pause_push', self._on_pause_push)):
            self._own(self.destroy_service, self.create_service(srv_type, name, callback))
        self._push = None
        if cfg.online.push_node and cfg.online.push_parameters:
            self._push = parameter_push.ParameterPush(
                self, cfg.online.push_node, cfg.online.push_parameters, problem.names,
                cfg.parameters.bounds, cfg.online.push_max_std, cfg.online.push_rate)
            self._own(self.destroy_client, self._push.client)

        start = time.perf_counter()
        # Exactly one window: the prediction then reuses the rollout that simulated it.
        self.session.warm_up(pipeline.simulate(
            problem, duration=(self.session.window_samples - 1) * problem.dt))
        self.get_logger().info(f'estimator compiled in {time.perf_counter() - start:.1f} s')
        if self.session.integration is not None:
            self.get_logger().info(self.session.integration.describe(self.session.problem))
        self._last: online.WindowResult | None = None
        self._lag = float('nan')
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

    def _subscribe(self, msg_type, topic: str, callback) -> None:
        """A measurement subscription: `qos.SENSOR_INPUT`, overridable by parameters."""
        self._own(self.destroy_subscription, self.create_subscription(
            msg_type, topic, callback, qos.SENSOR_INPUT,
            qos_overriding_options=qos.INPUT_OVERRIDES))

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
            from_file = config_io.to_dict(config_io.load_yaml(path))
            config_io.deep_merge(from_file, tree)
            tree = from_file
        cfg = config_io.from_dict(tree, path)
        description = self._settings['robot_description']
        topic = self._settings['robot_description_topic']
        if not description and topic:
            description = self._wait_for_description(
                topic, self._settings['robot_description_timeout'])
        if description:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(
                cfg.model, urdf=description, builder=None))
        return cfg

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
            helper.create_subscription(String, topic, on_description, qos.LATCHED)
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
        self._last_seen[topic] = time.monotonic()
        self._counts[topic] += 1
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
        except Exception as exc:                 # report, keep the node (and its files) alive
            if not self._stop.is_set():
                self.get_logger().error(f'estimator worker stopped: {exc!r}')

    def _publish(self, result: online.WindowResult, window, predicted) -> None:
        problem, t = self.problem, result.t_end
        self._estimate_pub.publish(messages.arrays_to_joint_state(
            t, problem.names, position=result.mean, velocity=result.std))
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
        with self._stats_lock:
            self._last = result
            self._lag = now - result.t_end
        if self._push is not None:
            self._push.offer(result.mean, result.std, result.diverged)

    # ------------------------------------------------------------------------------------------
    # Diagnostics
    # ------------------------------------------------------------------------------------------

    def _status(self, name: str, level: int, message: str, values: dict) -> DiagnosticStatus:
        return DiagnosticStatus(level=level, name=f'{self.get_name()}: {name}',
                                message=message, hardware_id=self.problem.model.name,
                                values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])

    def _input_status(self, topic: str, rate: float | None) -> DiagnosticStatus:
        seen = self._last_seen[topic]
        silent = float('inf') if seen is None else time.monotonic() - seen
        if silent >= self._online.silent_stale:
            level, message = DiagnosticStatus.STALE, f'silent for {silent:.1f} s'
        elif silent >= self._online.silent_warn:
            level, message = DiagnosticStatus.WARN, f'silent for {silent:.1f} s'
        else:
            level, message = DiagnosticStatus.OK, 'receiving'
        values = {'received': self._counts[topic], 'silent_s': f'{silent:.3f}'}
        if rate is not None:
            values['rate_hz'] = f'{rate:.2f}'
        return self._status(f'input {topic}', level, message, values)

    def diagnostics(self) -> DiagnosticArray:
        """The diagnostics array (see the module doc)."""
        stats = self.buffer.stats()
        statuses = [self._input_status(topic, stats.input_rate if i == 0 else None)
                    for i, topic in enumerate(self._topics)]
        rejected = sum(stats.rejected.values())
        buffer_values = {'fill': f'{stats.fill:.3f}', 'rejected': rejected,
                         **{f'rejected.{k}': v for k, v in stats.rejected.items()},
                         'ignored_joint_names': stats.ignored_joint_names,
                         'time_jumps': stats.time_jumps,
                         'windows_emitted': stats.windows_emitted,
                         **{f'windows_dropped.{k}': v
                            for k, v in stats.windows_dropped.items()}}
        statuses.append(self._status(
            'window buffer', DiagnosticStatus.WARN if rejected else DiagnosticStatus.OK,
            f'{rejected} messages rejected' if rejected else 'ok', buffer_values))
        with self._stats_lock:
            last, lag = self._last, self._lag
        active = self._active.is_set()
        values = {'windows': self.session.windows, 'divergences': self.session.divergences,
                  'active': active}
        level, message = DiagnosticStatus.OK, 'waiting for data'
        if last is not None:
            values.update(iteration_time_s=f'{last.iteration_time:.4f}', lag_s=f'{lag:.4f}',
                          ess=f'{last.ess:.3f}', loss=f'{last.loss:.6g}',
                          noise_scale=f'{last.noise_scale:.4g}',
                          prior_inflation=f'{last.prior_inflation:.4g}',
                          window_end=f'{last.t_end:.6f}')
            message = 'running'
            if last.diverged:
                level, message = DiagnosticStatus.WARN, 'last window diverged; posterior reset'
            elif last.iteration_time > self._online.hop:
                level, message = DiagnosticStatus.WARN, 'inference slower than the hop'
        if not active:
            level, message = DiagnosticStatus.OK, 'inactive'
        statuses.append(self._status('estimator', level, message, values))
        if self._push is not None:
            warn, message, values = self._push.status()
            statuses.append(self._status(
                'push', DiagnosticStatus.WARN if warn else DiagnosticStatus.OK, message, values))
        msg = DiagnosticArray(status=statuses)
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def _publish_diagnostics(self) -> None:
        self._diag_pub.publish(self.diagnostics())

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
