"""`ros.interfaces`: the nodes' interface descriptions are well formed, `type_name` spells
ROS type names, and `create` makes what an `Endpoint` describes, placeholders filled."""

import importlib

from control_msgs.action import FollowJointTrajectory
from geometry_msgs.msg import PoseStamped
import pytest
from rclpy.action.graph import get_action_client_names_and_types_by_node
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from sysid_ros.ros import interfaces
from sysid_ros.ros.interfaces import Endpoint

NODES = ('sim_robot', 'estimator', 'trajectory_publisher', 'bag_player', 'recorder')


@pytest.mark.parametrize('module', NODES)
def test_every_node_module_describes_its_endpoints_and_parameters(module):
    node = importlib.import_module(f'sysid_ros.ros.{module}')
    assert node.NODE_NAME.endswith(module)
    for endpoint in node.ENDPOINTS:
        assert endpoint.kind in interfaces.KINDS and endpoint.name and endpoint.doc
        if endpoint.kind in (interfaces.SERVICE, interfaces.CLIENT, interfaces.ACTION_CLIENT,
                             interfaces.ACTION_SERVER):
            assert endpoint.qos is None and endpoint.overrides is None
        if endpoint.msg_type is not None:
            assert interfaces.type_name(endpoint.msg_type).count('/') == 2
    parameters = getattr(node, 'PARAMETERS', ())       # the recorder has none
    names = [p.name for p in parameters]
    assert len(names) == len(set(names)) and all(p.description for p in parameters)


def test_type_name():
    assert interfaces.type_name(JointState) == 'sensor_msgs/msg/JointState'
    assert interfaces.type_name(Trigger) == 'std_srvs/srv/Trigger'
    assert (interfaces.type_name(FollowJointTrajectory)
            == 'control_msgs/action/FollowJointTrajectory')


def test_create_fills_placeholders_and_makes_each_kind(ros):
    node = ros.node
    pose = Endpoint('mocap/{link}/pose', PoseStamped, interfaces.PUBLISHER, 'a pose', 10)
    publisher = interfaces.create(node, pose, link='link2')
    subscription = interfaces.create(
        node, pose._replace(kind=interfaces.SUBSCRIPTION), lambda msg: None, link='link3')
    service = interfaces.create(
        node, Endpoint('~/{what}', Trigger, interfaces.SERVICE, 'a service'),
        lambda request, response: response, what='reset')
    client = interfaces.create(node, Endpoint('{target}/reset', Trigger, interfaces.CLIENT,
                                              'a client'), target='/other')
    action = interfaces.create(node, Endpoint(
        '/{controller}/follow_joint_trajectory', FollowJointTrajectory,
        interfaces.ACTION_CLIENT, 'an action client'), controller='arm')
    try:
        assert publisher.topic_name == '/mocap/link2/pose'
        assert subscription.topic_name == '/mocap/link3/pose'
        assert service.srv_name == '~/reset'
        assert client.srv_name == '/other/reset'
        assert ('/arm/follow_joint_trajectory', ['control_msgs/action/FollowJointTrajectory']) \
            in get_action_client_names_and_types_by_node(node, node.get_name(),
                                                         node.get_namespace())
    finally:
        action.destroy()
        node.destroy_publisher(publisher)
        node.destroy_subscription(subscription)
        node.destroy_service(service)
        node.destroy_client(client)
