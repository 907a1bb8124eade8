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


def offered_qos(reliable: bool, transient_local: bool, depth: int, keep_all: bool = False) -> Any:
    """A publisher's offered QoS as rosbag2 records it (``offered_qos_profiles``: what ``ros2 bag
    play`` republishes with; deadline, lifespan and liveliness left at their defaults)."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    zero = QosTime(0, 0)
    return Qos(QosHistory.KEEP_ALL if keep_all else QosHistory.KEEP_LAST, depth,
               QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
               QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
               zero, zero, QosLiveliness.AUTOMATIC, zero, False)


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
        self.storage = storage
        self._store = _typestore()
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(self.path, version=Writer.VERSION_LATEST, storage_plugin=plugin)
        for key, value in (custom_data or {}).items():
            self._writer.set_custom_data(key, value)
        try:
            self._writer.open()
            conn = self._sqlite()
            if conn is not None:
                # Pages of an uncommitted transaction stay in memory, not in the file, however big
                # it grows: a reader of the file of a killed recorder (rosbags opens it immutable,
                # without rolling back the leftover journal) then sees exactly the committed data.
                conn.execute("PRAGMA cache_spill=OFF")
        except Exception as err:
            raise BagError(f"cannot create bag {self.path}: {_one_line(err)}") from None
        self._connections: dict[str, Any] = {}
        self.counts: dict[str, int] = {}  # messages written, per topic
        self.committed: dict[str, int] = {}  # of those, on disk for good (sqlite3: at the last flush)
        self.closed = False

    def _sqlite(self) -> Any:
        """rosbags' sqlite3 connection of the open bag (None for MCAP)."""
        return getattr(getattr(self._writer, "storage", None), "conn", None)

    def knows(self, msgtype: str) -> bool:
        """Whether the type store has a definition of `msgtype` (``pkg/msg/Name``)."""
        return msgtype in self._store.types

    def add_topic(self, topic: str, msgtype: str, qos: list[Any] | None = None) -> None:
        """Record `topic` as `msgtype` from now on; `qos`: its publishers' :func:`offered_qos`."""
        if topic in self._connections:
            raise BagError(f"topic {topic} is recorded already")
        if not self.knows(msgtype):
            raise BagError(f"cannot record {topic}: no definition of {msgtype} in the rosbags type "
                           "store (ROS 2 Kilted's standard message packages)")
        self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self._store,
                                                               offered_qos_profiles=qos or [])
        self.counts[topic] = 0
        self.committed[topic] = 0

    def write(self, topic: str, stamp_ns: int, data: bytes) -> None:
        """Store one serialized message of an added topic."""
        self._writer.write(self._connections[topic], stamp_ns, data)
        self.counts[topic] += 1

    def flush(self) -> bool:
        """Make what was written so far survive a crash: sqlite3 storage commits its transaction.
        False for MCAP, whose file is readable only once closed."""
        conn = self._sqlite()
        if self.closed or conn is None:
            return False
        conn.commit()
        self.committed = dict(self.counts)
        return True

    def close(self) -> None:
        """Write the index and ``metadata.yaml``; safe to call twice. When it fails (OSError,
        sqlite3.Error) the bag stays open for :meth:`salvage`."""
        if not self.closed:
            self._writer.close()
            self.closed = True
            self.committed = dict(self.counts)

    def salvage(self) -> None:
        """After a failed write or flush (disk full): keep what is on disk for good and write nothing
        more. sqlite3: the storage file with the messages of the last flush (``committed``), no
        ``metadata.yaml`` (its counts would include the messages rolled back); MCAP: nothing readable."""
        if not self.closed:
            self.closed = True
            try:
                self._writer.abort()
            except Exception:  # noqa: S110 - the storage failed already; what is on disk stays
                pass

    def abort(self) -> None:
        """Remove the bag (a recording that could not start)."""
        if not self.closed:
            self.closed = True
            try:
                self._writer.abort()
            finally:
                shutil.rmtree(self.path, ignore_errors=True)
