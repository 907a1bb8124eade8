"""A pure-Python reader for the serialized messages the nodes subscribe to, bounded by the bytes.

rclpy's own deserializer (native code) reads past the end of a short buffer whose CDR header claims
padding, and a garbled sequence length can take it anywhere: one 4-byte message on a topic crashed
a subscriber with a segfault (session 14, found by fuzzing). Every node therefore subscribes with
``raw=True`` (the bytes as they came over DDS) and reads them here. Each length is bounded by the
bytes left before anything is allocated or looped over, so any input ends in a :class:`CdrError`
or a record, never in native code reading past a buffer. It is also faster than building rclpy's
message objects: the arrays become numpy views of the received bytes (no element conversion).

The records duck-type the ROS messages as the decoders in :mod:`opolo_ros.ros.messages` read them
(``layout.dim[i].label/size/stride``, ``layout.data_offset``, ``data``; ``header.stamp``,
``name``, ``position``...), and name the type they stand for in ``msg_type``.

Layout (XCDR1 ``CDR_BE``/``CDR_LE`` and XCDR2 ``PLAIN_CDR2_BE``/``_LE`` as ROS's Fast CDR type
support writes and reads them: no DHEADERs, and XCDR2 aligns 8-byte values to 4): a 4-byte
encapsulation header, then, aligned from the end of the header, each field in order. A string is a
``uint32`` length (with the NUL), the bytes and the NUL; a sequence is a ``uint32`` count and the
elements. A label ends at its first NUL, as rclpy reads it.
Trailing bytes (the writer's padding) are ignored, as rclpy's own deserializer does.

Bounded in time too: a few kilobytes of empty layout dims or joint names would otherwise cost the
reading thread milliseconds (200,000 dims in 2.4 MB: 2.7 s), so more than :data:`MAX_DIMS` dims or
:data:`MAX_JOINTS` joint names are refused (the decoders accept at most 7 dims; robots have tens
of joints).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, Int64, Int64MultiArray, UInt8MultiArray

ENCAPSULATIONS = {b"\x00\x00": (">", 8), b"\x00\x01": ("<", 8),  # CDR_BE, CDR_LE
                  b"\x00\x06": (">", 4), b"\x00\x07": ("<", 4)}  # PLAIN_CDR2_BE, PLAIN_CDR2_LE
HEADER = 4
MIN_DIM_BYTES = 12  # a dim: an empty string's length word, size, stride
MAX_DIMS = 64
MAX_JOINTS = 4096
MULTIARRAY_DTYPES: dict[type, np.dtype] = {
    UInt8MultiArray: np.dtype(np.uint8), Float32MultiArray: np.dtype(np.float32),
    Float64MultiArray: np.dtype(np.float64), Int64MultiArray: np.dtype(np.int64)}


class CdrError(ValueError):
    """The bytes are not a serialized message of the expected type."""


class Dim(NamedTuple):
    label: str
    size: int
    stride: int


class Layout(NamedTuple):
    dim: list[Dim]  # a list, as in the message: latency.pop_sequence takes a tag off its end
    data_offset: int


class MultiArray(NamedTuple):
    """A std_msgs ``*MultiArray``, its data a read-only numpy array (native byte order)."""

    msg_type: type
    layout: Layout
    data: np.ndarray


class Stamp(NamedTuple):
    sec: int
    nanosec: int


class Header(NamedTuple):
    stamp: Stamp
    frame_id: str


class JointStateRecord(NamedTuple):
    """A ``sensor_msgs/JointState``; position, velocity and effort float64 arrays (maybe empty)."""

    msg_type: type
    header: Header
    name: list[str]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class _Encoding(NamedTuple):
    order: str  # struct / numpy byte order
    max_align: int
    u32: struct.Struct


_ENCODINGS = {kind: _Encoding(order, align, struct.Struct(order + "I"))
              for kind, (order, align) in ENCAPSULATIONS.items()}
_DTYPES = {(dtype, order): dtype.newbyteorder(order)
           for dtype in (*MULTIARRAY_DTYPES.values(), np.dtype(np.float64)) for order in "<>"}


class _Reader:
    """Reads fields in order. `what` names the field in errors; a ``{}`` in it is filled with `i`
    only when an error is raised (the reader is on the control path: no formatting per field)."""

    def __init__(self, body: memoryview, encoding: _Encoding) -> None:
        self.body, self.pos, self.end = body, 0, len(body)
        self.order, self.max_align, self.u32 = encoding

    def left(self) -> int:
        return self.end - self.pos

    def align(self, size: int) -> None:
        a = min(size, self.max_align)
        self.pos = (self.pos + a - 1) & ~(a - 1)

    def short(self, what: str, i: int) -> CdrError:
        return CdrError(f"cut short at {what.format(i)} (byte {HEADER + self.pos} of {HEADER + self.end})")

    def scalar(self, code: str, what: str) -> int:
        size = struct.calcsize(code)
        self.align(size)
        if self.end - self.pos < size:
            raise self.short(what, 0)
        value = struct.unpack_from(self.order + code, self.body, self.pos)[0]
        self.pos += size
        return value

    def uint32(self, what: str, i: int = 0) -> int:
        pos = (self.pos + 3) & ~3
        if self.end - pos < 4:
            self.pos = pos
            raise self.short(what, i)
        self.pos = pos + 4
        return self.u32.unpack_from(self.body, pos)[0]

    def count(self, what: str, min_bytes: int, most: int | None = None) -> int:
        """A sequence's element count, refused when that many elements cannot fit (or exceed `most`)."""
        n = self.uint32(what + " count")
        if n * min_bytes > self.end - self.pos:
            raise CdrError(f"{what} count {n} does not fit in {self.left()} bytes")
        if most is not None and n > most:
            raise CdrError(f"{what} count {n} is more than {most}")
        return n

    def take(self, n: int, what: str, i: int = 0) -> memoryview:
        if n > self.end - self.pos:
            raise CdrError(f"{what.format(i)} says {n} bytes, {self.left()} are left")
        out = self.body[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self, what: str, i: int = 0) -> str:
        n = self.uint32(what + " length", i)
        if n == 0:
            return ""
        raw = self.take(n, what, i)
        if raw[-1] != 0:
            raise CdrError(f"{what.format(i)} is not NUL-terminated")
        try:  # a C string: it ends at the first NUL, as rclpy reads it
            return bytes(raw).split(b"\0", 1)[0].decode("utf-8")
        except UnicodeDecodeError as err:
            raise CdrError(f"{what.format(i)} is not UTF-8 ({err.reason})") from None

    def array(self, dtype: np.dtype, what: str) -> np.ndarray:
        """A sequence of numbers as a read-only numpy array (a view when the byte order is native)."""
        n = self.count(what, dtype.itemsize)
        if n:
            self.align(dtype.itemsize)
        raw = self.take(n * dtype.itemsize, what)
        out = np.frombuffer(raw, dtype=_DTYPES[dtype, self.order])
        if not out.dtype.isnative:
            out = out.astype(dtype)
        out.flags.writeable = False
        return out


def _reader(data: bytes | bytearray | memoryview) -> _Reader:
    buf = memoryview(data)
    if buf.format != "B" or not buf.c_contiguous:
        buf = (buf if buf.c_contiguous else memoryview(buf.tobytes())).cast("B")
    if len(buf) < HEADER:
        raise CdrError(f"{len(buf)} bytes: shorter than the encapsulation header")
    encoding = _ENCODINGS.get(bytes(buf[:2]))
    if encoding is None:
        raise CdrError(f"encapsulation 0x{bytes(buf[:2]).hex()} is not CDR or plain CDR2")
    return _Reader(buf[HEADER:], encoding)


def read_multiarray(data: bytes | bytearray | memoryview, msg_type: type) -> MultiArray:
    """Serialized bytes of a std_msgs ``*MultiArray`` (`msg_type`) -> :class:`MultiArray`."""
    dtype = MULTIARRAY_DTYPES[msg_type]
    reader = _reader(data)
    count = reader.count("dim", MIN_DIM_BYTES, MAX_DIMS)
    dims = []
    for i in range(count):
        label = reader.string("dim {} label", i)
        dims.append(Dim(label, reader.uint32("dim {} size", i), reader.uint32("dim {} stride", i)))
    offset = reader.uint32("data_offset")
    return MultiArray(msg_type, Layout(dims, offset), reader.array(dtype, "data"))


def read_joint_state(data: bytes | bytearray | memoryview) -> JointStateRecord:
    """Serialized bytes of a ``sensor_msgs/JointState`` -> :class:`JointStateRecord`."""
    reader = _reader(data)
    stamp = Stamp(reader.scalar("i", "header.stamp.sec"), reader.uint32("header.stamp.nanosec"))
    header = Header(stamp, reader.string("header.frame_id"))
    names = [reader.string("name {}", i) for i in range(reader.count("name", 4, MAX_JOINTS))]
    f64 = np.dtype(np.float64)
    return JointStateRecord(JointState, header, names, *(reader.array(f64, field) for field in
                                                       ("position", "velocity", "effort")))


def read_int64(data: bytes | bytearray | memoryview) -> Int64:
    """Serialized bytes of a ``std_msgs/Int64`` -> the message."""
    return Int64(data=_reader(data).scalar("q", "data"))


def read(data: bytes | bytearray | memoryview, msg_type: type) -> Any:
    """Serialized bytes -> the record (or message) for `msg_type`; :class:`CdrError` if they are not
    one. The types: the std_msgs multi-arrays of :data:`MULTIARRAY_DTYPES`, JointState, Int64."""
    if msg_type in MULTIARRAY_DTYPES:
        return read_multiarray(data, msg_type)
    if msg_type is JointState:
        return read_joint_state(data)
    if msg_type is Int64:
        return read_int64(data)
    raise TypeError(f"no serialized reader for {msg_type.__name__}")
