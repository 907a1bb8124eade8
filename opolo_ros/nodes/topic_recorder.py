"""topic_recorder: records ROS topics into a rosbag2 bag, as ``ros2 bag record`` would.

For a machine with this project's pip-installed ROS 2 (rclpy, no rosbag2): record a robot's
``/joint_states`` (or any observation stream) while an expert drives it, then train from the bag
(``demos:=bag``, ``demos_topic``, ``demos_joints``; README, "Your own demonstrations").
``opolo-ros record-topics /joint_states -o bags/arm`` runs it.

Each topic is subscribed once a publisher of it is seen (its type comes from the graph, as
``ros2 bag record`` takes it), with the publishers' reliability and durability (reliable only if
every publisher offers it, so a best-effort publisher is heard too; transient local if every
publisher offers it, so a latched topic's last message is recorded). Messages are stored as the
serialized bytes that arrived, stamped with their receive time (wall-clock time at the start, then
a monotonic clock, so the stamps never go back; the demonstration reader splits episodes by them).
The recording ends on SIGINT/SIGTERM, after ``duration_s`` or after ``max_messages``; the bag
is complete then (``metadata.yaml`` written). With sqlite3 storage (the default) the messages are
committed to disk every ``flush_period_s``: a recorder killed with SIGKILL (or a machine that
loses power) leaves ``<output>/<name>.db3``, which the demonstration reader takes as a bare
storage file, short of the last period's messages; an MCAP bag killed that way cannot be read
(see :mod:`opolo_ros.data.bag_writer`).
"""

from __future__ import annotations

import importlib
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from opolo_ros.data.bag_writer import StreamBagWriter, offered_qos
from opolo_ros.data.bags import STORAGES, BagError
from opolo_ros.nodes.common import FinishableNode, ParameterError, declare, run_node
from opolo_ros.signals import hold_signals

DISCOVERY_PERIOD_S = 0.2  # how often the graph is looked at for the topics not subscribed yet
WAITING_LOG_PERIOD_S = 5.0
DEPTH = 1000  # keep-last depth of each subscription (a burst the executor has not taken yet)
MAX_PERIOD_S = 1e9  # durations and periods: a ROS timer takes at most 2**63 ns (292 years)

PARAMETERS: dict[str, tuple] = {
    "topics": ([], "topics to record (absolute, or relative to the node's namespace)"),
    "output": ("", "new bag folder to write (must not exist); empty = rosbag2_<date-time> in the "
                   "working folder, as ros2 bag record names it"),
    "storage": ("sqlite3", "rosbag2 storage: sqlite3 (flushed every flush_period_s: a crash loses only "
                           "the messages since) or mcap (readable only once the recording ends)"),
    "flush_period_s": (1.0, "sqlite3: commit the messages to disk this often; 0 = only at the end (the "
                            "whole recording is held in memory until then, and lost with the process)"),
    "duration_s": (0.0, "stop after this many seconds from the first subscription; 0 = until a signal"),
    "max_messages": (0, "stop after this many messages (all topics together); 0 = no limit"),
    "discovery_timeout_s": (0.0, "give up (status 1) when a topic has no publisher this many seconds "
                                 "after the start; what was recorded is kept; 0 = wait for ever"),
    "progress_period_s": (5.0, "log the message counts this often; 0 = only at the end"),
}


def message_class(msgtype: str) -> type:
    """The Python class of ``pkg/msg/Name`` (a ROS message package installed for rclpy)."""
    package, kind, name = (msgtype.split("/") + ["", ""])[:3]
    if kind != "msg" or not package or not name:
        raise BagError(f"not a message type: {msgtype!r} (expected package/msg/Name)")
    try:
        module = importlib.import_module(f"{package}.msg")
    except ImportError:
        raise BagError(f"message type {msgtype} is not installed for rclpy (its package {package} is "
                       f"missing: pip install ros-{package.replace('_', '-')})") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise BagError(f"message type {msgtype}: the installed package {package} has no message "
                       f"{name}") from None


def _all(infos: list[Any], attribute: str, value: Any) -> bool:
    return bool(infos) and all(getattr(info.qos_profile, attribute) == value for info in infos)


class TopicRecorder(FinishableNode):
    def __init__(self, *, node_name: str = "topic_recorder", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        topics = [p["topics"]] if isinstance(p["topics"], str) else p["topics"]
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            got = "none" if not topics else repr(topics)  # -p topics:=[] comes as None
            raise ParameterError(f"parameter 'topics' must name at least one topic, got {got} (e.g. "
                                 "-p topics:=[/joint_states])")
        try:
            self.topics = [self.resolve_topic_name(t) for t in topics]
        except Exception as err:  # rclpy's InvalidTopicNameException, several lines
            raise ParameterError(f"parameter 'topics': {' '.join(str(err).split())}") from None
        if len(set(self.topics)) != len(self.topics):
            raise ParameterError(f"parameter 'topics' names a topic twice: {topics}")
        if p["storage"] not in STORAGES:
            raise ParameterError(f"parameter 'storage' must be one of {STORAGES}, got {p['storage']!r}")
        for name in ("duration_s", "discovery_timeout_s", "progress_period_s", "flush_period_s"):
            if not (math.isfinite(p[name]) and 0 <= p[name] <= MAX_PERIOD_S):
                raise ParameterError(f"parameter '{name}' must be between 0 and {MAX_PERIOD_S:g} s, "
                                     f"got {p[name]}")
        if p["max_messages"] < 0:
            raise ParameterError(f"parameter 'max_messages' must be >= 0, got {p['max_messages']}")
        self.duration_s, self.max_messages = p["duration_s"], p["max_messages"]
        self.discovery_timeout_s = p["discovery_timeout_s"]
        output = p["output"] or time.strftime("rosbag2_%Y_%m_%d-%H_%M_%S")
        self.output = Path(output)
        if self.output.exists():
            raise ParameterError(f"parameter 'output': {self.output} already exists; refusing to "
                                 "overwrite a bag")
        # the folders this recorder makes above the bag, removed again if it records nothing
        self._made = [d for d in (self.output.parent, *self.output.parent.parents) if not d.exists()]
        try:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            self.bag = StreamBagWriter(self.output, p["storage"], {"source": "opolo_ros topic_recorder"})
        except (OSError, BagError) as err:
            self._remove_made_folders()
            raise ParameterError(f"parameter 'output': {err}") from None
        self.error: str | None = None  # why the recording ended short (status 1)
        self.storage_failed = False  # a write or flush failed (disk full): salvage what is on disk
        self.messages = 0
        self._started = time.monotonic()
        self._wall0_ns, self._mono0_ns = time.time_ns(), time.monotonic_ns()
        self._first_subscription: float | None = None
        self._recorded: dict[str, Any] = {}
        self._skipped: dict[str, str] = {}  # topics that cannot be recorded, and why
        self._last_waiting_log = self._started
        self._discovery = self.create_timer(DISCOVERY_PERIOD_S, self._discover)
        if p["progress_period_s"] > 0:
            self.create_timer(p["progress_period_s"], self._report)
        if p["flush_period_s"] > 0 and p["storage"] == "sqlite3":
            self.create_timer(p["flush_period_s"], self._flush)
        self.get_logger().info(f"recording {', '.join(self.topics)} into {self.output} ({p['storage']})")

    # --------------------------------------------------------------------------------- discovery

    def _discover(self) -> None:
        if self.finished.is_set():
            return
        graph = dict(self.get_topic_names_and_types())
        for topic in self.topics:
            if topic in self._recorded or topic in self._skipped or topic not in graph:
                continue
            infos = self.get_publishers_info_by_topic(topic)
            if not infos:
                continue  # only subscribers so far: no type to record from
            types = sorted({info.topic_type for info in infos})  # a subscriber's type is not recorded
            try:
                if len(types) != 1:
                    raise BagError(f"topic {topic} has publishers of several types {types}; a bag topic "
                                   "has one")
                self._subscribe(topic, types[0], infos)
            except BagError as err:  # that topic is not recorded; the others go on (as ros2 bag)
                self._skipped[topic] = str(err)
                self.get_logger().error(f"{err}: not recording {topic}")
        if self._skipped and len(self._skipped) == len(self.topics):
            self._fail("; ".join(self._skipped.values()))
            return
        waiting = [t for t in self.topics if t not in self._recorded and t not in self._skipped]
        if not waiting:
            self._discovery.cancel()
            return
        now = time.monotonic()
        if self.discovery_timeout_s and now - self._started > self.discovery_timeout_s:
            self._fail(f"no publisher of {', '.join(waiting)} within discovery_timeout_s "
                       f"({self.discovery_timeout_s:g} s)")
        elif now - self._last_waiting_log >= WAITING_LOG_PERIOD_S:
            self._last_waiting_log = now
            self.get_logger().info(f"waiting for a publisher of {', '.join(waiting)}")

    def _subscribe(self, topic: str, msgtype: str, infos: list[Any]) -> None:
        cls = message_class(msgtype)
        self.bag.add_topic(topic, msgtype, [offered_qos(
            info.qos_profile.reliability == ReliabilityPolicy.RELIABLE,
            info.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL, info.qos_profile.depth,
            info.qos_profile.history == HistoryPolicy.KEEP_ALL) for info in infos])
        try:  # the topic's row on disk now: a write that fails before the first flush rolls back
            self.bag.flush()  # the whole transaction, and the messages kept would have no topic
        except (OSError, sqlite3.Error) as err:
            self._broken(err)
        reliable = _all(infos, "reliability", ReliabilityPolicy.RELIABLE)
        latched = _all(infos, "durability", DurabilityPolicy.TRANSIENT_LOCAL)
        reliability = ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT
        durability = DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=DEPTH, reliability=reliability,
                         durability=durability)
        self._recorded[topic] = self.create_subscription(
            cls, topic, lambda data, t=topic: self._on_message(t, data), qos, raw=True)
        if self._first_subscription is None:
            self._first_subscription = time.monotonic()
            if self.duration_s:
                self.create_timer(self.duration_s, self._duration_reached)
        self.get_logger().info(f"recording {topic} [{msgtype}], "
                               f"{'reliable' if reliable else 'best effort'}"
                               f"{', transient local' if latched else ''}")

    # ---------------------------------------------------------------------------------- messages

    def _on_message(self, topic: str, data: bytes) -> None:
        if self.finished.is_set():
            return
        # Wall-clock receive time, on a monotonic clock: a wall clock set back while recording
        # (NTP) would make the stream's stamps go backwards, which the demonstration reader refuses.
        stamp = self._wall0_ns + (time.monotonic_ns() - self._mono0_ns)
        try:
            self.bag.write(topic, stamp, data)
        except (OSError, sqlite3.Error) as err:  # disk full, storage removed: keep what was written
            self._broken(err)
            return
        self.messages += 1
        if self.max_messages and self.messages >= self.max_messages:
            self.get_logger().info(f"max_messages ({self.max_messages}) recorded")
            self.finished.set()

    def _flush(self) -> None:
        if self.finished.is_set():
            return
        try:
            self.bag.flush()
        except (OSError, sqlite3.Error) as err:  # disk full, I/O error
            self._broken(err)

    def _duration_reached(self) -> None:
        if not self.finished.is_set():
            self.get_logger().info(f"duration_s ({self.duration_s:g} s) reached")
            self.finished.set()

    def _broken(self, err: BaseException) -> None:
        self.storage_failed = True
        self._fail(f"cannot write {self.output}: {' '.join(str(err).split())}")

    def _remove_made_folders(self) -> None:
        for folder in self._made:  # deepest first; only if empty
            try:
                folder.rmdir()
            except OSError:
                break

    def _fail(self, why: str) -> None:
        self.error = why
        self.get_logger().error(why)
        self.finished.set()

    def counts(self, counts: dict[str, int] | None = None) -> str:
        counts = self.bag.counts if counts is None else counts
        return ", ".join(f"{t}: {n}" for t, n in counts.items()) or "no topic yet"

    def _report(self) -> None:
        if not self.finished.is_set():
            self.get_logger().info(f"{self.messages} messages ({self.counts()})")

    def close(self) -> None:
        if self.bag.closed:
            return
        self.finished.set()
        with hold_signals():  # a second Ctrl-C must not break off the bag's index and metadata
            self._close_bag()

    def _close_bag(self) -> None:
        if not self.bag.counts:  # no topic was ever seen: a bag without connections helps no one
            self.bag.abort()
            self._remove_made_folders()
            self.get_logger().warning(f"nothing recorded; {self.output} not written")
        elif self.storage_failed:
            self.bag.salvage()
            kept = sum(self.bag.committed.values())
            where = (f"{kept} messages ({self.counts(self.bag.committed)}) kept in "
                     f"{self.output / (self.output.name + '.db3')}, without metadata.yaml"
                     if self.bag.storage == "sqlite3" else "nothing readable (MCAP is written at the end)")
            self.get_logger().error(f"the storage failed: {where}")
        else:
            try:
                self.bag.close()
            except (OSError, sqlite3.Error) as err:  # the file size limit, a full disk at the end
                self._broken(err)
                self._close_bag()
                return
            self.get_logger().info(f"wrote {self.output}: {self.messages} messages ({self.counts()})")


def main(args: list[str] | None = None) -> int:
    return run_node(TopicRecorder, args)


if __name__ == "__main__":
    raise SystemExit(main())
