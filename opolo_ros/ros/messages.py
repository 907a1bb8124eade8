"""Encode/decode between numpy data and the standard ROS messages of the topic contract.

Only ``std_msgs`` and ``sensor_msgs`` are used, so no interface package has to be built and any ROS
tool (``ros2 topic echo``, ``ros2 bag``, Foxglove) can read the topics. The meaning of each array
lives in ``MultiArrayLayout``; this docstring is its specification. Arrays are copied as whole
buffers (``array.array(typecode, x.tobytes())`` one way, ``numpy.frombuffer`` the other), never
element by element, so a multi-megabyte policy decodes in about a millisecond.

Conventions shared by every multi-array message below:

- *Shape dims* come first and follow the ``MultiArrayLayout`` rule (``stride`` = product of the sizes
  of this dim and all later shape dims), so a generic reader sees the correct matrix.
- *Metadata dims* follow the shape dims. They carry one unsigned 32-bit integer each in ``size``,
  name it in ``label``, and have ``stride == 0``, which marks them as "not an axis".
- ``data_offset`` elements at the front of ``data`` are a *header* (the standard meaning of
  ``data_offset`` is "padding before the array"), used for values that are not integers.

Layouts (``F`` is the number of fields per transition, ``F = 2 * obs_dim + act_dim + 3``):

=====================  ================================================================================
message                layout
=====================  ================================================================================
observation            ``Float32MultiArray``; dim ``[obs(obs_dim)]``; data = obs. Decoding also accepts
                       an empty ``dim`` list (most third-party publishers leave the layout empty).
action                 ``Float64MultiArray``; dim ``[action(act_dim)]``; data = action (ros2_control
                       ``forward_command_controller`` reads only ``data``). Empty ``dim`` accepted.
replay batch           ``Float32MultiArray``; shape dims ``[transitions(N), fields(F)]``; metadata
                       dims ``obs_dim``, ``act_dim``, ``seq`` (per-source sequence number of the
                       batch), ``source`` (publisher id, see :func:`source_id`); data = N rows of
                       ``[obs | action | next_obs | reward | terminated | truncated]``, the flags
                       0.0/1.0. Reward is the environment reward (monitoring and TD3 only). A
                       *void* step (the simulation diverged: the step happened and ended the
                       episode, but its s' is meaningless) has ``terminated = -1.0``,
                       ``truncated = 1.0``: consumers count it, so every node's step count stays
                       the environment's, and never store it as a transition.
demonstration          ``Float32MultiArray``; shape dims ``[steps(T+1), obs(obs_dim)]``; metadata dim
                       ``episode`` (episode index); ``data_offset = 1``, ``data[0]`` = episode return
                       (float32, NaN when unknown); then the T+1 observations row-major. State-only:
                       no actions.
policy                 ``UInt8MultiArray``; shape dim ``[onnx(n_bytes)]``; metadata dim ``version``;
                       data = the ONNX model bytes.
learner progress       ``Int64MultiArray``; ``data_offset = 2``, header ``[gradient_steps,
                       transitions]`` (transitions consumed from all sources); shape dims
                       ``[sources(K), ack(4)]``, one row per replay source: ``[source, seq,
                       transitions, received]`` = the newest batch ``seq`` consumed from that
                       source, how many transitions it has delivered, and the newest ``seq``
                       received from it with every one before it (queued, not consumed yet: a
                       bridge need not send those again). K may be 0. Rows of 3 (no received
                       column) are read too.
joint states           ``sensor_msgs/JointState``; turned into an observation by an
                       :class:`ObservationSpec` (joint order and fields of the policy).
=====================  ================================================================================

Decoders validate type, layout, lengths and finiteness and raise :class:`MessageError` (a
``ValueError``) with a message that says what was wrong, so a subscription callback can catch it,
log the rejection and keep running. No other exception escapes a decoder for any well-typed message.
Encoders raise ``ValueError`` for bad input: that is a bug in the publishing node, not bad data.
"""

from __future__ import annotations

import array
import math
import socket
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import (
    Float32MultiArray,
    Float64MultiArray,
    Int64MultiArray,
    MultiArrayDimension,
    UInt8MultiArray,
)

from opolo_ros.data.bags import EPISODE_START_LABEL as EPISODE_START_LABEL  # a trailing stride-0 dim
from opolo_ros.data.batches import VOID as VOID  # the batch types, re-exported with their codecs
from opolo_ros.data.batches import ReplayBatch as ReplayBatch
from opolo_ros.data.batches import SourceAck as SourceAck
from opolo_ros.data.batches import replay_fields as replay_fields
from opolo_ros.data.demos import MAX_TRAINING_ABS
from opolo_ros.errors import counted
from opolo_ros.ros import cdr

UINT32_MAX = 2**32 - 1
OBS_LABEL = "obs"
ACTION_LABEL = "action"
TRANSITIONS_LABEL = "transitions"
FIELDS_LABEL = "fields"
OBS_DIM_LABEL = "obs_dim"
ACT_DIM_LABEL = "act_dim"
SEQ_LABEL = "seq"
SOURCE_LABEL = "source"
STEPS_LABEL = "steps"
EPISODE_LABEL = "episode"
ONNX_LABEL = "onnx"
VERSION_LABEL = "version"
SOURCES_LABEL = "sources"
ACK_LABEL = "ack"
ACK_WIDTH = 4  # [source, seq, transitions, received seq]
JOINT_FIELDS = ("position", "velocity", "effort")


class MessageError(ValueError):
    """A received message does not follow the documented layout; reject it, do not crash."""


# --------------------------------------------------------------------------------------- helpers

def _uint32(name: str, value: int) -> int:
    value = int(value)
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"{name} must be in [0, {UINT32_MAX}], got {value}")
    return value


def _dim(label: str, size: int, stride: int) -> MultiArrayDimension:
    return MultiArrayDimension(label=label, size=_uint32(label, size), stride=_uint32(label, stride))


def _meta(label: str, value: int) -> MultiArrayDimension:
    return _dim(label, value, 0)


def _f32_buffer(x: np.ndarray) -> array.array:
    return array.array("f", np.ascontiguousarray(x, dtype=np.float32).tobytes())


def _finite(name: str, x: np.ndarray) -> np.ndarray:
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf (or a value beyond float32 range)")
    return x


def _vector(name: str, x: np.ndarray | Sequence[float], dtype: type) -> np.ndarray:
    with np.errstate(over="ignore"):
        out = np.asarray(x, dtype=dtype)
    if out.ndim != 1 or out.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {out.shape}")
    return _finite(name, out)


def _check_type(msg: object, cls: type, what: str) -> None:
    """`msg` is a `cls`, or a record of one read from serialized bytes (:func:`deserialize`)."""
    got = getattr(msg, "msg_type", type(msg))
    if got is not cls:
        raise MessageError(f"{what}: expected {cls.__module__.split('.')[0]}/{cls.__name__}, "
                           f"got {got.__name__}")


def deserialize(data: bytes | bytearray | memoryview, cls: type, what: str) -> Any:
    """Bytes from a subscription with ``raw=True`` -> a record of `cls` that this module's decoders
    take, read by :mod:`opolo_ros.ros.cdr` (pure Python, every length bounded by the bytes there are:
    no native deserializer runs on bytes from the network). :class:`MessageError` if they are not."""
    try:
        return cdr.read(data, cls)
    except cdr.CdrError as err:
        raise MessageError(f"{what}: cannot read {len(data)} bytes as a serialized {cls.__name__}: "
                           f"{err}") from None


def _dims(msg: object) -> list[tuple[str, int, int]]:
    return [(d.label, d.size, d.stride) for d in msg.layout.dim]


def _read(buffer: object, dtype: type, what: str) -> np.ndarray:
    """A message array field as a read-only numpy view (no copy); MessageError if not a buffer."""
    try:
        view = np.frombuffer(buffer, dtype=dtype)
    except (TypeError, ValueError) as err:
        raise MessageError(f"{what}: data is not a {np.dtype(dtype).name} buffer ({err})") from None
    view.flags.writeable = False
    return view


def _expect_dims(what: str, got: list[tuple[str, int, int]],
                 want: list[tuple[str, int | None, int | None]]) -> None:
    """Check labels (and sizes/strides where given) of a strictly specified layout."""
    got_labels = [g[0] for g in got]
    want_labels = [w[0] for w in want]
    if got_labels != want_labels:
        shown = repr(got_labels) if len(got_labels) <= 8 else \
            f"{len(got_labels)} dims, first {got_labels[:8]!r}"
        if len(shown) > 300:  # a message can carry megabytes of labels: the log gets a glimpse
            shown = shown[:300] + "..."
        raise MessageError(f"{what}: layout dims must be labelled {want_labels}, got {shown}")
    for (label, size, stride), (_, want_size, want_stride) in zip(got, want):
        if want_size is not None and size != want_size:
            raise MessageError(f"{what}: dim {label!r} has size {size}, expected {want_size}")
        if want_stride is not None and stride != want_stride:
            raise MessageError(f"{what}: dim {label!r} has stride {stride}, expected {want_stride}")


def _expect_offset(what: str, msg: object, offset: int) -> None:
    if msg.layout.data_offset != offset:
        raise MessageError(f"{what}: data_offset must be {offset}, got {msg.layout.data_offset}")


def _expect_len(what: str, data: np.ndarray, n: int) -> None:
    if data.size != n:
        raise MessageError(f"{what}: data has {data.size} elements, the layout says {n}")


def _expect_finite(what: str, x: np.ndarray, limit: float = math.inf) -> None:
    """NaN and inf refused; with `limit`, so is a finite value beyond +-limit (training data: one
    replay value of 1e30 overflowed the normalisers and turned every network into NaN)."""
    if not np.isfinite(x).all():
        bad = int(np.flatnonzero(~np.isfinite(x.reshape(-1)))[0])
        raise MessageError(f"{what}: non-finite value (NaN or inf) at flat index {bad}")
    if limit < math.inf and x.size and float(np.abs(x).max()) > limit:
        bad = int(np.flatnonzero(np.abs(x.reshape(-1)) > limit)[0])
        raise MessageError(f"{what}: value {x.reshape(-1)[bad]:.3g} at flat index {bad} is beyond "
                           f"+-{limit:g} (a diverged simulation?)")


def _expect_dim(what: str, name: str, got: int, expected: int | None) -> None:
    if expected is not None and got != expected:
        raise MessageError(f"{what}: {name} is {got}, this node expects {expected}")


def _flat_vector(msg: object, label: str, dtype: type, expected: int | None, what: str) -> np.ndarray:
    """Decode a 1-D multi-array: no dims, or one dim labelled `label` (or unlabelled)."""
    _expect_offset(what, msg, 0)
    data = _read(msg.data, dtype, what)
    dims = _dims(msg)
    if len(dims) > 1 or (dims and dims[0][0] not in (label, "")):
        raise MessageError(f"{what}: layout must be empty or one dim labelled {label!r}, "
                           f"got {[d[0] for d in dims]}")
    if dims:
        _expect_len(what, data, dims[0][1])
    if data.size == 0:
        raise MessageError(f"{what}: empty data")
    _expect_dim(what, label + " size", data.size, expected)
    _expect_finite(what, data)
    return data.copy()


# ----------------------------------------------------------------------------------- observation

def observation_to_msg(obs: np.ndarray | Sequence[float]) -> Float32MultiArray:
    """Observation vector [obs_dim] -> Float32MultiArray (dim ``obs``)."""
    x = _vector("observation", obs, np.float32)
    msg = Float32MultiArray()
    msg.layout.dim = [_dim(OBS_LABEL, x.size, x.size)]
    msg.data = _f32_buffer(x)
    return msg


def mark_episode_start(msg: Float32MultiArray, start: bool) -> None:
    """Give an observation message the trailing ``episode_start`` dim (`start`) or take it away:
    in-band, as a separate marker message would be lost to a keep-last-1 subscription behind the
    state that follows it at once."""
    dims = msg.layout.dim
    marked = bool(dims) and dims[-1].stride == 0 and dims[-1].label == EPISODE_START_LABEL
    if start and not marked:
        dims.append(MultiArrayDimension(label=EPISODE_START_LABEL, size=0, stride=0))
    elif marked and not start:
        dims.pop()


def pop_episode_start(msg: Float32MultiArray | Float64MultiArray) -> bool:
    """Remove a trailing ``episode_start`` dim from `msg`'s layout; whether there was one (False for
    what is no multi-array: the decoder that comes next rejects it)."""
    dims = getattr(getattr(msg, "layout", None), "dim", None)
    if dims is not None and len(dims) > 1 and dims[-1].stride == 0 and dims[-1].label == EPISODE_START_LABEL:
        dims.pop()
        return True
    return False


def make_observation_msg(obs_dim: int) -> Float32MultiArray:
    """A preallocated observation message (zeros) for :func:`fill_observation_msg`."""
    return observation_to_msg(np.zeros(obs_dim, dtype=np.float32))


def fill_observation_msg(msg: Float32MultiArray, obs: np.ndarray) -> Float32MultiArray:
    """Write `obs` into a message from :func:`make_observation_msg` in place (no allocation).

    The control-loop fast path: a publisher serialises the message synchronously in ``publish``,
    so the same message object can be refilled for the next step.
    """
    view = np.frombuffer(msg.data, dtype=np.float32)
    if np.shape(obs) != view.shape:
        raise ValueError(f"observation shape {np.shape(obs)} does not match message {view.shape}")
    with np.errstate(over="ignore"):
        view[:] = obs
    _finite("observation", view)
    return msg


def msg_to_observation(msg: Float32MultiArray | Float64MultiArray, obs_dim: int | None = None) -> np.ndarray:
    """Float32MultiArray, or Float64MultiArray (an array state in ros2_control's type) -> float32
    [obs_dim]; checks `obs_dim` when given."""
    if getattr(msg, "msg_type", type(msg)) is Float64MultiArray:
        values = _flat_vector(msg, OBS_LABEL, np.float64, obs_dim, "observation")
        with np.errstate(over="ignore"):
            out = values.astype(np.float32)
        if not np.isfinite(out).all():
            raise MessageError("observation: a value exceeds the float32 range")
        return out
    _check_type(msg, Float32MultiArray, "observation")
    return _flat_vector(msg, OBS_LABEL, np.float32, obs_dim, "observation")


# ---------------------------------------------------------------------------------------- action

def action_to_msg(action: np.ndarray | Sequence[float]) -> Float64MultiArray:
    """Action vector [act_dim] -> Float64MultiArray (dim ``action``), the ros2_control command type."""
    x = _vector("action", action, np.float64)
    msg = Float64MultiArray()
    msg.layout.dim = [_dim(ACTION_LABEL, x.size, x.size)]
    msg.data = array.array("d", x.tobytes())
    return msg


def msg_to_action(msg: Float64MultiArray, act_dim: int | None = None) -> np.ndarray:
    """Float64MultiArray -> float64 [act_dim]; checks `act_dim` when given."""
    _check_type(msg, Float64MultiArray, "action")
    return _flat_vector(msg, ACTION_LABEL, np.float64, act_dim, "action")


# ---------------------------------------------------------------------------------------- replay

def source_id(name: str) -> int:
    """A stable uint32 id for a replay publisher (CRC-32 of e.g. its fully qualified node name)."""
    return zlib.crc32(name.encode("utf-8"))


def bridge_source_id(node_name: str) -> int:
    """A sim bridge's source id: of its host and fully qualified node name, so a bridge restarted
    there goes on with its acknowledgements, while bridges of one name on two hosts (the default
    ``/sim_bridge`` on each) are two sources; with the name alone they were one, and the learner
    dropped one bridge's batches as the other's duplicates, yet acknowledged them."""
    return source_id(f"{socket.gethostname()}:{node_name}")


def replay_to_msg(obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray, reward: np.ndarray,
                  terminated: np.ndarray, truncated: np.ndarray, *, seq: int,
                  source: int, void: np.ndarray | None = None) -> Float32MultiArray:
    """A batch of N transitions -> one Float32MultiArray (layout in the module docstring).

    `void` (bool [N], optional) marks void steps; their `terminated`/`truncated` are ignored.
    """
    obs = np.asarray(obs, dtype=np.float32)
    if obs.ndim != 2 or obs.shape[0] == 0 or obs.shape[1] == 0:
        raise ValueError(f"replay obs must be [N, obs_dim] with N, obs_dim >= 1, got {obs.shape}")
    n, obs_dim = obs.shape
    action = np.asarray(action, dtype=np.float32)
    if action.ndim != 2 or action.shape[0] != n or action.shape[1] == 0:
        raise ValueError(f"replay action must be [{n}, act_dim >= 1], got {action.shape}")
    act_dim = action.shape[1]
    columns = [("obs", obs, obs_dim), ("action", action, act_dim),
               ("next_obs", next_obs, obs_dim), ("reward", reward, None),
               ("terminated", terminated, None), ("truncated", truncated, None)]
    f = replay_fields(obs_dim, act_dim)
    rows = np.empty((n, f), dtype=np.float32)
    col = 0
    for name, values, width in columns:
        values = np.asarray(values)
        shape = (n,) if width is None else (n, width)
        if values.shape != shape:
            raise ValueError(f"replay {name} must have shape {shape}, got {values.shape}")
        if name in ("terminated", "truncated") and not ((values == 0) | (values == 1)).all():
            raise ValueError(f"replay {name} must be boolean or 0/1")
        with np.errstate(over="ignore"):
            rows[:, col:col + (width or 1)] = values.reshape(n, width or 1)
        col += width or 1
    if void is not None:
        void = np.asarray(void, dtype=bool)
        if void.shape != (n,):
            raise ValueError(f"replay void must have shape {(n,)}, got {void.shape}")
        rows[void, -2:] = (VOID, 1.0)
    _finite("replay batch", rows)
    msg = Float32MultiArray()
    msg.layout.dim = [
        _dim(TRANSITIONS_LABEL, n, n * f), _dim(FIELDS_LABEL, f, f),
        _meta(OBS_DIM_LABEL, obs_dim), _meta(ACT_DIM_LABEL, act_dim),
        _meta(SEQ_LABEL, seq), _meta(SOURCE_LABEL, source),
    ]
    msg.data = _f32_buffer(rows)
    return msg


def msg_to_replay(msg: Float32MultiArray, obs_dim: int | None = None,
                  act_dim: int | None = None) -> ReplayBatch:
    """Float32MultiArray -> :class:`ReplayBatch`; checks `obs_dim`/`act_dim` when given."""
    what = "replay batch"
    _check_type(msg, Float32MultiArray, what)
    _expect_offset(what, msg, 0)
    dims = _dims(msg)
    _expect_dims(what, dims, [(TRANSITIONS_LABEL, None, None), (FIELDS_LABEL, None, None),
                              (OBS_DIM_LABEL, None, 0), (ACT_DIM_LABEL, None, 0),
                              (SEQ_LABEL, None, 0), (SOURCE_LABEL, None, 0)])
    n, f, o, a = (d[1] for d in dims[:4])
    if n == 0 or o == 0 or a == 0:
        raise MessageError(f"{what}: transitions, obs_dim and act_dim must be >= 1, "
                           f"got {n}, {o}, {a}")
    if f != replay_fields(o, a):
        raise MessageError(f"{what}: fields is {f}, but obs_dim={o}, act_dim={a} "
                           f"need {replay_fields(o, a)}")
    _expect_dims(what, dims[:2], [(TRANSITIONS_LABEL, n, n * f), (FIELDS_LABEL, f, f)])
    _expect_dim(what, "obs_dim", o, obs_dim)
    _expect_dim(what, "act_dim", a, act_dim)
    data = _read(msg.data, np.float32, what)
    _expect_len(what, data, n * f)
    _expect_finite(what, data, MAX_TRAINING_ABS)
    rows = data.reshape(n, f)
    flags = rows[:, -2:]
    void = (flags[:, 0] == VOID) & (flags[:, 1] == 1.0)
    if not (((flags == 0.0) | (flags == 1.0)).all(axis=1) | void).all():
        raise MessageError(f"{what}: terminated/truncated must be 0.0 or 1.0 "
                           f"(or -1.0/1.0 for a void step)")
    return ReplayBatch.from_rows(rows, o, seq=dims[4][1], source=dims[5][1])


# --------------------------------------------------------------------------------- demonstration

@dataclass(frozen=True, eq=False)
class Demonstration:
    """One state-only expert episode: T+1 observations (T transitions), no actions."""

    obs: np.ndarray  # float32 [T+1, obs_dim]
    episode_return: float  # NaN when unknown
    episode: int


def demonstration_to_msg(obs: np.ndarray, episode_return: float = float("nan"),
                         episode: int = 0) -> Float32MultiArray:
    """Episode observations [T+1, obs_dim] (T >= 1) -> Float32MultiArray (see module docstring)."""
    with np.errstate(over="ignore"):
        x = np.asarray(obs, dtype=np.float32)
        ret = np.float32(episode_return)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] == 0:
        raise ValueError(f"demonstration obs must be [T+1 >= 2, obs_dim >= 1], got {x.shape}")
    _finite("demonstration obs", x)
    if np.isinf(ret):
        raise ValueError(f"episode return must be finite in float32, or NaN (unknown); "
                         f"got {episode_return}")
    steps, obs_dim = x.shape
    msg = Float32MultiArray()
    msg.layout.dim = [_dim(STEPS_LABEL, steps, steps * obs_dim), _dim(OBS_LABEL, obs_dim, obs_dim),
                      _meta(EPISODE_LABEL, episode)]
    msg.layout.data_offset = 1
    buf = np.empty(1 + x.size, dtype=np.float32)
    buf[0] = ret
    buf[1:] = x.reshape(-1)
    msg.data = _f32_buffer(buf)
    return msg


def msg_to_demonstration(msg: Float32MultiArray, obs_dim: int | None = None) -> Demonstration:
    """Float32MultiArray -> :class:`Demonstration`; checks `obs_dim` when given."""
    what = "demonstration"
    _check_type(msg, Float32MultiArray, what)
    _expect_offset(what, msg, 1)
    dims = _dims(msg)
    _expect_dims(what, dims, [(STEPS_LABEL, None, None), (OBS_LABEL, None, None),
                              (EPISODE_LABEL, None, 0)])
    steps, o = dims[0][1], dims[1][1]
    if steps < 2 or o == 0:
        raise MessageError(f"{what}: needs steps >= 2 and obs >= 1, got {steps}, {o}")
    _expect_dims(what, dims[:2], [(STEPS_LABEL, steps, steps * o), (OBS_LABEL, o, o)])
    _expect_dim(what, "obs_dim", o, obs_dim)
    data = _read(msg.data, np.float32, what)
    _expect_len(what, data, 1 + steps * o)
    if np.isinf(data[0]):
        raise MessageError(f"{what}: episode return is inf (NaN means unknown, inf is invalid)")
    _expect_finite(what, data[1:], MAX_TRAINING_ABS)
    return Demonstration(obs=data[1:].reshape(steps, o).copy(), episode_return=float(data[0]),
                         episode=dims[2][1])


# ---------------------------------------------------------------------------------------- policy

class PolicyMessage(NamedTuple):
    model: bytes  # the ONNX file's bytes
    version: int


def policy_to_msg(model: bytes | bytearray | memoryview, version: int) -> UInt8MultiArray:
    """ONNX model bytes + version -> UInt8MultiArray (dim ``onnx``, metadata dim ``version``)."""
    payload = bytes(model)
    if not payload:
        raise ValueError("policy model bytes are empty")
    msg = UInt8MultiArray()
    msg.layout.dim = [_dim(ONNX_LABEL, len(payload), len(payload)), _meta(VERSION_LABEL, version)]
    msg.data = array.array("B", payload)
    return msg


def msg_to_policy(msg: UInt8MultiArray) -> PolicyMessage:
    """UInt8MultiArray -> :class:`PolicyMessage` (one buffer copy, ~1 ms for a few MB)."""
    what = "policy"
    _check_type(msg, UInt8MultiArray, what)
    _expect_offset(what, msg, 0)
    dims = _dims(msg)
    _expect_dims(what, dims, [(ONNX_LABEL, None, None), (VERSION_LABEL, None, 0)])
    size = dims[0][1]
    if size == 0:
        raise MessageError(f"{what}: empty model")
    _expect_dims(what, dims[:1], [(ONNX_LABEL, size, size)])
    data = _read(msg.data, np.uint8, what)
    _expect_len(what, data, size)
    return PolicyMessage(model=data.tobytes(), version=dims[1][1])


def serialized_to_policy(data: bytes) -> PolicyMessage:
    """A policy message as taken from the topic serialized: read by :func:`deserialize` wherever
    the caller likes (the actor: in its loader thread, not on the executor thread)."""
    return msg_to_policy(deserialize(data, UInt8MultiArray, "policy"))


# ------------------------------------------------------------------------------ learner progress

@dataclass(frozen=True)
class LearnerProgress:
    gradient_steps: int
    transitions: int  # consumed from all sources
    acks: dict[int, SourceAck] = field(default_factory=dict)  # source id -> ack
    # source id -> newest seq received with every one before it (queued, maybe not consumed yet);
    # a source without an entry: its ack's seq
    received: dict[int, int] = field(default_factory=dict)


def progress_to_msg(progress: LearnerProgress) -> Int64MultiArray:
    """:class:`LearnerProgress` -> Int64MultiArray (header + [sources, ack] rows)."""
    rows = [(_uint32("source", s), _uint32("seq", ack.seq), int(ack.transitions),
             _uint32("received seq", max(progress.received.get(s, ack.seq), ack.seq)))
            for s, ack in sorted(progress.acks.items())]
    values = np.array([progress.gradient_steps, progress.transitions]
                      + [v for row in rows for v in row], dtype=np.int64)
    if (values < 0).any():
        raise ValueError(f"learner progress counts must be non-negative, got {progress}")
    k = len(rows)
    msg = Int64MultiArray()
    msg.layout.data_offset = 2
    msg.layout.dim = [_dim(SOURCES_LABEL, k, ACK_WIDTH * k), _dim(ACK_LABEL, ACK_WIDTH, ACK_WIDTH)]
    msg.data = array.array("q", values.tobytes())
    return msg


def msg_to_progress(msg: Int64MultiArray) -> LearnerProgress:
    """Int64MultiArray -> :class:`LearnerProgress`. Rows of 3 (a learner before the received
    column) are read too: received is then the ack's seq."""
    what = "learner progress"
    _check_type(msg, Int64MultiArray, what)
    _expect_offset(what, msg, 2)
    dims = _dims(msg)
    _expect_dims(what, dims, [(SOURCES_LABEL, None, None), (ACK_LABEL, None, None)])
    k, width = dims[0][1], dims[1][1]
    if width not in (3, ACK_WIDTH):
        raise MessageError(f"{what}: dim 'ack' has size {width}, expected 3 or {ACK_WIDTH}")
    _expect_dims(what, dims, [(SOURCES_LABEL, k, width * k), (ACK_LABEL, width, width)])
    data = _read(msg.data, np.int64, what)
    _expect_len(what, data, 2 + width * k)
    if (data < 0).any():
        raise MessageError(f"{what}: negative count")
    rows = data[2:].reshape(k, width)
    if (rows[:, :2] > UINT32_MAX).any() or (rows[:, 3:] > UINT32_MAX).any():
        raise MessageError(f"{what}: source id or seq exceeds uint32")
    if width == ACK_WIDTH and (rows[:, 3] < rows[:, 1]).any():
        raise MessageError(f"{what}: a received seq below the acknowledged one")
    table = rows.tolist()
    acks = {row[0]: SourceAck(row[1], row[2]) for row in table}
    if len(acks) != k:
        raise MessageError(f"{what}: duplicate source ids")
    received = {row[0]: row[3] for row in table if width == ACK_WIDTH and row[3] > row[1]}
    return LearnerProgress(gradient_steps=int(data[0]), transitions=int(data[1]), acks=acks,
                           received=received)


def replay_origin(msg: Float32MultiArray | bytes) -> tuple[int, int]:
    """``(source, seq)`` of a replay batch (or its serialized bytes) from its layout alone, without
    checking its data (:func:`msg_to_replay` does): what a learner has received, told as it comes."""
    what = "replay batch"
    if isinstance(msg, (bytes, bytearray, memoryview)):
        msg = deserialize(msg, Float32MultiArray, what)
    _check_type(msg, Float32MultiArray, what)
    dims = _dims(msg)
    if len(dims) != 6 or [d[0] for d in dims[4:]] != [SEQ_LABEL, SOURCE_LABEL]:
        raise MessageError(f"{what}: no seq and source dims")
    return dims[5][1], dims[4][1]


# ---------------------------------------------------------------------------------- joint states

def joint_state_msg(names: Sequence[str], positions: np.ndarray | Sequence[float] | None = None,
                    velocities: np.ndarray | Sequence[float] | None = None,
                    efforts: np.ndarray | Sequence[float] | None = None, *,
                    stamp: Time | None = None, frame_id: str = "") -> JointState:
    """Names + per-joint arrays (each optional, as in sensor_msgs) -> JointState.

    Pass `stamp` from the node's clock (``node.get_clock().now().to_msg()``), so that sim time
    is honoured when ``use_sim_time`` is set.
    """
    msg = JointState()
    msg.name = [str(n) for n in names]
    if len(set(msg.name)) != len(msg.name):
        raise ValueError(f"duplicate joint names: {msg.name}")
    for attr, values in (("position", positions), ("velocity", velocities), ("effort", efforts)):
        if values is None:
            continue
        x = np.asarray(values, dtype=np.float64)
        if x.shape != (len(msg.name),):
            raise ValueError(f"joint {attr} must have shape ({len(msg.name)},), got {x.shape}")
        setattr(msg, attr, array.array("d", x.tobytes()))
    if stamp is not None:
        msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    return msg


@dataclass(frozen=True, eq=False)
class ObservationSpec:
    """How a JointState becomes a policy observation.

    obs = concat over `fields` of [field of joints[0], ..., field of joints[-1]], e.g. positions of
    all joints, then velocities (MuJoCo's qpos-then-qvel order); then ``(obs - offset) * scale``
    element-wise (offset and scale have length ``obs_dim``; None means 0 and 1).
    """

    joints: tuple[str, ...]
    fields: tuple[str, ...] = ("position", "velocity")
    offset: np.ndarray | None = None
    scale: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "joints", tuple(self.joints))
        object.__setattr__(self, "fields", tuple(self.fields))
        if not self.joints or len(set(self.joints)) != len(self.joints):
            raise ValueError(f"spec joints must be non-empty and unique, got {self.joints}")
        if not self.fields or len(set(self.fields)) != len(self.fields) or \
                not set(self.fields) <= set(JOINT_FIELDS):
            raise ValueError(f"spec fields must be unique names from {JOINT_FIELDS}, got {self.fields}")
        for name in ("offset", "scale"):
            value = getattr(self, name)
            if value is not None:
                x = _vector(f"spec {name}", value, np.float64)
                if x.shape != (self.obs_dim,):
                    raise ValueError(f"spec {name} must have length {self.obs_dim}, got {x.size}")
                if name == "scale" and not x.all():  # the policy would never see that value move
                    raise ValueError(f"spec scale has a 0 (at {np.flatnonzero(x == 0).tolist()}): the "
                                     "value there would always be 0; 1 leaves a value as it is")
                object.__setattr__(self, name, x)

    @property
    def obs_dim(self) -> int:
        return len(self.joints) * len(self.fields)

    def describe_size(self) -> str:
        """Where the size comes from, e.g. '4 values (2 joints x 2 fields: position, velocity)'."""
        return (f"{counted(self.obs_dim, 'value')} ({counted(len(self.joints), 'joint')} x "
                f"{counted(len(self.fields), 'field')}: {', '.join(self.fields)})")


def joint_state_to_obs(msg: JointState, spec: ObservationSpec, obs_dim: int | None = None) -> np.ndarray:
    """JointState -> float32 [spec.obs_dim] in the policy's joint order (message order is free).

    With `obs_dim` (the policy's input size) a spec of another size raises :class:`MessageError`
    before the message is read: the observation must be dropped, never given to the model.
    """
    what = "joint state"
    _check_type(msg, JointState, what)
    if obs_dim is not None and spec.obs_dim != obs_dim:
        raise MessageError(f"{what}: the observation spec gives {spec.describe_size()}, "
                           f"this node expects {obs_dim}")
    names = list(msg.name)
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise MessageError(f"{what}: duplicate joint names")
    missing = [j for j in spec.joints if j not in index]
    if missing:
        raise MessageError(f"{what}: missing joints {missing} (message has {names})")
    rows = np.fromiter((index[j] for j in spec.joints), dtype=np.intp, count=len(spec.joints))
    parts = []
    for name in spec.fields:
        values = _read(getattr(msg, name), np.float64, f"{what} {name}")
        if values.size != len(names):
            raise MessageError(f"{what}: {values.size} {name} values for {len(names)} joints")
        parts.append(values[rows])
    obs = np.concatenate(parts)
    if not np.isfinite(obs).all():  # named by joint and field (a flat index meant nothing to a user)
        k = int(np.flatnonzero(~np.isfinite(obs))[0])
        field, joint = spec.fields[k // len(spec.joints)], spec.joints[k % len(spec.joints)]
        raise MessageError(f"{what}: non-finite {field} (NaN or inf) of joint {joint}")
    if spec.offset is not None:
        obs = obs - spec.offset
    if spec.scale is not None:
        obs = obs * spec.scale
    with np.errstate(over="ignore"):
        out = obs.astype(np.float32)
    if not np.isfinite(out).all():
        raise MessageError(f"{what}: observation exceeds the float32 range after offset/scale")
    return out
