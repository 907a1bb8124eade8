"""A rosbag2 bag written message by message, as serialized bytes arrive (no ROS import).

What ``ros2 bag record`` does for the topic recorder (:mod:`opolo_ros.nodes.topic_recorder`) on a
machine with rclpy but without rosbag2 (this project's pip-installed ROS): each topic is a
connection of the bag, each message is stored as the CDR bytes it came in, stamped with its
receive time. Written with the `rosbags` library (MCAP by default, or sqlite3), whose type store
must know the message type (ROS 2 Kilted's standard messages: ``std_msgs``, ``sensor_msgs``,
``geometry_msgs``, ``nav_msgs``, ...), since MCAP keeps each type's definition.

The bag's ``metadata.yaml`` (and MCAP's index) are written by :meth:`StreamBagWriter.close`.
With sqlite3 storage, :meth:`StreamBagWriter.flush` commits what was written so far: a process
killed with SIGKILL (or a power cut) loses only what came after the last flush, and its storage
file (``<bag>/<bag>.db3``, without ``metadata.yaml``) is read as a bare storage file. An MCAP bag
killed that way cannot be read (as rosbag2's own MCAP recorder leaves one that needs ``ros2 bag
reindex``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from opolo_ros.data.bags import STORAGES, BagError, _one_line, _typestore


class StreamBagWriter:
    """A new bag folder at `path` (must not exist); topics are added as their types become known."""

    def __init__(self, path: str | Path, storage: str = "mcap",
                 custom_data: dict[str, str] | None = None) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.path = Path(path)
        if storage not in STORAGES:
            raise BagError(f"storage must be one of {STORAGES}, got {storage!r}")
        if self.path.exists():
            raise FileExistsError(f"{self.path} already exists; refusing to overwrite a bag "
                                  "(choose another output path or remove it)")
        self._store = _typestore()
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(self.path, version=Writer.VERSION_LATEST, storage_plugin=plugin)
        for key, value in (custom_data or {}).items():
            self._writer.set_custom_data(key, value)
        try:
            self._writer.open()
        except Exception as err:
            raise BagError(f"cannot create bag {self.path}: {_one_line(err)}") from None
        self._connections: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        self.closed = False

    def knows(self, msgtype: str) -> bool:
        """Whether the type store has a definition of `msgtype` (``pkg/msg/Name``)."""
        return msgtype in self._store.types

    def add_topic(self, topic: str, msgtype: str) -> None:
        """Record `topic` as `msgtype` from now on."""
        if topic in self._connections:
            raise BagError(f"topic {topic} is recorded already")
        if not self.knows(msgtype):
            raise BagError(f"cannot record {topic}: no definition of {msgtype} in the rosbags type "
                           "store (ROS 2 Kilted's standard message packages)")
        self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self._store)
        self.counts[topic] = 0

    def write(self, topic: str, stamp_ns: int, data: bytes) -> None:
        """Store one serialized message of an added topic."""
        self._writer.write(self._connections[topic], stamp_ns, data)
        self.counts[topic] += 1

    def flush(self) -> bool:
        """Make what was written so far survive a crash: sqlite3 storage commits its transaction.
        False for MCAP, whose file is readable only once closed."""
        conn = getattr(getattr(self._writer, "storage", None), "conn", None)  # rosbags' sqlite3 writer
        if self.closed or conn is None:
            return False
        conn.commit()
        return True

    def close(self) -> None:
        """Write the index and ``metadata.yaml``; safe to call twice."""
        if not self.closed:
            self.closed = True
            self._writer.close()

    def abort(self) -> None:
        """Remove the bag (a recording that could not start)."""
        if not self.closed:
            self.closed = True
            try:
                self._writer.abort()
            finally:
                shutil.rmtree(self.path, ignore_errors=True)
