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
def serialized_policies(draw) -> bytes:
    """Bytes as a raw policy subscription hands them over: any, or a serialized message cut short,
    grown or with bytes changed."""
    from rclpy.serialization import serialize_message

    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    raw = bytearray(serialize_message(draw(random_arrays()) if draw(st.booleans()) else
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
@given(data=serialized_policies())
def test_serialized_policy_decoder_raises_only_message_error(data: bytes) -> None:
    try:
        policy = m.serialized_to_policy(data)
    except m.MessageError:
        return
    assert policy.model and policy.version >= 0


# ------------------------------------------------------------------------------------ callbacks

@pytest.fixture(scope="module")
def nodes(ros_domain_id, tmp_path_factory) -> Iterator[dict]:
    """The nodes whose callbacks decode messages, constructed in one context and not spun: the
    test calls the callbacks itself. The learner waits for 100 demonstrations, so it never trains;
    the recorder wants 1000 episodes, so it never writes."""
    tmp = tmp_path_factory.mktemp("fuzz")
    specs = [
        NodeSpec("learner", "learner", parameters={"env_id": ENV, "num_demos": 100, "demo_settle_s": 1e6,
                                                   "run_dir": str(tmp / "run"), "progress": False}),
        NodeSpec("sim_bridge", "sim_bridge", parameters={"env_id": ENV, "publish_replay": False,
                                                         "joint_states_topic": ""}),
        NodeSpec("demo_recorder", "demo_recorder", parameters={"output": str(tmp / "bag"),
                                                               "episodes": 1000}),
        NodeSpec("actor", "actor", parameters={"mode": "deploy", "subscribe_policy": False,
                                               "model": str(ROOT / "models" / "experts" / f"{ENV}.onnx")}),
    ]
    with GraphRunner(specs, ros_domain_id) as graph:
        yield graph.nodes


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
