"""`bag_player` node: plays a rosbag into its topics, with `/clock`, for machines without the
`ros2` command line.

Reads rosbag2 folders (sqlite3 or mcap, also those of `ros2 bag record`) and ROS 1 `.bag`
files (converted to CDR) through `rosbags`, and publishes every message, as recorded, on its
topic at its bag (receive) time: in real time (`rate` 1.0), faster (`rate` > 1) or as fast as
possible (`rate` 0). Each topic is offered with the QoS its publishers were recorded with
(`offered_qos_profiles` of a rosbag2; `ros.qos.from_recording`: best effort if any recorded
publisher was, transient local only if all were), so a subscriber sees the replay as it
would the robot. `/clock` (rosgraph_msgs/Clock) carries the bag time before every message,
so nodes with `use_sim_time` follow the recording. Topics whose message package is not
importable here are skipped with a warning.

Parameters: `PARAMETERS`; topics: `ENDPOINTS`.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
import time

from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy.duration import Duration
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock

from sysid_ros.ros import qos
from sysid_ros.ros.interfaces import create, Endpoint, NodeParameter, PUBLISHER
from sysid_ros.ros.messages import seconds_to_stamp

__all__ = ['NODE_NAME', 'ENDPOINTS', 'PARAMETERS', 'BagPlayer', 'main']

NODE_NAME = 'bag_player'
_QUEUE = 1000

PARAMETERS = (
    NodeParameter('bag', '', 'the recording: a rosbag2 folder or a ROS 1 .bag (required)'),
    NodeParameter('rate', 1.0, 'playback speed factor, >= 0; 0: no waiting'),
    NodeParameter('topics', Parameter.Type.STRING_ARRAY, 'topics to play (not given: all)'),
    NodeParameter('publish_clock', True, 'publish /clock'),
    NodeParameter('start_delay', 0.5, 'wall seconds to wait before the first message, so that '
                  'subscribers can connect [s]'),
    NodeParameter('wait_for_subscribers', 0, 'before playing, wait until every played topic '
                  'has at least this many subscribers (at most wait_timeout, then play with a '
                  'warning), so that a fast replay into a starting node loses nothing'),
    NodeParameter('wait_timeout', 30.0, 'longest wait for those subscribers [s], and after '
                  "the last message for its reliable subscribers' acknowledgements"),
)
CLOCK = Endpoint('/clock', Clock, PUBLISHER,
                 'the bag time of the next message, before each message; if publish_clock', 10)
PLAYED = Endpoint(
    '{topic}', None, PUBLISHER,
    'every recorded topic (or those of topics) with its recorded type, each message at its '
    'bag time; offered with the QoS its publishers were recorded with (ros.qos.from_recording: '
    'best effort if any was, transient local only if all were); types that are not '
    'importable here are skipped')
ENDPOINTS = (CLOCK, PLAYED)


def _message_class(msgtype: str):
    """'sensor_msgs/msg/JointState' -> the Python class, or None if not importable."""
    package, _, name = msgtype.rpartition('/')
    try:
        return getattr(importlib.import_module(package.replace('/', '.')), name)
    except (ImportError, AttributeError):
        return None


class BagPlayer(Node):
    """Publishes the messages of one bag; `play()` runs until the end of the bag."""

    def __init__(self):
        super().__init__(NODE_NAME)
        for name, default, description, _ in PARAMETERS:
            self.declare_parameter(name, default, ParameterDescriptor(description=description))
        self.bag = pathlib.Path(self.get_parameter('bag').value)
        self.rate = float(self.get_parameter('rate').value)
        try:
            self.topics = set(self.get_parameter('topics').value) or None
        except ParameterUninitializedException:      # not given: every topic
            self.topics = None
        self.publish_clock = bool(self.get_parameter('publish_clock').value)
        self.start_delay = float(self.get_parameter('start_delay').value)
        self.wait_for_subscribers = int(self.get_parameter('wait_for_subscribers').value)
        self.wait_timeout = float(self.get_parameter('wait_timeout').value)
        if not str(self.get_parameter('bag').value):
            raise ValueError('bag: expected the path of a rosbag (-p bag:=PATH)')
        if not self.rate >= 0.0:
            raise ValueError(f'rate: expected a number >= 0, got {self.rate!r}')
        if not self.bag.exists():
            raise ValueError(f'{self.bag}: bag not found')
        self.published = 0

    def _wait_for_subscribers(self, publishers: dict) -> None:
        """Block until every publisher has `wait_for_subscribers` subscribers, or time out."""
        deadline = time.monotonic() + self.wait_timeout
        while any(p.get_subscription_count() < self.wait_for_subscribers
                  for p in publishers.values()):
            if time.monotonic() > deadline:
                missing = [t for t, p in publishers.items()
                           if p.get_subscription_count() < self.wait_for_subscribers]
                self.get_logger().warning(f'playing without {self.wait_for_subscribers} '
                                          f'subscriber(s) on {", ".join(missing)} after '
                                          f'{self.wait_timeout:g} s')
                return
            time.sleep(0.05)

    def _wait_for_acknowledgements(self, publishers) -> None:
        """Block until reliable subscribers have acknowledged every message (at most
        `wait_timeout` each; best-effort publishers return at once)."""
        for publisher in filter(None, publishers):
            if not publisher.wait_for_all_acked(Duration(seconds=self.wait_timeout)):
                self.get_logger().warning(f'{publisher.topic_name}: not every message was '
                                          f'acknowledged after {self.wait_timeout:g} s')

    def play(self) -> int:
        """Publish the bag once; returns the number of messages published."""
        from rosbags.highlevel import AnyReader

        clock = create(self, CLOCK) if self.publish_clock else None
        with AnyReader([self.bag]) as reader:
            classes, recorded, conns = {}, {}, []
            for conn in reader.connections:
                if self.topics is not None and conn.topic not in self.topics:
                    continue
                cls = _message_class(conn.msgtype)
                if cls is None:
                    self.get_logger().warning(f'{conn.topic}: message type {conn.msgtype} not '
                                              'available here; skipped')
                    continue
                classes[conn.topic] = cls
                recorded.setdefault(conn.topic, []).extend(
                    getattr(conn.ext, 'offered_qos_profiles', ()))    # ROS 1 bags: none
                conns.append(conn)
            publishers = {topic: create(
                self, PLAYED, msg_type=cls, qos=qos.from_recording(recorded[topic], _QUEUE),
                topic=topic) for topic, cls in classes.items()}
            self.get_logger().info(f'{self.bag}: playing {len(publishers)} topics, '
                                   f'{reader.duration * 1e-9:.1f} s at rate {self.rate:g}')
            self._wait_for_subscribers(publishers)
            time.sleep(self.start_delay)
            wall0, bag0 = time.monotonic(), None
            for conn, ns, raw in reader.messages(connections=conns):
                bag0 = ns if bag0 is None else bag0
                if self.rate > 0.0:
                    delay = wall0 + (ns - bag0) * 1e-9 / self.rate - time.monotonic()
                    if delay > 0.0:
                        time.sleep(delay)
                if not reader.is2:
                    raw = reader.typestore.ros1_to_cdr(raw, conn.msgtype)
                if clock is not None:
                    clock.publish(Clock(clock=seconds_to_stamp(ns * 1e-9)))
                publishers[conn.topic].publish(bytes(raw))
                self.published += 1
            self._wait_for_acknowledgements([*publishers.values(), clock])
        self.get_logger().info(f'{self.bag}: done, {self.published} messages published')
        return self.published


def main(args=None) -> int:
    rclpy.init(args=args)
    code = 0
    node = None
    try:
        node = BagPlayer()
        node.play()
    except KeyboardInterrupt:
        pass
    except ValueError as exc:
        print(f'bag_player: {exc}', file=sys.stderr)
        code = 1
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
