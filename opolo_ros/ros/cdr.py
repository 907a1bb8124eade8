"""A pure-Python reader for one serialized message type: ``std_msgs/UInt8MultiArray`` in CDR.

The actor takes policies from a raw subscription (``raw=True``: the bytes as they came over DDS)
and decodes them off the executor thread. Those bytes are whoever published them; this reader
bounds every length by the bytes left before it allocates or loops, so any input ends in a
:class:`CdrError` or a message, never in native code reading past a buffer. It also skips the
per-element conversion rclpy does (the model's bytes are one slice, set as an ``array.array``,
which the message's setter takes without checking each element, even with
``ROS_PYTHON_CHECK_FIELDS=1``). A label ends at its first NUL, as rclpy reads it.

Layout (XCDR1 ``CDR_BE``/``CDR_LE``, and XCDR2 ``PLAIN_CDR2`` whose layout is the same for a type
without 8-byte members): a 4-byte encapsulation header, then, aligned from the end of the header,
``uint32`` dim count; per dim a string (``uint32`` length with the NUL, the bytes, the NUL) and
``uint32`` size and stride; ``uint32`` data_offset; ``uint32`` data length and the bytes.
Trailing bytes (the writer's padding) are ignored, as rclpy's own deserializer does.
"""

from __future__ import annotations

import array
import struct

from std_msgs.msg import MultiArrayDimension, UInt8MultiArray

ENCAPSULATIONS = {b"\x00\x00": ">", b"\x00\x01": "<",  # CDR_BE, CDR_LE
                  b"\x00\x06": ">", b"\x00\x07": "<"}  # PLAIN_CDR2_BE, PLAIN_CDR2_LE
HEADER = 4
MIN_DIM_BYTES = 12  # a dim: an empty string's length word, size, stride


class CdrError(ValueError):
    """The bytes are not a serialized UInt8MultiArray."""


class _Reader:
    def __init__(self, body: memoryview, order: str) -> None:
        self.body, self.pos = body, 0
        self.u32 = struct.Struct(order + "I")

    def left(self) -> int:
        return len(self.body) - self.pos

    def uint32(self, what: str) -> int:
        self.pos = (self.pos + 3) & ~3
        if self.left() < 4:
            raise CdrError(f"cut short at {what} (byte {HEADER + self.pos} of {HEADER + len(self.body)})")
        value = self.u32.unpack_from(self.body, self.pos)[0]
        self.pos += 4
        return value

    def take(self, n: int, what: str) -> memoryview:
        if n > self.left():
            raise CdrError(f"{what} says {n} bytes, {self.left()} are left")
        out = self.body[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self, what: str) -> str:
        n = self.uint32(f"{what} length")
        if n == 0:
            return ""
        raw = self.take(n, what)
        if raw[-1] != 0:
            raise CdrError(f"{what} is not NUL-terminated")
        try:  # a C string: it ends at the first NUL, as rclpy reads it
            return bytes(raw).split(b"\0", 1)[0].decode("utf-8")
        except UnicodeDecodeError as err:
            raise CdrError(f"{what} is not UTF-8 ({err.reason})") from None


def read_uint8_multiarray(data: bytes | bytearray | memoryview) -> UInt8MultiArray:
    """Serialized bytes -> ``UInt8MultiArray``; :class:`CdrError` for anything else."""
    buf = memoryview(data)
    buf = (buf if buf.c_contiguous else memoryview(buf.tobytes())).cast("B")
    if len(buf) < HEADER:
        raise CdrError(f"{len(buf)} bytes: shorter than the encapsulation header")
    order = ENCAPSULATIONS.get(bytes(buf[:2]))
    if order is None:
        raise CdrError(f"encapsulation 0x{bytes(buf[:2]).hex()} is not CDR or plain CDR2")
    reader = _Reader(buf[HEADER:], order)
    count = reader.uint32("dim count")
    if count * MIN_DIM_BYTES > reader.left():
        raise CdrError(f"dim count {count} does not fit in {reader.left()} bytes")
    dims = []
    for i in range(count):
        label = reader.string(f"dim {i} label")
        size, stride = reader.uint32(f"dim {i} size"), reader.uint32(f"dim {i} stride")
        dims.append(MultiArrayDimension(label=label, size=size, stride=stride))
    msg = UInt8MultiArray()
    msg.layout.dim = dims
    msg.layout.data_offset = reader.uint32("data_offset")
    data = array.array("B")
    data.frombytes(reader.take(reader.uint32("data length"), "data"))  # one copy, no per-element check
    msg.data = data
    return msg
