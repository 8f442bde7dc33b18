"""Launch actions that drive a managed (lifecycle) node through its transitions, for the
launch files (ROS 2 `launch` and `launch_ros`, which a ROS 2 install provides):

    estimator = LifecycleNode(package='sysid_ros', executable='estimator', name='estimator',
                              namespace='sysid', parameters=[..., {'autostart': False}])
    LaunchDescription([estimator, *lifecycle_launch.configure_then_activate(estimator)])

The node is asked to configure as soon as it is launched and to activate once it reports
the inactive state (after configure succeeded); a failed configure leaves it unconfigured.
"""

from __future__ import annotations

from launch.actions import EmitEvent, RegisterEventHandler
from launch.events import matches_action
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

__all__ = ['configure_then_activate']


def _transition(node: LifecycleNode, transition_id: int) -> EmitEvent:
    """An event that asks `node` to take a transition."""
    return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                       transition_id=transition_id))


def configure_then_activate(node: LifecycleNode) -> list:
    """Actions that configure `node` at launch and activate it once it is inactive."""
    return [
        RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, start_state='configuring', goal_state='inactive',
            entities=[_transition(node, Transition.TRANSITION_ACTIVATE)])),
        _transition(node, Transition.TRANSITION_CONFIGURE),
    ]
