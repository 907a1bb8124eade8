"""State-only demonstrations in rosbag2 bags (MCAP or sqlite3), written and read without ROS.

Uses the `rosbags` library and its built-in type store (ROS 2 Kilted definitions of ``std_msgs``,
``sensor_msgs``, ``geometry_msgs``, ...), so nothing here imports rclpy: a bag can be produced and
consumed on a machine without ROS, and ``ros2 bag info|play`` works on it where ROS is installed.

Writing (:func:`write_demonstrations`)
    One ``std_msgs/msg/Float32MultiArray`` per episode on ``/opolo/demonstrations``, in the
    *demonstration* layout of :mod:`opolo_ros.ros.messages` (shape dims ``[steps(T+1), obs(obs_dim)]``,
    metadata dim ``episode`` with stride 0, ``data_offset = 1``, ``data[0]`` = episode return as
    float32, NaN when unknown, then the observations row-major). The topic is recorded with the
    contract's QoS (reliable, transient local, keep last 100), so ``ros2 bag play`` republishes it the
    way a learner that starts late expects. Timestamps start at the wall-clock time of writing and
    increase by 1 ms per episode. Bag-level facts go into the bag's own ``custom_data`` (rosbag2
    metadata.yaml, shown by ``ros2 bag info``): ``env_id``, ``obs_dim``, ``count``, ``returns``
    (JSON list, null for unknown), ``source``, ``format``, ``sha256`` (JSON list: the digest of
    each episode message's serialized bytes, checked when the bag is read: MCAP chunks as rosbags
    writes them carry no CRC, so a flipped bit would otherwise go unnoticed) and any caller
    metadata (non-strings as JSON).
    The returns are also inside every message, so a replayed topic carries them.

Reading (:func:`read_demonstrations`)
    Any rosbag2 bag: a bag folder (with ``metadata.yaml``, which must list each of its storage
    files once), a bare ``.mcap``/``.db3`` storage file,
    or a folder whose sub-folders are bags (read one after the other in name order, numbers by
    value: ``run_2`` before ``run_10``; episodes never span two bags; a sub-folder with storage
    files but no ``metadata.yaml``, or a storage file beside the bags, is an error, not skipped).
    The topic is chosen as: the given `topic`; else ``/opolo/demonstrations`` if present; else the
    only ``Float32MultiArray``/``Float64MultiArray``/``JointState`` topic.

    - Demonstration layout (dim labels ``steps, obs, episode``; ``Float32MultiArray`` as written,
      or ``Float64MultiArray``): one episode per message. The first message that holds data
      decides whether a topic holds episodes or a stream; the other kind on the same topic, or
      dims that begin ``steps, obs`` but are not exactly the layout's, are errors.
    - Observation streams, one observation per message: ``Float32MultiArray`` /
      ``Float64MultiArray`` (observation = ``data[data_offset:]``), ``sensor_msgs/JointState``
      (``fields`` of ``joints`` in the given order: all positions, then all velocities, ...; the
      message's own joint order is free; `joints` defaults to the first message's order, applied
      by name to every later message; duplicate joint names in a message are an error), or any
      type with `obs_field` (dotted attribute paths whose numeric values are concatenated, e.g.
      ``("pose.pose", "twist.twist")`` for ``nav_msgs/Odometry``).

      **Episode split rule.** A stream's bag timestamps must increase from message to message
      (equal or earlier ones are an error: a clock that restarted, two publishers, storage files
      out of order). It is cut into episodes (a) where the bag timestamps of two consecutive
      observations are more than `episode_gap_s` apart (default 0.5 s; None or inf disables),
      (b) at a *reset marker*, (c) before a multi-array whose last layout dim is labelled
      ``"episode_start"`` (the first state of an episode, as a sim_bridge with reset_markers marks
      its observations), and (d) at the end of each bag. A reset marker is a message that
      carries no observation: a multi-array with no data (after ``data_offset``; an offset past
      the data is an error) or with a layout dim labelled ``"reset"``; a JointState with no joint
      names and no values (values without names are an error) or with ``header.frame_id ==
      "reset"``; with `obs_field`, an empty selected value. Markers are not observations. Pass
      ``reset_marker=None`` to disable the label/frame_id rules (empty messages always separate:
      they cannot be observations). A publisher ends an episode with e.g.
      ``Float32MultiArray(layout=MultiArrayLayout(dim=[MultiArrayDimension(label="reset")]))``.
      An episode needs at least 2 observations (one transition); a single one is an error (usually
      a stream published slower than the gap), except first or last in a bag that holds more: a
      recording that began just before an episode ended, or stopped just after one began, has
      that one state of it, which is left out.

Every problem is a one-line :class:`BagError` (a ``ValueError``), or ``FileNotFoundError`` for a
missing path, naming the bag, topic and message where it applies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from opolo_ros.data.demos import Episode

DEMO_TOPIC = "/opolo/demonstrations"
F32_ARRAY = "std_msgs/msg/Float32MultiArray"
F64_ARRAY = "std_msgs/msg/Float64MultiArray"
JOINT_STATE = "sensor_msgs/msg/JointState"
STREAM_TYPES = (F32_ARRAY, F64_ARRAY, JOINT_STATE)
# Layout labels: the same strings as opolo_ros.ros.messages (which needs rclpy, so is not imported).
STEPS_LABEL = "steps"
OBS_LABEL = "obs"
EPISODE_LABEL = "episode"
RESET_LABEL = "reset"
EPISODE_START_LABEL = "episode_start"  # an observation that starts an episode (sim_bridge reset_markers)
DEFAULT_EPISODE_GAP_S = 0.5
F32_MAX = float(np.finfo(np.float32).max)
JOINT_FIELDS = ("position", "velocity", "effort")
STORAGES = ("mcap", "sqlite3")
FORMAT = "opolo_ros demonstration/1"
DIGEST_KEY = "sha256"  # custom_data: JSON list, SHA-256 of each episode message's serialized bytes
DIGEST_TOPIC_KEY = "sha256_topic"  # custom_data: the topic of those messages, when not DEMO_TOPIC
DEMONSTRATIONS_DEPTH = 100  # the contract's keep-last depth for /opolo/demonstrations
STORAGE_SUFFIXES = (".mcap", ".db3")
_STEP_NS = 1_000_000  # 1 ms between episode messages


class BagError(ValueError):
    """A bag cannot be written or read as demonstrations; the message is one line."""


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _typestore() -> Any:
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


# ----------------------------------------------------------------------------------------- layout

def demonstration_layout(obs: np.ndarray, episode_return: float,
                         episode: int) -> tuple[list[tuple[str, int, int]], int, np.ndarray]:
    """The demonstration layout as plain values: (dims as (label, size, stride), data_offset, data).

    The same layout as ``opolo_ros.ros.messages.demonstration_to_msg`` (module docstring there).
    """
    with np.errstate(over="ignore"):
        x = np.asarray(obs, dtype=np.float32)
        ret = np.float32(episode_return)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] == 0:
        raise BagError(f"demonstration obs must be [T+1 >= 2, obs_dim >= 1], got {x.shape}")
    if not np.isfinite(x).all():
        raise BagError("demonstration obs contain NaN or inf (or a value beyond float32 range)")
    if np.isinf(ret):
        raise BagError(f"episode return must be finite in float32, or NaN (unknown); got {episode_return}")
    if not 0 <= int(episode) < 2**32:
        raise BagError(f"episode index must fit uint32, got {episode}")
    steps, obs_dim = x.shape
    dims = [(STEPS_LABEL, steps, steps * obs_dim), (OBS_LABEL, obs_dim, obs_dim),
            (EPISODE_LABEL, int(episode), 0)]
    data = np.empty(1 + x.size, dtype=np.float32)
    data[0] = ret
    data[1:] = x.reshape(-1)
    return dims, 1, data


def is_demonstration_layout(dims: Sequence[tuple[str, int, int]]) -> bool:
    """True when the dim labels are those of the demonstration layout."""
    return [d[0] for d in dims] == [STEPS_LABEL, OBS_LABEL, EPISODE_LABEL]


def _parse_demonstration(dims: list[tuple[str, int, int]], offset: int, data: np.ndarray,
                         where: str) -> tuple[np.ndarray, float, int]:
    (_, steps, s_stride), (_, obs_dim, o_stride), (_, episode, e_stride) = dims
    if offset != 1:
        raise BagError(f"{where}: demonstration data_offset must be 1, got {offset}")
    if obs_dim == 0 or s_stride != steps * obs_dim or o_stride != obs_dim or e_stride != 0:
        raise BagError(f"{where}: malformed demonstration layout {dims}")
    if steps < 2:
        raise BagError(f"{where}: episode has {steps} state(s); an episode needs at least 2 (T+1 >= 2)")
    if data.size != 1 + steps * obs_dim:
        raise BagError(f"{where}: data has {data.size} elements, the layout says {1 + steps * obs_dim}")
    if np.isinf(data[0]):
        raise BagError(f"{where}: episode return is inf (NaN means unknown, inf is invalid)")
    if abs(data[0]) > F32_MAX:  # a Float64MultiArray bag: the topic and the bags we write are float32
        raise BagError(f"{where}: episode return {data[0]:g} exceeds the float32 range")
    obs = data[1:]
    if not np.isfinite(obs).all():
        bad = int(np.flatnonzero(~np.isfinite(obs))[0])
        raise BagError(f"{where}: non-finite observation value (NaN or inf) at step {bad // obs_dim}")
    if np.abs(obs).max() > F32_MAX:
        raise BagError(f"{where}: an observation value exceeds the float32 range")
    return obs.reshape(steps, obs_dim).astype(np.float32), float(data[0]), int(episode)


# ---------------------------------------------------------------------------------------- writing

def _demo_qos() -> list[Any]:
    from rosbags.interfaces import (
        Qos,
        QosDurability,
        QosHistory,
        QosLiveliness,
        QosReliability,
        QosTime,
    )

    zero = QosTime(0, 0)
    return [Qos(QosHistory.KEEP_LAST, DEMONSTRATIONS_DEPTH, QosReliability.RELIABLE,
                QosDurability.TRANSIENT_LOCAL, zero, zero, QosLiveliness.AUTOMATIC, zero, False)]


def _custom_data(episodes: Sequence[Episode], metadata: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not key:
            raise BagError(f"metadata keys must be non-empty strings, got {key!r}")
        out[key] = value if isinstance(value, str) else json.dumps(value, allow_nan=False, default=str)
    returns = [None if math.isnan(ep.ret) else float(ep.ret) for ep in episodes]
    out.update({
        "env_id": str((metadata or {}).get("env_id", "")),
        "obs_dim": str(episodes[0].obs.shape[1]),
        "count": str(len(episodes)),
        "returns": json.dumps(returns, allow_nan=False),
        "source": str((metadata or {}).get("source", "opolo_ros")),
        "format": FORMAT,
    })
    return out


def write_demonstrations(path: str | Path, episodes: Sequence[Episode], *, topic: str = DEMO_TOPIC,
                         storage: str = "mcap", metadata: Mapping[str, Any] | None = None) -> Path:
    """Write `episodes` as a new rosbag2 bag folder at `path`, one message per episode.

    `metadata` (e.g. ``env_id``, ``expert``, ``seed``) goes into the bag's ``custom_data``; see the
    module docstring. Never overwrites: an existing `path` is an error. Returns the bag folder.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer

    path = Path(path)
    if storage not in STORAGES:
        raise BagError(f"storage must be one of {STORAGES}, got {storage!r}")
    if path.exists():
        raise FileExistsError(f"{path} already exists; refusing to overwrite a bag "
                              "(choose another output path or remove it)")
    episodes = list(episodes)
    if not episodes:
        raise BagError("no episodes to write")
    obs_dims = {ep.obs.shape[1] for ep in episodes}
    if len(obs_dims) != 1:
        raise BagError(f"episodes have different observation dimensions {sorted(obs_dims)}")
    if not topic.startswith("/"):
        raise BagError(f"topic must be an absolute name (start with '/'), got {topic!r}")
    # Validate every episode before anything is created on disk.
    payloads = [demonstration_layout(ep.obs, ep.ret, k) for k, ep in enumerate(episodes)]
    custom = _custom_data(episodes, metadata)

    store = _typestore()
    cls = store.types[F32_ARRAY]
    layout_cls = store.types["std_msgs/msg/MultiArrayLayout"]
    dim_cls = store.types["std_msgs/msg/MultiArrayDimension"]
    raws = [store.serialize_cdr(cls(layout=layout_cls(dim=[dim_cls(label=lab, size=s, stride=st)
                                                            for lab, s, st in dims], data_offset=offset),
                                    data=data), F32_ARRAY) for dims, offset, data in payloads]
    custom[DIGEST_KEY] = json.dumps([hashlib.sha256(raw).hexdigest() for raw in raws])
    if topic != DEMO_TOPIC:  # whose messages the digests are of (a bag without this key: DEMO_TOPIC's)
        custom[DIGEST_TOPIC_KEY] = topic
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    writer = Writer(path, version=Writer.VERSION_LATEST, storage_plugin=plugin)
    for key, value in custom.items():
        writer.set_custom_data(key, value)
    try:
        writer.open()
    except Exception as err:
        raise BagError(f"cannot create bag {path}: {_one_line(err)}") from None
    try:
        conn = writer.add_connection(topic, F32_ARRAY, typestore=store, offered_qos_profiles=_demo_qos())
        start = time.time_ns()
        for k, raw in enumerate(raws):
            writer.write(conn, start + k * _STEP_NS, raw)
        writer.close()
    except BaseException:
        try:
            writer.abort()
        finally:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return path


# ---------------------------------------------------------------------------------------- reading

def _natural_key(path: Path) -> list[Any]:
    """run_2 before run_10: digits compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", path.name)]


def _bag_paths(path: Path) -> list[Path]:
    """The bags under `path`: itself (bag folder or storage file) or its sub-folder bags, in order."""
    if not path.exists():
        raise FileNotFoundError(f"demonstration bag not found: {path}")
    if path.is_file():
        if path.suffix in STORAGE_SUFFIXES:
            return [path]
        raise BagError(f"{path} is not a rosbag2 bag (expected a bag folder with metadata.yaml, "
                       f"a folder of bags, or a {'/'.join(STORAGE_SUFFIXES)} file)")
    if (path / "metadata.yaml").is_file():
        return [path]
    bags = sorted((p for p in path.iterdir() if p.is_dir() and (p / "metadata.yaml").is_file()),
                  key=lambda p: (_natural_key(p), p.name))
    stray = sorted(p.name for p in path.iterdir() if p.is_file() and p.suffix in STORAGE_SUFFIXES)
    nested = sorted(p.name for p in path.iterdir() if p.is_dir() and p not in bags
                    and any(q.name == "metadata.yaml" for q in p.rglob("*")))
    if bags or nested:  # a folder of bags: what looks like one but cannot be read is an error, not skipped
        broken = sorted(p.name for p in path.iterdir() if p.is_dir() and p not in bags
                        and p.name not in nested and any(q.suffix in STORAGE_SUFFIXES for q in p.iterdir()))
        if broken or stray or nested:
            what = "; ".join(part for part in (
                broken and f"sub-folders with storage files but no metadata.yaml {broken} (an "
                           "interrupted recording? `ros2 bag reindex` writes one)",
                nested and f"sub-folders holding bags of their own {nested} (bags are read one level deep)",
                stray and f"storage files beside the bags {stray}") if part)
            head = f"a folder of {len(bags)} bags, but not everything in it can be read" if bags else \
                "no bag of its own, one level down"
            raise BagError(f"{path}: {head}: {what}; move them out or pass the bags one by one")
        return bags
    if stray:
        raise BagError(f"{path} is not a readable rosbag2 bag: metadata.yaml is missing "
                       f"(storage files {stray}); pass the storage file itself to read it")
    raise BagError(f"{path} is not a rosbag2 bag (no metadata.yaml) nor a folder of bags")


def _bag_info(path: str | Path) -> dict[str, Any]:
    """A bag folder's metadata.yaml, its ``rosbag2_bagfile_information`` ({} when there is none)."""
    import yaml

    meta = Path(path) / "metadata.yaml"
    if not meta.is_file():
        return {}
    try:
        info = yaml.safe_load(meta.read_text())["rosbag2_bagfile_information"]
    except Exception as err:
        raise BagError(f"{path}: corrupt bag metadata ({_one_line(err)})") from None
    return info if isinstance(info, dict) else {}


def read_bag_metadata(path: str | Path) -> dict[str, str]:
    """The ``custom_data`` of a bag folder's metadata.yaml ({} when it has none)."""
    custom = _bag_info(path).get("custom_data")
    return {str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {}


def _check_storage_listing(bag: Path) -> None:
    """Every storage file of a bag folder read once: none listed twice in metadata.yaml (its messages
    would be read twice), none in the folder left out of the listing (they would not be read)."""
    try:
        listed = _bag_info(bag).get("relative_file_paths")
    except BagError:
        return  # a corrupt metadata.yaml: reported when the bag is opened
    if not isinstance(listed, list):
        return  # likewise a malformed listing
    names = [Path(str(p)).name for p in listed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BagError(f"{bag}: metadata.yaml lists the storage file(s) {twice} more than once")
    unlisted = sorted(p.name for p in bag.iterdir()
                      if p.is_file() and p.suffix in STORAGE_SUFFIXES and p.name not in names)
    if unlisted:
        raise BagError(f"{bag}: storage file(s) {unlisted} in the bag folder are not listed in its "
                       "metadata.yaml, so their messages would not be read (`ros2 bag reindex` "
                       "rewrites the listing)")


@dataclasses.dataclass
class _Source:
    """How messages of one topic become observations."""

    msgtype: str
    obs_field: tuple[str, ...] | None
    joints: tuple[str, ...] | None
    fields: tuple[str, ...]
    reset_marker: str | None


def _register_bag_types(store: Any, connections: Sequence[Any]) -> None:
    """Add message types the bag defines but the built-in store lacks (ros2msg definitions)."""
    from rosbags.interfaces import MessageDefinitionFormat
    from rosbags.typesys import get_types_from_msg

    for conn in connections:
        if conn.msgtype in store.fielddefs or conn.msgdef.format != MessageDefinitionFormat.MSG:
            continue
        try:
            store.register(get_types_from_msg(conn.msgdef.data, conn.msgtype))
        except Exception:  # an unreadable definition: reported when the type is needed
            continue


def _choose_topic(topics: Mapping[str, str], bag: Path, any_type: bool = False) -> str:
    """The topic to read when none is named: the demonstration topic, else the one observation
    stream, else (`any_type`: obs_field names the fields to read) the bag's only topic."""
    if DEMO_TOPIC in topics:
        return DEMO_TOPIC
    candidates = [t for t, typ in topics.items() if typ in STREAM_TYPES]
    if not candidates and any_type:
        candidates = list(topics)
    if len(candidates) == 1:
        return candidates[0]
    listing = ", ".join(f"{t} [{typ}]" for t, typ in sorted(topics.items())) or "none"
    why = "several observation topics" if candidates else (
        "no demonstration or observation topic (the types read: the demonstration layout on "
        f"{DEMO_TOPIC}, or a stream of {', '.join(t.rsplit('/', 1)[-1] for t in STREAM_TYPES)}; "
        "another type's fields: demos_obs_field)")
    raise BagError(f"{bag}: {why}; choose one with demos_topic (opolo-ros train --set demos_topic=..., "
                   f"opolo-ros launch sim_train demos_topic:=..., or the task file; demo_player's own "
                   f"parameter: bag_topic) (topics: {listing})")


def _flatten(value: Any, what: str) -> np.ndarray:
    """A numeric field value (number, array, list of numbers, or message of those) as float64."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise BagError(f"{what} is not numeric (dtype {value.dtype})")
        return value.astype(np.float64).reshape(-1)
    if isinstance(value, bool | int | float):
        return np.array([value], dtype=np.float64)
    if dataclasses.is_dataclass(value):
        parts = [_flatten(getattr(value, f.name), f"{what}.{f.name}") for f in dataclasses.fields(value)
                 if not isinstance(getattr(value, f.name), str)]
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(value, list | tuple) and all(isinstance(v, int | float) for v in value):
        return np.asarray(value, dtype=np.float64)
    raise BagError(f"{what} is not numeric (a {type(value).__name__})")


def _observation(msg: Any, src: _Source, where: str, state: dict) -> np.ndarray | None:
    """One message -> observation (float64), or None for a reset marker. Without `src.joints` the
    first JointState's joint order is kept in `state` and applied to the later ones."""
    if src.obs_field is not None:
        parts = []
        for field in src.obs_field:
            value = msg
            for name in field.split("."):
                if not hasattr(value, name):
                    raise BagError(f"{where}: {src.msgtype} has no field {field!r}")
                value = getattr(value, name)
            parts.append(_flatten(value, f"{where}: field {field!r}"))
        obs = np.concatenate(parts)
        return obs if obs.size else None
    if src.msgtype == JOINT_STATE:
        names = list(msg.name)
        if src.reset_marker is not None and msg.header.frame_id == src.reset_marker:
            return None
        if not names:  # a marker only when it holds nothing at all
            if any(len(getattr(msg, f)) for f in JOINT_FIELDS):
                raise BagError(f"{where}: JointState with values but no joint names")
            return None
        index = {n: i for i, n in enumerate(names)}
        if len(index) != len(names):
            raise BagError(f"{where}: duplicate joint names in the JointState ({names})")
        joints = src.joints if src.joints is not None else state.setdefault("joints", tuple(names))
        missing = [j for j in joints if j not in index]
        if missing:
            raise BagError(f"{where}: joint(s) {missing} missing from the JointState (it has {names})")
        rows = [index[j] for j in joints]
        parts = []
        for name in src.fields:
            values = np.asarray(getattr(msg, name), dtype=np.float64)
            if values.size != len(names):
                raise BagError(f"{where}: JointState has {values.size} {name} values for "
                               f"{len(names)} joints")
            parts.append(values[rows])
        return np.concatenate(parts)
    # Float32MultiArray / Float64MultiArray stream
    labels = [d.label for d in msg.layout.dim]
    data, offset = np.asarray(msg.data), int(msg.layout.data_offset)
    if offset > data.size:
        raise BagError(f"{where}: data_offset {offset} is past the {data.size} values of the message")
    data = data[offset:]
    if data.size == 0 or (src.reset_marker is not None and src.reset_marker in labels):
        return None
    return data.astype(np.float64)


def _starts_episode(msg: Any, src: _Source) -> bool:
    """An observation multi-array whose last layout dim is ``episode_start``: the first state of an
    episode (what a sim_bridge with reset_markers publishes on its observation topic)."""
    if src.msgtype not in (F32_ARRAY, F64_ARRAY) or src.obs_field is not None:
        return False
    dims = msg.layout.dim
    return bool(dims) and dims[-1].label == EPISODE_START_LABEL


def _value_names(src: _Source | None, state: dict, size: int) -> list[str]:
    """What each value of an observation is: "velocity of hinge" for a JointState, else "value k"."""
    joints = None if src is None or src.msgtype != JOINT_STATE else src.joints or state.get("joints")
    if joints and src is not None and len(joints) * len(src.fields) == size:
        return [f"{field} of {joint}" for field in src.fields for joint in joints]
    return [f"value {k}" for k in range(size)]


def _check_obs(obs: np.ndarray, state: dict, expected_obs_dim: int | None, where: str,
               src: _Source | None = None) -> None:
    if expected_obs_dim is not None and obs.size != expected_obs_dim:
        raise BagError(f"{where}: observation dimension {obs.size}, expected {expected_obs_dim}")
    if state.get("obs_dim") is None:
        state["obs_dim"] = obs.size
    elif obs.size != state["obs_dim"]:
        raise BagError(f"{where}: observation dimension {obs.size}, earlier observations have "
                       f"{state['obs_dim']} (inconsistent)")
    if not np.isfinite(obs).all():
        names = _value_names(src, state, obs.size)
        bad = [f"{names[k]} = {obs[k]}" for k in np.flatnonzero(~np.isfinite(obs))[:5]]
        raise BagError(f"{where}: observation contains NaN or inf ({', '.join(bad)}): a demonstration "
                       "must be finite throughout (record again, or leave that episode out of the bag)")
    if np.abs(obs).max(initial=0.0) > F32_MAX:
        raise BagError(f"{where}: an observation value exceeds the float32 range")


def _read_bag(bag: Path, topic: str | None, src_args: dict, gap_ns: int | None,
              expected_obs_dim: int | None, state: dict) -> list[Episode]:
    from rosbags.rosbag2 import Reader

    if bag.is_dir():
        _check_storage_listing(bag)
    _roll_back_hot_journals(bag)
    reader = Reader(bag)
    try:
        reader.open()
    except FileNotFoundError:
        raise
    except Exception as err:
        raise BagError(f"{bag}: not a readable rosbag2 bag (corrupt or truncated metadata or "
                       f"storage: {_one_line(err)})") from None
    try:
        topics = {name: info.msgtype or "<mixed types>" for name, info in reader.topics.items()}
        if topic is None:
            topic = state.get("topic") or _choose_topic(topics, bag, src_args["obs_field"] is not None)
        if topic not in topics and not topic.startswith("/") and f"/{topic}" in topics:
            topic = f"/{topic}"  # a relative name, resolved in the root namespace as ROS does
        if topic not in topics:
            listing = ", ".join(f"{t} [{typ}]" for t, typ in sorted(topics.items())) or "none"
            raise BagError(f"{bag}: topic {topic!r} not in the bag (topics: {listing})")
        state["topic"] = topic
        msgtype = topics[topic]
        if src_args["obs_field"] is None and msgtype not in STREAM_TYPES:
            raise BagError(f"{bag}: topic {topic} has type {msgtype}; expected one of "
                           f"{', '.join(STREAM_TYPES)} (or name the fields that make the observation: "
                           "obs_field=..., the config key demos_obs_field)")
        src = _Source(msgtype=msgtype, **src_args)
        conns = [c for c in reader.connections if c.topic == topic]
        store = _typestore()
        _register_bag_types(store, conns)
        if msgtype not in store.fielddefs:
            raise BagError(f"{bag}: cannot decode message type {msgtype} (no definition in the bag)")
        custom = read_bag_metadata(bag) if bag.is_dir() else {}
        base_meta = {"bag": str(bag), "topic": topic}
        if custom.get("env_id"):
            base_meta["env_id"] = custom["env_id"]
        digests = _digests(custom, bag) if topic == custom.get(DIGEST_TOPIC_KEY, DEMO_TOPIC) else None
        episodes = _episodes(reader, conns, store, src, bag, topic, gap_ns, expected_obs_dim, state,
                             base_meta, digests)
        if msgtype == JOINT_STATE and src.obs_field is None:  # what each value is (opolo-ros info)
            read_by = {"joints": list(src.joints or state.get("joints") or ()), "fields": list(src.fields)}
            for episode in episodes:
                episode.meta.update(read_by)
        if digests is not None and len(episodes) != len(digests):
            raise BagError(f"{bag}: {len(episodes)} episodes on {topic}, but the bag was written with "
                           f"{len(digests)} (a storage file lost or listed twice in metadata.yaml?)")
        return episodes
    except (BagError, FileNotFoundError):
        raise
    except Exception as err:
        raise BagError(f"{bag}: cannot read messages on {topic} (corrupt or truncated bag? "
                       f"{_one_line(err)})") from None
    finally:
        reader.close()


def demonstration_type(path: str | Path, topic: str | None = None) -> str | None:
    """The message type :func:`read_demonstrations` reads from `path` (its first bag's `topic`, or
    the topic it would choose); None for an .npz or where it cannot tell (its own errors come when
    the bag is read)."""
    path = Path(path)
    if path.suffix == ".npz" or not path.exists():
        return None
    try:
        topics = {name: kind for name, kind, _ in bag_topics(path)[0][1]}
        chosen = topic or _choose_topic(topics, path)
    except (BagError, IndexError):
        return None
    return topics.get(chosen) or topics.get(f"/{chosen}")


def bag_topics(path: str | Path) -> list[tuple[Path, list[tuple[str, str, int]]]]:
    """Each bag under `path` (as :func:`read_demonstrations` finds them) with its topics: (name,
    message type, message count), sorted by name. BagError for what is no readable bag."""
    from rosbags.rosbag2 import Reader

    out = []
    for bag in _bag_paths(Path(path)):
        _roll_back_hot_journals(bag)
        reader = Reader(bag)
        try:
            reader.open()
        except Exception as err:
            raise BagError(f"{bag}: not a readable rosbag2 bag ({_one_line(err)})") from None
        try:
            topics = [(name, info.msgtype or "<mixed types>", int(info.msgcount))
                      for name, info in sorted(reader.topics.items())]
        finally:
            reader.close()
        out.append((bag, topics))
    return out


def _roll_back_hot_journals(bag: Path) -> None:
    """An sqlite3 storage file left by a killed writer may have its rollback journal beside it
    (``<file>.db3-journal``): rosbags opens storage files immutable, which ignores the journal and can
    read pages of the transaction that never committed. Opening the file once with sqlite3 rolls the
    journal back, as any sqlite3 reader would (the file is then what was last committed). A bag
    written in WAL mode (rosbag2's ``resilient`` preset) may hold committed messages in its
    ``<file>.db3-wal`` only, which an immutable read leaves out without a word: they are moved into the
    storage file (a checkpoint, as sqlite3 itself does)."""
    import sqlite3

    files = [bag] if bag.is_file() else sorted(bag.glob("*.db3"))
    for db in files:
        journal, wal = Path(f"{db}-journal"), Path(f"{db}-wal")
        has_wal = wal.exists() and wal.stat().st_size > 0
        if db.suffix != ".db3" or not (journal.exists() or has_wal):
            continue
        moved_already = has_wal and _messages_in(db, "mode=ro") == _messages_in(db, "immutable=1")
        if moved_already and not journal.exists():
            continue  # the log holds nothing the file lacks (checkpointed already): read as it is
        what = "move its write-ahead log (-wal) into it" if has_wal else "roll back its leftover journal"
        try:
            conn = sqlite3.connect(db)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                if has_wal:  # PASSIVE: a recording still writing the bag is never blocked
                    _, logged, moved = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if moved < logged:
                        raise BagError(f"{db}: cannot {what}: another process uses the bag (a recording "
                                       "still running? read it once it has ended)")
            finally:
                conn.close()
        except sqlite3.Error as err:
            raise BagError(f"{db}: cannot {what} ({_one_line(err)}; a bag folder that cannot be written: "
                           "copy it somewhere writable)") from None


def _messages_in(db: Path, mode: str) -> int | None:
    """How many messages sqlite3 finds in storage file `db` opened with URI `mode` (``mode=ro`` sees
    a write-ahead log, ``immutable=1``, as rosbags reads, does not); None when it cannot say."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db}?{mode}", uri=True)
        try:
            return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def _digests(custom: Mapping[str, str], bag: Path) -> list[str] | None:
    """The per-episode SHA-256 digests a bag was written with (None for a bag without them)."""
    if DIGEST_KEY not in custom:
        return None
    try:
        digests = json.loads(custom[DIGEST_KEY])
    except ValueError:
        digests = None
    if not isinstance(digests, list) or not all(isinstance(d, str) for d in digests):
        raise BagError(f"{bag}: metadata.yaml custom_data {DIGEST_KEY} is not a list of digests")
    return digests


def _episodes(reader: Any, conns: list, store: Any, src: _Source, bag: Path, topic: str,
              gap_ns: int | None, expected_obs_dim: int | None, state: dict,
              base_meta: dict, digests: list[str] | None = None) -> list[Episode]:
    """The bag's episodes on `topic`; with `digests`, each episode message's bytes are checked
    against the digest written with the bag (MCAP chunks as rosbags writes them carry no CRC)."""
    episodes: list[Episode] = []
    current: list[np.ndarray] = []
    stamps: list[int] = []  # the bag time stamps of `current`'s messages
    start_index = 0
    demo_mode: bool | None = None
    last_t: int | None = None
    gap_before: int | None = None  # ns between the episode's first message and the one before it

    earlier = False  # an episode (or a lone state) of this bag before the one being closed

    def close_episode(index: int, gap_after: int | None = None, last: bool = False) -> None:
        nonlocal current, stamps, earlier
        if not current:
            return
        first, earlier = not earlier, True  # the bag's first episode: reset markers before it do not count
        if len(current) < 2 and first != last:
            # A recording that began one step before an episode's end, or stopped one step after
            # a reset: one state of an episode that is not in the bag (no transition, nothing lost)
            state["lone"] = state.get("lone", 0) + 1
            current, stamps = [], []
            return
        if len(current) < 2:
            gaps = [f"{where} a gap of {gap / 1e9:.9g} s" for where, gap in
                    (("began after", gap_before), ("ended at", gap_after)) if gap is not None]
            hint = "" if not gaps else (
                f" (it {' and '.join(gaps)}, more than the episode gap {gap_ns / 1e9:.9g} s: a stream "
                "published slower than that needs a larger demos_episode_gap_s)")
            raise BagError(f"{bag}: {topic}: the episode at message {start_index} has 1 observation; "
                           f"an episode needs at least 2 (T+1 >= 2){hint}")
        obs32 = np.asarray(current, dtype=np.float32)  # in range: _check_obs
        meta = dict(base_meta, start_message=start_index, messages=index - start_index,
                    period_s=float(np.median(np.diff(stamps))) / 1e9)  # the interval between states
        try:
            episodes.append(Episode(obs32, float("nan"), meta))
        except ValueError as err:  # a value beyond what training takes: the data's, not the bag's fault
            raise BagError(f"{bag}: {topic}: the episode from message {start_index}: {err}") from None
        current, stamps = [], []

    index = 0
    for index, (_, t, raw) in enumerate(reader.messages(connections=conns)):
        where = f"{bag}: {topic} message {index}"
        msg = store.deserialize_cdr(raw, src.msgtype)
        if src.msgtype in (F32_ARRAY, F64_ARRAY) and src.obs_field is None:
            dims = [(d.label, int(d.size), int(d.stride)) for d in msg.layout.dim]
            is_demo = is_demonstration_layout(dims)
            labels = [d[0] for d in dims]
            if not is_demo and labels[:2] == [STEPS_LABEL, OBS_LABEL]:
                raise BagError(f"{where}: dims labelled {labels}: the demonstration layout is exactly "
                               f"{[STEPS_LABEL, OBS_LABEL, EPISODE_LABEL]}")
            if demo_mode is None and (is_demo or len(msg.data) > msg.layout.data_offset):
                demo_mode = is_demo  # decided by the first message that holds data (not a marker)
                if not demo_mode and src.joints is not None:  # they would select nothing (the
                    # project's demonstration layout ignores them: runs of sim_train before
                    # session 18 recorded an MJCF model's joints with any bag)
                    raise BagError(f"{bag}: topic {topic} is a stream of {src.msgtype}: joints "
                                   f"(demos_joints) select from a {JOINT_STATE} only; leave them empty")
            if demo_mode is False and is_demo:
                raise BagError(f"{where}: a message in the demonstration layout in an observation "
                               "stream (one topic holds one or the other)")
            if demo_mode:
                if not is_demo:
                    raise BagError(f"{where}: not in the demonstration layout (dims labelled "
                                   f"{labels}) on a demonstration topic")
                k = len(episodes)
                if digests is not None and (k >= len(digests)
                                            or hashlib.sha256(raw).hexdigest() != digests[k]):
                    raise BagError(f"{where}: its bytes differ from those the bag was written with "
                                   f"(episode {k}; corrupt storage, or a message added)")
                obs, ret, episode = _parse_demonstration(
                    dims, int(msg.layout.data_offset), np.asarray(msg.data), where)
                _check_obs(obs[0], state, expected_obs_dim, where)
                try:
                    episodes.append(Episode(obs, ret, dict(base_meta, episode=episode)))
                except ValueError as err:
                    raise BagError(f"{where}: {err}") from None
                continue
        obs = _observation(msg, src, where, state)
        if obs is None:  # reset marker
            close_episode(index)
            start_index, last_t, gap_before = index + 1, None, None
            continue
        _check_obs(obs, state, expected_obs_dim, where, src)
        if last_t is not None and t <= last_t:  # storage returns a file's messages in time order
            raise BagError(f"{where}: its time stamp is not after the previous message's ({t} <= {last_t} "
                           "ns): not one stream in time order (a clock that restarted, several "
                           "publishers on the topic, or the bag's storage files out of order)")
        if src.reset_marker is not None and _starts_episode(msg, src):
            close_episode(index)
            start_index, gap_before = index, None
        elif last_t is not None and gap_ns is not None and t - last_t > gap_ns:
            close_episode(index, t - last_t)
            start_index, gap_before = index, t - last_t
        current.append(obs)
        stamps.append(t)
        last_t = t
    close_episode(index + 1, last=True)
    return episodes


def read_demonstrations(path: str | Path, *, topic: str | None = None,
                        obs_field: str | Sequence[str] | None = None,
                        joints: Sequence[str] | None = None,
                        fields: Sequence[str] = ("position", "velocity"),
                        episode_gap_s: float | None = DEFAULT_EPISODE_GAP_S,
                        reset_marker: str | None = RESET_LABEL,
                        expected_obs_dim: int | None = None) -> list[Episode]:
    """State-only episodes from a rosbag2 bag, a storage file, or a folder of bags (module docstring).

    `joints`/`fields` select a JointState observation (joint names in policy order; fields from
    ``position``, ``velocity``, ``effort``). `episode_gap_s` and `reset_marker` split observation
    streams into episodes. `expected_obs_dim` checks the observation size. Each Episode's ``meta``
    names its bag and topic (and ``env_id`` when the bag records one).
    """
    if isinstance(obs_field, str):
        obs_field = (obs_field,)
    obs_field_t = tuple(obs_field) if obs_field is not None else None
    if obs_field_t is not None and (not obs_field_t or not all(obs_field_t)):
        raise BagError(f"obs_field must name at least one field, got {obs_field!r}")
    fields_t = (fields,) if isinstance(fields, str) else tuple(fields)  # one name, not its letters
    if not fields_t or len(set(fields_t)) != len(fields_t) or not set(fields_t) <= set(JOINT_FIELDS):
        raise BagError(f"fields must be unique names from {JOINT_FIELDS}, got {fields_t}")
    joints_t = None if joints is None else (joints,) if isinstance(joints, str) else tuple(joints)
    if joints_t is not None and (not joints_t or len(set(joints_t)) != len(joints_t)):
        raise BagError(f"joints must be non-empty and unique, got {joints_t}")
    if episode_gap_s is not None and not episode_gap_s > 0:
        raise BagError(f"episode_gap_s must be a number of seconds > 0 (inf: gaps never split), "
                       f"got {episode_gap_s}")
    gap_ns = None if episode_gap_s is None or episode_gap_s * 1e9 >= 2**63 else round(episode_gap_s * 1e9)
    src_args = {"obs_field": obs_field_t, "joints": joints_t, "fields": fields_t,
                "reset_marker": reset_marker}

    state: dict = {}
    episodes: list[Episode] = []
    for bag in _bag_paths(Path(path)):
        episodes.extend(_read_bag(bag, topic, src_args, gap_ns, expected_obs_dim, state))
    if not episodes:
        lone = (f" ({state['lone']} single states left out: a stream published slower than the "
                "episode gap needs a larger demos_episode_gap_s)") if state.get("lone") else ""
        raise BagError(f"{path}: no episodes on topic {state.get('topic')}{lone}")
    return episodes
