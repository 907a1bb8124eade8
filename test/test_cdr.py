"""The pure-Python UInt8MultiArray reader against rclpy's own deserializer, and on bad bytes."""

from __future__ import annotations

import array
import struct
import time

import pytest

pytest.importorskip("rclpy")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from std_msgs.msg import MultiArrayDimension, UInt8MultiArray  # noqa: E402

from opolo_ros.ros.cdr import CdrError, read_uint8_multiarray  # noqa: E402

UINT32 = st.integers(0, 2**32 - 1)
LABELS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=9)  # C strings end at NUL


@st.composite
def arrays(draw) -> UInt8MultiArray:
    msg = UInt8MultiArray()
    msg.layout.dim = draw(st.lists(st.builds(MultiArrayDimension, label=LABELS, size=UINT32,
                                             stride=UINT32), max_size=5))
    msg.layout.data_offset = draw(UINT32)
    msg.data = draw(st.binary(max_size=300))
    return msg


@settings(max_examples=300, deadline=None)
@given(msg=arrays())
def test_reads_what_rclpy_reads(msg: UInt8MultiArray) -> None:
    raw = serialize_message(msg)
    assert read_uint8_multiarray(raw) == deserialize_message(raw, UInt8MultiArray) == msg


def big_endian(labels: list[str], data: bytes, offset: int = 0, kind: bytes = b"\x00\x00") -> bytes:
    """A UInt8MultiArray serialized big-endian (rclpy here writes little-endian only)."""
    out = bytearray(kind + b"\x00\x00") + struct.pack(">I", len(labels))
    for i, label in enumerate(labels):
        text = label.encode() + b"\x00"
        out += struct.pack(">I", len(text)) + text
        out += b"\x00" * (-(len(out) - 4) % 4) + struct.pack(">II", i + 1, 10 * (i + 1))
    return bytes(out + struct.pack(">II", offset, len(data)) + data)


@pytest.mark.parametrize("kind", [b"\x00\x00", b"\x00\x06"])
def test_reads_big_endian(kind: bytes) -> None:
    msg = read_uint8_multiarray(big_endian(["onnx", "version"], b"\x01\x02\x03", offset=7, kind=kind))
    assert [(d.label, d.size, d.stride) for d in msg.layout.dim] == [("onnx", 1, 10), ("version", 2, 20)]
    assert msg.layout.data_offset == 7 and bytes(msg.data) == b"\x01\x02\x03"


def test_trailing_padding_is_ignored() -> None:
    raw = serialize_message(UInt8MultiArray(data=b"abc"))
    assert bytes(read_uint8_multiarray(raw + b"\x00\x00\x00").data) == b"abc"


def _good() -> bytes:
    msg = UInt8MultiArray(data=b"abc")
    msg.layout.dim = [MultiArrayDimension(label="onnx", size=3, stride=3)]
    return serialize_message(msg)


GOOD = _good()  # header, count, label length 5 at 8, "onnx\0" at 12, size, stride, offset, length, data


@pytest.mark.parametrize("raw, says", [
    (b"", "shorter than the encapsulation header"),
    (b"\x00\x03" + GOOD[2:], "encapsulation 0x0003"),
    (GOOD[:-1], "data says 3 bytes, 2 are left"),
    (GOOD[:6], "cut short at dim count"),
    (b"\x00\x00\xe6\x61", "cut short at dim count"),  # options claim padding: rclpy reads past the end
    (GOOD[:4] + struct.pack("<I", 2**32 - 1), "dim count 4294967295 does not fit"),
    (GOOD[:8] + struct.pack("<I", 2**31) + GOOD[12:], "dim 0 label says 2147483648 bytes"),
    (GOOD[:16] + b"X" + GOOD[17:], "dim 0 label is not NUL-terminated"),
    (GOOD[:12] + b"\xff" + GOOD[13:], "dim 0 label is not UTF-8"),
])
def test_bad_bytes_are_refused_with_the_reason(raw: bytes, says: str) -> None:
    with pytest.raises(CdrError, match=says):
        read_uint8_multiarray(raw)


def test_a_huge_count_is_refused_before_any_loop() -> None:
    raw = GOOD[:4] + struct.pack("<I", 2**32 - 1) + b"\x00" * 2**20
    start = time.perf_counter()
    with pytest.raises(CdrError, match="does not fit"):
        read_uint8_multiarray(raw)
    assert time.perf_counter() - start < 0.05


def test_a_label_ends_at_its_first_nul_as_rclpy_reads_it() -> None:
    """A C++ publisher's std::string may hold a NUL; rclpy's C string stops there, so does the reader."""
    text = b"onnx\x00junk\x00"
    raw = (b"\x00\x01\x00\x00" + struct.pack("<I", 1) + struct.pack("<I", len(text)) + text
           + b"\x00\x00" + struct.pack("<IIII", 3, 3, 0, 0))
    assert [d.label for d in read_uint8_multiarray(raw).layout.dim] == ["onnx"]


def test_any_buffer_reads_like_bytes() -> None:
    spread = bytes(x for b in GOOD for x in (b, 0xEE))
    for buffer in (bytearray(GOOD), memoryview(GOOD), memoryview(spread)[::2]):  # the last: not contiguous
        assert read_uint8_multiarray(buffer) == read_uint8_multiarray(GOOD)
    assert isinstance(read_uint8_multiarray(GOOD).data, array.array)  # set in one copy, unchecked per element
