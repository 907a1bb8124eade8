"""topic_recorder (``opolo-ros record-topics``): a robot's topics into a bag the demonstration reader
takes, over real DDS: the recorder in its own process, publishers in this one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")

from opolo_ros.data.bag_writer import StreamBagWriter  # noqa: E402
from opolo_ros.data.bags import read_demonstrations  # noqa: E402

pytestmark = pytest.mark.ros
OPOLO_ROS = str(Path(sys.executable).parent / "opolo-ros")
JOINTS = ["shoulder", "elbow"]


FLOATS = "std_msgs/msg/Float64MultiArray"


@contextmanager
def recorder_in_process(tmp_path: Path, domain_id: int, **parameters: object):
    """A topic_recorder node of this process recording /x (Float64MultiArray) into tmp_path/b."""
    from opolo_ros.launch_runner import GraphRunner, NodeSpec

    spec = NodeSpec("topic_recorder", "topic_recorder",
                    parameters={"topics": ["/x"], "output": str(tmp_path / "b"), **parameters})
    with GraphRunner([spec], domain_id) as graph:
        node = graph.nodes["topic_recorder"]
        node.bag.add_topic("/x", FLOATS)
        yield node


def write_floats(node, count: int, flush_after: int | None = None) -> None:
    """Messages [0.0], [1.0], ... straight into the node's bag (as its subscription would)."""
    from opolo_ros.data.bags import _typestore

    store = _typestore()
    layout = store.types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
    for k in range(count):
        node.bag.write("/x", 1_000 + k, store.serialize_cdr(
            store.types[FLOATS](layout=layout, data=np.array([float(k)])), FLOATS))
        if k == flush_after:
            node.bag.flush()


def start_recorder(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([OPOLO_ROS, "record-topics", *args], cwd=tmp_path, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@contextmanager
def recording(tmp_path: Path, *args: str):
    """`opolo-ros record-topics ARGS` in its own process; killed at the end if still running."""
    proc = start_recorder(tmp_path, *args)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def wait_until(condition, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture()
def ros_node(ros_domain_id):
    import rclpy

    from opolo_ros.ros import runtime

    context = runtime.init_context(ros_domain_id, args=[])
    node = rclpy.create_node("recorder_test_publisher", context=context)
    yield node
    runtime.shutdown(context, [node])


def joint_state(values: np.ndarray, frame_id: str = "") -> object:
    from sensor_msgs.msg import JointState

    msg = JointState()
    msg.header.frame_id = frame_id
    if len(values):
        msg.name = list(reversed(JOINTS))  # the message's own order is free: read back by name
        msg.position = [float(values[1]), float(values[0])]
        msg.velocity = [float(values[3]), float(values[2])]
    return msg


def test_recorded_joint_states_read_back_as_the_published_episodes(ros_node, tmp_path):
    """Two episodes of JointState (a reset marker between them) and a latched array topic: SIGINT
    ends the recording with a complete bag, exit 0; the reader gives back exactly the published
    observations, episode by episode."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float32MultiArray

    latched = ros_node.create_publisher(Float32MultiArray, "/robot_info", QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    latched.publish(Float32MultiArray(data=[1.0, 2.0]))  # before the recorder exists
    states = ros_node.create_publisher(type(joint_state(np.zeros(0))), "/joint_states", 1000)
    with recording(tmp_path, "/joint_states", "robot_info", "-o", "bags/arm") as proc:
        wait_until(lambda: ros_node.count_subscribers("/joint_states") >= 1
                   and ros_node.count_subscribers("/robot_info") >= 1, proc)
        rng = np.random.default_rng(0)
        episodes = [rng.normal(size=(n, 4)) for n in (30, 20)]
        for k, episode in enumerate(episodes):
            if k:
                states.publish(joint_state(np.zeros(0), frame_id="reset"))
            for values in episode:
                states.publish(joint_state(values))
                time.sleep(0.002)
        time.sleep(1.0)  # reliable: the last messages are taken before the signal
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, out
    assert "wrote bags/arm: 52 messages (/joint_states: 51, /robot_info: 1)" in out, out
    assert "/robot_info [std_msgs/msg/Float32MultiArray], reliable, transient local" in out, out
    read = read_demonstrations(tmp_path / "bags" / "arm", topic="/joint_states", joints=JOINTS)
    assert [len(ep.obs) for ep in read] == [30, 20]
    for got, want in zip(read, episodes):
        np.testing.assert_array_equal(got.obs, want.astype(np.float32))
    from rosbags.rosbag2 import Reader

    from opolo_ros.data.bags import _typestore

    with Reader(tmp_path / "bags" / "arm") as reader:
        conns = [c for c in reader.connections if c.topic == "/robot_info"]
        infos = [_typestore().deserialize_cdr(raw, c.msgtype).data.tolist()
                 for c, _, raw in reader.messages(connections=conns)]
    assert infos == [[1.0, 2.0]]  # published before the recorder started: latched


def test_bad_arguments_are_one_line_and_status_2(ros_domain_id, tmp_path):
    (tmp_path / "taken").mkdir()
    cases = {
        ("/joint_states", "-o", "taken"): "taken already exists",
        ("/joint_states", "/joint_states", "-o", "b"): "names a topic twice",
        ("/joint states", "-o", "b"): "parameter 'topics'",
        # a ROS timer takes at most 2**63 ns: this one crashed at the first subscription (a probe)
        ("/joint_states", "--duration", "1e10", "-o", "b"): "got 10000000000.0",
    }
    node = str(Path(sys.executable).parent / "topic_recorder")
    node_cases = {  # the node program's own checks (record-topics checks its options before)
        ("-p", "topics:=[/joint_states]", "-p", "output:=b", "-p", "duration_s:=.nan"):
            "'duration_s' must be between 0 and 1e+09 s",
        ("-p", "topics:=[]", "-p", "output:=b"): "must name at least one topic, got none",
    }
    runs = [([OPOLO_ROS, "record-topics", *args], message) for args, message in cases.items()]
    runs += [([node, "--ros-args", *args], message) for args, message in node_cases.items()]
    for command, message in runs:
        result = subprocess.run(command, cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True,
                                timeout=60)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], (command, result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing written
    result = subprocess.run([node, "--ros-args", "--bogus"],
                            cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr  # every node program
    assert result.stderr.count("\n") == 1 and "--bogus" in result.stderr, result.stderr


@pytest.mark.parametrize("params,match", [
    ({"storage": "zip"}, r"parameter 'storage' must be one of \('mcap', 'sqlite3'\), got 'zip'"),
    ({"duration_s": -1.0}, r"parameter 'duration_s' must be between 0 and 1e\+09 s, got -1.0"),
    ({"flush_period_s": -0.5}, r"parameter 'flush_period_s' must be between 0 and 1e\+09 s, got -0.5"),
    ({"max_messages": -1}, r"parameter 'max_messages' must be >= 0, got -1"),
])
def test_the_node_refuses_parameters_it_cannot_record_with_naming_them(ros_domain_id, tmp_path, params,
                                                                        match):
    """The node program's own checks (record-topics checks its options before): refused by name when
    it starts, nothing written (a mutation test)."""
    from opolo_ros.launch_runner import GraphRunner, NodeSpec

    spec = NodeSpec("topic_recorder", "topic_recorder",
                    parameters={"topics": ["/x"], "output": str(tmp_path / "b"), **params})
    with pytest.raises(ValueError, match=match):
        GraphRunner([spec], ros_domain_id)
    assert list(tmp_path.iterdir()) == []


def test_message_types_and_the_qos_every_publisher_offers():
    """A type that is no message (a service's, a typo's kind) is refused by name, not taken from
    the package's messages; a topic is reliable (or latched) only if every publisher offers it, so a
    best-effort publisher is heard too (a mutation test)."""
    from types import SimpleNamespace

    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from opolo_ros.data.bags import BagError
    from opolo_ros.nodes.topic_recorder import _all, message_class

    assert message_class(FLOATS).__name__ == "Float64MultiArray"
    for msgtype in ("std_msgs/srv/String", "std_msgs/String"):
        with pytest.raises(BagError, match=r"not a message type: .* \(expected package/msg/Name\)"):
            message_class(msgtype)

    def info(reliability, durability=DurabilityPolicy.VOLATILE) -> SimpleNamespace:
        profile = QoSProfile(depth=10, reliability=reliability, durability=durability)
        return SimpleNamespace(qos_profile=profile)

    reliable, best_effort = info(ReliabilityPolicy.RELIABLE), info(ReliabilityPolicy.BEST_EFFORT)
    assert _all([reliable, reliable], "reliability", ReliabilityPolicy.RELIABLE)
    assert not _all([reliable, best_effort], "reliability", ReliabilityPolicy.RELIABLE)
    assert not _all([best_effort, reliable], "reliability", ReliabilityPolicy.RELIABLE)
    assert not _all([], "reliability", ReliabilityPolicy.RELIABLE)
    latched = info(ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL)
    assert not _all([latched, reliable], "durability", DurabilityPolicy.TRANSIENT_LOCAL)


def test_duration_s_ends_a_recording_that_waited_past_a_topics_subscribers(ros_node, ros_domain_id, tmp_path):
    """A topic with only a subscriber so far has no type to record from: the recorder waits (it
    did not fail the topic); once a publisher comes it records, and `duration_s` after that first
    subscription the recording ends, the bag complete (a mutation test)."""
    from std_msgs.msg import Float64MultiArray

    from opolo_ros.launch_runner import GraphRunner, NodeSpec

    ros_node.create_subscription(Float64MultiArray, "/obs", lambda _msg: None, 10)
    spec = NodeSpec("topic_recorder", "topic_recorder",
                    parameters={"topics": ["/obs"], "output": str(tmp_path / "b"), "duration_s": 0.5,
                                "storage": "mcap"})
    with GraphRunner([spec], ros_domain_id) as graph:
        node = graph.nodes["topic_recorder"]
        assert graph.spin_until(lambda: "/obs" in dict(node.get_topic_names_and_types()), timeout_s=20.0)
        graph.spin_until(lambda: False, timeout_s=0.6)  # three discovery periods with only a subscriber
        assert not node.finished.is_set() and node.error is None and not node._skipped
        ros_node.create_publisher(Float64MultiArray, "/obs", 10)
        assert graph.spin_until(lambda: "/obs" in node._recorded, timeout_s=20.0)
        started = time.monotonic()
        assert graph.spin_until(node.finished.is_set, timeout_s=10.0)
        assert time.monotonic() - started < 5.0 and node.error is None
    assert (tmp_path / "b" / "metadata.yaml").is_file()


def test_a_topic_that_never_appears_fails_after_the_discovery_timeout_and_writes_nothing(ros_domain_id,
                                                                                          tmp_path):
    result = subprocess.run([OPOLO_ROS, "record-topics", "/nobody", "-o", "new/b",
                             "--discovery-timeout", "1"], cwd=tmp_path, env=dict(os.environ),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "no publisher of /nobody within discovery_timeout_s (1 s)" in result.stderr
    assert list(tmp_path.iterdir()) == []  # nor the folder it made for the bag


def test_max_messages_ends_the_recording(ros_node, tmp_path):
    from rclpy.qos import qos_profile_sensor_data
    from std_msgs.msg import Float64MultiArray

    pub = ros_node.create_publisher(Float64MultiArray, "/obs", qos_profile_sensor_data)  # best effort
    with recording(tmp_path, "/obs", "--max-messages", "5", "-o", "b", "--storage", "sqlite3") as proc:
        wait_until(lambda: ros_node.count_subscribers("/obs") >= 1, proc)
        for k in range(20):
            if proc.poll() is not None:
                break
            pub.publish(Float64MultiArray(data=[float(k), -float(k)]))
            time.sleep(0.05)
        out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0 and "max_messages (5) recorded" in out, out
    assert "/obs [std_msgs/msg/Float64MultiArray], best effort" in out, out
    (episode,) = read_demonstrations(tmp_path / "b", episode_gap_s=None)
    np.testing.assert_array_equal(episode.obs, [[k, -k] for k in range(5)])


def test_a_killed_sqlite3_recording_keeps_what_was_flushed(ros_node, tmp_path):
    """SIGKILL: no metadata.yaml, but the storage file holds every message up to the last flush
    (1 s by default), and the reader takes it as a bare storage file."""
    from std_msgs.msg import Float64MultiArray

    pub = ros_node.create_publisher(Float64MultiArray, "/obs", 100)
    with recording(tmp_path, "/obs", "-o", "b") as proc:
        wait_until(lambda: ros_node.count_subscribers("/obs") >= 1, proc)
        for k in range(20):
            pub.publish(Float64MultiArray(data=[float(k)]))
            time.sleep(0.01)
        time.sleep(2.5)  # two flush periods
        proc.kill()
        proc.communicate(timeout=20)
    assert not (tmp_path / "b" / "metadata.yaml").exists()
    (storage,) = (tmp_path / "b").glob("*.db3")
    (episode,) = read_demonstrations(storage, episode_gap_s=None)
    np.testing.assert_array_equal(episode.obs, np.arange(20, dtype=np.float32)[:, None])


def test_a_topic_that_cannot_be_recorded_is_skipped_and_the_others_recorded(ros_domain_id, tmp_path):
    """Publishers of two types on one topic: that topic is skipped (logged), the others recorded (it
    ended the whole recording); a subscriber's type does not count (it failed the topic). The graph
    the recorder sees is given (over DDS the two publishers' participants are discovered one after
    the other, so which the recorder saw first would decide the test)."""
    from types import SimpleNamespace

    from rclpy.qos import QoSProfile

    def publisher(msgtype: str) -> SimpleNamespace:
        return SimpleNamespace(topic_type=msgtype, qos_profile=QoSProfile(depth=10))

    publishers = {"/x": [publisher(FLOATS)],
                  "/mixed": [publisher(FLOATS), publisher("std_msgs/msg/String")]}
    graph = [("/x", [FLOATS, "std_msgs/msg/String"]),  # a String subscriber on /x
             ("/mixed", [FLOATS, "std_msgs/msg/String"])]
    with recorder_in_process(tmp_path, ros_domain_id, topics=["/x", "/mixed"]) as node:
        node.bag = StreamBagWriter(tmp_path / "b2", "sqlite3")  # /x not added yet: discovery adds it
        node.get_topic_names_and_types = lambda: graph
        node.get_publishers_info_by_topic = lambda topic: publishers[topic]
        node._discover()
        assert set(node._recorded) == {"/x"} and set(node._skipped) == {"/mixed"}
        assert node._skipped["/mixed"] == ("topic /mixed has publishers of several types "
                                           "['std_msgs/msg/Float64MultiArray', 'std_msgs/msg/String']; "
                                           "a bag topic has one")
        assert not node.finished.is_set() and node.error is None  # the recording goes on
        node.close()
    # only topics that cannot be recorded: the recording fails
    with recorder_in_process(tmp_path / "c", ros_domain_id, topics=["/mixed"]) as node:
        node.get_topic_names_and_types = lambda: graph
        node.get_publishers_info_by_topic = lambda topic: publishers[topic]
        node._discover()
        assert node.finished.is_set() and "several types" in node.error


def test_a_second_signal_right_after_the_first_still_leaves_a_complete_bag(ros_node, tmp_path):
    """SIGINT, then SIGTERM 5 ms later, under traffic: the second one broke off the bag's close (an
    MCAP bag of 43 bytes, no metadata.yaml; a probe: 6 of 6)."""
    from std_msgs.msg import Float64MultiArray

    pub = ros_node.create_publisher(Float64MultiArray, "/obs", 1000)
    with recording(tmp_path, "/obs", "-o", "b", "--storage", "mcap") as proc:
        wait_until(lambda: ros_node.count_subscribers("/obs") >= 1, proc)
        for k in range(300):
            pub.publish(Float64MultiArray(data=[float(k)]))
            time.sleep(0.001)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, out
    assert (tmp_path / "b" / "metadata.yaml").is_file(), out
    (episode,) = read_demonstrations(tmp_path / "b", episode_gap_s=None)
    assert 0 < len(episode.obs) <= 300 and np.array_equal(episode.obs[:, 0], np.arange(len(episode.obs)))


def test_a_signal_while_the_bag_closes_does_not_break_it_off(ros_domain_id, tmp_path):
    """The deterministic form of the test above: a SIGINT (whose handler raises, as a node program's
    second signal does) arrives inside the bag's close; the index and metadata.yaml are written."""
    with recorder_in_process(tmp_path, ros_domain_id, storage="mcap") as node:
        write_floats(node, 3)
        real_close = node.bag._writer.close

        def interrupted_close() -> None:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here
            real_close()

        def raise_interrupt(_signum, _frame) -> None:
            raise KeyboardInterrupt

        node.bag._writer.close = interrupted_close
        previous = signal.signal(signal.SIGINT, raise_interrupt)
        try:
            node.close()
        finally:
            signal.signal(signal.SIGINT, previous)
    (episode,) = read_demonstrations(tmp_path / "b", episode_gap_s=None)
    np.testing.assert_array_equal(episode.obs[:, 0], [0.0, 1.0, 2.0])


def test_a_failed_write_keeps_the_flushed_messages_and_reports_those(ros_domain_id, tmp_path):
    """Disk full: the recorder ended with status 1 but then reported (and wrote into metadata.yaml)
    every message it had tried to write, more than the bag held (a probe: 2221 against 1721)."""
    import sqlite3

    with recorder_in_process(tmp_path, ros_domain_id) as node:
        write_floats(node, 5, flush_after=2)
        node._broken(sqlite3.OperationalError("database or disk is full"))
        node.close()
        assert node.error == f"cannot write {tmp_path / 'b'}: database or disk is full"
        assert node.bag.committed == {"/x": 3}
    assert not (tmp_path / "b" / "metadata.yaml").exists()  # its counts would say 5
    (episode,) = read_demonstrations(tmp_path / "b" / "b.db3", episode_gap_s=None)
    np.testing.assert_array_equal(episode.obs[:, 0], [0.0, 1.0, 2.0])


def test_a_bag_that_fails_to_close_is_one_line_and_status_1(ros_domain_id, tmp_path):
    """The MCAP index hit the file size limit at close: a traceback from run_node's clean-up, the
    executor and rclpy left up (a review). Now the node's error, salvaged, and status 1."""
    with recorder_in_process(tmp_path, ros_domain_id, storage="mcap") as node:
        def too_large() -> None:
            raise OSError(27, "File too large")

        node.bag._writer.close = too_large
        node.close()
        assert node.error == f"cannot write {tmp_path / 'b'}: [Errno 27] File too large"
        assert node.bag.closed


def test_a_launch_with_a_topic_recorder_reports_without_a_traceback(ros_domain_id, tmp_path):
    """`opolo-ros launch` took any node with a `bag` for a demo_recorder: AttributeError 'episodes'
    after the bag was written (a review)."""
    launch = tmp_path / "rec.launch.py"
    launch.write_text(
        "from opolo_ros.launch_runner import NodeSpec, launch_description\n"
        "ARGUMENTS = []\n"
        "def describe(args):\n"
        f"    return [NodeSpec('topic_recorder', 'topic_recorder', exit_ends_launch=True, parameters={{\n"
        f"        'topics': ['/rosout'], 'max_messages': 1, 'output': {str(tmp_path / 'b')!r}}})]\n"
        "def generate_launch_description():\n"
        "    return launch_description(ARGUMENTS, describe)\n")
    result = subprocess.run([OPOLO_ROS, "launch", str(launch)], cwd=tmp_path, env=dict(os.environ),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "wrote" in result.stderr and (tmp_path / "b" / "metadata.yaml").is_file(), result.stderr


def test_a_simulated_robots_episodes_are_cut_at_its_reset_markers(ros_domain_id, tmp_path):
    """A real-time sim_bridge with reset_markers: the recording of its joint states splits into its
    episodes (without markers the resets ran on into one long 'episode', a walkthrough)."""
    from opolo_ros.launch_runner import GraphRunner, NodeSpec

    spec = NodeSpec("sim_bridge", "sim_bridge", parameters={
        "env_id": "InvertedPendulum-v5", "mode": "realtime", "time_scale": 10.0, "publish_replay": False,
        "reset_markers": True, "joint_states_topic": "/joint_states"})
    with recording(tmp_path, "/joint_states", "-o", "b") as proc, GraphRunner([spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        assert graph.spin_until(lambda: bridge.joint_pub.get_subscription_count() > 0, timeout_s=30.0)
        first = bridge.episodes + 1  # the episode in progress is recorded from its middle
        assert graph.spin_until(lambda: bridge.episodes >= first + 4, timeout_s=60.0)  # uncommanded: falls
        # the episode in progress gets a few steps (one of a single observation is no episode), then
        # the bridge stands still (not spun) while the recorder takes the last messages
        assert graph.spin_until(lambda: bridge.episode_len >= 3, timeout_s=60.0)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, out
    episodes = read_demonstrations(tmp_path / "b", joints=["slider", "hinge"], episode_gap_s=None)
    assert len(episodes) >= 4, [len(ep.obs) for ep in episodes]
    # no fallen state mid-episode (the first, recorded from its middle, may hold only its last 2 states)
    assert all(np.abs(ep.obs[1:-1, 1]).max() < 0.2 for ep in episodes if len(ep.obs) > 2)
    # Each whole episode ends with the fall itself (s_T, published before the marker: it was lost to
    # the reset) and holds all its steps: T + 1 states, T = the bridge's return + 1 (InvertedPendulum-v5
    # rewards 1 per step but the falling one)
    whole = episodes[1:-1]
    assert all(abs(ep.obs[-1, 1]) > 0.2 for ep in whole), [ep.obs[-1] for ep in whole]
    steps = [round(r) + 1 for r in bridge._returns]
    lengths = [len(ep.obs) - 1 for ep in whole]
    assert any(lengths == steps[k:k + len(lengths)] for k in range(len(steps))), (lengths, steps)
