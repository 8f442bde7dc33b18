"""Descriptions of a node's topics, services, actions and parameters, which the node creates
them from.

A node module lists what it offers as module-level data: `NODE_NAME`, `ENDPOINTS` (a tuple of
`Endpoint`) and `PARAMETERS` (a tuple of `NodeParameter`), and creates each entity through
`create` from its `Endpoint`, so the generated ROS interface reference reads the same values
the node runs with.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from rclpy.action import ActionClient, ActionServer
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.qos_overriding_options import QoSOverridingOptions

__all__ = ['PUBLISHER', 'SUBSCRIPTION', 'SERVICE', 'CLIENT', 'ACTION_CLIENT', 'ACTION_SERVER',
           'KINDS',
           'Endpoint', 'NodeParameter', 'type_name', 'create']

PUBLISHER = 'publisher'
SUBSCRIPTION = 'subscription'
SERVICE = 'service'
CLIENT = 'client'
ACTION_CLIENT = 'action client'
ACTION_SERVER = 'action server'
KINDS = (PUBLISHER, SUBSCRIPTION, SERVICE, CLIENT, ACTION_CLIENT, ACTION_SERVER)


class Endpoint(NamedTuple):
    """One topic, service or action of a node.

    Attributes:
      name: as passed to rclpy, relative to the node's namespace (`~/` is the node's own);
        a `{placeholder}` is filled by the node from the parameter that `doc` names.
      msg_type: the message, service or action class; None where a recording sets it.
      kind: one of `KINDS`.
      doc: what it carries (units, frames) and when the node has it.
      qos: the profile of a topic (or a history depth); None for a service, a client or an
        action client, or where a recording sets it.
      overrides: the QoS policies of a topic that parameters may override
        (`qos_overrides.<topic>.<publisher|subscription>.<policy>`), or None.
    """

    name: str
    msg_type: type | None
    kind: str
    doc: str
    qos: QoSProfile | int | None = None
    overrides: QoSOverridingOptions | None = None


class NodeParameter(NamedTuple):
    """One of a node's own parameters: its type is the default's type.

    Attributes:
      name: the parameter name.
      default: its value when none is given, or a `Parameter.Type` for a parameter that has
        no value unless given.
      description: what it sets, with its unit.
      minimum: the smallest value accepted, or None.
    """

    name: str
    default: Any
    description: str
    minimum: float | None = None


def type_name(msg_type: type) -> str:
    """`package/msg/Name` (or `srv`, `action`) of a message, service or action class."""
    package, kind = msg_type.__module__.split('.')[:2]
    return f'{package}/{kind}/{msg_type.__name__}'


def create(node: Node, endpoint: Endpoint, callback: Callable | None = None,
           lifecycle: bool = False, msg_type: type | None = None,
           qos: QoSProfile | int | None = None, raw: bool = False,
           callback_group: CallbackGroup | None = None, **names: Any) -> Any:
    """Create `endpoint` on `node`.

    Args:
      node: the node (a `LifecycleNode` with `lifecycle`).
      endpoint: what to create.
      callback: of a subscription, service, or action server (its execute callback).
      lifecycle: make a publisher a lifecycle publisher (it publishes only while active).
      msg_type: the type of an endpoint whose type a recording sets.
      qos: the profile of an endpoint whose profile a recording sets.
      raw: a subscription's callback receives the serialised message (bytes).
      callback_group: of a service, client or action (None: the node's default).
      **names: the values of the placeholders in `endpoint.name`.

    Returns:
      The publisher, subscription, service, client, action client or action server.
    """
    name = endpoint.name.format(**names)
    msg_type = msg_type or endpoint.msg_type
    qos = endpoint.qos if qos is None else qos
    options = ({} if endpoint.overrides is None
               else {'qos_overriding_options': endpoint.overrides})
    if endpoint.kind == PUBLISHER:
        make = node.create_lifecycle_publisher if lifecycle else node.create_publisher
        return make(msg_type, name, qos, **options)
    if endpoint.kind == SUBSCRIPTION:
        return node.create_subscription(msg_type, name, callback, qos, raw=raw, **options)
    group = {} if callback_group is None else {'callback_group': callback_group}
    if endpoint.kind == SERVICE:
        return node.create_service(msg_type, name, callback, **group)
    if endpoint.kind == ACTION_CLIENT:
        return ActionClient(node, msg_type, name, **group)
    if endpoint.kind == ACTION_SERVER:
        return ActionServer(node, msg_type, name, callback, **group)
    return node.create_client(msg_type, name, **group)
