"""Quality of service of this package's topics, and its conversions to and from rosbag2
metadata (`rosbags.interfaces.Qos`, the `offered_qos_profiles` of a bag's topics).

  * `SENSOR_INPUT`: what the nodes subscribe to measurements with. BEST_EFFORT and VOLATILE:
    a best-effort reader matches both best-effort writers (drivers that publish with the
    sensor-data QoS) and reliable ones, where a reliable reader never receives from a
    best-effort writer. Its depth, history, reliability and durability are ROS parameters
    (`INPUT_OVERRIDES`: `qos_overrides.<topic>.subscription.<policy>`).
  * `LATCHED`: RELIABLE, TRANSIENT_LOCAL, depth 1: a subscriber that starts later receives the
    latest message at once (what `/robot_description` and `/tf_static` use).
  * `from_recording`: the profile a player offers for the publishers recorded on one topic,
    as `ros2 bag play` adapts it: best effort if any of them was, transient local only if all
    of them were.
  * `to_recording`: the profiles offered by a topic's publishers, for the bag's metadata.
"""

from __future__ import annotations

from typing import Sequence

from rclpy.qos import (DurabilityPolicy, HistoryPolicy, LivelinessPolicy, QoSPolicyKind,
                       QoSProfile, ReliabilityPolicy)
from rclpy.qos_overriding_options import QoSOverridingOptions

__all__ = ['SENSOR_INPUT', 'INPUT_OVERRIDES', 'LATCHED', 'from_recording', 'to_recording']

# Reader cache of the measurement subscriptions [messages]: callbacks only append to the
# window buffer, so it absorbs a burst of a few seconds at 200 Hz.
_INPUT_DEPTH = 1000

SENSOR_INPUT = QoSProfile(depth=_INPUT_DEPTH, history=HistoryPolicy.KEEP_LAST,
                          reliability=ReliabilityPolicy.BEST_EFFORT,
                          durability=DurabilityPolicy.VOLATILE)
INPUT_OVERRIDES = QoSOverridingOptions(policy_kinds=(
    QoSPolicyKind.HISTORY, QoSPolicyKind.DEPTH, QoSPolicyKind.RELIABILITY,
    QoSPolicyKind.DURABILITY))
LATCHED = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                     reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)


def from_recording(recorded: Sequence, depth: int) -> QoSProfile:
    """The profile to replay a topic with, from the `rosbags.interfaces.Qos` profiles recorded
    for its publishers (none recorded: reliable and volatile, `ros2 bag play`'s default).

    Args:
      recorded: the topic's offered QoS profiles in the bag's metadata.
      depth: history depth of the player's publisher [messages].
    """
    reliabilities = {profile.reliability.name for profile in recorded}
    durabilities = {profile.durability.name for profile in recorded}
    best_effort = 'BEST_EFFORT' in reliabilities
    latched = durabilities == {'TRANSIENT_LOCAL'}
    return QoSProfile(
        depth=depth, history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def to_recording(publishers: Sequence) -> list:
    """`rosbags.interfaces.Qos` profiles offered by `publishers`
    (`rclpy.topic_endpoint_info.TopicEndpointInfo`, from `Node.get_publishers_info_by_topic`)."""
    from rosbags import interfaces as bag

    def duration(value) -> 'bag.QosTime':
        sec, nsec = divmod(value.nanoseconds, 1_000_000_000)
        return bag.QosTime(sec=sec, nsec=nsec)

    profiles = []
    for info in publishers:
        profile = info.qos_profile
        profiles.append(bag.Qos(
            history=bag.QosHistory[HistoryPolicy(profile.history).name],
            depth=profile.depth,
            reliability=bag.QosReliability[ReliabilityPolicy(profile.reliability).name],
            durability=bag.QosDurability[DurabilityPolicy(profile.durability).name],
            deadline=duration(profile.deadline), lifespan=duration(profile.lifespan),
            liveliness=bag.QosLiveliness[LivelinessPolicy(profile.liveliness).name],
            liveliness_lease_duration=duration(profile.liveliness_lease_duration),
            avoid_ros_namespace_conventions=profile.avoid_ros_namespace_conventions))
    return profiles
