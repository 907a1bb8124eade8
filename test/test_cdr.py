"""The pure-Python reader of serialized messages against rclpy's own deserializer, and on bad bytes."""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rclpy")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import (  # noqa: E402
    Float32MultiArray,
    Float64MultiArray,
    Int64,
    Int64MultiArray,
    MultiArrayDimension,
    UInt8MultiArray,
)

from opolo_ros.ros import messages as m  # noqa: E402
from opolo_ros.ros.cdr import CdrError, read, read_multiarray  # noqa: E402

UINT32 = st.integers(0, 2**32 - 1)
LABELS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=9)  # C strings end at NUL
ELEMENTS = {UInt8MultiArray: st.binary(max_size=300),
            Float32MultiArray: st.lists(st.floats(width=32), max_size=40),
            Float64MultiArray: st.lists(st.floats(), max_size=40),
            Int64MultiArray: st.lists(st.integers(-2**63, 2**63 - 1), max_size=40)}
F64S = st.lists(st.floats(), max_size=6)


# The element type of each message's data: what the reader must give, whatever the bytes say.
DTYPES = {UInt8MultiArray: np.dtype(np.uint8), Float32MultiArray: np.dtype(np.float32),
          Float64MultiArray: np.dtype(np.float64), Int64MultiArray: np.dtype(np.int64)}


def same_values(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> bool:
    """`got` is native `dtype` and holds `want`'s values (NaNs and -0.0 compared by their bytes)."""
    assert want.dtype == dtype, f"the reference is {want.dtype}, not {dtype}"
    return (got.dtype == dtype and got.shape == want.shape
            and np.array_equal(got, want, equal_nan=dtype.kind == "f") and got.tobytes() == want.tobytes())


def same(record: Any, msg: Any) -> bool:
    """A record from the reader holds what rclpy's message holds: the same values in the element
    type of the message's data (an Int64MultiArray as int64, not its bytes as float64)."""
    if record.msg_type is not type(msg):
        return False
    if isinstance(msg, JointState):
        f64 = np.dtype(np.float64)
        return (record.header.stamp == (msg.header.stamp.sec, msg.header.stamp.nanosec)
                and record.header.frame_id == msg.header.frame_id and record.name == list(msg.name)
                and all(same_values(getattr(record, f), np.asarray(getattr(msg, f), dtype=f64), f64)
                        for f in ("position", "velocity", "effort")))
    want = np.asarray(memoryview(msg.data))  # rclpy's own element type: array.array('q') is int64
    return ([tuple(d) for d in record.layout.dim] == [(d.label, d.size, d.stride) for d in msg.layout.dim]
            and record.layout.data_offset == msg.layout.data_offset
            and same_values(record.data, want, DTYPES[type(msg)]))


@st.composite
def multiarrays(draw) -> Any:
    msg_type = draw(st.sampled_from(list(ELEMENTS)))
    msg = msg_type()
    msg.layout.dim = draw(st.lists(st.builds(MultiArrayDimension, label=LABELS, size=UINT32,
                                             stride=UINT32), max_size=5))
    msg.layout.data_offset = draw(UINT32)
    msg.data = draw(ELEMENTS[msg_type])
    return msg


@st.composite
def joint_states(draw) -> JointState:
    msg = JointState(name=draw(st.lists(LABELS, max_size=5)), position=draw(F64S), velocity=draw(F64S),
                     effort=draw(F64S))
    msg.header.stamp.sec = draw(st.integers(-2**31, 2**31 - 1))
    msg.header.stamp.nanosec = draw(UINT32)
    msg.header.frame_id = draw(LABELS)
    return msg


@settings(max_examples=300, deadline=None)
@given(msg=st.one_of(multiarrays(), joint_states()))
def test_reads_what_rclpy_reads(msg: Any) -> None:
    raw = serialize_message(msg)
    assert same(read(raw, type(msg)), deserialize_message(raw, type(msg)))
    assert same(read(raw, type(msg)), msg)


class Writer:
    """CDR by hand, for the byte orders and encodings rclpy here does not write (it writes XCDR1 LE)."""

    def __init__(self, kind: bytes, order: str, max_align: int) -> None:
        self.out, self.order, self.max_align = bytearray(kind + b"\x00\x00"), order, max_align

    def put(self, code: str, *values: Any) -> Writer:
        size = min(struct.calcsize(code.lstrip("0123456789")[0]), self.max_align)
        self.out += b"\x00" * (-(len(self.out) - 4) % size)
        self.out += struct.pack(self.order + code, *values)
        return self

    def string(self, text: str) -> Writer:
        raw = text.encode() + b"\x00"
        return self.put("I", len(raw)).put(f"{len(raw)}s", raw)

    def __bytes__(self) -> bytes:
        return bytes(self.out)

    def doubles(self, values: list[float]) -> Writer:
        self.put("I", len(values))
        return self.put(f"{len(values)}d", *values) if values else self


ENCODINGS = {"xcdr1 le": (b"\x00\x01", "<", 8), "xcdr1 be": (b"\x00\x00", ">", 8),
             "xcdr2 le": (b"\x00\x07", "<", 4), "xcdr2 be": (b"\x00\x06", ">", 4)}


def float64_array(encoding: str) -> bytes:
    w = Writer(*ENCODINGS[encoding]).put("I", 1).string("action").put("II", 3, 3).put("I", 0)
    return bytes(w.doubles([1.5, -2.0, 3.25]))


def int64_array(encoding: str) -> bytes:
    w = Writer(*ENCODINGS[encoding]).put("I", 1).string("count").put("II", 3, 3).put("I", 0)
    return bytes(w.put("I", 3).put("3q", 1, -2, 2**40 + 3))


def joint_state(encoding: str) -> bytes:
    w = Writer(*ENCODINGS[encoding]).put("i", -7).put("I", 9).string("base").put("I", 2)
    return bytes(w.string("hinge").string("slider").doubles([0.5, -0.25]).doubles([]).doubles([2.0]))


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_reads_both_byte_orders_and_plain_cdr2(encoding: str) -> None:
    """XCDR2 aligns the doubles and int64s to 4, XCDR1 to 8; the hand-written XCDR1 LE is checked
    by rclpy itself. Each record's data has its message's element type."""
    want = Float64MultiArray(data=[1.5, -2.0, 3.25])
    want.layout.dim = [MultiArrayDimension(label="action", size=3, stride=3)]
    want_int = Int64MultiArray(data=[1, -2, 2**40 + 3])
    want_int.layout.dim = [MultiArrayDimension(label="count", size=3, stride=3)]
    want_js = JointState(name=["hinge", "slider"], position=[0.5, -0.25], effort=[2.0])
    want_js.header.stamp.sec, want_js.header.stamp.nanosec, want_js.header.frame_id = -7, 9, "base"
    if encoding == "xcdr1 le":
        assert deserialize_message(float64_array(encoding), Float64MultiArray) == want
        assert deserialize_message(joint_state(encoding), JointState) == want_js
        assert deserialize_message(int64_array(encoding), Int64MultiArray) == want_int
    assert same(read(float64_array(encoding), Float64MultiArray), want)
    assert same(read(int64_array(encoding), Int64MultiArray), want_int)
    assert same(read(joint_state(encoding), JointState), want_js)
    assert read(float64_array(encoding), Float64MultiArray).data.dtype == np.dtype("=f8")  # native order
    assert read(int64_array(encoding), Int64MultiArray).data.tolist() == [1, -2, 2**40 + 3]


def _good() -> bytes:
    msg = UInt8MultiArray(data=b"abc")
    msg.layout.dim = [MultiArrayDimension(label="onnx", size=3, stride=3)]
    return serialize_message(msg)


GOOD = _good()  # header, count, label length 5 at 8, "onnx\0" at 12, size, stride, offset, length, data


@pytest.mark.parametrize("raw, says", [
    (b"", "shorter than the encapsulation header"),
    (b"\x00\x03" + GOOD[2:], "encapsulation 0x0003"),
    (GOOD[:-1], "data count 3 does not fit in 2 bytes"),
    (GOOD[:6], "cut short at dim count"),
    (b"\x00\x00\xe6\x61", "cut short at dim count"),  # options claim padding: rclpy reads past the end
    (GOOD[:4] + struct.pack("<I", 2**32 - 1), "dim count 4294967295 does not fit"),
    (GOOD[:8] + struct.pack("<I", 2**31) + GOOD[12:], "dim 0 label says 2147483648 bytes"),
    (GOOD[:16] + b"X" + GOOD[17:], "dim 0 label is not NUL-terminated"),
    (GOOD[:12] + b"\xff" + GOOD[13:], "dim 0 label is not UTF-8"),
])
def test_bad_bytes_are_refused_with_the_reason(raw: bytes, says: str) -> None:
    with pytest.raises(CdrError, match=says):
        read_multiarray(raw, UInt8MultiArray)


@pytest.mark.parametrize("msg_type, raw, says", [
    (Int64, b"\x00\x01\x00\x03", "cut short at data"),  # rclpy returns 8 bytes from past the buffer
    (Int64, b"\x00\x01\x00\x00\x05\x00\x00\x00", "cut short at data"),
    (JointState, b"\x00\x01\x00\x00", "cut short at header.stamp.sec"),
    (JointState, joint_state("xcdr1 le")[:-4], "effort count 1 does not fit in 4 bytes"),
    (JointState, joint_state("xcdr1 le")[:24] + struct.pack("<I", 2**30) + bytes(64),
     "name count 1073741824 does not fit"),
    (Float64MultiArray, float64_array("xcdr1 le")[:-1], "data count 3 does not fit in 23 bytes"),
])
def test_other_types_refuse_short_or_garbled_bytes(msg_type: type, raw: bytes, says: str) -> None:
    with pytest.raises(CdrError, match=says):
        read(raw, msg_type)


def test_int64_reads_both_orders() -> None:
    assert read(serialize_message(Int64(data=-5)), Int64).data == -5
    assert read(b"\x00\x00\x00\x00" + struct.pack(">q", 2**40), Int64).data == 2**40


@settings(max_examples=400, deadline=None)
@given(msg_type=st.sampled_from([*ELEMENTS, JointState, Int64]),
       head=st.sampled_from([b"\x00\x00", b"\x00\x01", b"\x00\x06", b"\x00\x07"]),
       body=st.binary(max_size=64))
def test_any_bytes_give_a_record_or_a_cdr_error(msg_type: type, head: bytes, body: bytes) -> None:
    """The property the nodes rely on: no other exception, and (unlike rclpy's) no crash."""
    try:
        read(head + body, msg_type)
    except CdrError:
        pass


def test_a_huge_count_is_refused_before_any_loop() -> None:
    raw = GOOD[:4] + struct.pack("<I", 2**32 - 1) + b"\x00" * 2**20
    start = time.perf_counter()
    with pytest.raises(CdrError, match="does not fit"):
        read_multiarray(raw, UInt8MultiArray)
    assert time.perf_counter() - start < 0.05


def test_many_dims_or_joint_names_are_refused_before_they_are_read() -> None:
    """Bounded in time: 65 empty dims (792 bytes) or 4097 names, which no decoder would take."""
    dims = Float32MultiArray()
    dims.layout.dim = [MultiArrayDimension() for _ in range(65)]
    with pytest.raises(CdrError, match="dim count 65 is more than 64"):
        read(serialize_message(dims), Float32MultiArray)
    dims.layout.dim = dims.layout.dim[:64]
    assert len(read(serialize_message(dims), Float32MultiArray).layout.dim) == 64
    with pytest.raises(CdrError, match="name count 4097 is more than 4096"):
        read(serialize_message(JointState(name=[""] * 4097)), JointState)


def test_a_label_ends_at_its_first_nul_as_rclpy_reads_it() -> None:
    """A C++ publisher's std::string may hold a NUL; rclpy's C string stops there, so does the reader."""
    text = b"onnx\x00junk\x00"
    raw = (b"\x00\x01\x00\x00" + struct.pack("<I", 1) + struct.pack("<I", len(text)) + text
           + b"\x00\x00" + struct.pack("<IIII", 3, 3, 0, 0))
    assert [d.label for d in read_multiarray(raw, UInt8MultiArray).layout.dim] == ["onnx"]


def test_any_buffer_reads_like_bytes() -> None:
    spread = bytes(x for b in GOOD for x in (b, 0xEE))
    want = read_multiarray(GOOD, UInt8MultiArray)
    for buffer in (bytearray(GOOD), memoryview(GOOD), memoryview(spread)[::2]):  # the last: not contiguous
        got = read_multiarray(buffer, UInt8MultiArray)
        assert got.layout == want.layout and got.data.tobytes() == b"abc"


def test_the_data_is_a_read_only_view_of_the_bytes() -> None:
    """No copy and no element conversion: what makes the reader faster than rclpy's message objects."""
    raw = serialize_message(m.observation_to_msg(np.arange(5, dtype=np.float32)))
    data = read(raw, Float32MultiArray).data
    assert not data.flags.writeable and not data.flags.owndata
    assert np.array_equal(data, np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("msg, decode", [
    (m.observation_to_msg([1.0, 2.0]), m.msg_to_observation),
    (m.action_to_msg([0.5]), m.msg_to_action),
    (m.demonstration_to_msg(np.ones((3, 2)), 4.0, 7), m.msg_to_demonstration),
    (m.policy_to_msg(b"onnx bytes", 3), m.msg_to_policy),
    (m.progress_to_msg(m.LearnerProgress(5, 6, {9: m.SourceAck(2, 6)})), m.msg_to_progress),
    (m.replay_to_msg(np.ones((2, 3)), np.zeros((2, 1)), np.ones((2, 3)), np.zeros(2), np.zeros(2),
                     np.ones(2), seq=4, source=11), m.msg_to_replay),
])
def test_each_decoder_takes_the_record_as_it_takes_the_message(msg: Any, decode: Any) -> None:
    record = m.deserialize(serialize_message(msg), type(msg), "x")
    assert repr(decode(record)) == repr(decode(msg))


def test_joint_state_record_gives_the_same_observation() -> None:
    spec = m.ObservationSpec(joints=("b", "a"))
    msg = m.joint_state_msg(["a", "b"], [1.0, 2.0], [3.0, 4.0])
    record = m.deserialize(serialize_message(msg), JointState, "joint state")
    assert np.array_equal(m.joint_state_to_obs(record, spec), m.joint_state_to_obs(msg, spec))


def test_a_record_of_another_type_is_refused_by_the_decoder() -> None:
    record = m.deserialize(serialize_message(m.observation_to_msg([0.5])), Float32MultiArray, "x")
    with pytest.raises(m.MessageError, match="expected std_msgs/Float64MultiArray, got Float32MultiArray"):
        m.msg_to_action(record)  # (an observation may be either: observation_type float64)
    with pytest.raises(m.MessageError, match="cannot read 4 bytes as a serialized Float32MultiArray"):
        m.deserialize(b"\x00\x01\x00\x03", Float32MultiArray, "observation")
