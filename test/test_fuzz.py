"""Fuzzing the message decoders and the node callbacks that use them (hypothesis).

Messages with random layouts (dims, labels, sizes, strides, ``data_offset``), random lengths and
values (NaN, inf, the float32 limit, 1e308), valid messages with one field broken, and messages of
the wrong type: a decoder raises nothing but :class:`MessageError`, and no callback raises at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import (  # noqa: E402
    Float32MultiArray,
    Float64MultiArray,
    Int64MultiArray,
    MultiArrayDimension,
    UInt8MultiArray,
)

from opolo_ros.launch_runner import GraphRunner, NodeSpec  # noqa: E402
from opolo_ros.ros import messages as m  # noqa: E402
from opolo_ros.ros.runtime import spin_until  # noqa: E402

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
ENV = "InvertedPendulum-v5"  # obs_dim 4, act_dim 1
UINT32_MAX = 2**32 - 1
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

LABELS = st.sampled_from([m.OBS_LABEL, m.ACTION_LABEL, m.TRANSITIONS_LABEL, m.FIELDS_LABEL, m.OBS_DIM_LABEL,
                          m.ACT_DIM_LABEL, m.SEQ_LABEL, m.SOURCE_LABEL, m.STEPS_LABEL, m.EPISODE_LABEL,
                          m.ONNX_LABEL, m.VERSION_LABEL, m.SOURCES_LABEL, m.ACK_LABEL, "", "reset", "é"])
SIZES = st.one_of(st.integers(0, 12), st.sampled_from([2**16, 2**31 - 1, 2**31, UINT32_MAX]))
OFFSETS = st.one_of(st.integers(0, 4), st.sampled_from([2**31, UINT32_MAX]))
SPECIAL = [0.0, -0.0, 1.0, 0.5, math.nan, -math.nan, math.inf, -math.inf, 3.4028235e38, -1e30]
FLOATS32 = st.one_of(st.sampled_from(SPECIAL), st.floats(width=32))
FLOATS64 = st.one_of(st.sampled_from([*SPECIAL, 1e308, -1e308, 5e-324]), st.floats())
INTS64 = st.one_of(st.integers(-3, 4), st.sampled_from([2**32, 2**40, -(2**63), 2**63 - 1]))
DATA = {Float32MultiArray: FLOATS32, Float64MultiArray: FLOATS64, Int64MultiArray: INTS64,
        UInt8MultiArray: st.integers(0, 255)}
DIMS = st.lists(st.builds(MultiArrayDimension, label=LABELS, size=SIZES, stride=SIZES), max_size=7)


@st.composite
def random_arrays(draw):
    """Any multi-array type, with any layout and any data."""
    cls = draw(st.sampled_from(list(DATA)))
    msg = cls(data=draw(st.lists(DATA[cls], max_size=64)))
    msg.layout.dim = draw(DIMS)
    msg.layout.data_offset = draw(OFFSETS)
    return msg


def _valid(kind: str, draw) -> object:
    """A well-formed message of `kind` with drawn dimensions and finite values."""
    small, rows = st.integers(1, 4), st.integers(1, 3)
    if kind == "observation":
        return m.observation_to_msg(np.ones(draw(small), np.float32))
    if kind == "action":
        return m.action_to_msg(np.ones(draw(small)))
    if kind == "replay":
        n, o, a = draw(rows), draw(small), draw(small)
        z = np.zeros
        return m.replay_to_msg(z((n, o)), z((n, a)), z((n, o)), z(n), z(n), np.ones(n),
                               seq=draw(st.integers(0, 5)), source=draw(st.integers(0, UINT32_MAX)))
    if kind == "demonstration":
        return m.demonstration_to_msg(np.zeros((draw(st.integers(2, 4)), draw(small))), 1.0, draw(rows))
    if kind == "policy":
        return m.policy_to_msg(draw(st.binary(min_size=1, max_size=40)), draw(st.integers(0, UINT32_MAX)))
    return m.progress_to_msg(m.LearnerProgress(1, 2, {7: m.SourceAck(1, 2)}))


@st.composite
def broken_valid(draw):
    """A valid message (the node's own dimensions half of the time) with one thing changed."""
    kind = draw(st.sampled_from(["observation", "action", "replay", "demonstration", "policy", "progress"]))
    msg = _valid(kind, draw)
    dims = list(msg.layout.dim)
    change = draw(st.sampled_from(["none", "value", "size", "stride", "label", "offset", "length"]))
    values = np.frombuffer(msg.data, dtype=np.dtype(msg.data.typecode)).copy()
    if change == "value" and values.size:
        values[draw(st.integers(0, values.size - 1))] = draw(DATA[type(msg)])
    elif change in ("size", "stride", "label") and dims:
        dim = dims[draw(st.integers(0, len(dims) - 1))]
        if change == "label":
            dim.label = draw(LABELS)
        else:
            setattr(dim, change, draw(SIZES))
    elif change == "offset":
        msg.layout.data_offset = draw(OFFSETS)
    elif change == "length":
        values = values[: draw(st.integers(0, values.size))] if draw(st.booleans()) else \
            np.concatenate([values, np.ones(draw(st.integers(1, 4)), values.dtype)])
    msg.data = values.tolist()
    msg.layout.dim = dims
    return msg


MESSAGES = st.one_of(random_arrays(), broken_valid(),
                     st.builds(JointState, name=st.lists(st.sampled_from(["a", "hinge", ""]), max_size=3),
                               position=st.lists(FLOATS64, max_size=3)))
DECODERS = [m.msg_to_observation, m.msg_to_action, m.msg_to_replay, m.msg_to_demonstration, m.msg_to_policy,
            m.msg_to_progress, lambda msg: m.joint_state_to_obs(msg, m.ObservationSpec(("a", "hinge")))]


@FUZZ
@given(msg=MESSAGES)
def test_decoders_raise_only_message_error(msg) -> None:
    for decode in DECODERS:
        try:
            out = decode(msg)
        except m.MessageError:
            continue
        arrays = [out] if isinstance(out, np.ndarray) else \
            [getattr(out, f) for f in ("obs", "action", "next_obs", "reward") if hasattr(out, f)]
        assert all(np.isfinite(a).all() for a in arrays)  # what decodes is usable as it is


@st.composite
def serialized(draw) -> bytes:
    """Bytes as a raw subscription hands them over: any, or a serialized message (any of the fuzzed
    ones, or a valid policy) cut short, grown or with bytes changed."""
    from rclpy.serialization import serialize_message

    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    raw = bytearray(serialize_message(draw(MESSAGES) if draw(st.booleans()) else
                                      m.policy_to_msg(draw(st.binary(min_size=1, max_size=40)), 3)))
    change = draw(st.sampled_from(["none", "cut", "grow", "flip"]))
    if change == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif change == "grow":
        raw += draw(st.binary(min_size=1, max_size=20))
    elif change == "flip" and raw:
        raw[draw(st.integers(0, len(raw) - 1))] ^= draw(st.integers(1, 255))
    return bytes(raw)


@FUZZ
@given(data=serialized())
def test_serialized_policy_decoder_raises_only_message_error(data: bytes) -> None:
    try:
        policy = m.serialized_to_policy(data)
    except m.MessageError:
        return
    assert policy.model and policy.version >= 0


@FUZZ
@given(data=serialized())
def test_the_learners_replay_peek_raises_only_message_error(data: bytes) -> None:
    """``replay_origin`` reads (source, seq) in the learner's subscription callback, before the
    worker reads the batch in full: on any bytes it raises nothing but MessageError."""
    try:
        source, seq = m.replay_origin(data)
    except m.MessageError:
        return
    assert 0 <= source <= m.UINT32_MAX and 0 <= seq <= m.UINT32_MAX


# ------------------------------------------------------------------------------------ callbacks

@pytest.fixture(scope="module")
def graph(ros_domain_id, tmp_path_factory) -> Iterator[GraphRunner]:
    """The nodes whose callbacks decode messages, in one context; the tests call the callbacks
    themselves or spin the graph. Nothing here trains or records: the learner waits for 100
    demonstrations, the recorder wants 1000 episodes and publishes none, the bridge's topics are
    its own (it drives no actor, and with flow control it waits for a learner that never reports),
    so every message a node takes comes from the test. A second actor reads joint states and
    policies."""
    tmp = tmp_path_factory.mktemp("fuzz")
    model = str(ROOT / "models" / "experts" / f"{ENV}.onnx")
    specs = [
        NodeSpec("learner", "learner", parameters={"env_id": ENV, "num_demos": 100, "demo_settle_s": 1e6,
                                                   "run_dir": str(tmp / "run"), "progress": False}),
        NodeSpec("sim_bridge", "sim_bridge", parameters={
            "env_id": ENV, "joint_states_topic": "", "observation_topic": "fuzz/observation",
            "action_topic": "fuzz/action", "replay_topic": "fuzz/replay", "policy_every": 1000}),
        NodeSpec("demo_recorder", "demo_recorder", parameters={"output": str(tmp / "bag"),
                                                               "episodes": 1000,
                                                               "demonstrations_topic": ""}),
        NodeSpec("actor", "actor", parameters={"mode": "deploy", "subscribe_policy": False, "model": model}),
        NodeSpec("actor", "actor_js", parameters={
            "mode": "deploy", "model": model, "joints": ["slider", "hinge"],
            "observation_topic": "fuzz/joint_states", "action_topic": "fuzz/js_action"}),
    ]
    with GraphRunner(specs, ros_domain_id) as graph:
        yield graph


@pytest.fixture(scope="module")
def nodes(graph) -> dict:
    return graph.nodes


def callbacks(nodes: dict) -> list:
    learner, bridge, recorder, actor = (nodes[k] for k in ("learner", "sim_bridge", "demo_recorder", "actor"))
    return [learner._on_demo, learner.take, bridge._on_action, bridge._on_progress, recorder._on_replay,
            actor._on_observation, actor._on_policy]


@FUZZ
@given(msg=MESSAGES, waiting=st.booleans())
def test_node_callbacks_never_raise(nodes, msg, waiting) -> None:
    nodes["sim_bridge"]._waiting_action = waiting  # a lock-step bridge waiting for an action steps on it
    for callback in callbacks(nodes):
        callback(msg)
    learner = nodes["learner"]
    assert learner.error is None and not learner.finished.is_set()
    assert all(np.isfinite(ep.obs).all() for ep in learner.demos.values())


def test_callbacks_count_what_they_reject(nodes) -> None:
    """A NaN in a well-formed message: rejected and counted, the state untouched."""
    learner, bridge = nodes["learner"], nodes["sim_bridge"]
    before = dict(learner.rejected)
    demo = m.demonstration_to_msg(np.zeros((3, 4)), 1.0, 77)
    demo.data[5] = math.nan
    replay = m.replay_to_msg(np.zeros((2, 4)), np.zeros((2, 1)), np.zeros((2, 4)), np.zeros(2), np.zeros(2),
                             np.zeros(2), seq=1, source=5)
    replay.data[3] = math.inf
    learner._on_demo(demo)
    assert learner.take(replay) is None
    absurd = m.replay_to_msg(np.zeros((2, 4)), np.array([[0.5], [1e6]]), np.zeros((2, 4)), np.zeros(2),
                             np.zeros(2), np.zeros(2), seq=2, source=5)  # InvertedPendulum's bounds: +-3
    assert learner.take(absurd) is None
    inside = m.replay_to_msg(np.zeros((2, 4)), np.array([[-3.0], [3.0]]), np.zeros((2, 4)), np.zeros(2),
                             np.zeros(2), np.zeros(2), seq=3, source=5)
    assert learner.take(inside) is not None  # at the bounds: taken
    assert learner.rejected == {"replay": before["replay"] + 2, "demonstration": before["demonstration"] + 1}
    assert 77 not in learner.demos
    steps = bridge.steps
    bridge._waiting_action = True
    bridge._on_action(Float64MultiArray(data=[math.nan]))
    assert bridge.steps == steps and bridge._waiting_action  # still waiting for a usable action


def test_learner_warns_when_replay_comes_from_another_source(nodes, capfd) -> None:
    """A second bridge, or another training on the same ROS domain: said once per new source."""
    learner, z = nodes["learner"], np.zeros
    sources = (3_000_000_001, 3_000_000_002)
    for source in (*sources, sources[0]):
        batch = m.replay_to_msg(z((2, 4)), z((2, 1)), z((2, 4)), z(2), z(2), z(2), seq=7, source=source)
        assert learner.take(batch) is not None
    assert set(sources) <= learner.sources
    err = capfd.readouterr().err
    assert f"replay from a new source {sources[1]}" in err and "ROS_DOMAIN_ID" in err
    assert err.count(f"replay from a new source {sources[0]}") <= 1  # once per source, not per batch


def test_learner_says_when_a_demonstration_episode_is_replaced(nodes, capfd) -> None:
    """Two demo players on one learner number their episodes alike: the second replaces the first,
    which is said; the same episode again (a transient-local re-delivery) is not."""
    learner = nodes["learner"]
    first = m.demonstration_to_msg(np.zeros((3, 4)), 1.0, 55)
    learner._on_demo(first)
    learner._on_demo(first)
    assert "episode 55 received again" not in capfd.readouterr().err
    learner._on_demo(m.demonstration_to_msg(np.ones((5, 4)), 2.0, 55))
    assert "episode 55 received again with other states: the later one replaces it" in capfd.readouterr().err
    assert len(learner.demos[55].obs) == 5
    learner._on_demo(m.demonstration_to_msg(np.ones((5, 4)), 3.0, 55))  # the same states, another return
    assert "episode 55 received again with another return (3.0 instead of 2.0)" in capfd.readouterr().err
    assert learner.demos[55].ret == 3.0


def test_demonstrations_after_the_start_are_not_kept(nodes, capfd, monkeypatch) -> None:
    """Once training started the learner uses no new episode: it says so and keeps none (a live
    recorder's stream would fill the memory for nothing)."""
    learner = nodes["learner"]
    monkeypatch.setattr(learner, "_demos_taken", True)
    held = len(learner.demos)
    for episode in range(1000, 1050):
        learner._on_demo(m.demonstration_to_msg(np.zeros((3, 4)), 1.0, episode))
    assert len(learner.demos) == held
    assert "demonstration episode 1000 arrived after training started: not used" in capfd.readouterr().err


# Bytes that are no message of their topic's type, as another participant may publish them. rclpy's
# native deserializer reads the first two past their end (their options claim padding) and was seen
# to segfault on such input; the nodes read every message with the bounded reader (cdr.py).
GARBAGE = [b"\x00\x00\xe6\x61", b"\x00\x01\x00\x03", b"\x00\x01\x00\x00" + b"\xff" * 12,
           b"\x00\x01\x00\x00\x02\x00\x00\x00\x00\x00\x00\x40"]


def test_garbage_bytes_over_dds_are_rejected_by_every_subscription(graph, ros_node) -> None:
    """Published serialized on each topic a node takes, over real DDS: every message is read by the
    bounded reader and rejected (counted: exactly, on the reliable topics), and the nodes go on."""
    from std_msgs.msg import Int64

    from opolo_ros.ros.qos import POLICY_VERSION_QOS, qos_for

    n = graph.nodes
    learner, actor, actor_js, bridge, recorder = (n[k] for k in ("learner", "actor", "actor_js",
                                                                 "sim_bridge", "demo_recorder"))
    vandal, executor = ros_node("vandal")
    topics = {"/opolo/demonstrations": (Float32MultiArray, qos_for("demonstrations")),
              "/opolo/replay": (Float32MultiArray, qos_for("replay")),
              "observation": (Float32MultiArray, qos_for("observation")),
              "fuzz/joint_states": (JointState, qos_for("joint_states")),
              "/opolo/policy": (UInt8MultiArray, qos_for("policy")),
              "fuzz/action": (Float64MultiArray, qos_for("action")),
              "/opolo/learner_progress": (Int64MultiArray, qos_for("learner_progress")),
              "policy_version": (Int64, POLICY_VERSION_QOS)}
    pubs = {t: vandal.create_publisher(cls, t, qos) for t, (cls, qos) in topics.items()}
    both = [graph.executor, executor]
    assert spin_until(both, lambda: all(p.get_subscription_count() >= 1 for p in pubs.values()), 10.0)
    before = {"demos": learner.rejected["demonstration"], "replay": learner.rejected["replay"],
              "recorder": recorder.rejected, "obs": actor.rejected_observations,
              "joints": actor_js.rejected_observations, "policy": actor_js.rejected, **bridge.rejected}
    queued = learner._replay_queue.qsize()
    for raw in GARBAGE:
        for topic, pub in pubs.items():
            if topic != "policy_version" or len(raw) <= 12:  # Fast DDS sends no more for an Int64
                pub.publish(raw)
        spin_until(both, lambda: False, 0.05)  # the best-effort topics keep only the newest
    k = len(GARBAGE)
    assert spin_until(both, lambda: (learner.rejected["demonstration"] == before["demos"] + k
                                     and recorder.rejected == before["recorder"] + k
                                     and bridge.rejected["learner progress"] == before["learner progress"] + k
                                     and learner._replay_queue.qsize() == queued + k), 5.0)
    for _ in range(k):  # the learner's replay bytes wait in its queue until training starts
        raw = learner._replay_queue.get_nowait()
        assert raw in GARBAGE and learner.take(raw) is None
    assert learner.rejected["replay"] == before["replay"] + k
    # best effort, or reliable with depth 1: at least one arrives, none is taken
    assert spin_until(both, lambda: actor_js.rejected > before["policy"], 5.0)
    assert before["policy"] < actor_js.rejected <= before["policy"] + k
    assert before["policy version"] < bridge.rejected["policy version"] <= before["policy version"] + k
    assert before["action"] < bridge.rejected["action"] <= before["action"] + k
    assert before["obs"] < actor.rejected_observations <= before["obs"] + k
    assert before["joints"] < actor_js.rejected_observations <= before["joints"] + k
    actions, js_actions = actor.actions, actor_js.actions  # and they go on:
    pubs["observation"].publish(m.observation_to_msg([0.0, 0.1, 0.0, 0.0]))
    pubs["fuzz/joint_states"].publish(m.joint_state_msg(["hinge", "slider"], [0.1, 0.0], [0.0, 0.0]))
    assert spin_until(both, lambda: actor.actions > actions and actor_js.actions > js_actions, 5.0)
    assert learner.error is None
    assert bridge.actor_version <= m.UINT32_MAX  # the 12 bytes are an Int64 (2**62 + 2), no version


@FUZZ
@given(data=serialized())
def test_every_subscription_takes_any_bytes(graph, data: bytes) -> None:
    """The nodes' own subscription callbacks (raw: bytes as DDS hands them over), fed any bytes or
    serialized messages cut, grown or flipped: nothing raises."""
    callbacks = [s.callback for node in graph.nodes.values() for s in node.subscriptions if s.raw]
    assert len(callbacks) == 9  # learner 2, bridge 3, recorder 1, actor 1, actor_js 2 (joints, policy)
    graph.nodes["sim_bridge"]._waiting_action = True
    for callback in callbacks:
        callback(data)
    learner = graph.nodes["learner"]
    while not learner._replay_queue.empty():
        learner.take(learner._replay_queue.get_nowait())
    assert learner.error is None and not learner.finished.is_set()
