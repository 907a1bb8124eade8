"""`opolo-ros info`: what a policy, an MJCF model and a demonstration file hold, from the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opolo_ros import cli
from opolo_ros.data.demos import Episode, save_npz

ROOT = Path(__file__).resolve().parents[1]


def info(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    assert cli.main(["info", *argv]) == status
    return capsys.readouterr().out


def test_a_policy_names_its_task_inputs_and_bounds(capsys) -> None:
    out = info(capsys, str(ROOT / "models" / "experts" / "Hopper-v5.onnx"))
    assert "trained on: Hopper-v5 (step " in out
    assert ("input 'obs': 12 values (the last is the time feature 1 - t/T: deploy with "
            "time_feature_clock:=1000, T the training episode length, and 11 observation values)") in out
    assert "output 'action': 3 values within low [-1, -1, -1], high [1, 1, 1]" in out
    # its other metadata, the rate to deploy at first (a mutation test: they were left out unseen);
    # the time feature is said above, not again as a line of its own
    assert "\n  control_period_s: 0.008\n" in out and "\n  eval_return_mean: " in out
    assert "time_feature:" not in out and "time_feature_steps" not in out


def test_an_mjcf_model_lists_the_joints_actuators_and_control_period(capsys, tmp_path) -> None:
    import gymnasium

    xml = tmp_path / "arm.xml"
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    out = info(capsys, str(xml))
    assert "observation: 4 values: the positions of slider, hinge, then their velocities" in out
    assert "action: 1 value: slide [-3, 3]" in out
    assert "control period: 0.02 s (50 Hz): timestep 0.02 s x frame_skip 1" in out
    assert "demos_joints:=slider,hinge / joints:=slider,hinge" in out
    assert "note:" not in out


def test_an_mjcf_models_notes_are_said_and_an_upper_case_suffix_is_a_model(capsys, tmp_path) -> None:
    """What the task leaves out of a model (an actuator without a ctrlrange, commanded in [-1, 1])
    is said, and ARM.XML is read as a model, not as a bag (a mutation test)."""
    xml = tmp_path / "ARM.XML"
    xml.write_text("""<mujoco><worldbody><body><joint name="j" type="hinge"/><geom size="0.1"/></body>


</worldbody><actuator><motor name="m" joint="j"/></actuator></mujoco>""")
    out = info(capsys, str(xml))
    assert "observation: 2 values: the positions of j, then their velocities" in out
    assert "action: 1 value: m [-1, 1]" in out
    assert "note: MJCF " in out and "actuator(s) ['m'] are not ctrllimited" in out


def test_a_bag_lists_its_topics_metadata_and_episodes(capsys) -> None:
    out = info(capsys, str(ROOT / "models" / "demos" / "InvertedPendulum-v5"))
    assert "/opolo/demonstrations [std_msgs/msg/Float32MultiArray]: 4 messages" in out
    assert "env_id: InvertedPendulum-v5" in out
    assert ("demonstrations: 4 episodes of obs_dim 4, 4000 transitions (states per episode: 1001, 1001, "
            "1001, 1001); returns 1000.0, 1000.0, 1000.0, 1000.0") in out



def test_a_folder_of_bags_shows_each_bags_episodes_and_whether_they_make_one_set(capsys, tmp_path) -> None:
    """`info models/demos` read the six tasks' bags as one set and said only "inconsistent" (a
    walkthrough): each bag's episodes now follow its own lines, then whether the folder makes one
    demonstration set, as `--demos FOLDER` reads it; status 1 only when it does not."""
    import shutil

    demos = ROOT / "models" / "demos"
    mixed = tmp_path / "mixed"
    for task in ("InvertedPendulum-v5", "Hopper-v5"):
        shutil.copytree(demos / task, mixed / task)
    out = info(capsys, str(mixed), status=1)
    *bags, together = out.split(f"folder {mixed}, as one demonstration set (--demos {mixed}):\n")[0:2]
    hopper, pendulum = bags[0].split("rosbag2 bag ")[1:]  # in name order
    assert "env_id: Hopper-v5" in hopper and "4 episodes of obs_dim 11, " in hopper
    assert "env_id: InvertedPendulum-v5" in pendulum and "4 episodes of obs_dim 4, 4000 " in pendulum
    assert together.startswith("  demonstrations: none read (") and "inconsistent" in together
    same = tmp_path / "same"
    for copy in ("a", "b"):
        shutil.copytree(demos / "InvertedPendulum-v5", same / copy)
    out = info(capsys, str(same))
    assert out.count("demonstrations: 4 episodes of obs_dim 4") == 2
    eight = ", ".join(["1001"] * 8) + "); returns " + ", ".join(["1000.0"] * 8)
    assert out.endswith(f"as one demonstration set (--demos {same}):\n  demonstrations: 8 episodes of "
                        f"obs_dim 4, 8000 transitions (states per episode: {eight}\n")


def test_demonstration_options_for_a_policy_or_a_model_are_refused(capsys, tmp_path) -> None:
    """`info policy.onnx --topic /x` printed the policy and ignored the option without a word (a
    walkthrough): options that select demonstrations are refused for what holds none (status 2)."""
    expert = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"
    assert cli.main(["info", str(expert), "--topic", "/x", "--episode-gap", "1"]) == 2
    assert capsys.readouterr().err.strip() == (f"opolo-ros info: error: --topic, --episode-gap select "
                                               f"demonstrations in a bag or .npz; {expert} is an ONNX policy")
    xml = tmp_path / "arm.xml"
    xml.write_text('<mujoco><worldbody><body><joint name="j"/><geom size="0.1"/></body></worldbody>'
                   '<actuator><motor joint="j"/></actuator></mujoco>')
    assert cli.main(["info", str(xml), "--fields", "position"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"--fields select demonstrations in a bag or .npz; "
                                                    f"{xml} is an MJCF model")
    assert cli.main(["info", str(expert), "--fields", "position,velocity"]) == 0  # the default, said again

def test_a_recording_cut_short_says_so(capsys, tmp_path) -> None:
    """An `opolo-ros record` stopped early writes the episodes that had ended and says so in the
    bag's metadata: `info` shows it beside the task, expert, seed and source (a mutation test)."""
    from opolo_ros.data.bags import write_demonstrations

    bag = write_demonstrations(tmp_path / "cut", [Episode(np.zeros((3, 4)), 2.0)], metadata={
        "env_id": "InvertedPendulum-v5", "expert": "e.onnx", "seed": 3, "source": "opolo-ros record",
        "interrupted": "1 of 4 episodes recorded", "skipped_terminated_seeds": [5]})
    out = info(capsys, str(bag))
    for line in ("env_id: InvertedPendulum-v5", "expert: e.onnx", "seed: 3", "source: opolo-ros record",
                 "interrupted: 1 of 4 episodes recorded"):
        assert f"\n  {line}\n" in out, line
    assert "skipped_terminated_seeds" not in out and "demonstrations: 1 episode of obs_dim 4" in out


def test_episodes_of_an_npz_and_a_bag_that_needs_a_topic(capsys, tmp_path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "demos.npz"
    save_npz(path, [Episode(rng.normal(size=(5 + k, 3)), float("nan")) for k in range(2)])
    out = info(capsys, str(path))
    assert ("demonstrations: 2 episodes of obs_dim 3, 9 transitions (states per episode: 5, 6); "
            "returns unknown") in out
    # an .npz without episodes: why, without the bag options (an .npz takes none; a walkthrough)
    np.savez(tmp_path / "keys.npz", ep0=np.zeros((3, 2)))
    out = info(capsys, str(tmp_path / "keys.npz"), status=1)
    assert "keys.npz holds no episodes (no obs_<k> arrays))\n" in out and "--topic" not in out
    # some returns known: their count and mean; the first 20 lengths, then '...' (a mutation test)
    save_npz(path, [Episode(np.zeros((2, 1)), float("nan") if k % 2 else 10.0 * k) for k in range(21)])
    out = info(capsys, str(path))
    twenty = ", ".join(["2"] * 20)
    assert f"(states per episode: {twenty}, ...); returns 11 known, mean 100.0" in out
    save_npz(path, [Episode(np.zeros((2, 1)), 1.0) for _ in range(20)])
    assert f"(states per episode: {twenty}); returns 1.0, " in info(capsys, str(path))
    from test_bags import F32, SEC, _stream, _write_stream

    two = _write_stream(tmp_path / "two", {"/a": (F32, _stream(np.zeros((3, 2)))),
                                           "/b": (F32, _stream(np.ones((4, 2))))})
    out = info(capsys, str(two), status=1)  # described, but no demonstrations to train on: status 1
    assert "/a [std_msgs/msg/Float32MultiArray]: 3 messages" in out
    assert "demonstrations: none read (" in out and "several observation topics" in out
    assert "[here the options are --topic, --joints, --fields, --episode-gap, --obs-field]" in out
    out = info(capsys, str(two), "--topic", "/b")
    assert "demonstrations: 1 episode of obs_dim 2, 3 transitions" in out
    assert "\n  recorded at 100 Hz (a state every 0.01 s, the median)\n" in out  # the task's rate?
    assert "note:" not in out
    # a stream whose last episode was cut off (3 whole ones of 4 states, gaps of 1 s between them)
    rows = np.arange(15.0).reshape(15, 1) * [1.0, 1.0]
    cut = [msg for k in range(4)
           for msg in _stream(rows[4 * k:4 * k + (4 if k < 3 else 2)], SEC + k * 2 * SEC)]
    out = info(capsys, str(_write_stream(tmp_path / "cut", {"/a": (F32, cut)})))
    assert "demonstrations: 4 episodes of obs_dim 2, 10 transitions (states per episode: 4, 4, 4, 2)" in out
    assert ("\n  note: the last demonstration episode has 2 states, every other one 4: a recording cut "
            "off mid-episode (its duration, a stop)? It is used as it is; leave it out with "
            "num_demos: 3\n") in out
    out = info(capsys, str(two), "--topic", "/b", "--episode-gap", "0", status=1)
    assert "episode_gap_s must be a number of seconds > 0 (inf: gaps never split), got 0.0" in out


def test_a_bag_of_another_message_type_is_read_with_obs_field(capsys, tmp_path) -> None:
    from test_bags import SEC, TS, _write_stream

    vec, twist = TS.types["geometry_msgs/msg/Vector3"], TS.types["geometry_msgs/msg/Twist"]
    msgs = [(SEC + k * 10_000_000, twist(linear=vec(x=k, y=1.0, z=2.0), angular=vec(x=0.0, y=0.0, z=-k)))
            for k in range(3)]
    bag = _write_stream(tmp_path / "twist", {"/cmd": ("geometry_msgs/msg/Twist", msgs)})
    assert "obs_field" in info(capsys, str(bag), status=1)
    out = info(capsys, str(bag), "--obs-field", "linear,angular.z")
    assert "demonstrations: 1 episode of obs_dim 4, 2 transitions" in out


def test_what_is_not_there_or_no_known_file_is_one_line_and_status_2(capsys, tmp_path) -> None:
    assert cli.main(["info", str(tmp_path / "missing.onnx")]) == 2
    assert capsys.readouterr().err.strip() == f"opolo-ros info: error: not found: {tmp_path / 'missing.onnx'}"
    (tmp_path / "notes.txt").write_text("hello")
    assert cli.main(["info", str(tmp_path / "notes.txt")]) == 2
    assert "is not a rosbag2 bag" in capsys.readouterr().err


def test_a_joint_state_bag_says_which_joints_and_fields_make_the_observation(capsys, tmp_path) -> None:
    """The README sends a user to `opolo-ros info` for a JointState bag's joint order (for
    demos_joints, or a deploy's joints), and info did not list it (a walkthrough)."""
    from test_bags import robot_bag

    bag, _ = robot_bag(tmp_path / "robot")
    out = info(capsys, str(bag), "--topic", "/joint_states")
    assert ("observation: the positions then velocities of joints wrist,shoulder,elbow, in this order "
            "(demos_joints / deploy joints)") in out
    out = info(capsys, str(bag), "--topic", "/joint_states", "--joints", "elbow,shoulder",
               "--fields", "velocity")
    assert "observation: the velocities of joints elbow,shoulder, in this order" in out


def test_counts_are_plural_but_for_one() -> None:
    """"1 value", "0 values", "2 episodes" (a mutation test: zero was said in the singular)."""
    from opolo_ros.errors import counted

    assert [counted(n, "value") for n in (0, 1, 2)] == ["0 values", "1 value", "2 values"]
