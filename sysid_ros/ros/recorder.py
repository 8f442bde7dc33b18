"""Records the configured topics into a new rosbag2 with `rosbags` (`sysid record`).

Topics (from the problem configuration's `data` section): `joint_states_topic`
(sensor_msgs/JointState), the torque topic when `torque_source` names one
(std_msgs/Float64MultiArray) and `mocap_topics` (geometry_msgs/PoseStamped). Messages are
stored as received (serialised CDR, no decoding) under their receive time, as `ros2 bag
record` does. As `ros2 bag record` does, a topic is subscribed once a publisher of it appears,
with the QoS its publishers offer (best effort if any of them is: a reliable reader would
receive nothing from a best-effort writer), and the profiles offered when its first message
arrives go into the bag's metadata (`offered_qos_profiles`), which `bag_player` replays. A
reliable subscription is made best effort when a best-effort publisher appears later (a
driver that starts after a reliable one, or a reliable publisher still in the graph for a
while after its process ended). Ctrl-C (SIGINT) stops the recording and closes the bag, so
it is complete and readable; the bag is written into a temporary folder beside `out` and
renamed into place when closed (`io.bag_writer.new_bag`).
"""

from __future__ import annotations

from geometry_msgs.msg import PoseStamped
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from sysid_ros.io import bag_writer
from sysid_ros.io.config_sections import TORQUE_FROM_JOINT_STATES
from sysid_ros.ros import qos
from sysid_ros.ros.interfaces import create, Endpoint, SUBSCRIPTION, type_name

__all__ = ['NODE_NAME', 'ENDPOINTS', 'Recorder', 'record_topics', 'record']

NODE_NAME = 'sysid_recorder'
_QUEUE = 1000
# How often the topics' publishers are looked up in the ROS graph [s].
_DISCOVERY_PERIOD = 0.1

_RECORDED = ('; subscribed once a publisher appears, with the QoS its publishers offer, and '
             'stored as received (serialised) under its receive time')
JOINT_STATES = Endpoint('{topic}', JointState, SUBSCRIPTION,
                        'data.joint_states_topic' + _RECORDED)
TORQUE_COMMANDS = Endpoint('{topic}', Float64MultiArray, SUBSCRIPTION,
                           'data.torque_source, where it names a topic' + _RECORDED)
MOCAP_POSES = Endpoint('{topic}', PoseStamped, SUBSCRIPTION,
                       'each entry of data.mocap_topics' + _RECORDED)
ENDPOINTS = (JOINT_STATES, TORQUE_COMMANDS, MOCAP_POSES)


def record_topics(data) -> dict[str, Endpoint]:
    """{topic: endpoint} to record for a `DataConfig`."""
    topics = {data.joint_states_topic: JOINT_STATES}
    if data.torque_source != TORQUE_FROM_JOINT_STATES:
        topics[data.torque_source] = TORQUE_COMMANDS
    topics.update({topic: MOCAP_POSES for topic in data.mocap_topics})
    return topics


class Recorder(Node):
    """Subscribes `topics` ({name: endpoint}, `record_topics`) as their publishers appear and
    writes what arrives into `writer`."""

    def __init__(self, writer, topics: dict[str, Endpoint]):
        super().__init__(NODE_NAME)
        from rosbags.typesys import get_typestore, Stores

        self._store = get_typestore(Stores.LATEST)
        self.writer = writer
        self.topics = dict(topics)
        self.counts = dict.fromkeys(topics, 0)
        self._subscribed = {}                   # topic -> its subscription
        self._bag_connections = {}              # topic -> bag connection, at its 1st message
        self.create_timer(_DISCOVERY_PERIOD, self._subscribe_published)
        self.get_logger().info(f'recording {", ".join(topics)}')

    def _publishers_of(self, topic: str) -> list:
        return self.get_publishers_info_by_topic(self.resolve_topic_name(topic))

    def _subscribe_published(self) -> None:
        """Subscribe each topic that has publishers with the QoS they offer; a reliable
        subscription becomes best effort once any publisher is."""
        for topic, endpoint in self.topics.items():
            offered = qos.to_recording(self._publishers_of(topic))
            if not offered:
                continue
            profile = qos.from_recording(offered, _QUEUE)
            subscription = self._subscribed.get(topic)
            if subscription is not None:
                if (subscription.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT
                        or profile.reliability != ReliabilityPolicy.BEST_EFFORT):
                    continue                    # best effort already, or no need to be
                self.get_logger().warning(f'{topic}: a best-effort publisher appeared; '
                                          'subscribing best effort')
                self.destroy_subscription(subscription)
            self._subscribed[topic] = create(self, endpoint, self._callback(topic), qos=profile,
                                             raw=True, topic=topic)

    def _callback(self, topic: str):
        def on_message(raw: bytes) -> None:
            if topic not in self._bag_connections:
                self._bag_connections[topic] = self.writer.add_connection(
                    topic, type_name(self.topics[topic].msg_type), typestore=self._store,
                    offered_qos_profiles=qos.to_recording(self._publishers_of(topic)))
            self.writer.write(self._bag_connections[topic], self.get_clock().now().nanoseconds,
                              raw)
            self.counts[topic] += 1
        return on_message


def record(data, out, storage: str = 'mcap', duration: float | None = None) -> dict[str, int]:
    """Record until Ctrl-C (or `duration` seconds) into the new bag `out`.

    Returns:
      Messages recorded per topic.

    Raises:
      FileExistsError: `out` exists.
    """
    rclpy.init()
    try:
        with bag_writer.new_bag(out, storage) as writer:
            node = Recorder(writer, record_topics(data))
            try:
                if duration is None:
                    rclpy.spin(node)
                else:
                    end = node.get_clock().now().nanoseconds + duration * 1e9
                    while rclpy.ok() and node.get_clock().now().nanoseconds < end:
                        rclpy.spin_once(node, timeout_sec=0.05)
            except (KeyboardInterrupt, ExternalShutdownException):
                pass        # Ctrl-C: close the bag
            counts = dict(node.counts)
            node.destroy_node()
    finally:
        rclpy.try_shutdown()
    return counts
