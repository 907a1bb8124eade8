"""The ROS message layer: codec round trips, rejections, fuzzing, and a real-DDS exchange."""

from __future__ import annotations

import array
import dataclasses
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("std_msgs")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.qos import (  # noqa: E402
    DurabilityPolicy,
    QoSCompatibility,
    QoSProfile,
    ReliabilityPolicy,
    qos_check_compatible,
)
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import (  # noqa: E402
    Float32MultiArray,
    Float64MultiArray,
    Int64MultiArray,
    MultiArrayDimension,
    MultiArrayLayout,
    UInt8MultiArray,
)

from opolo_ros.ros import messages as m  # noqa: E402
from opolo_ros.ros import qos, runtime  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(0)


def replay_arrays(n: int = 5, obs_dim: int = 4, act_dim: int = 2) -> dict[str, np.ndarray]:
    return {
        "obs": RNG.standard_normal((n, obs_dim)).astype(np.float32),
        "action": RNG.uniform(-1, 1, (n, act_dim)).astype(np.float32),
        "next_obs": RNG.standard_normal((n, obs_dim)).astype(np.float32),
        "reward": RNG.standard_normal(n).astype(np.float32),
        "terminated": np.arange(n) % 2 == 0,
        "truncated": np.arange(n) == n - 1,
    }


def assert_replay_equal(batch: m.ReplayBatch, arrays: dict[str, np.ndarray], seq: int,
                        source: int) -> None:
    for name, expected in arrays.items():
        got = getattr(batch, name)
        assert got.dtype == (np.bool_ if name in ("terminated", "truncated") else np.float32)
        np.testing.assert_array_equal(got, expected, err_msg=name)
    assert (batch.seq, batch.source, len(batch)) == (seq, source, len(arrays["obs"]))


# ------------------------------------------------------------------------------- round trips

def test_observation_round_trip_and_fast_path() -> None:
    obs = RNG.standard_normal(11).astype(np.float32)
    msg = m.observation_to_msg(obs)
    assert [(d.label, d.size, d.stride) for d in msg.layout.dim] == [("obs", 11, 11)]
    np.testing.assert_array_equal(m.msg_to_observation(msg, obs_dim=11), obs)

    pre = m.make_observation_msg(11)
    buffer = pre.data
    assert m.fill_observation_msg(pre, obs) is pre and pre.data is buffer
    np.testing.assert_array_equal(m.msg_to_observation(pre), obs)


def test_observation_accepts_layoutless_publishers() -> None:
    msg = Float32MultiArray(data=[1.0, 2.0, 3.0])
    np.testing.assert_array_equal(m.msg_to_observation(msg), [1, 2, 3])


def test_action_round_trip() -> None:
    action = np.array([0.25, -1.0, 1e-9])
    decoded = m.msg_to_action(m.action_to_msg(action), act_dim=3)
    assert decoded.dtype == np.float64
    np.testing.assert_array_equal(decoded, action)
    np.testing.assert_array_equal(m.msg_to_action(Float64MultiArray(data=[0.5])), [0.5])


def test_replay_round_trip_and_layout() -> None:
    arrays = replay_arrays(n=5, obs_dim=4, act_dim=2)
    msg = m.replay_to_msg(**arrays, seq=41, source=m.source_id("/bridge_0"))
    assert [(d.label, d.size, d.stride) for d in msg.layout.dim] == [
        ("transitions", 5, 65), ("fields", 13, 13), ("obs_dim", 4, 0), ("act_dim", 2, 0),
        ("seq", 41, 0), ("source", m.source_id("/bridge_0"), 0)]
    batch = m.msg_to_replay(msg, obs_dim=4, act_dim=2)
    assert_replay_equal(batch, arrays, seq=41, source=m.source_id("/bridge_0"))


def test_void_replay_steps_round_trip_and_are_strict() -> None:
    """A void step (diverged sim) travels as terminated = -1, truncated = 1, through messages and rows."""
    arrays = replay_arrays(n=4, obs_dim=3, act_dim=1)
    void = np.array([False, True, False, True])
    batch = m.msg_to_replay(m.replay_to_msg(**arrays, seq=1, source=2, void=void))
    np.testing.assert_array_equal(batch.void, void)
    assert batch.truncated[void].all() and not batch.terminated[void].any()
    np.testing.assert_array_equal(batch.terminated[~void], arrays["terminated"][~void] == 1)
    assert (batch.rows()[:, -2] == m.VOID).sum() == 2
    again = m.ReplayBatch.from_rows(batch.rows(), 3, seq=1, source=2)  # the learner's journal
    np.testing.assert_array_equal(again.void, void)
    assert not m.msg_to_replay(m.replay_to_msg(**arrays, seq=1, source=2)).void.any()
    msg = m.replay_to_msg(**arrays, seq=1, source=2, void=void)
    data = np.array(msg.data, dtype=np.float32).reshape(4, -1)
    data[1, -1] = 0.0  # -1 with truncated 0 is no void step: rejected
    msg.data = data.reshape(-1).tolist()
    with pytest.raises(m.MessageError, match="void"):
        m.msg_to_replay(msg)


def test_a_batch_fingerprint_covers_every_column_of_its_rows() -> None:
    """The fingerprint tells a re-send (the same rows) from another bridge's batch of the same
    (source, seq), whichever column differs: two trainings' bridges from one reset state send the
    same observations with other actions and rewards (a mutation test: obs alone passed)."""
    arrays = replay_arrays(n=4, obs_dim=3, act_dim=1)
    batch = m.ReplayBatch.from_rows(m.msg_to_replay(m.replay_to_msg(**arrays, seq=1, source=2)).rows(), 3,
                                    seq=1, source=2)
    assert m.ReplayBatch.from_rows(batch.rows(), 3, seq=1, source=2).fingerprint() == batch.fingerprint()
    for name in ("action", "next_obs", "reward", "terminated", "truncated"):
        other = dict(arrays)
        other[name] = ~arrays[name] if arrays[name].dtype == np.bool_ else arrays[name] + 0.5
        changed = m.msg_to_replay(m.replay_to_msg(**other, seq=1, source=2))
        assert changed.fingerprint() != batch.fingerprint(), name
    void = m.msg_to_replay(m.replay_to_msg(**arrays, seq=1, source=2, void=np.array([0, 1, 0, 0], bool)))
    assert void.fingerprint() != batch.fingerprint()



def test_rows_that_do_not_fit_the_obs_dim_are_refused() -> None:
    """A journal's rows read back under another obs_dim (a run resumed on another task's journal):
    rows with no action columns left, or not a 2-D array, are a ValueError, not a batch of empty
    actions or columns shifted into each other (a mutation test)."""
    arrays = replay_arrays(n=4, obs_dim=3, act_dim=2)
    rows = m.msg_to_replay(m.replay_to_msg(**arrays, seq=1, source=2)).rows()
    assert m.ReplayBatch.from_rows(rows, 3, seq=1, source=2).action.shape == (4, 2)
    for bad, obs_dim in ((rows, 4), (rows, 5), (rows[0], 3), (rows[None], 3)):  # 2*4 + 3: all 11 columns
        with pytest.raises(ValueError, match=rf"replay rows of shape {re.escape(str(bad.shape))} do not fit "
                                             rf"obs_dim {obs_dim}"):
            m.ReplayBatch.from_rows(bad, obs_dim, seq=1, source=2)


def test_an_episodes_first_observation_is_marked_in_band_and_decodes_as_any_other() -> None:
    """sim_bridge reset_markers: the first state of an episode carries a trailing stride-0
    ``episode_start`` dim, set and cleared on the bridge's one preallocated message; a reader pops
    it and decodes the observation; a message without it is left as it is."""
    msg = m.make_observation_msg(3)
    m.fill_observation_msg(msg, np.array([1.0, 2.0, 3.0], np.float32))
    m.mark_episode_start(msg, True)
    m.mark_episode_start(msg, True)  # once only
    assert [d.label for d in msg.layout.dim] == ["obs", m.EPISODE_START_LABEL]
    with pytest.raises(m.MessageError, match="layout must be empty or one dim"):
        m.msg_to_observation(msg, 3)
    assert m.pop_episode_start(msg) and not m.pop_episode_start(msg)
    np.testing.assert_array_equal(m.msg_to_observation(msg, 3), [1.0, 2.0, 3.0])
    m.mark_episode_start(msg, True)
    m.mark_episode_start(msg, False)
    assert [d.label for d in msg.layout.dim] == ["obs"]

def test_demonstration_round_trip() -> None:
    obs = RNG.standard_normal((7, 3)).astype(np.float32)
    demo = m.msg_to_demonstration(m.demonstration_to_msg(obs, 1234.5, episode=3), obs_dim=3)
    np.testing.assert_array_equal(demo.obs, obs)
    assert (demo.episode_return, demo.episode) == (1234.5, 3)
    unknown = m.msg_to_demonstration(m.demonstration_to_msg(obs))
    assert math.isnan(unknown.episode_return) and unknown.episode == 0


def test_policy_round_trip_is_fast_for_megabytes() -> None:
    model = RNG.integers(0, 256, 4 * 1024 * 1024, dtype=np.uint8).tobytes()
    msg = m.policy_to_msg(model, version=12)
    start = time.perf_counter()
    decoded = m.msg_to_policy(msg)
    elapsed = time.perf_counter() - start
    assert decoded == m.PolicyMessage(model, 12)
    assert elapsed < 0.1, f"decoding 4 MB took {elapsed:.3f} s: not a buffer copy"


def test_progress_round_trip() -> None:
    progress = m.LearnerProgress(gradient_steps=2**40, transitions=123456, acks={
        m.source_id("/a"): m.SourceAck(seq=9, transitions=100_000),
        7: m.SourceAck(seq=0, transitions=23456)})
    assert m.msg_to_progress(m.progress_to_msg(progress)) == progress
    empty = m.LearnerProgress(gradient_steps=0, transitions=0)
    assert m.msg_to_progress(m.progress_to_msg(empty)) == empty
    # what the learner holds beyond its acknowledgement (queued batches): a fourth column
    holding = dataclasses.replace(progress, received={7: 3})
    msg = m.progress_to_msg(holding)
    assert [(d.label, d.size) for d in msg.layout.dim] == [("sources", 2), ("ack", 4)]
    assert m.msg_to_progress(msg) == holding
    # rows of three (a learner from before that column): nothing held beyond the acknowledgement
    old = m.progress_to_msg(progress)
    rows = np.asarray(old.data[2:]).reshape(2, 4)[:, :3]
    old.data = array.array("q", [*old.data[:2], *rows.ravel().tolist()])
    old.layout.dim[0].stride, old.layout.dim[1].size, old.layout.dim[1].stride = 6, 3, 3
    assert m.msg_to_progress(old) == progress


def test_joint_state_to_obs_reorders_and_scales() -> None:
    msg = m.joint_state_msg(["knee", "hip", "ankle"], positions=[1.0, 2.0, 3.0],
                            velocities=[10.0, 20.0, 30.0], frame_id="base")
    spec = m.ObservationSpec(joints=("hip", "knee"), fields=("position", "velocity"),
                             offset=[1.0, 0.0, 0.0, 0.0], scale=[1.0, 1.0, 0.5, 0.1])
    obs = m.joint_state_to_obs(msg, spec)
    assert obs.dtype == np.float32
    np.testing.assert_array_equal(obs, np.array([1.0, 1.0, 10.0, 1.0], dtype=np.float32))


# -------------------------------------------------------------------------------- rejections

def _with(msg, **layout):
    """Copy of a multi-array message with some layout fields replaced."""
    out = type(msg)()
    out.layout.dim = [MultiArrayDimension(label=d.label, size=d.size, stride=d.stride)
                      for d in msg.layout.dim]
    out.layout.data_offset = msg.layout.data_offset
    out.data = msg.data
    for key, value in layout.items():
        if key == "data":
            out.data = value
        elif key == "data_offset":
            out.layout.data_offset = value
        else:
            index, attr = key.split("_", 1)
            setattr(out.layout.dim[int(index[1:])], attr, value)
    return out


def _nan_at(msg, index: int):
    data = np.frombuffer(msg.data, dtype=np.float32).copy()
    data[index] = np.nan
    return _with(msg, data=data.tolist())


OBS_MSG = m.observation_to_msg(np.ones(3, np.float32))
REPLAY_MSG = m.replay_to_msg(**replay_arrays(n=2, obs_dim=3, act_dim=1), seq=1, source=2)
DEMO_MSG = m.demonstration_to_msg(np.ones((4, 3), np.float32), 1.0, episode=1)
POLICY_MSG = m.policy_to_msg(b"\x08\x01onnx", version=1)
PROGRESS_MSG = m.progress_to_msg(m.LearnerProgress(5, 6, {1: m.SourceAck(2, 6)}))

REJECTIONS = [
    ("obs wrong label", m.msg_to_observation, _with(OBS_MSG, d0_label="act"), "labelled"),
    ("obs size mismatch", m.msg_to_observation, _with(OBS_MSG, d0_size=4), "layout says 4"),
    ("obs NaN", m.msg_to_observation, _nan_at(OBS_MSG, 1), "non-finite"),
    ("obs inf", m.msg_to_observation, _with(OBS_MSG, data=[1.0, math.inf, 0.0]), "non-finite"),
    ("obs empty", m.msg_to_observation, Float32MultiArray(), "empty"),
    ("obs offset", m.msg_to_observation, _with(OBS_MSG, data_offset=1), "data_offset"),
    ("action type", m.msg_to_action, OBS_MSG, "expected std_msgs/Float64MultiArray"),
    ("replay short", m.msg_to_replay, _with(REPLAY_MSG, data=[0.0] * 10), "elements"),
    ("replay fields", m.msg_to_replay, _with(REPLAY_MSG, d1_size=11), "fields is 11"),
    ("replay stride", m.msg_to_replay, _with(REPLAY_MSG, d0_stride=3), "stride"),
    ("replay labels", m.msg_to_replay, _with(REPLAY_MSG, d4_label="sequence"), "labelled"),
    ("replay NaN", m.msg_to_replay, _nan_at(REPLAY_MSG, 5), "non-finite"),
    ("replay huge", m.msg_to_replay, _with(REPLAY_MSG, data=[0.0] * 5 + [1e30] + [0.0] * 14),
     r"value 1e\+30 at flat index 5 is beyond \+-1e\+10"),  # overflowed the normalisers: NaN networks
    ("replay flag", m.msg_to_replay, _with(REPLAY_MSG, data=[0.5] * 20), "0.0 or 1.0"),
    ("replay zero", m.msg_to_replay, _with(REPLAY_MSG, d0_size=0, d0_stride=0, data=[]), ">= 1"),
    ("demo offset", m.msg_to_demonstration, _with(DEMO_MSG, data_offset=0), "data_offset"),
    ("demo one step", m.msg_to_demonstration,
     _with(DEMO_MSG, d0_size=1, d0_stride=3, data=[0.0] * 4), "steps >= 2"),
    ("demo NaN obs", m.msg_to_demonstration, _nan_at(DEMO_MSG, 3), "non-finite"),
    ("demo huge obs", m.msg_to_demonstration, _with(DEMO_MSG, data=[1.0] * 4 + [-3e38] + [1.0] * 8),
     r"value -3e\+38 at flat index 3 is beyond \+-1e\+10"),
    ("demo inf return", m.msg_to_demonstration,
     _with(DEMO_MSG, data=[math.inf] + [0.0] * 12), "inf"),
    ("policy short", m.msg_to_policy, _with(POLICY_MSG, d0_size=9, d0_stride=9), "elements"),
    ("policy no version", m.msg_to_policy,
     UInt8MultiArray(layout=MultiArrayLayout(dim=[MultiArrayDimension(label="onnx", size=6,
                                                                      stride=6)]),
                     data=b"\x08\x01onnx"),
     "labelled"),
    ("progress rows", m.msg_to_progress, _with(PROGRESS_MSG, d0_size=2, d0_stride=8), "elements"),
    ("progress negative", m.msg_to_progress, _with(PROGRESS_MSG, data=[5, -6, 1, 2, 6, 2]), "negative"),
    ("progress duplicate", m.msg_to_progress,
     _with(PROGRESS_MSG, d0_size=2, d0_stride=8, data=[5, 6, 1, 2, 3, 2, 1, 2, 3, 2]), "duplicate"),
    ("progress received below ack", m.msg_to_progress, _with(PROGRESS_MSG, data=[5, 6, 1, 2, 6, 1]),
     "received seq below"),
    ("progress ack width", m.msg_to_progress, _with(PROGRESS_MSG, d0_stride=5, d1_size=5, d1_stride=5,
                                                    data=[5, 6, 1, 2, 6, 2, 0]), "expected 3 or 4"),
]


@pytest.mark.parametrize("decode,msg,match", [r[1:] for r in REJECTIONS],
                         ids=[r[0] for r in REJECTIONS])
def test_decoders_reject_bad_messages(decode, msg, match) -> None:
    with pytest.raises(m.MessageError, match=match):
        decode(msg)


def test_decoders_check_expected_dims() -> None:
    with pytest.raises(m.MessageError, match="expects 4"):
        m.msg_to_observation(OBS_MSG, obs_dim=4)
    with pytest.raises(m.MessageError, match="act_dim is 1"):
        m.msg_to_replay(REPLAY_MSG, act_dim=2)
    with pytest.raises(m.MessageError, match="obs_dim is 3"):
        m.msg_to_demonstration(DEMO_MSG, obs_dim=2)


@pytest.mark.parametrize("msg,match", [
    (m.joint_state_msg(["a"], positions=[0.0], velocities=[0.0]), r"missing joints \['b'\]"),
    (JointState(name=["a", "b"], position=[0.0, 1.0], velocity=[0.0]), "1 velocity values"),
    (JointState(name=["a", "b"], position=[0.0, 1.0]), "0 velocity values"),
    (JointState(name=["a", "a", "b"], position=[0.0] * 3, velocity=[0.0] * 3), "duplicate"),
    (m.joint_state_msg(["a", "b"], positions=[0.0, math.nan], velocities=[0.0, 0.0]),
     r"non-finite position \(NaN or inf\) of joint b$"),
    (m.joint_state_msg(["b", "a"], positions=[0.0, 0.0], velocities=[math.inf, 0.0]),
     r"non-finite velocity \(NaN or inf\) of joint b$"),  # named by the policy's joint, not an index
    (m.joint_state_msg(["a", "b"], positions=[0.0, 1e300], velocities=[0.0, 0.0]),
     "float32 range"),
])
def test_joint_state_rejections(msg, match) -> None:
    with pytest.raises(m.MessageError, match=match):
        m.joint_state_to_obs(msg, m.ObservationSpec(joints=("a", "b")))


def test_encoders_refuse_bad_input() -> None:
    arrays = replay_arrays(n=3)
    with pytest.raises(ValueError, match="next_obs"):
        m.replay_to_msg(**{**arrays, "next_obs": arrays["next_obs"][:2]}, seq=0, source=0)
    with pytest.raises(ValueError, match="terminated"):
        m.replay_to_msg(**{**arrays, "terminated": np.full(3, 0.5)}, seq=0, source=0)
    with pytest.raises(ValueError, match="seq"):
        m.replay_to_msg(**arrays, seq=2**32, source=0)
    with pytest.raises(ValueError, match="NaN"):
        m.observation_to_msg([0.0, math.nan])
    with pytest.raises(ValueError, match="T\\+1 >= 2"):
        m.demonstration_to_msg(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="episode return"):
        m.demonstration_to_msg(np.zeros((2, 3)), episode_return=1e39)
    with pytest.raises(ValueError, match="length 4"):
        m.ObservationSpec(joints=("a", "b"), scale=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"spec scale has a 0 \(at \[1, 3\]\)"):  # a value that never moves
        m.ObservationSpec(joints=("a", "b"), scale=[1.0, 0.0, -1.0, 0.0])
    assert m.ObservationSpec(joints=("a", "b"), scale=[1.0, 2.0, -1.0, 0.5]).scale.tolist() == [1, 2, -1, 0.5]


# ------------------------------------------------------------------------------ qos, runtime

def test_qos_contract() -> None:
    assert qos.POLICY_QOS.durability == DurabilityPolicy.TRANSIENT_LOCAL and qos.POLICY_QOS.depth == 1
    assert qos.DEMONSTRATIONS_QOS.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert qos.REPLAY_QOS.reliability == ReliabilityPolicy.RELIABLE and qos.REPLAY_QOS.depth >= 1000
    assert qos.OBSERVATION_QOS.reliability == ReliabilityPolicy.BEST_EFFORT
    assert qos.qos_for("learner_progress") is qos.LEARNER_PROGRESS_QOS
    with pytest.raises(KeyError, match="known"):
        qos.qos_for("/opolo/replay")


def test_command_qos_reaches_ros2_control_but_best_effort_does_not() -> None:
    reliable_subscriber = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    # WARNING only flags "system_default" liveliness as unknown; ERROR means no messages flow.
    compatible, _ = qos_check_compatible(qos.COMMAND_QOS, reliable_subscriber)
    assert compatible != QoSCompatibility.ERROR
    compatible, _ = qos_check_compatible(qos.ACTION_QOS, reliable_subscriber)
    assert compatible == QoSCompatibility.ERROR
    compatible, _ = qos_check_compatible(qos.COMMAND_QOS, qos.ACTION_QOS)
    assert compatible != QoSCompatibility.ERROR


def test_domain_id_resolution() -> None:
    assert runtime.isolated_domain_id(pid=0, environ={}) == 1
    assert runtime.isolated_domain_id(pid=100, environ={}) == 101
    assert runtime.isolated_domain_id(pid=101, environ={}) == 1
    assert runtime.isolated_domain_id(environ={runtime.TEST_DOMAIN_ID_ENV: "42"}) == 42
    assert runtime.resolve_domain_id(None, {}) == 0
    assert runtime.resolve_domain_id(None, {"ROS_DOMAIN_ID": " 7 "}) == 7
    assert runtime.resolve_domain_id(3, {"ROS_DOMAIN_ID": "7"}) == 3
    with pytest.raises(ValueError, match="ROS_DOMAIN_ID must be an integer"):
        runtime.resolve_domain_id(None, {"ROS_DOMAIN_ID": "abc"})
    with pytest.raises(ValueError, match="233"):
        runtime.resolve_domain_id(233)
    environ = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}
    runtime.apply_local_dds_env(environ)
    assert environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
    runtime.apply_local_dds_env(environ, overwrite=True)
    assert environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"


@pytest.mark.ros
def test_ros_context_is_isolated_and_shut_down(ros_domain_id) -> None:
    with runtime.ros_context(args=[]) as context:
        assert context.ok() and context.get_domain_id() == ros_domain_id
        with runtime.ros_context(domain_id=0, args=[]) as other:
            assert other.get_domain_id() == 0
    assert not context.ok() and not other.ok()
    runtime.shutdown(context)  # idempotent


# ------------------------------------------------------------------------------------ fuzzing

LABELS = ["obs", "action", "transitions", "fields", "obs_dim", "act_dim", "seq", "source", "steps",
          "episode", "onnx", "version", "sources", "ack", "", "x"]
SIZES = st.one_of(st.integers(0, 8), st.sampled_from([13, 22, 2**31, 2**32 - 1]))
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)


@st.composite
def layouts(draw):
    dims = [MultiArrayDimension(label=draw(st.sampled_from(LABELS)), size=draw(SIZES),
                                stride=draw(st.one_of(st.just(0), SIZES)))
            for _ in range(draw(st.integers(0, 7)))]
    return dims, draw(st.sampled_from([0, 0, 1, 2, 3]))


@st.composite
def multi_arrays(draw):
    kind = draw(st.sampled_from(["f32", "f64", "u8", "i64"]))
    dims, offset = draw(layouts())
    n = draw(st.integers(0, 40))
    cls, data = {
        "f32": (Float32MultiArray, st.lists(FLOATS, min_size=n, max_size=n)),
        "f64": (Float64MultiArray, st.lists(st.floats(width=64), min_size=n, max_size=n)),
        "u8": (UInt8MultiArray, st.binary(min_size=n, max_size=n)),
        "i64": (Int64MultiArray, st.lists(st.integers(-2**63, 2**63 - 1), min_size=n, max_size=n)),
    }[kind]
    msg = cls(data=draw(data))
    msg.layout.dim, msg.layout.data_offset = dims, offset
    return msg


@st.composite
def mutated_valid(draw):
    """A valid message with one layout field or the data length changed: reaches deep checks."""
    msg = draw(st.sampled_from([OBS_MSG, REPLAY_MSG, DEMO_MSG, POLICY_MSG, PROGRESS_MSG]))
    dims = list(msg.layout.dim)
    choice = draw(st.sampled_from(["size", "stride", "offset", "trim", "extend"]))
    if choice in ("size", "stride") and dims:
        key = f"d{draw(st.integers(0, len(dims) - 1))}_{choice}"
        return _with(msg, **{key: draw(SIZES)})
    if choice == "offset":
        return _with(msg, data_offset=draw(st.integers(0, 3)))
    data = np.frombuffer(msg.data, dtype=np.dtype(msg.data.typecode)).tolist()
    if choice == "trim":
        return _with(msg, data=data[:draw(st.integers(0, max(len(data) - 1, 0)))])
    return _with(msg, data=data + [1] * draw(st.integers(1, 5)))


@st.composite
def plausible(draw):
    """The right labels and data_offset for a message kind, everything else drawn (sizes, strides,
    a data length off by one or not, values among 0/1/0.5/NaN/inf): reaches every deep check."""
    small = st.integers(0, 4)
    kind = draw(st.sampled_from(["obs", "replay", "demo", "policy", "progress"]))
    meta: list[tuple[str, int]] = []
    cls, offset = Float32MultiArray, 0
    if kind == "obs":
        shape = [("obs", draw(small))]
    elif kind == "replay":
        o, a = draw(small), draw(small)
        shape = [("transitions", draw(small)), ("fields", draw(st.sampled_from([2 * o + a + 3, 4])))]
        meta = [("obs_dim", o), ("act_dim", a), ("seq", draw(SIZES)), ("source", draw(SIZES))]
    elif kind == "demo":
        shape, meta, offset = [("steps", draw(small)), ("obs", draw(small))], [("episode", 1)], 1
    elif kind == "policy":
        shape, meta, cls = [("onnx", draw(small))], [("version", draw(SIZES))], UInt8MultiArray
    else:
        shape = [("sources", draw(small)), ("ack", draw(st.sampled_from([3, 2])))]
        cls, offset = Int64MultiArray, 2
    sizes = [size for _, size in shape]
    strides = [math.prod(sizes[i:]) for i in range(len(sizes))]
    if draw(st.booleans()):
        strides = [draw(SIZES) for _ in strides]
    dims = [MultiArrayDimension(label=label, size=size, stride=stride)
            for (label, size), stride in zip(shape, strides)]
    dims += [MultiArrayDimension(label=label, size=size, stride=0) for label, size in meta]
    n = max(0, offset + math.prod(sizes) + draw(st.sampled_from([0, 0, 0, -1, 1])))
    if cls is UInt8MultiArray:
        data = draw(st.binary(min_size=n, max_size=n))
    elif cls is Int64MultiArray:
        data = draw(st.lists(st.sampled_from([0, 1, 3, -1, 2**40]), min_size=n, max_size=n))
    else:
        values = st.sampled_from([0.0, 1.0, 0.5, -2.0, math.nan, math.inf])
        data = draw(st.lists(values, min_size=n, max_size=n))
    msg = cls(data=data)
    msg.layout.dim, msg.layout.data_offset = dims, offset
    return msg


DECODERS = [m.msg_to_observation, m.msg_to_action, m.msg_to_replay, m.msg_to_demonstration,
            m.msg_to_policy, m.msg_to_progress, m.replay_origin]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=st.one_of(multi_arrays(), mutated_valid(), plausible()))
def test_fuzz_decoders_raise_only_message_error(msg) -> None:
    for decode in DECODERS:
        try:
            decode(msg)
        except m.MessageError:
            pass


@settings(max_examples=150, deadline=None)
@given(names=st.lists(st.sampled_from(["a", "b", "c", ""]), max_size=4),
       pos=st.lists(st.floats(width=64), max_size=5), vel=st.lists(st.floats(width=64), max_size=5))
def test_fuzz_joint_state_raises_only_message_error(names, pos, vel) -> None:
    msg = JointState(name=names, position=pos, velocity=vel)
    try:
        obs = m.joint_state_to_obs(msg, m.ObservationSpec(joints=("a", "b")))
    except m.MessageError:
        return
    assert obs.shape == (4,) and np.isfinite(obs).all()


# --------------------------------------------------------------------------------- real DDS

def _wait(executors, done, timeout: float = 5.0) -> None:
    assert runtime.spin_until(executors, done, timeout), "timed out waiting on DDS"


@pytest.mark.ros
def test_linked_waits_for_both_ends_of_a_link(ros_node) -> None:
    pub_node, pub_exec = ros_node("writer")
    sub_node, sub_exec = ros_node("reader")
    pub = pub_node.create_publisher(Float32MultiArray, "/linked_test", qos.REPLAY_QOS)
    other = sub_node.create_subscription(Float32MultiArray, "/another_topic", lambda _: None, qos.REPLAY_QOS)
    runtime.spin_until([pub_exec, sub_exec], lambda: False, 0.2)
    assert not runtime.linked(pub, sub_node)  # no subscription of that node on the topic
    sub = sub_node.create_subscription(Float32MultiArray, "/linked_test", lambda _: None, qos.REPLAY_QOS)
    _wait([pub_exec, sub_exec], lambda: runtime.linked(pub, sub_node))
    assert pub.get_subscription_count() == 1 and sub.get_publisher_count() == 1
    assert other.get_publisher_count() == 0
    # The writer sees a reader of the node, but another reader of that node on the topic never
    # matches the writer (it asks transient local of a volatile writer): not linked. Without the
    # reader-side check, linked() would say yes here.
    strict = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)
    never = sub_node.create_subscription(Float32MultiArray, "/linked_test", lambda _: None, strict)
    runtime.spin_until([pub_exec, sub_exec], lambda: False, 0.5)
    assert pub.get_subscription_count() == 1 and never.get_publisher_count() == 0
    assert not runtime.linked(pub, sub_node)


@pytest.mark.ros
def test_dds_replay_and_late_joining_demonstrations(ros_node) -> None:
    pub_node, pub_exec = ros_node("bridge")
    replay_pub = pub_node.create_publisher(Float32MultiArray, "/opolo/replay", qos.REPLAY_QOS)
    demo_pub = pub_node.create_publisher(Float32MultiArray, "/opolo/demonstrations",
                                         qos.DEMONSTRATIONS_QOS)
    episodes = [RNG.standard_normal((50, 11)).astype(np.float32) for _ in range(4)]
    for i, obs in enumerate(episodes):  # all published before the learner exists
        demo_pub.publish(m.demonstration_to_msg(obs, 100.0 + i, episode=i))

    sub_node, sub_exec = ros_node("learner")
    replays, demos = [], []
    sub_node.create_subscription(Float32MultiArray, "/opolo/replay",
                                 lambda msg: replays.append(m.msg_to_replay(msg)), qos.REPLAY_QOS)
    sub_node.create_subscription(Float32MultiArray, "/opolo/demonstrations",
                                 lambda msg: demos.append(m.msg_to_demonstration(msg)),
                                 qos.DEMONSTRATIONS_QOS)
    executors = [pub_exec, sub_exec]
    _wait(executors, lambda: replay_pub.get_subscription_count() == 1
          and runtime.linked(replay_pub, sub_node))
    batches = [replay_arrays(n=64, obs_dim=11, act_dim=3) for _ in range(3)]
    for seq, arrays in enumerate(batches):
        replay_pub.publish(m.replay_to_msg(**arrays, seq=seq, source=m.source_id("/bridge")))
    _wait(executors, lambda: len(replays) == 3 and len(demos) == 4)

    for seq, (batch, arrays) in enumerate(zip(replays, batches)):
        assert_replay_equal(batch, arrays, seq=seq, source=m.source_id("/bridge"))
    for i, (demo, obs) in enumerate(zip(demos, episodes)):
        np.testing.assert_array_equal(demo.obs, obs)
        assert (demo.episode, demo.episode_return) == (i, 100.0 + i)


@pytest.mark.ros
def test_dds_policy_late_joiner_gets_newest_2mb(ros_node, record_property) -> None:
    pub_node, pub_exec = ros_node("learner")
    policy_pub = pub_node.create_publisher(UInt8MultiArray, "/opolo/policy", qos.POLICY_QOS)
    models = [RNG.integers(0, 256, 2 * 1024 * 1024, dtype=np.uint8).tobytes() for _ in range(3)]
    policy_pub.publish(m.policy_to_msg(models[0], version=1))
    policy_pub.publish(m.policy_to_msg(models[1], version=2))  # depth 1: only this one is kept

    sub_node, sub_exec = ros_node("actor")
    received: list[tuple[float, m.PolicyMessage]] = []
    sub_node.create_subscription(
        UInt8MultiArray, "/opolo/policy",
        lambda msg: received.append((time.perf_counter(), m.msg_to_policy(msg))), qos.POLICY_QOS)
    executors = [pub_exec, sub_exec]
    _wait(executors, lambda: len(received) == 1)
    assert received[0][1] == m.PolicyMessage(models[1], 2)

    msg = m.policy_to_msg(models[2], version=3)
    start = time.perf_counter()
    policy_pub.publish(msg)
    _wait([sub_exec], lambda: len(received) == 2)
    elapsed_ms = (received[1][0] - start) * 1e3
    assert received[1][1] == m.PolicyMessage(models[2], 3)
    record_property("policy_2mb_in_process_ms", round(elapsed_ms, 2))
    print(f"2 MB policy, two contexts in one process: publish -> decoded {elapsed_ms:.1f} ms")


SUBPROCESS_PUBLISHER = """
import sys, time
import numpy as np
from rclpy.node import Node
from opolo_ros.ros import messages as m, qos, runtime
context = runtime.init_context(args=[])
node = Node("remote_learner", context=context)
pub = node.create_publisher(m.UInt8MultiArray, "/opolo/policy", qos.POLICY_QOS)
rng = np.random.default_rng(int(sys.argv[1]))
models = [rng.integers(0, 256, 2 * 1024 * 1024, dtype=np.uint8).tobytes() for _ in range(2)]
pub.publish(m.policy_to_msg(models[0], version=1))
print("ready", flush=True)
sys.stdin.readline()
start = time.time()
pub.publish(m.policy_to_msg(models[1], version=2))
print(start, flush=True)
sys.stdin.readline()
runtime.shutdown(context, [node])
"""


@pytest.mark.ros
def test_dds_policy_across_processes(ros_node, record_property) -> None:
    seed = 5
    rng = np.random.default_rng(seed)
    models = [rng.integers(0, 256, 2 * 1024 * 1024, dtype=np.uint8).tobytes() for _ in range(2)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                      os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", SUBPROCESS_PUBLISHER, str(seed)], cwd=REPO,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        node, executor = ros_node("actor")
        received: list[tuple[float, m.PolicyMessage]] = []
        node.create_subscription(
            UInt8MultiArray, "/opolo/policy",
            lambda msg: received.append((time.time(), m.msg_to_policy(msg))), qos.POLICY_QOS)
        _wait(executor, lambda: len(received) == 1, timeout=8.0)
        assert received[0][1] == m.PolicyMessage(models[0], 1)  # transient local, late joiner

        proc.stdin.write("go\n")
        proc.stdin.flush()
        published_at = float(proc.stdout.readline())
        _wait(executor, lambda: len(received) == 2)
        elapsed_ms = (received[1][0] - published_at) * 1e3
        assert received[1][1] == m.PolicyMessage(models[1], 2)
        record_property("policy_2mb_cross_process_ms", round(elapsed_ms, 2))
        print(f"2 MB policy, across processes: publish -> decoded {elapsed_ms:.1f} ms")
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_layout_of_many_labels_gives_a_short_error() -> None:
    """A message may carry megabytes of labels: the error (and the log line) shows a glimpse."""
    from std_msgs.msg import MultiArrayDimension, UInt8MultiArray

    msg = UInt8MultiArray(data=b"abc")
    msg.layout.dim = [MultiArrayDimension(label="x" * 1000, size=1, stride=1) for _ in range(100)]
    with pytest.raises(m.MessageError, match="100 dims, first") as err:
        m.msg_to_policy(msg)
    assert len(str(err.value)) < 500


def test_ros_log_lines_clear_a_progress_bar_on_a_terminal_only() -> None:
    """A line logged while the learner's progress bar was drawn was glued onto the bar's end (a
    walkthrough missed the warnings): on a terminal each log line clears the line first; a format
    the user set and output into a file are left alone."""
    import io

    from opolo_ros.ros.runtime import CONSOLE_FORMAT_ENV, DEFAULT_CONSOLE_FORMAT, log_lines_over_progress_bars

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    environ: dict[str, str] = {}
    log_lines_over_progress_bars(environ, Terminal())
    assert environ[CONSOLE_FORMAT_ENV] == "\r\x1b[K" + DEFAULT_CONSOLE_FORMAT
    mine = {CONSOLE_FORMAT_ENV: "{message}"}
    log_lines_over_progress_bars(mine, Terminal())
    assert mine == {CONSOLE_FORMAT_ENV: "{message}"}
    file: dict[str, str] = {}
    log_lines_over_progress_bars(file, io.StringIO())
    assert file == {}


def test_a_bridges_source_id_is_of_its_host_and_name(monkeypatch):
    """Two hosts each running the default /sim_bridge fed one learner as one source (one's batches
    dropped as the other's duplicates); a bridge restarted on its host keeps its id."""
    import socket

    here = m.bridge_source_id("/sim_bridge")
    assert here == m.bridge_source_id("/sim_bridge") != m.bridge_source_id("/robot2/sim_bridge")
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")
    assert m.bridge_source_id("/sim_bridge") != here
