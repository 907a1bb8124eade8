"""rosbag2 demonstrations: write/read round trips, plain observation streams, errors, `record`."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from opolo_ros import cli
from opolo_ros.data import bags
from opolo_ros.data.bags import BagError, read_bag_metadata, read_demonstrations, write_demonstrations
from opolo_ros.data.demos import Episode, load_episodes

TS = get_typestore(Stores.ROS2_KILTED)
IP_EXPERT = Path(__file__).resolve().parents[1] / "models" / "experts" / "InvertedPendulum-v5.onnx"
F32 = "std_msgs/msg/Float32MultiArray"
F64 = "std_msgs/msg/Float64MultiArray"
JS = "sensor_msgs/msg/JointState"
SEC = 1_000_000_000


def _episodes(obs_dim: int = 3, lengths: tuple[int, ...] = (5, 8), seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    out = [Episode(rng.normal(size=(n, obs_dim)).astype(np.float32), float(10 * k + 0.25))
           for k, n in enumerate(lengths)]
    out[-1].ret = float("nan")  # unknown return survives as NaN
    return out


def _multiarray(msgtype: str, values, labels: tuple[str, ...] | None = None):
    cls = TS.types[msgtype]
    dtype = np.float32 if msgtype == F32 else np.float64
    data = np.asarray(values, dtype=dtype).reshape(-1)
    if labels is None:
        labels = ("obs",) if data.size else ()
    dims = [TS.types["std_msgs/msg/MultiArrayDimension"](label=lab, size=data.size, stride=data.size)
            for lab in labels]
    return cls(layout=TS.types["std_msgs/msg/MultiArrayLayout"](dim=dims, data_offset=0), data=data)


def _joint_state(names, position, velocity, frame_id: str = ""):
    header = TS.types["std_msgs/msg/Header"](
        stamp=TS.types["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id=frame_id)
    return TS.types[JS](header=header, name=list(names), position=np.asarray(position, dtype=np.float64),
                        velocity=np.asarray(velocity, dtype=np.float64), effort=np.zeros(0))


def _write_stream(path: Path, topics: dict[str, tuple[str, list[tuple[int, object]]]],
                  storage: str = "mcap") -> Path:
    """A bag with, per topic, (msgtype, [(timestamp_ns, message), ...])."""
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        for topic, (msgtype, msgs) in topics.items():
            conn = writer.add_connection(topic, msgtype, typestore=TS)
            for t, msg in msgs:
                writer.write(conn, t, TS.serialize_cdr(msg, msgtype))
    return path


def _stream(obs: np.ndarray, t0: int = SEC, dt: int = SEC // 100) -> list[tuple[int, object]]:
    return [(t0 + k * dt, _multiarray(F32, row)) for k, row in enumerate(obs)]


# ------------------------------------------------------------------------------ project layout

@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_round_trip_exact(tmp_path: Path, storage: str) -> None:
    eps = _episodes()
    bag = write_demonstrations(tmp_path / "demos", eps, storage=storage,
                               metadata={"env_id": "Hopper-v5", "seed": 3, "expert": "hopper.onnx"})
    got = read_demonstrations(bag)
    assert len(got) == len(eps)
    for k, (a, b) in enumerate(zip(eps, got)):
        assert b.obs.dtype == np.float32 and np.array_equal(a.obs, b.obs)
        assert b.meta["episode"] == k and b.meta["env_id"] == "Hopper-v5"
    assert got[0].ret == eps[0].ret and math.isnan(got[1].ret)
    assert [ep.obs.shape for ep in load_episodes(bag)] == [ep.obs.shape for ep in eps]
    storage_file = bag / ("demos.mcap" if storage == "mcap" else "demos.db3")  # a bare storage file
    assert [ep.obs.tolist() for ep in read_demonstrations(storage_file)] == [ep.obs.tolist() for ep in eps]
    custom = read_bag_metadata(bag)
    assert custom["env_id"] == "Hopper-v5" and custom["obs_dim"] == "3" and custom["count"] == "2"
    assert json.loads(custom["returns"]) == [0.25, None]
    assert custom["seed"] == "3" and custom["expert"] == "hopper.onnx"


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_plain_reader_sees_one_message_per_episode(tmp_path: Path, storage: str) -> None:
    bag = write_demonstrations(tmp_path / "demos", _episodes(lengths=(3, 4, 5)), storage=storage)
    with Reader(bag) as reader:
        assert reader.message_count == 3
        info = reader.topics[bags.DEMO_TOPIC]
        assert info.msgtype == F32 and info.msgcount == 3
        qos = info.connections[0].ext.offered_qos_profiles[0]
        assert qos.durability.name == "TRANSIENT_LOCAL" and qos.reliability.name == "RELIABLE"
        stamps, steps = [], []
        for conn, t, raw in reader.messages():
            msg = TS.deserialize_cdr(raw, conn.msgtype)
            stamps.append(t)
            steps.append(msg.layout.dim[0].size)
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    assert steps == [3, 4, 5]


def test_bag_message_decodes_with_ros_decoder(tmp_path: Path) -> None:
    pytest.importorskip("std_msgs")
    from rclpy.serialization import deserialize_message
    from std_msgs.msg import Float32MultiArray

    from opolo_ros.ros import messages

    assert (bags.STEPS_LABEL, bags.OBS_LABEL, bags.EPISODE_LABEL) == (
        messages.STEPS_LABEL, messages.OBS_LABEL, messages.EPISODE_LABEL)
    eps = _episodes()
    bag = write_demonstrations(tmp_path / "demos", eps)
    with Reader(bag) as reader:
        raws = [bytes(raw) for _, _, raw in reader.messages()]
    for k, (ep, raw) in enumerate(zip(eps, raws)):
        msg = deserialize_message(raw, Float32MultiArray)
        demo = messages.msg_to_demonstration(msg, obs_dim=3)
        assert np.array_equal(demo.obs, ep.obs) and demo.episode == k
        assert demo.episode_return == ep.ret or (math.isnan(demo.episode_return) and math.isnan(ep.ret))
        # and it is the message the ROS encoder builds (layout and data; CDR padding bytes may differ)
        ref = messages.demonstration_to_msg(ep.obs, ep.ret, k)
        assert msg.layout == ref.layout
        assert np.frombuffer(msg.data, np.float32).tobytes() == np.frombuffer(ref.data, np.float32).tobytes()


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    bag = write_demonstrations(tmp_path / "demos", _episodes())
    before = sorted(p.name for p in bag.iterdir())
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        write_demonstrations(bag, _episodes(seed=1))
    assert sorted(p.name for p in bag.iterdir()) == before
    with pytest.raises(ValueError, match="storage"):
        write_demonstrations(tmp_path / "other", _episodes(), storage="rosbag1")
    with pytest.raises(ValueError, match="different observation dimensions"):
        write_demonstrations(tmp_path / "mixed", [_episodes(3)[0], _episodes(4)[0]])
    assert not (tmp_path / "other").exists() and not (tmp_path / "mixed").exists()


def test_folder_of_bags_merged_in_order(tmp_path: Path) -> None:
    a, b = _episodes(lengths=(3, 4), seed=1), _episodes(lengths=(5,), seed=2)
    write_demonstrations(tmp_path / "all" / "run_a", a)
    write_demonstrations(tmp_path / "all" / "run_b", b, storage="sqlite3")
    got = read_demonstrations(tmp_path / "all")
    assert [ep.obs.shape[0] for ep in got] == [3, 4, 5]
    for want, ep in zip(a + b, got):
        assert np.array_equal(want.obs, ep.obs)
    assert got[0].meta["bag"].endswith("run_a") and got[2].meta["bag"].endswith("run_b")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_changed_byte_or_a_storage_file_listed_twice_is_caught(tmp_path: Path, storage: str) -> None:
    """The digests written with the bag: a flipped bit in an observation (the storage formats check
    nothing here) is an error, not other demonstrations; so is a storage file listed twice in
    metadata.yaml (every message read twice) or not at all (none read)."""
    eps = _episodes(lengths=(4, 5))
    eps[1].obs[2, 1] = np.float32(1234.5678)
    bag = write_demonstrations(tmp_path / "good", eps, storage=storage)
    assert len(read_demonstrations(bag)) == 2
    flipped = tmp_path / "flipped"
    shutil.copytree(bag, flipped)
    storage_file = next(p for p in flipped.iterdir() if p.suffix in (".mcap", ".db3"))
    data = bytearray(storage_file.read_bytes())
    at = data.index(np.float32(1234.5678).tobytes())
    data[at] ^= 0x01
    storage_file.write_bytes(bytes(data))
    with pytest.raises(BagError, match="message 1: its bytes differ from those the bag was written with"):
        read_demonstrations(flipped)
    twice = tmp_path / "twice"
    shutil.copytree(bag, twice)
    meta = yaml.safe_load((twice / "metadata.yaml").read_text())
    info = meta["rosbag2_bagfile_information"]
    info["relative_file_paths"] *= 2
    info["files"] *= 2
    (twice / "metadata.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(BagError, match=r"lists the storage file\(s\) \['good\.\w+'\] more than once"):
        read_demonstrations(twice)
    info["relative_file_paths"], info["files"] = [], []  # and one left out of the listing
    (twice / "metadata.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(BagError, match=r"\['good\.\w+'\] in the bag folder are not listed in its metadata"):
        read_demonstrations(twice)


def test_folder_of_bags_in_number_order_and_nothing_skipped(tmp_path: Path) -> None:
    """run_2 before run_10; a sub-folder that lost its metadata.yaml (an interrupted recording) or a
    storage file beside the bags is an error naming it, not silently left out."""
    for k in (10, 2):
        write_demonstrations(tmp_path / "all" / f"run_{k}", _episodes(lengths=(k,), seed=k))
    write_demonstrations(tmp_path / "all" / "run_11.mcap", _episodes(lengths=(11,)))  # a bag folder so named
    assert [len(ep.obs) for ep in read_demonstrations(tmp_path / "all")] == [2, 10, 11]
    broken = write_demonstrations(tmp_path / "all" / "run_3", _episodes(lengths=(3,)))
    (broken / "metadata.yaml").unlink()
    with pytest.raises(BagError, match=r"no metadata.yaml \['run_3'\].*reindex"):
        read_demonstrations(tmp_path / "all")
    storage = next(broken.iterdir())
    storage.rename(tmp_path / "all" / storage.name)
    broken.rmdir()
    with pytest.raises(BagError, match=f"storage files beside the bags \\['{storage.name}'\\]"):
        read_demonstrations(tmp_path / "all")


# ------------------------------------------------------------------------------ plain streams

def test_a_stream_exactly_one_gap_apart_is_one_episode(tmp_path: Path) -> None:
    """A new episode starts after *more* than the gap (a mutation test: with >= a stream stamped
    exactly that far apart, a sim-time recording, split at every message and read no episode)."""
    obs = np.arange(6, dtype=np.float32).reshape(3, 2)
    bag = _write_stream(tmp_path / "even", {"/observation": (F32, _stream(obs, dt=SEC // 2))})
    got = read_demonstrations(bag, episode_gap_s=0.5)
    assert [ep.obs.tolist() for ep in got] == [obs.tolist()]


def test_float32_stream_split_by_gap_and_reset_marker(tmp_path: Path) -> None:
    """Episodes end at a gap, an empty message, and a message with a dim labelled "reset" even when
    it holds data; with reset_marker=None that labelled message is an observation like any other."""
    obs = np.arange(24, dtype=np.float32).reshape(12, 2)
    msgs = _stream(obs[:3])  # episode 1: 3 steps, 10 ms apart
    msgs += _stream(obs[3:6], t0=2 * SEC)  # 1.98 s gap -> episode 2
    msgs.append((2 * SEC + 50_000_000, _multiarray(F32, [], labels=())))  # empty message: reset
    msgs += _stream(obs[6:8], t0=2 * SEC + 60_000_000)  # episode 3, only 10 ms after the marker
    msgs.append((2 * SEC + 90_000_000, _multiarray(F32, [], labels=("reset",))))  # labelled reset
    msgs += _stream(obs[8:10], t0=2 * SEC + 100_000_000)  # episode 4
    marker = [99.0, -99.0]  # a labelled marker with data: only the label makes it a marker
    msgs.append((2 * SEC + 120_000_000, _multiarray(F32, marker, labels=("reset",))))
    msgs += _stream(obs[10:], t0=2 * SEC + 130_000_000)  # episode 5
    bag = _write_stream(tmp_path / "stream", {"/observation": (F32, msgs)})
    got = read_demonstrations(bag)
    assert [ep.obs.tolist() for ep in got] == [obs[:3].tolist(), obs[3:6].tolist(), obs[6:8].tolist(),
                                               obs[8:10].tolist(), obs[10:].tolist()]
    assert all(math.isnan(ep.ret) for ep in got) and got[0].meta["topic"] == "/observation"
    assert all(ep.meta["period_s"] == pytest.approx(0.01) for ep in got)  # 10 ms between states
    # without gap splitting, only the markers separate
    assert [len(ep.obs) for ep in read_demonstrations(bag, episode_gap_s=None)] == [6, 2, 2, 2]
    # a larger gap threshold keeps the 1.98 s pause inside one episode
    assert [len(ep.obs) for ep in read_demonstrations(bag, episode_gap_s=5.0)] == [6, 2, 2, 2]
    # without the label rule: empty messages still separate, the labelled one with data is a step
    plain = read_demonstrations(bag, reset_marker=None)
    assert [ep.obs.tolist() for ep in plain] == [obs[:3].tolist(), obs[3:6].tolist(), obs[6:8].tolist(),
                                                 [*obs[8:10].tolist(), marker, *obs[10:].tolist()]]



def test_an_observation_marked_episode_start_begins_an_episode(tmp_path: Path) -> None:
    """A sim_bridge with reset_markers marks each episode's first state on its observation topic
    with a trailing ``episode_start`` dim (in-band: the deploy actor's keep-last-1 subscription would
    lose a marker message). A recording of that topic splits there, the marked state being the new
    episode's first, with no time gap between the episodes; reset_marker=None ignores the mark."""
    obs = np.arange(14, dtype=np.float32).reshape(7, 2)
    msgs = _stream(obs)
    for k in (0, 3):  # the first episode's first state is marked too
        msgs[k] = (msgs[k][0], _multiarray(F32, obs[k], labels=("obs", "episode_start")))
    bag = _write_stream(tmp_path / "stream", {"/observation": (F32, msgs)})
    assert [ep.obs.tolist() for ep in read_demonstrations(bag)] == [obs[:3].tolist(), obs[3:].tolist()]
    assert [len(ep.obs) for ep in read_demonstrations(bag, reset_marker=None)] == [7]

def test_float64_stream_and_topic_choice(tmp_path: Path) -> None:
    obs = np.linspace(-1, 1, 12).reshape(4, 3)
    msgs = [(SEC + k * SEC // 10, _multiarray(F64, row)) for k, row in enumerate(obs)]
    other = [(SEC, TS.types["std_msgs/msg/String"](data="hello"))]
    bag = _write_stream(tmp_path / "f64", {"/state": (F64, msgs), "/chatter": ("std_msgs/msg/String", other)},
                        storage="sqlite3")
    (ep,) = read_demonstrations(bag)  # the only observation-like topic is chosen
    assert np.array_equal(ep.obs, obs.astype(np.float32))
    for topic in ("/state", "state"):  # a relative name resolves in the root namespace
        (ep,) = read_demonstrations(bag, topic=topic, expected_obs_dim=3)
        assert ep.obs.shape == (4, 3) and ep.meta["topic"] == "/state"


def test_joint_state_selection_in_policy_order(tmp_path: Path) -> None:
    names = ["wrist", "shoulder", "elbow"]  # message order differs from the policy's
    rng = np.random.default_rng(0)
    pos, vel = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    msgs = [(SEC + k * SEC // 50, _joint_state(names, pos[k], vel[k])) for k in range(5)]
    bag = _write_stream(tmp_path / "js", {"/joint_states": (JS, msgs)})
    order = [1, 2, 0]  # shoulder, elbow, wrist
    (ep,) = read_demonstrations(bag, joints=["shoulder", "elbow", "wrist"])
    want = np.concatenate([pos[:, order], vel[:, order]], axis=1).astype(np.float32)
    assert np.array_equal(ep.obs, want)
    (ep,) = read_demonstrations(bag, joints=["elbow"], fields=("velocity", "position"))
    assert np.array_equal(ep.obs, np.stack([vel[:, 2], pos[:, 2]], axis=1).astype(np.float32))
    (one,) = read_demonstrations(bag, joints="elbow", fields="velocity")  # a name, not its letters
    assert np.array_equal(one.obs, vel[:, 2:3].astype(np.float32))
    # default joints: the first message's order
    (ep,) = read_demonstrations(bag, fields=("position",))
    assert np.array_equal(ep.obs, pos.astype(np.float32))


def test_joint_state_reset_marker(tmp_path: Path) -> None:
    """An empty JointState always ends an episode; one with names and values ends it only by its
    header.frame_id "reset" (a step like any other with reset_marker=None)."""
    names = ["a", "b"]
    ms = 1_000_000
    msgs = [(SEC + k * 10 * ms, _joint_state(names, [k, k], [0, 0])) for k in range(3)]
    msgs.append((SEC + 30 * ms, _joint_state([], [], [], frame_id="reset")))  # empty: a marker anyway
    msgs += [(SEC + (k + 4) * 10 * ms, _joint_state(names, [k, -k], [1, 1])) for k in range(2)]
    msgs.append((SEC + 60 * ms, _joint_state(names, [7, 8], [9, 9], frame_id="reset")))  # full marker
    msgs += [(SEC + (k + 7) * 10 * ms, _joint_state(names, [5, k], [2, 2])) for k in range(2)]
    bag = _write_stream(tmp_path / "js", {"/joint_states": (JS, msgs)})
    first = [[0, 0, 0, 0], [1, 1, 0, 0], [2, 2, 0, 0]]
    second = [[0, 0, 1, 1], [1, -1, 1, 1]]
    third = [[5, 0, 2, 2], [5, 1, 2, 2]]
    assert [ep.obs.tolist() for ep in read_demonstrations(bag, joints=names)] == [first, second, third]
    # without the frame_id rule the full marker is an observation inside the second episode
    plain = read_demonstrations(bag, joints=names, reset_marker=None)
    assert [ep.obs.tolist() for ep in plain] == [first, [*second, [7, 8, 9, 9], *third]]


def test_obs_field_for_other_message_types(tmp_path: Path) -> None:
    vec = TS.types["geometry_msgs/msg/Vector3"]
    twist = TS.types["geometry_msgs/msg/Twist"]
    msgs = [(SEC + k * 10_000_000, twist(linear=vec(x=k, y=1.0, z=2.0), angular=vec(x=0.0, y=0.0, z=-k)))
            for k in range(3)]
    bag = _write_stream(tmp_path / "twist", {"/cmd": ("geometry_msgs/msg/Twist", msgs)})
    with pytest.raises(ValueError, match="obs_field"):
        read_demonstrations(bag, topic="/cmd")
    (ep,) = read_demonstrations(bag, topic="/cmd", obs_field=("linear", "angular.z"))
    assert ep.obs.tolist() == [[0, 1, 2, 0], [1, 1, 2, -1], [2, 1, 2, -2]]
    # the bag's only topic needs no name when obs_field says how to read it; of two, one is named
    (alone,) = read_demonstrations(bag, obs_field=("linear", "angular.z"))
    assert alone.obs.tolist() == ep.obs.tolist()
    two = _write_stream(tmp_path / "two", {"/cmd": ("geometry_msgs/msg/Twist", msgs),
                                           "/cmd2": ("geometry_msgs/msg/Twist", msgs)})
    with pytest.raises(ValueError, match="choose one with demos_topic"):
        read_demonstrations(two, obs_field=("linear", "angular.z"))
    from opolo_ros.algo.config import load_run_config  # the same from a run config

    cfg = load_run_config(None, {"demos": str(bag), "demos_topic": "/cmd"})
    with pytest.raises(ValueError, match="the config key demos_obs_field"):
        load_episodes(cfg.demos, **cfg.demo_options())
    cfg = load_run_config(None, {"demos": str(bag), "demos_topic": "/cmd",
                                 "demos_obs_field": "linear, angular.z"})
    assert [ep.obs.tolist() for ep in load_episodes(cfg.demos, **cfg.demo_options())] == [ep.obs.tolist()]


# ------------------------------------------------------------------------------------- errors

def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_error_missing_path_and_not_a_bag(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        read_demonstrations(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="not found"):
        load_episodes(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a rosbag2 bag") as exc:
        read_demonstrations(tmp_path / "empty")
    _one_line(exc)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="not a rosbag2 bag"):
        read_demonstrations(tmp_path / "notes.txt")


def test_error_corrupt_or_truncated_metadata(tmp_path: Path) -> None:
    bag = write_demonstrations(tmp_path / "demos", _episodes())
    meta = bag / "metadata.yaml"
    text = meta.read_text()
    meta.write_text(text[: len(text) // 3])  # truncated
    with pytest.raises(ValueError, match="not a readable rosbag2 bag") as exc:
        read_demonstrations(bag)
    _one_line(exc)
    meta.write_text("{{{ not yaml: [")
    with pytest.raises(ValueError, match="not a readable rosbag2 bag") as exc:
        read_demonstrations(bag)
    _one_line(exc)
    meta.unlink()
    with pytest.raises(ValueError, match="metadata.yaml is missing"):
        read_demonstrations(bag)


def test_error_truncated_storage(tmp_path: Path) -> None:
    bag = write_demonstrations(tmp_path / "demos", _episodes(lengths=(50, 50)))
    data = bag / "demos.mcap"
    raw = data.read_bytes()
    data.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"demos: not a readable rosbag2 bag \(corrupt or truncated") as exc:
        read_demonstrations(bag)
    _one_line(exc)


def test_error_topic_missing_lists_topics(tmp_path: Path) -> None:
    bag = write_demonstrations(tmp_path / "demos", _episodes())
    with pytest.raises(ValueError, match=r"'/expert' not in the bag.*/opolo/demonstrations") as exc:
        read_demonstrations(bag, topic="/expert")
    _one_line(exc)
    both = _write_stream(tmp_path / "two", {"/a": (F32, _stream(np.zeros((2, 2)))),
                                            "/b": (F32, _stream(np.zeros((2, 2))))})
    with pytest.raises(ValueError, match=r"several observation topics.*/a .*/b"):
        read_demonstrations(both)


def test_error_wrong_message_type(tmp_path: Path) -> None:
    msgs = [(SEC, TS.types["std_msgs/msg/String"](data="x"))]
    bag = _write_stream(tmp_path / "s", {"/text": ("std_msgs/msg/String", msgs)})
    read = (r"\(the types read: .* a stream of Float32MultiArray, Float64MultiArray, JointState; "
            r"another type's fields: demos_obs_field\)")
    with pytest.raises(ValueError, match=rf"no demonstration or observation topic {read}.*/text"):
        read_demonstrations(bag)
    with pytest.raises(ValueError, match="has type std_msgs/msg/String"):
        read_demonstrations(bag, topic="/text")


def test_error_observation_dimension(tmp_path: Path) -> None:
    bag = write_demonstrations(tmp_path / "demos", _episodes(obs_dim=3))
    with pytest.raises(ValueError, match="observation dimension 3, expected 4"):
        read_demonstrations(bag, expected_obs_dim=4)
    msgs = _stream(np.zeros((3, 2))) + [(SEC + SEC // 10, _multiarray(F32, [1.0, 2.0, 3.0]))]
    stream = _write_stream(tmp_path / "stream", {"/obs": (F32, msgs)})
    with pytest.raises(ValueError, match="message 3: observation dimension 3, earlier .* 2"):
        read_demonstrations(stream)


def test_error_non_finite(tmp_path: Path) -> None:
    obs = np.zeros((4, 2), dtype=np.float32)
    obs[2, 1] = np.nan
    bag = _write_stream(tmp_path / "nan", {"/obs": (F32, _stream(obs))})
    with pytest.raises(ValueError, match=r"message 2: observation contains NaN or inf \(value 1 = nan\)"):
        read_demonstrations(bag)
    obs[2, 1] = np.inf
    bag = _write_stream(tmp_path / "inf", {"/obs": (F64, [(t, _multiarray(F64, m.data))
                                                           for t, m in _stream(obs)])})
    with pytest.raises(ValueError, match=r"NaN or inf \(value 1 = inf\)"):
        read_demonstrations(bag)
    # a JointState's value is named by its field and joint (the first message's order, or joints)
    msgs = [(SEC + k * 10_000_000, _joint_state(["a", "b"], [0, 0], [0, np.nan if k == 2 else 0]))
            for k in range(4)]
    bag = _write_stream(tmp_path / "js", {"/joint_states": (JS, msgs)})
    with pytest.raises(ValueError, match=r"message 2: .*NaN or inf \(velocity of b = nan\)") as exc:
        read_demonstrations(bag)
    _one_line(exc)
    with pytest.raises(ValueError, match=r"\(velocity of b = nan\)"):
        read_demonstrations(bag, joints=["b", "a"])


def test_error_joint_missing(tmp_path: Path) -> None:
    msgs = [(SEC + k * 10_000_000, _joint_state(["a", "b"], [0, 0], [0, 0])) for k in range(3)]
    bag = _write_stream(tmp_path / "js", {"/joint_states": (JS, msgs)})
    with pytest.raises(ValueError, match=r"joint\(s\) \['c'\] missing") as exc:
        read_demonstrations(bag, joints=["a", "c"])
    _one_line(exc)
    short = [(SEC + k * 10_000_000, _joint_state(["a", "b"], [0, 0], [])) for k in range(3)]
    bag = _write_stream(tmp_path / "js2", {"/joint_states": (JS, short)})
    with pytest.raises(ValueError, match="0 velocity values for 2 joints"):
        read_demonstrations(bag)


def test_joint_state_default_order_is_the_first_messages_by_name(tmp_path: Path) -> None:
    """Without `joints`, the first message's order is applied by name to the later messages."""
    msgs = [(SEC, _joint_state(["a", "b"], [1, 2], [10, 20])),
            (SEC + SEC // 50, _joint_state(["b", "a"], [2.5, 1.5], [25, 15]))]
    (ep,) = read_demonstrations(_write_stream(tmp_path / "swap", {"/joint_states": (JS, msgs)}))
    assert ep.obs.tolist() == [[1, 2, 10, 20], [1.5, 2.5, 15, 25]]
    msgs[1] = (SEC + SEC // 50, _joint_state(["a", "c"], [1.5, 9], [15, 90]))  # b replaced by c
    bag = _write_stream(tmp_path / "other", {"/joint_states": (JS, msgs)})
    with pytest.raises(ValueError, match=r"message 1: joint\(s\) \['b'\] missing") as exc:
        read_demonstrations(bag)
    _one_line(exc)


def test_error_duplicate_joint_names(tmp_path: Path) -> None:
    msgs = [(SEC + k * SEC // 50, _joint_state(["a", "a"], [1, 2], [3, 4])) for k in range(3)]
    bag = _write_stream(tmp_path / "dup", {"/joint_states": (JS, msgs)})
    for joints in (None, ["a"]):
        with pytest.raises(ValueError, match=r"message 0: duplicate joint names in the JointState"):
            read_demonstrations(bag, joints=joints)


def test_float64_demonstration_layout_and_float32_range(tmp_path: Path) -> None:
    """A Float64MultiArray in the demonstration layout is read as episodes, not as a stream; a value
    beyond float32 is refused, naming the message that holds it."""
    from opolo_ros.data.bags import demonstration_layout

    eps = _episodes(obs_dim=2, lengths=(3, 4))
    cls, dim_cls = TS.types[F64], TS.types["std_msgs/msg/MultiArrayDimension"]
    layout_cls = TS.types["std_msgs/msg/MultiArrayLayout"]

    def f64_demo(k: int, ep: Episode):
        dims, offset, data = demonstration_layout(ep.obs, ep.ret, k)
        return cls(layout=layout_cls(dim=[dim_cls(label=lab, size=n, stride=st) for lab, n, st in dims],
                                     data_offset=offset), data=data.astype(np.float64))

    msgs = [(SEC + k * SEC, f64_demo(k, ep)) for k, ep in enumerate(eps)]
    got = read_demonstrations(_write_stream(tmp_path / "demo64", {"/demos": (F64, msgs)}))
    assert [ep.obs.tolist() for ep in got] == [ep.obs.tolist() for ep in eps]
    assert got[0].ret == eps[0].ret and np.isnan(got[1].ret)
    msgs[1][1].data[3] = 1e39
    bag = _write_stream(tmp_path / "demo64_big", {"/demos": (F64, msgs)})
    with pytest.raises(ValueError, match="message 1: an observation value exceeds the float32 range"):
        read_demonstrations(bag)
    stream = [(SEC + k * SEC // 100, _multiarray(F64, [0.0, 1e39 if k == 2 else 0.0])) for k in range(4)]
    bag = _write_stream(tmp_path / "stream64_big", {"/obs": (F64, stream)})
    with pytest.raises(ValueError, match="message 2: an observation value exceeds the float32 range"):
        read_demonstrations(bag)
    msgs[1][1].data[3] = 0.0
    msgs[1][1].data[0] = 1e300  # the return, which the topic and our bags carry as float32
    bag = _write_stream(tmp_path / "demo64_return", {"/demos": (F64, msgs)})
    with pytest.raises(ValueError, match="message 1: episode return 1e\\+300 exceeds the float32 range"):
        read_demonstrations(bag)

def test_error_episode_shorter_than_two_states(tmp_path: Path) -> None:
    msgs = (_stream(np.zeros((3, 2))) + _stream(np.ones((1, 2)), t0=5 * SEC)  # lone state after a gap
            + _stream(np.full((3, 2), 2.0), t0=7 * SEC))
    bag = _write_stream(tmp_path / "short", {"/obs": (F32, msgs)})
    with pytest.raises(ValueError, match=r"message 3 has 1 observation; an episode needs at least 2 "
                                         r"\(T\+1 >= 2\) \(it began after a gap of 3.98 s and ended at a "
                                         r"gap of 2 s, more than the episode gap 0.5 s.*demos_episode_gap_s"):
        read_demonstrations(bag)
    with pytest.raises(BagError):
        read_demonstrations(bag, episode_gap_s=-1)
    assert len(read_demonstrations(bag, episode_gap_s=1e300)) == 1  # no gap rule (not an OverflowError)
    slow = [(SEC + k * SEC, _multiarray(F32, [float(k), 0.0])) for k in range(4)]  # 1 Hz, 0.5 s gap
    with pytest.raises(BagError, match=r"message 1 has 1 observation.* \(it began after a gap of 1 s "
                                       r"and ended at a gap of 1 s, more than the episode gap 0.5 s"):
        read_demonstrations(_write_stream(tmp_path / "slow", {"/obs": (F32, slow)}))
    with pytest.raises(BagError, match=r"message 0 has 1 observation"):  # the whole stream
        read_demonstrations(_write_stream(tmp_path / "one", {"/obs": (F32, slow[:1])}))
    with pytest.raises(BagError, match=r"no episodes on topic /obs \(2 single states left out: a stream "
                                       r"published slower than the episode gap"):  # first and last
        read_demonstrations(_write_stream(tmp_path / "two", {"/obs": (F32, slow[:2])}))


@pytest.mark.parametrize("split", ["marker", "gap"])
def test_a_lone_state_where_a_recording_began_or_stopped_is_left_out(tmp_path: Path, split: str) -> None:
    """A recording that began one step before an episode ended, or stopped one step after the next
    began (record-topics with the sim bridge's reset markers), has one state of each of those
    episodes: no transition, so nothing to train on; the bag was refused whole for it."""
    def gap_or_marker(t: int) -> list:
        return [(t, _multiarray(F32, [], labels=("reset",)))] if split == "marker" else []

    t_mid, t_end = 3 * SEC, 5 * SEC
    msgs = (_stream(np.full((1, 2), 9.0)) + gap_or_marker(SEC + SEC // 200)
            + _stream(np.zeros((4, 2)), t0=2 * SEC) + gap_or_marker(t_mid - SEC // 200)
            + _stream(np.ones((3, 2)), t0=t_mid) + gap_or_marker(t_end - SEC // 200)
            + _stream(np.full((1, 2), 8.0), t0=t_end))
    episodes = read_demonstrations(_write_stream(tmp_path / "cut", {"/obs": (F32, msgs)}))
    assert [ep.obs[0, 0] for ep in episodes] == [0.0, 1.0] and [len(ep.obs) for ep in episodes] == [4, 3]
    if split == "marker":  # a marker before the lone first state (the recorder caught a reset): the
        marked = [(SEC - SEC // 200, _multiarray(F32, [], labels=("reset",))), *msgs]  # same; was an error
        episodes = read_demonstrations(_write_stream(tmp_path / "marked", {"/obs": (F32, marked)}))
        assert [len(ep.obs) for ep in episodes] == [4, 3]


def test_error_time_stamps_that_do_not_increase(tmp_path: Path) -> None:
    """Two episodes on a simulated clock that restarts at 0 come back interleaved by time: the equal
    stamps give it away. So do a stream's messages going back in time."""
    first, second = _stream(np.zeros((3, 2)), t0=0), _stream(np.ones((3, 2)), t0=0)
    bag = _write_stream(tmp_path / "restart", {"/obs": (F32, first + second)})
    with pytest.raises(BagError, match=r"message 1: its time stamp is not after the previous message's "
                                       r"\(0 <= 0 ns\).*a clock that restarted"):
        read_demonstrations(bag)


def test_stream_or_episodes_decided_by_the_first_message_with_data(tmp_path: Path) -> None:
    """A reset marker first does not turn a topic of episodes into a stream (which would flatten
    each episode into one observation); the two kinds mixed, or a near-miss layout, are errors."""
    from opolo_ros.data.bags import demonstration_layout

    dim_cls = TS.types["std_msgs/msg/MultiArrayDimension"]
    layout_cls = TS.types["std_msgs/msg/MultiArrayLayout"]

    def demo(k: int, labels: tuple[str, ...] = ()):
        dims, offset, data = demonstration_layout(np.full((3, 2), k, np.float32), 1.0, k)
        dims = [*dims, *((lab, 0, 0) for lab in labels)]
        dim = [dim_cls(label=lab, size=n, stride=st) for lab, n, st in dims]
        return TS.types[F32](layout=layout_cls(dim=dim, data_offset=offset), data=data)

    marker = (SEC, _multiarray(F32, [], labels=()))
    episodes = [(2 * SEC + k * SEC, demo(k)) for k in range(3)]
    got = read_demonstrations(_write_stream(tmp_path / "first", {"/demos": (F32, [marker, *episodes])}))
    assert [ep.obs.shape for ep in got] == [(3, 2)] * 3
    mixed = [(SEC, _multiarray(F32, [1.0, 2.0])), (SEC + 1, _multiarray(F32, [1.0, 3.0])), episodes[0]]
    with pytest.raises(BagError, match="message 2: a message in the demonstration layout in an observation"):
        read_demonstrations(_write_stream(tmp_path / "mixed", {"/demos": (F32, mixed)}))
    with pytest.raises(BagError, match=r"message 0: dims labelled \['steps', 'obs', 'episode', 'extra'\]"):
        read_demonstrations(_write_stream(tmp_path / "extra", {"/d": (F32, [(SEC, demo(0, ("extra",)))])}))


def test_error_messages_that_only_look_like_reset_markers(tmp_path: Path) -> None:
    """A JointState with values but no names, a multi-array whose data_offset is past its data: bad
    input, not episode boundaries."""
    nameless = [(SEC, _joint_state(["a"], [0.0], [0.0])), (SEC + 1, _joint_state([], [1.0], [2.0]))]
    with pytest.raises(BagError, match="message 1: JointState with values but no joint names"):
        read_demonstrations(_write_stream(tmp_path / "nameless", {"/joint_states": (JS, nameless)}))
    past = _multiarray(F32, [1.0, 2.0])
    past.layout.data_offset = 3
    msgs = [*_stream(np.zeros((2, 2))), (2 * SEC, past)]
    with pytest.raises(BagError, match="message 2: data_offset 3 is past the 2 values of the message"):
        read_demonstrations(_write_stream(tmp_path / "past", {"/obs": (F32, msgs)}))


# -------------------------------------------------------------------------------------- record

def test_cli_record_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opolo_ros.algo.networks import Actor
    from opolo_ros.export.onnx_policy import export_policy

    model = export_policy(Actor(4, 1, (16, 16)), tmp_path / "expert.onnx", action_low=[-3],
                          action_high=[3], metadata={"env_id": "InvertedPendulum-v5"})
    out = tmp_path / "demos" / "InvertedPendulum-v5"
    argv = ["record", "--model", str(model), "--episodes", "2", "--output", str(out), "--seed", "7"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "InvertedPendulum-v5: 2 expert episodes, return" in printed and str(out) in printed
    eps = load_episodes(out)
    assert len(eps) == 2 and all(ep.obs.shape[1] == 4 and ep.obs.shape[0] >= 2 for ep in eps)
    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.sim.rollout import rollout_episodes

    policy = load_policy(model)
    direct = rollout_episodes(lambda o: policy(o), "InvertedPendulum-v5", 2, seed=7)
    for want, ep in zip(direct, eps):  # deterministic: the bag holds exactly the rollout
        assert np.array_equal(want.obs, ep.obs) and want.ret == ep.ret
    custom = read_bag_metadata(out)
    assert custom["env_id"] == "InvertedPendulum-v5" and custom["expert"] == "expert.onnx"
    assert custom["seed"] == "7" and json.loads(custom["returns"]) == [ep.ret for ep in eps]
    # a second recording into the same folder is refused with a one-line error, exit 2
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err and err.count("\n") == 1


def test_complete_episodes_skips_falls_and_records_their_seeds() -> None:
    import itertools

    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.sim.rollout import complete_episodes

    expert = load_policy(IP_EXPERT)
    calls = itertools.count()  # full push for the first 4 steps: the first episode falls at step 3

    def clumsy(obs: np.ndarray) -> np.ndarray:
        return np.array([3.0], dtype=np.float32) if next(calls) < 4 else expert(obs)

    kept, skipped = complete_episodes(clumsy, "InvertedPendulum-v5", 2, seed=5)
    assert skipped == [5]
    assert [ep.meta["seed"] for ep in kept] == [6, 7]
    assert all(not ep.meta["terminated"] and len(ep.obs) == 1001 and ep.ret == 1000.0 for ep in kept)
    with pytest.raises(ValueError, match=r"only 0 of 3 InvertedPendulum-v5 episodes \(seeds 1..3\)"):
        complete_episodes(lambda o: np.array([3.0]), "InvertedPendulum-v5", 2, seed=1, max_tries=3)


def test_cli_record_skip_terminated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demos"
    argv = ["record", "--model", str(IP_EXPERT),
            "--episodes", "2", "--output", str(out), "--skip-terminated"]
    assert cli.main(argv) == 0
    assert json.loads(read_bag_metadata(out)["skipped_terminated_seeds"]) == []  # this expert never falls
    assert [len(ep.obs) for ep in load_episodes(out)] == [1001, 1001]
    # a policy that always falls: one-line error, exit 2, no bag
    from opolo_ros.algo.networks import Actor
    from opolo_ros.export.onnx_policy import export_policy

    falling = export_policy(Actor(4, 1, (16, 16)), tmp_path / "falling.onnx", action_low=[-3],
                            action_high=[3], metadata={"env_id": "InvertedPendulum-v5"})
    argv = ["record", "--model", str(falling), "--episodes", "1", "--output", str(tmp_path / "none"),
            "--skip-terminated"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "reached the time limit without terminating" in err and err.count("\n") == 1
    assert not (tmp_path / "none").exists()


def pendulum_robot_demos(path: Path) -> Path:
    """The shipped pendulum demonstrations as a robot's own (an .npz without the recorded task), for
    an MJCF copy of the pendulum's model: a bag that says InvertedPendulum-v5 is refused for it."""
    from opolo_ros.data.demos import save_npz

    shipped = Path(__file__).resolve().parents[1] / "models" / "demos" / "InvertedPendulum-v5"
    save_npz(path, [Episode(ep.obs, ep.ret) for ep in load_episodes(shipped)])
    return path


def robot_bag(path: Path) -> tuple[Path, np.ndarray]:
    """A bag with two JointState topics (an arm and a gripper), and the observations that
    demos_topic=/joint_states, demos_joints=shoulder,elbow, demos_fields=velocity,position make."""
    rng = np.random.default_rng(1)
    pos, vel = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    stamps = [SEC + k * SEC // 50 for k in range(6)]
    arm = [(t, _joint_state(["wrist", "shoulder", "elbow"], pos[k], vel[k])) for k, t in enumerate(stamps)]
    gripper = [(t, _joint_state(["finger"], [0.1], [0.0])) for t in stamps]
    bag = _write_stream(path, {"/joint_states": (JS, arm), "/gripper/joint_states": (JS, gripper)})
    return bag, np.concatenate([vel[:, [1, 2]], pos[:, [1, 2]]], axis=1).astype(np.float32)


def test_run_config_picks_the_topic_joints_and_fields_of_a_robot_bag(tmp_path: Path) -> None:
    """A robot bag with two JointState topics: the run config's demos_* keys choose the topic, the
    joints in policy order and the fields (the graph's demo_player: test_nodes.py)."""
    from opolo_ros.algo.config import load_run_config

    bag, want = robot_bag(tmp_path / "robot")
    cfg = load_run_config(None, {"demos": str(bag)})
    with pytest.raises(ValueError, match="several observation topics; choose one with demos_topic "
                                         r"\(opolo-ros train --set demos_topic=..., opolo-ros launch "
                                         "sim_train demos_topic:=...") as exc:
        load_episodes(cfg.demos, **cfg.demo_options())
    _one_line(exc)
    cfg = load_run_config(None, {"demos": str(bag), "demos_topic": "/joint_states",
                                 "demos_joints": "shoulder, elbow", "demos_fields": "velocity,position"})
    (ep,) = load_episodes(cfg.demos, **cfg.demo_options())
    assert np.array_equal(ep.obs, want)


@pytest.mark.parametrize("case", ["negative_seed", "other_task", "output_under_a_file", "no_episodes",
                                  "existing_output"])
def test_cli_record_refuses_before_any_rollout(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               case: str) -> None:
    """One line, exit 2, and nothing recorded: a negative seed, a model of another task with the
    same dimensions (Walker2d's expert has HalfCheetah's), an output that cannot be a folder, no
    episodes to record, an output that exists (a mutation test: `--episodes 0` went on to an empty
    bag, an existing output was refused only after the whole recording)."""
    (tmp_path / "a_file").write_text("")
    root = Path(__file__).resolve().parents[1]
    argv = {"negative_seed": ["--model", str(IP_EXPERT), "--seed", "-1"],
            "other_task": ["--model", str(root / "models" / "experts" / "Walker2d-v5.onnx"),
                           "--env-id", "HalfCheetah-v5"],
            "output_under_a_file": ["--model", str(IP_EXPERT),
                                    "--output", str(tmp_path / "a_file" / "bag")],
            "no_episodes": ["--model", str(IP_EXPERT), "--episodes", "0"],
            "existing_output": ["--model", str(IP_EXPERT), "--output", str(tmp_path / "old_bag")]}[case]
    says = {"negative_seed": "argument --seed: must not be negative, got -1",
            "other_task": "was trained on Walker2d-v5 (its metadata's env_id), not HalfCheetah-v5",
            "output_under_a_file": "bag: cannot create its folder",
            "no_episodes": "--episodes must be at least 1, got 0",
            "existing_output": "old_bag already exists; refusing to overwrite a bag (choose another "
                               "--output"}[case]
    (tmp_path / "old_bag").mkdir()
    if "--output" not in argv:
        argv += ["--output", str(tmp_path / "bag")]
    with pytest.raises(SystemExit) if case == "negative_seed" else contextlib.nullcontext() as exited:
        status = cli.main(["record", "--episodes", "1", *argv])
    status = exited.value.code if case == "negative_seed" else status
    err = capsys.readouterr().err
    assert status == 2 and says in err, err
    assert not (tmp_path / "bag").exists()


def test_an_episode_with_absurd_finite_values_is_refused() -> None:
    """Values of 1e30 (or 3e38) overflowed the discriminator's normaliser: features silently zeroed,
    or every network NaN (a probe found both)."""
    from opolo_ros.data.demos import Episode

    obs = np.zeros((5, 3), np.float32)
    obs[2, 1] = 1e30
    with pytest.raises(ValueError, match=r"episode observation 2 has 1e\+30 at index 1, beyond \+-1e\+10"):
        Episode(obs, 1.0)
    obs[2, 1] = 1e9  # large, fine
    Episode(obs, 1.0)


def test_joints_for_an_array_topic_are_refused_not_ignored(tmp_path: Path) -> None:
    """demos_joints select from a JointState; for an array topic they selected nothing and the
    whole array was read without a word (a walkthrough)."""
    bag = _write_stream(tmp_path / "arrays", {"/obs": (F32, _stream(np.zeros((3, 4))))})
    with pytest.raises(BagError, match=r"topic /obs is a stream of std_msgs/msg/Float32MultiArray: joints "
                                       r"\(demos_joints\) select from a sensor_msgs/msg/JointState only"):
        read_demonstrations(bag, joints=["shoulder", "elbow"])
    assert len(read_demonstrations(bag)) == 1
    # the project's own layout: ignored, as before (the config of an MJCF run of sim_train before
    # this change names its model's joints with any bag, and must still resume)
    demos = write_demonstrations(tmp_path / "demos", _episodes())
    assert len(read_demonstrations(demos, joints=["shoulder", "elbow"])) == len(_episodes())
    assert bags.demonstration_type(bag) == F32 and bags.demonstration_type(bag, "obs") == F32
    assert bags.demonstration_type(tmp_path / "x.npz") is None


def test_committed_messages_in_a_write_ahead_log_are_read(tmp_path: Path) -> None:
    """A sqlite3 bag recorded in WAL mode (rosbag2's `resilient` preset) whose writer was killed holds
    committed messages in <file>.db3-wal only; rosbags reads storage files immutable and left them
    out without a word. They are moved into the storage file and read."""
    import sqlite3
    import subprocess
    import sys

    obs = np.arange(16, dtype=np.float32).reshape(8, 2)
    bag = _write_stream(tmp_path / "wal", {"/x": (F32, _stream(obs[:3]))}, storage="sqlite3")
    db = next(bag.glob("*.db3"))
    later = [(ts, TS.serialize_cdr(msg, F32).tobytes()) for ts, msg in _stream(obs)[3:]]
    writer = (  # a recorder in WAL mode that commits 5 more messages, then dies (SIGKILL)
        "import os, sqlite3, sys\n"
        f"conn = sqlite3.connect({str(db)!r})\n"
        "conn.execute('PRAGMA journal_mode=WAL')\n"
        "conn.execute('PRAGMA wal_autocheckpoint=0')\n"
        f"for ts, data in {later!r}:\n"
        "    conn.execute('INSERT INTO messages (topic_id, timestamp, data) VALUES (1, ?, ?)', (ts, data))\n"
        "    conn.commit()\n"
        "os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", writer], check=False)
    assert Path(f"{db}-wal").stat().st_size > 0
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:  # closed: a connection
        # left open kept the log in place whatever the reader did (a mutation test)
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 8
    for path in (db, bag):
        (episode,) = read_demonstrations(path)
        np.testing.assert_array_equal(episode.obs, obs)
    # A log left again, holding nothing the file lacks (its frames moved already): read without a
    # write to the bag, as a bag in a read-only folder must be.
    moved = (f"import os, sqlite3\nconn = sqlite3.connect({str(db)!r})\n"
             "conn.execute('PRAGMA journal_mode=WAL')\n"
             "conn.execute('INSERT INTO messages (topic_id, timestamp, data) SELECT topic_id, timestamp + "
             f"{SEC // 100}, data FROM messages WHERE id = (SELECT max(id) FROM messages)')\nconn.commit()\n"
             "conn.execute('PRAGMA wal_checkpoint(PASSIVE)')\nos.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", moved], check=False)
    obs = np.concatenate([obs, obs[-1:]])
    assert Path(f"{db}-wal").stat().st_size > 0
    before = (db.stat().st_mtime_ns, Path(f"{db}-wal").stat().st_mtime_ns)
    (episode,) = read_demonstrations(bag)
    np.testing.assert_array_equal(episode.obs, obs)
    assert (db.stat().st_mtime_ns, Path(f"{db}-wal").stat().st_mtime_ns) == before


def test_a_folder_whose_sub_folders_hold_bags_of_their_own_is_an_error(tmp_path: Path) -> None:
    """bags/run_0 plus bags/day2/{run_1, run_2}: only run_0 was read, without a word."""
    root = tmp_path / "bags"
    for name in ("run_0", "day2/run_1", "day2/run_2"):
        write_demonstrations(root / name, _episodes(lengths=(3,)))
    with pytest.raises(ValueError, match=r"sub-folders holding bags of their own \['day2'\]"):
        read_demonstrations(root)
    with pytest.raises(ValueError, match=r"no bag of its own, one level down: sub-folders holding bags of "
                                         r"their own \['bags'\]"):
        read_demonstrations(tmp_path)  # bags two levels down: said too
    assert len(read_demonstrations(root / "day2")) == 2


def test_the_digests_are_checked_on_the_topic_the_bag_was_written_on(tmp_path: Path) -> None:
    """write_demonstrations(topic=...) wrote digests of that topic's messages, but the reader checked
    them only on /opolo/demonstrations: a corrupt value on another topic was read as data."""
    bag = write_demonstrations(tmp_path / "mine", _episodes(lengths=(3, 4)), topic="/my_demos",
                               storage="sqlite3")
    db = next(bag.glob("*.db3"))
    import sqlite3

    with sqlite3.connect(db) as conn:
        rowid, data = conn.execute("SELECT id, data FROM messages ORDER BY id LIMIT 1").fetchone()
        flipped = bytearray(data)
        flipped[-1] ^= 0x01  # the last byte of the last float of episode 0
        conn.execute("UPDATE messages SET data = ? WHERE id = ?", (bytes(flipped), rowid))
    with pytest.raises(ValueError, match="its bytes differ from those the bag was written with"):
        read_demonstrations(bag, topic="/my_demos")


def test_a_value_beyond_what_training_takes_is_said_so_not_called_corruption(tmp_path: Path) -> None:
    """A 1e11 in a stream read as "cannot read messages (corrupt or truncated bag?)"."""
    obs = np.zeros((4, 2), np.float32)
    obs[2, 1] = 1e11
    bag = _write_stream(tmp_path / "big", {"/x": (F32, _stream(obs))})
    with pytest.raises(ValueError) as err:
        read_demonstrations(bag)
    assert "/x: the episode from message 0: episode observation 2 has 1e+11 at index 1, beyond +-1e+10" \
        in str(err.value) and "corrupt" not in str(err.value)



def _demo_message(dims, offset: int, data: np.ndarray):
    """A Float32MultiArray of the plain values demonstration_layout gives."""
    dim = [TS.types["std_msgs/msg/MultiArrayDimension"](label=lab, size=n, stride=st) for lab, n, st in dims]
    layout = TS.types["std_msgs/msg/MultiArrayLayout"](dim=dim, data_offset=offset)
    return TS.types[F32](layout=layout, data=data)


def test_the_demonstration_layout_refuses_what_its_message_cannot_carry(tmp_path: Path) -> None:
    """demonstration_layout refuses one state, an inf return and an episode index beyond uint32, and
    write_demonstrations says so for an inf return in one line (not json's "Out of range float") and
    creates nothing (a mutation test)."""
    from opolo_ros.data.bags import demonstration_layout

    obs = np.zeros((2, 3), np.float32)
    assert demonstration_layout(obs, 1.0, 2**32 - 1)[0][2] == ("episode", 2**32 - 1, 0)
    for args, what in (((obs[:1], 1.0, 0), r"T\+1 >= 2"), ((obs, math.inf, 0), "must be finite"),
                       ((obs, 1.0, 2**32), "fit uint32"), ((obs, 1.0, -1), "fit uint32")):
        with pytest.raises(BagError, match=what):
            demonstration_layout(*args)
    with pytest.raises(BagError, match=r"episode return must be finite in float32, or NaN \(unknown\); "
                                       r"got inf"):
        write_demonstrations(tmp_path / "inf", [Episode(obs, math.inf)])
    assert not (tmp_path / "inf").exists()


def test_a_demonstration_message_of_another_offset_or_episode_stride_is_refused(tmp_path: Path) -> None:
    """The demonstration layout is exact: data_offset 1 and the episode dim's stride 0; a message
    that differs is refused naming it, not read with its values shifted (a mutation test)."""
    from opolo_ros.data.bags import demonstration_layout

    cls, dim_cls = TS.types[F32], TS.types["std_msgs/msg/MultiArrayDimension"]
    layout_cls = TS.types["std_msgs/msg/MultiArrayLayout"]
    ep = _episodes(obs_dim=2, lengths=(3,))[0]

    def message(offset_change: int = 0, episode_stride: int = 0):
        dims, offset, data = demonstration_layout(ep.obs, 1.0, 0)
        dims[2] = (dims[2][0], dims[2][1], episode_stride)
        return cls(layout=layout_cls(dim=[dim_cls(label=lab, size=n, stride=st) for lab, n, st in dims],
                                     data_offset=offset + offset_change), data=data)

    good = _write_stream(tmp_path / "good", {"/d": (F32, [(SEC, message())])})
    assert read_demonstrations(good)[0].ret == 1.0
    for name, msg, what in (("offset", message(offset_change=1),
                             "demonstration data_offset must be 1, got 2"),
                            ("stride", message(episode_stride=1), "malformed demonstration layout")):
        with pytest.raises(BagError, match=f"/d message 0: {what}"):
            read_demonstrations(_write_stream(tmp_path / name, {"/d": (F32, [(SEC, msg)])}))


def test_a_written_bag_names_its_topic_absolutely_and_keeps_no_empty_metadata_key(tmp_path: Path) -> None:
    """write_demonstrations refuses a relative topic, an empty metadata key and no episodes at all
    before anything is created on disk (a mutation test)."""
    for kwargs, what in (({"topic": "demos"}, "topic must be an absolute name"),
                         ({"episodes": []}, "^no episodes to write$"),
                         ({"metadata": {"": 1}}, "metadata keys must be non-empty strings")):
        with pytest.raises(BagError, match=what):
            write_demonstrations(tmp_path / "demos", **{"episodes": _episodes(), **kwargs})
        assert not (tmp_path / "demos").exists()


def test_the_demonstration_topic_is_recorded_keep_last_100(tmp_path: Path) -> None:
    """The demonstrations are offered keep-last 100, the contract's depth, so that `ros2 bag play`
    republishes them to a learner that starts late (a mutation test)."""
    with Reader(write_demonstrations(tmp_path / "demos", _episodes())) as reader:
        qos = reader.topics[bags.DEMO_TOPIC].connections[0].ext.offered_qos_profiles[0]
    assert qos.history.name == "KEEP_LAST" and qos.depth == bags.DEMONSTRATIONS_DEPTH == 100


def test_a_write_that_fails_midway_leaves_no_bag_behind(tmp_path: Path, monkeypatch) -> None:
    """A write that fails after the bag was opened removes the half-written bag folder, so that the
    next try is not refused as an existing one (a mutation test)."""

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Writer, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_demonstrations(tmp_path / "demos", _episodes())
    assert not (tmp_path / "demos").exists()


def test_a_bag_whose_write_ahead_log_another_process_holds_is_refused_not_read_short(tmp_path: Path) -> None:
    """While a reader of the bag (a recording still running) keeps the write-ahead log from being
    moved into the storage file, reading it is refused in one line: read immutable, the messages
    still in the log would be left out without a word (a mutation test)."""
    import sqlite3

    obs = np.arange(12, dtype=np.float32).reshape(6, 2)
    bag = _write_stream(tmp_path / "busy", {"/x": (F32, _stream(obs[:3]))}, storage="sqlite3")
    db = next(bag.glob("*.db3"))
    later = [(ts, TS.serialize_cdr(msg, F32).tobytes()) for ts, msg in _stream(obs)[3:]]
    insert = "INSERT INTO messages (topic_id, timestamp, data) VALUES (1, ?, ?)"
    with contextlib.closing(sqlite3.connect(db)) as writer, contextlib.closing(sqlite3.connect(db)) as other:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute(insert, later[0])
        writer.commit()
        other.execute("BEGIN")
        other.execute("SELECT count(*) FROM messages").fetchone()  # a read that holds its snapshot
        writer.executemany(insert, later[1:])
        writer.commit()
        with pytest.raises(BagError, match=r"busy\.db3: cannot move its write-ahead log \(-wal\) into it: "
                                           r"another process uses the bag"):
            read_demonstrations(bag)


def test_digests_of_a_lost_episode_or_not_digests_at_all_are_said_so(tmp_path: Path) -> None:
    """The bag's digest list says how many episodes it was written with: one fewer on the topic is
    refused, one more is named as an added message, and a list that holds no digests is named as
    such (a mutation test)."""
    for name, digests, what in (("lost", lambda d: [*d, d[0]], "2 episodes on /opolo/demonstrations, but "
                                 r"the bag was written with 3 \(a storage file lost"),
                                ("numbers", lambda d: [1, 2], "custom_data sha256 is not a list of digests"),
                                ("added", lambda d: d[:1], r"message 1: its bytes differ from those the bag "
                                 r"was written with \(episode 1; corrupt storage, or a message added\)")):
        bag = write_demonstrations(tmp_path / name, _episodes(lengths=(3, 4)))
        meta = yaml.safe_load((bag / "metadata.yaml").read_text())
        custom = meta["rosbag2_bagfile_information"]["custom_data"]
        custom["sha256"] = json.dumps(digests(json.loads(custom["sha256"])))
        (bag / "metadata.yaml").write_text(yaml.safe_dump(meta))
        with pytest.raises(BagError, match=what):
            read_demonstrations(bag)


def test_an_observation_stream_beside_the_written_topic_is_not_held_to_its_digests(tmp_path: Path) -> None:
    """The digests are of the demonstration topic's messages only: another topic of the same bag
    is read without them (a mutation test)."""
    written = write_demonstrations(tmp_path / "demos", _episodes(lengths=(3, 4)))
    with Reader(written) as reader:
        demos = [(t, TS.deserialize_cdr(raw, F32)) for _, t, raw in reader.messages()]
    bag = tmp_path / "both"
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        writer.set_custom_data("sha256", read_bag_metadata(written)["sha256"])
        for topic, msgs in ((bags.DEMO_TOPIC, demos), ("/obs", _stream(np.zeros((3, 2))))):
            conn = writer.add_connection(topic, F32, typestore=TS)
            for t, msg in msgs:
                writer.write(conn, t, TS.serialize_cdr(msg, F32))
    assert len(read_demonstrations(bag)) == 2
    (episode,) = read_demonstrations(bag, topic="/obs")
    assert episode.obs.shape == (3, 2)


def test_reading_options_are_checked_before_the_bag_is_looked_for() -> None:
    """An empty obs_field name, and a field or joint named twice, are refused in one line before
    any bag is opened (a mutation test)."""
    for kwargs, what in (({"obs_field": ("pose", "")}, "obs_field must name at least one field"),
                         ({"fields": ("position", "position")}, "fields must be unique names"),
                         ({"joints": ("a", "a")}, "joints must be non-empty and unique")):
        with pytest.raises(BagError, match=what):
            read_demonstrations("/nonexistent/bag", **kwargs)


def test_a_reset_marker_starts_the_count_of_the_next_episodes_messages(tmp_path: Path) -> None:
    """An episode after a reset marker starts at the message after it: its start_message and
    message count leave the marker out (a mutation test)."""
    marker = (SEC // 10, _multiarray(F32, [], labels=("reset",)))
    msgs = [*_stream(np.zeros((3, 2)), t0=0), marker, *_stream(np.ones((3, 2)), t0=SEC // 5)]
    first, second = read_demonstrations(_write_stream(tmp_path / "marked", {"/obs": (F32, msgs)}))
    assert (first.meta["start_message"], first.meta["messages"]) == (0, 3)
    assert (second.meta["start_message"], second.meta["messages"]) == (4, 3)


def test_a_first_marker_whose_values_are_all_before_the_offset_decides_nothing(tmp_path: Path) -> None:
    """A first message whose data ends at its data_offset holds no observation (a reset marker): the
    demonstration messages after it are read as episodes, not refused as a stream (a mutation test)."""
    from opolo_ros.data.bags import demonstration_layout

    marker = _multiarray(F32, [7.0], labels=())
    marker.layout.data_offset = 1
    msgs = [(SEC, marker)]
    for k in range(2):
        dims, offset, data = demonstration_layout(np.full((3, 2), k, np.float32), 1.0, k)
        msgs.append((2 * SEC + k * SEC, _demo_message(dims, offset, data)))
    got = read_demonstrations(_write_stream(tmp_path / "offset_marker", {"/demos": (F32, msgs)}))
    assert [ep.obs.shape for ep in got] == [(3, 2)] * 2


def test_a_written_bag_says_its_format(tmp_path: Path) -> None:
    """custom_data names the format the bag was written in (a mutation test)."""
    bag = write_demonstrations(tmp_path / "demos", _episodes())
    assert read_bag_metadata(bag)["format"] == bags.FORMAT == "opolo_ros demonstration/1"


def test_a_non_finite_value_in_a_demonstration_message_names_its_step(tmp_path: Path) -> None:
    """A NaN in an episode message is located by its step (state index), not by its value index
    (a mutation test)."""
    from opolo_ros.data.bags import demonstration_layout

    dims, offset, data = demonstration_layout(np.zeros((4, 3), np.float32), 1.0, 0)
    data[1 + 2 * 3 + 1] = np.nan  # step 2, value 1
    bag = _write_stream(tmp_path / "nan", {"/d": (F32, [(SEC, _demo_message(dims, offset, data))])})
    with pytest.raises(BagError, match=r"/d message 0: non-finite observation value \(NaN or inf\) at "
                                       r"step 2$"):
        read_demonstrations(bag)
