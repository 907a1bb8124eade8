"""Subscriptions that never run rclpy's native deserializer on bytes from the network.

Every subscription of the nodes takes its messages serialized (``raw=True``) and reads them with
:func:`opolo_ros.ros.messages.deserialize` (see :mod:`opolo_ros.ros.cdr` for why: a malformed
4-byte message segfaulted a typed subscriber). The handler gets a record that the decoders of
:mod:`opolo_ros.ros.messages` take like the message itself; bytes that are no such message go to
`reject` as a :class:`~opolo_ros.ros.messages.MessageError`, like any other bad message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.subscription import Subscription

from opolo_ros.ros import messages as m


def read_then(msg_type: type, what: str, handler: Callable[[Any], None],
              reject: Callable[[m.MessageError], None]) -> Callable[[bytes], None]:
    """A raw subscription's callback: the bytes read as `msg_type`, then `handler` (or `reject`)."""

    def callback(data: bytes) -> None:
        try:
            msg = m.deserialize(data, msg_type, what)
        except m.MessageError as err:
            reject(err)
            return
        handler(msg)

    return callback


def subscribe(node: Node, msg_type: type, topic: str, handler: Callable[[Any], None],
              qos: QoSProfile, reject: Callable[[m.MessageError], None], what: str) -> Subscription:
    """``node.create_subscription`` with ``raw=True`` and the bounded reader in between."""
    return node.create_subscription(msg_type, topic, read_then(msg_type, what, handler, reject), qos,
                                    raw=True)
