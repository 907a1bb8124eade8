"""Bad input: a one-line error and a non-zero exit (commands), a logged and counted rejection (nodes).

The commands run as real subprocesses of the installed entry points (``opolo-ros``, and the node
executables as ``python -m opolo_ros.nodes.<node>``), all started together to keep the test short.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_bags import F32, SEC, TS, _stream, _write_stream
from test_session_pool import gather_policy

from opolo_ros.data.bags import write_demonstrations
from opolo_ros.data.demos import Episode

ROOT = Path(__file__).resolve().parents[1]
ENV = "InvertedPendulum-v5"
OPOLO_ROS = str(Path(sys.executable).parent / "opolo-ros")


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # {name} placeholders are files made by `bad_files`
    expect: str  # in the error line
    node: bool = False  # a node executable, not the opolo-ros command


TRAIN = ("train", "--total-steps", "10", "--run-dir", "{tmp}/run", "--demos")
CASES = {
    "bag truncated": Case((*TRAIN, "{truncated}"), "corrupt or truncated"),
    "bag corrupt metadata": Case((*TRAIN, "{corrupt_metadata}"), "not a readable rosbag2 bag"),
    "bag without the topic": Case((*TRAIN, "{no_topic}"), "no demonstration or observation topic"),
    "bag wrong message type": Case((*TRAIN, "{wrong_type}"), "has type std_msgs/msg/String"),
    "bag with NaN": Case((*TRAIN, "{nan_bag}"), "NaN or inf"),
    "onnx corrupt": Case(("evaluate", "{corrupt_onnx}"), "not a valid ONNX model"),
    "onnx wrong dimensions": Case(("evaluate", "{wrong_dims_onnx}", "--env-id", ENV), "takes obs_dim 5"),
    "onnx fails when run": Case(("evaluate", "{failing_onnx}"),
                                "the model fails when run (InvalidArgument: "),
    "config malformed": Case(("train", "--config", "{malformed_yaml}"), "is not valid YAML"),
    "config wrong type": Case(("train", "--config", "{wrong_type_yaml}"), "'seed': expected an integer"),
    "launch params malformed": Case(("launch", "sim_train", "params_file:={malformed_params}"),
                                    "is not valid YAML"),
    "launch demos with NaN": Case(("launch", "sim_train", "demos:={nan_bag}", "run_dir:={tmp}/launch"),
                                  "NaN or inf"),
    "launch deploy corrupt onnx": Case(("launch", "deploy", "model:={corrupt_onnx}"),
                                       "not a valid ONNX model"),
    "launch deploy bad namespace": Case(("launch", "deploy", "model:={expert_onnx}", "namespace:=1abc"),
                                        "node 'actor': invalid name (namespace '1abc'"),
    "launch deploy bad topic": Case(("launch", "deploy", "model:={expert_onnx}", "action_topic:=a//b"),
                                    "Couldn't parse remap rule: '-r action:=a//b'"),
    # A typo in a parameter file (rcl and the old run-config reader ignored unknown keys).
    "config unknown key": Case(("train", "--config", "{typo_learner_params}", "--total-steps", "10",
                                "--run-dir", "{tmp}/typo"),
                               "section 'learner': unknown key 'total_step', not a parameter of the learner "
                               "node; did you mean 'total_steps'?"),
    "config unknown shared key": Case(("train", "--config", "{typo_shared_params}", "--total-steps", "10",
                                       "--run-dir", "{tmp}/typo_shared"),
                                      "section '/**': unknown key 'sed', not a parameter of any opolo_ros "
                                      "node"),
    "launch params unknown key": Case(("launch", "sim_train", "params_file:={typo_bridge_params}",
                                       "total_steps:=10", "run_dir:={tmp}/launch_typo"),
                                      "section 'sim_bridge': unknown key 'max_ahed', not a parameter of the "
                                      "sim_bridge node; did you mean 'max_ahead'?"),
    "launch demos of another task": Case(("launch", "sim_train", "params_file:=config/inverted_pendulum.yaml",
                                          "env:=Hopper-v5", "total_steps:=10", "run_dir:={tmp}/g_hop"),
                                         "expert episode 0 has obs_dim 4, the environment has 11"),
    "train with a TD3 config": Case(("train", "--config", "{expert_config}", "--total-steps", "10",
                                     "--run-dir", "{tmp}/algo"),
                                    "has algo: td3, but `opolo-ros train` trains opolo: use "
                                    "`opolo-ros train-expert`"),
    "train-expert with an OPOLO config": Case(("train-expert", "--config", "{opolo_config}", "--total-steps",
                                               "10", "--run-dir", "{tmp}/algo"),
                                              "has algo: opolo, but `opolo-ros train-expert` trains td3: "
                                              "use `opolo-ros train`"),
    "evaluate no episodes": Case(("evaluate", "{expert_onnx}", "--episodes", "0"),
                                 "--episodes must be at least 1, got 0"),
    "export checkpoint missing": Case(("export", "{tmp}/nope.pt", "{tmp}/out.onnx"),
                                      "checkpoint not found: "),
    "config is a folder": Case(("train", "--config", "{tmp}"), "is not a regular file"),
    "run dir is a file": Case(("train", "--config", "{opolo_config}", "--run-dir", "{malformed_yaml}"),
                              "exists and is not a folder"),
    "train without demonstrations": Case(("train", "--total-steps", "10", "--run-dir", "{tmp}/no_demos"),
                                         "needs demonstrations: set 'demos' to a bag, folder or .npz "
                                         "(--demos PATH, or --config config/<task>.yaml"),
    "train-expert with demos": Case(("train-expert", "--config", "{expert_config}", "--demos", "x"),
                                    "--demos is for OPOLO"),
    "launch with a plain run config": Case(("launch", "sim_train", "params_file:={expert_config}"),
                                           "looks like a plain run config"),
    "evaluate on an MJCF file without demos": Case(
        ("evaluate", "{expert_onnx}", "--env-id", "{tmp}/robot.xml"),
        "robot.xml is an MJCF model, which has no reward: give --demos"),
    "evaluate a Gymnasium task with another time limit": Case(  # (a mutation test)
        ("evaluate", "{expert_onnx}", "--max-episode-steps", "300"),
        "--max-episode-steps sets an MJCF model's time limit; InvertedPendulum-v5 keeps its own"),
    "evaluate on an id whose module is missing": Case(  # ModuleNotFoundError's traceback before
        ("evaluate", "{expert_onnx}", "--env-id", "nosuchmod:Foo-v0"),
        "cannot create environment 'nosuchmod:Foo-v0': No module named 'nosuchmod'"),
    "train an expert on an MJCF file": Case(
        ("train-expert", "--env-id", "{tmp}/robot.xml", "--run-dir", "{tmp}/mjcf_run"),
        "a TD3 expert learns from the reward, which an MJCF file"),
    "record-topics existing output": Case(("record-topics", "/x", "-o", "{tmp}"),
                                          "already exists; refusing to overwrite it"),
    "queue file not text": Case(("queue", "{binary_file}"), "is not a text (UTF-8) file"),
    "bench script bad input": Case(("bench", "reward_parts", "{tmp}/missing.onnx"), "policy file not found"),
    "node params file malformed": Case(("sim_bridge", "--ros-args", "--params-file", "{malformed_params}"),
                                       "is not valid YAML", node=True),
    "node params file is a launch record": Case(
        ("sim_bridge", "--ros-args", "--params-file", "{launch_record}"),
        "is the record of an `opolo-ros launch` (its launch file, arguments and each node's parameters)",
        node=True),
    "node parameter wrong type": Case(("sim_bridge", "--ros-args", "--params-file", "{wrong_type_params}"),
                                      "parameter 'mode': expected str, got 3", node=True),
    "node params file unknown key": Case(("sim_bridge", "--ros-args", "-r", "__node:=bridge2",
                                          "--params-file", "{typo_node_params}"),
                                         "section 'bridge2': unknown key 'max_ahed'", node=True),
    "node demos with NaN": Case(("demo_player", "--ros-args", "-p", "demos:={nan_bag}"), "NaN or inf",
                                node=True),
    # rcl ignores a -p the node does not declare (the default ran instead, a walkthrough)
    "node -p unknown key": Case(("sim_bridge", "--ros-args", "-p", "max_ahed:=5"),
                                "-p max_ahed:=5: unknown key 'max_ahed', not a parameter of the sim_bridge "
                                "node; did you mean 'max_ahead'?", node=True),
    # rcl applied the file's learner section over a plain -p: the run went to the file's run_dir
    "node -p shadowed by its params file": Case(("learner", "--ros-args", "--params-file", "{opolo_config}",
                                                 "-p", "run_dir:={tmp}/mine"),
                                                "did not reach the node (run_dir is 'runs/opolo/", node=True),
    "node -p unknown key of its name": Case(("sim_bridge", "--ros-args", "-p", "sim_bridge:env:=Hopper-v5"),
                                            "unknown key 'env', not a parameter of the sim_bridge node",
                                            node=True),
}


def bad_files(tmp: Path) -> dict[str, str]:
    """Every broken input of CASES, by placeholder name."""
    rng = np.random.default_rng(0)
    good = write_demonstrations(tmp / "good", [Episode(rng.normal(size=(60, 4)), 1.0) for _ in range(2)])
    files = {"tmp": tmp}
    for name in ("truncated", "corrupt_metadata"):
        files[name] = Path(shutil.copytree(good, tmp / name))
    storage = next(files["truncated"].glob("*.mcap"))
    storage.write_bytes(storage.read_bytes()[: storage.stat().st_size // 2])
    (files["corrupt_metadata"] / "metadata.yaml").write_text("rosbag2_bagfile_information: {[\n")
    text = [(SEC, TS.types["std_msgs/msg/String"](data="hello"))]
    files["no_topic"] = _write_stream(tmp / "no_topic", {"/chatter": ("std_msgs/msg/String", text)})
    files["wrong_type"] = _write_stream(tmp / "wrong_type",
                                        {"/opolo/demonstrations": ("std_msgs/msg/String", text)})
    obs = rng.normal(size=(10, 4)).astype(np.float32)
    obs[5, 2] = np.nan
    files["nan_bag"] = _write_stream(tmp / "nan_bag", {"/obs": (F32, _stream(obs))})
    files["corrupt_onnx"] = tmp / "corrupt.onnx"
    files["corrupt_onnx"].write_bytes(b"\x08\x07" + rng.bytes(500))
    files["wrong_dims_onnx"] = wrong_dims_policy(tmp / "wrong_dims.onnx")
    files["binary_file"] = tmp / "binary.yaml"
    files["binary_file"].write_bytes(b"\xff\xfe\x00jobs")
    files["failing_onnx"] = tmp / "failing.onnx"  # builds, checks, fails in the first run
    files["failing_onnx"].write_bytes(gather_policy(7, env_id=ENV, high=3.0))
    texts = {"malformed_yaml": "seed: [1,\n", "wrong_type_yaml": "seed: abc\n",
             "malformed_params": "learner:\n  ros__parameters: {seed: [1,\n",
             "wrong_type_params": yaml.safe_dump({"/**": {"ros__parameters": {"mode": 3}}}),
             "typo_node_params": yaml.safe_dump({"bridge2": {"ros__parameters": {"max_ahed": 3}}}),
             # a run folder's launch_params.yaml: the record of a launch, taken for a parameter file
             "launch_record": yaml.safe_dump({"launch_file": "sim_train.launch.py",
                                              "arguments": {"total_steps": "2500"},
                                              "nodes": {"learner": {"parameters": {"seed": 0}}}})}
    task = (ROOT / "config" / "inverted_pendulum.yaml").read_text()
    texts["typo_learner_params"] = task.replace("total_steps: 20000", "total_step: 300")
    texts["typo_bridge_params"] = task.replace("max_ahead: 50", "max_ahed: 50")
    texts["typo_shared_params"] = task.replace("    seed: 0\n", "    seed: 0\n    sed: 1\n", 1)
    for name, text in texts.items():
        files[name] = tmp / f"{name}.yaml"
        files[name].write_text(text)
        assert not name.startswith("typo_") or text != task
    files["expert_config"] = ROOT / "config" / "experts" / f"{ENV}.yaml"
    files["opolo_config"] = ROOT / "config" / "inverted_pendulum.yaml"
    files["expert_onnx"] = ROOT / "models" / "experts" / f"{ENV}.onnx"
    return {name: str(path) for name, path in files.items()}


def wrong_dims_policy(path: Path) -> Path:
    """A valid policy for obs_dim 5, labelled as an InvertedPendulum (obs_dim 4) policy."""
    torch = pytest.importorskip("torch")
    from opolo_ros.export.onnx_policy import export_policy

    class Zero(torch.nn.Module):
        obs_dim, act_dim = 5, 1

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1, 5))

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.tanh(obs @ self.w.T)

    return export_policy(Zero(), path, action_low=-3.0, action_high=3.0, metadata={"env_id": ENV})


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Run every case at once (subprocesses), each on its own isolated ROS domain."""
    pytest.importorskip("rclpy")
    from opolo_ros.ros import runtime

    tmp = tmp_path_factory.mktemp("bad_input")
    files = bad_files(tmp)
    env = dict(os.environ)
    runtime.apply_local_dds_env(env, overwrite=True)
    env[runtime.DOMAIN_ID_ENV] = str(runtime.isolated_domain_id())
    procs = {}
    try:
        for name, case in CASES.items():
            argv = [arg.format(**files) for arg in case.argv]
            command = [sys.executable, "-m", f"opolo_ros.nodes.{argv[0]}", *argv[1:]] if case.node \
                else [OPOLO_ROS, *argv]
            procs[name] = (time.monotonic(), subprocess.Popen(command, cwd=tmp, env=env, text=True,
                                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        out = {}
        for name, (start, proc) in procs.items():
            stdout, stderr = proc.communicate(timeout=120.0)
            out[name] = Outcome(proc.returncode, stdout, stderr, time.monotonic() - start)
        return out
    finally:
        for _, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10.0)


@pytest.mark.parametrize("name", CASES)
def test_bad_input_gives_one_line_error_and_nonzero_exit(outcomes, name):
    result, case = outcomes[name], CASES[name]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr + result.stdout
    # Only the error; `opolo-ros launch` announces the graph first, nodes log what they start.
    lines = [line for line in result.stderr.strip().splitlines()
             if not re.match(r"opolo-ros launch: \S+\.launch\.py with |\[INFO\]", line)]
    assert len(lines) == 1 and ": error: " in lines[0] and case.expect in lines[0], result.stderr[-3000:]


# ------------------------------------------------------------------------------ nodes, over DDS

@pytest.mark.ros
def test_learner_rejects_non_finite_data_over_the_topics(tmp_path, ros_domain_id, ros_node, capfd):
    """NaN/inf in demonstrations and replay batches arriving over DDS: logged, counted, never trained
    on; the run goes on with the good data."""
    import math

    from std_msgs.msg import Float32MultiArray
    from test_fault_tolerance import replay_batches, resume_learner_spec

    from opolo_ros.launch_runner import GraphRunner
    from opolo_ros.ros import messages as m
    from opolo_ros.ros.qos import qos_for
    from opolo_ros.ros.runtime import linked, spin_until

    rng = np.random.default_rng(1)
    bad_demos = [m.demonstration_to_msg(rng.normal(size=(30, 4)), 1.0, k) for k in range(10, 13)]
    bad_demos[0].data[7] = math.nan
    bad_demos[1].data[0] = math.inf  # the episode return
    bad_demos[2] = m.demonstration_to_msg(rng.normal(size=(30, 5)), 1.0, 12)  # another task's obs_dim
    good = replay_batches()
    z = np.zeros
    bad_replay = [m.replay_to_msg(z((5, 4)), z((5, 1)), z((5, 4)), z(5), z(5), z(5), seq=k, source=9)
                  for k in range(2)]
    bad_replay[0].data[2] = math.nan
    bad_replay[1].data[11] = -math.inf
    with GraphRunner([resume_learner_spec(tmp_path / "run")], ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        node, executor = ros_node("bad_publisher")
        demo_pub = node.create_publisher(Float32MultiArray, "/opolo/demonstrations",
                                         qos_for("demonstrations"))
        replay_pub = node.create_publisher(Float32MultiArray, "/opolo/replay", qos_for("replay"))
        both = [executor, graph.executor]
        assert spin_until(both, lambda: linked(replay_pub, learner), 20.0)
        for msg in bad_demos + [m.demonstration_to_msg(rng.normal(size=(30, 4)), 1.0, k) for k in range(4)]:
            demo_pub.publish(msg)
        for msg in bad_replay + good:
            replay_pub.publish(msg)
        trainer = learner.trainer
        assert spin_until(both, lambda: trainer.step == 120, 90.0), (trainer.step, learner.rejected)
        assert learner.error is None
        assert learner.rejected == {"replay": 2, "demonstration": 3}
        assert sorted(learner.demos) == [0, 1, 2, 3]
        assert learner.trainer.step == 120 and np.isfinite(learner.trainer.replay.obs.numpy()).all()
    err = capfd.readouterr().err
    assert "rejected replay batch (1 so far): replay batch: non-finite value" in err
    assert "rejected demonstration (1 so far)" in err


@pytest.mark.ros
def test_learner_refuses_a_run_folder_another_process_trains_in(tmp_path, ros_domain_id, ros_node, capfd):
    """A second trainer on a run folder: the learner logs one line naming the holder and ends, and
    writes nothing of its own there (no checkpoint, journal, config)."""
    from test_fault_tolerance import publish_random_demos, resume_learner_spec

    from opolo_ros.launch_runner import GraphRunner
    from opolo_ros.ros.runtime import spin_until
    from opolo_ros.train.runlock import RunFolderInUse, RunFolderLock

    rng = np.random.default_rng(2)
    lock = RunFolderLock(tmp_path / "run").acquire()
    try:
        with GraphRunner([resume_learner_spec(tmp_path / "run")], ros_domain_id) as graph:
            learner = graph.nodes["learner"]
            both = publish_random_demos(ros_node, graph, rng)
            assert spin_until(both, learner.finished.is_set, 60.0)
            assert isinstance(learner.error, RunFolderInUse)
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lock"]
    finally:
        lock.release()
    err = capfd.readouterr().err
    assert f"learner failed: run folder {tmp_path / 'run'} is in use by another training process " \
           f"(pid {os.getpid()})" in err and "Traceback" not in err


def test_a_launch_refused_by_the_learner_leaves_the_run_folder_alone(tmp_path, ros_domain_id):
    """launch_params.yaml was written before the learner took the folder: over the record of the run
    that another process trains there (or of the run whose config a refused resume would change).
    The launch now refuses a folder another training holds before any node starts."""
    from opolo_ros.launch_runner import run_launch
    from opolo_ros.train.runlock import RunFolderLock

    run = tmp_path / "run"
    lock = RunFolderLock(run).acquire()
    try:
        with pytest.raises(ValueError, match=f"run folder {run} is in use by another training process"):
            run_launch("sim_train", [f"run_dir:={run}", "total_steps:=50"], ros_domain_id)
        assert sorted(p.name for p in run.iterdir()) == [".lock"]
    finally:
        lock.release()


def test_a_launch_whose_learner_refuses_the_run_folder_writes_no_launch_record(tmp_path, ros_domain_id):
    """The learner refuses to resume a checkpoint.pt that is none (its one-line error ends the
    launch): the folder is left as it was, with no launch_params.yaml claiming the launch as the
    run's record (a mutation test)."""
    from opolo_ros.launch_runner import run_launch

    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"not a checkpoint")
    launch = tmp_path / "learn.launch.py"
    launch.write_text("from opolo_ros.launch_runner import NodeSpec\n"
                      "ARGUMENTS = []\n"
                      "def describe(args):\n"
                      "    return [NodeSpec('learner', 'learner', exit_ends_launch=True, parameters={\n"
                      f"        'env_id': 'InvertedPendulum-v5', 'algo': 'td3', 'run_dir': {str(run)!r},\n"
                      "        'progress': False})]\n")
    result = run_launch(str(launch), [], ros_domain_id)
    assert "checkpoint.pt is a text file, not a checkpoint" in str(result.learner.error)
    assert sorted(p.name for p in run.iterdir()) == [".lock", "checkpoint.pt"]


def test_record_stopped_removes_the_folders_it_made(tmp_path, monkeypatch):
    """--output new/deeper/bag: the folders are made before the rollout (a path that cannot hold a
    bag fails at once), and were left behind, empty, when the recording failed or was stopped."""
    from opolo_ros import cli

    def stopped(*_args):
        raise KeyboardInterrupt("stopped by SIGINT")

    monkeypatch.setattr(cli, "_record_into", stopped)
    model = ROOT / "models" / "experts" / f"{ENV}.onnx"
    (tmp_path / "kept").mkdir()
    out = tmp_path / "kept" / "new" / "deeper" / "bag"
    assert cli.main(["record", "--model", str(model), "--episodes", "1", "--output", str(out)]) == 130
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]


def test_record_removes_the_folders_a_failed_mkdir_made(tmp_path):
    from opolo_ros import cli

    model = ROOT / "models" / "experts" / f"{ENV}.onnx"
    out = tmp_path / "new" / ("a" * 300) / "bag"  # `new` is made, the next name is too long
    assert cli.main(["record", "--model", str(model), "--episodes", "1", "--output", str(out)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_node_programs_find_their_params_file_section_under_every_rename(tmp_path):
    from opolo_ros.nodes.common import check_params_files

    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({"bridge2": {"ros__parameters": {"max_ahed": 3}}}))
    for rule in ("__node:=bridge2", "__name:=bridge2", "sim_bridge:__node:=bridge2"):
        with pytest.raises(ValueError, match="section 'bridge2': unknown key 'max_ahed'"):
            check_params_files(["--ros-args", "-r", rule, "--params-file", str(typo)], "sim_bridge")
    other = ["--ros-args", "-r", "other:__node:=bridge2", "--params-file", str(typo)]
    check_params_files(other, "sim_bridge")  # renames another node: sim_bridge reads its own sections


def test_exit_status_of_a_script_that_returns_its_results():
    from opolo_ros.errors import exit_status

    assert exit_status(lambda: {"rates": {}}, "x.py") == 0  # sys.exit(dict) printed it and gave 1
    assert exit_status(lambda: 3, "x.py") == 3


def test_record_writes_beside_the_shipped_bags_by_default(tmp_path, monkeypatch):
    """The default was models/demos/<env_id>, where every shipped task's bag is: the README's
    command failed with 'already exists' (found by a walkthrough)."""
    from opolo_ros import cli

    written: list = []
    monkeypatch.setattr(cli, "_record_into", lambda *args: written.append(args[-1]) or 0)
    monkeypatch.chdir(tmp_path)
    model = ROOT / "models" / "experts" / f"{ENV}.onnx"
    assert cli.main(["record", "--model", str(model), "--episodes", "1", "--seed", "3"]) == 0
    assert written == [Path("demos") / f"{ENV}_seed3"]


def test_the_score_line_of_demonstrations_without_returns():
    from opolo_ros.sim.envs import score_line

    assert score_line(float("nan"), float("nan"), 7.5) == \
        "normalised score: n/a (the demonstrations carry no expert return; random 7.5)"
    assert score_line(0.5, 100.0, 0.0) == "normalised score: 0.500 (expert 100.0, random 0.0)"
    from opolo_ros.sim.envs import eval_line

    assert eval_line(5000, 12.0, 1.5, float("nan")) == "step 5000: eval return 12.0 +- 1.5 (normalised n/a)"
    assert eval_line(5000, 12.0, 1.5, 0.25) == "step 5000: eval return 12.0 +- 1.5 (normalised 0.250)"


def test_a_runs_final_lines_the_same_for_both_trainers():
    from opolo_ros.train.direct import TrainResult

    nan = float("nan")
    result = TrainResult(Path("run"), 100, 900.0, 12.5, 0.9, 1000.0, 0.0, Path("run/policy.onnx"))
    assert result.summary_lines(10, "opolo") == [
        "evaluation return: 900.0 +- 12.5 (10 deterministic episodes)",
        "normalised score: 0.900 (expert 1000.0, random 0.0)"]
    assert result.summary_lines(10, "td3") == ["evaluation return: 900.0 +- 12.5 (10 deterministic episodes)"]
    robot = TrainResult(Path("run"), 100, nan, nan, nan, nan, nan, Path("run/policy.onnx"),
                        imitation=(0.5, 2.0))
    assert robot.summary_lines(3, "opolo") == [
        "imitation distance: 0.500 (random actions: 2.000; 0 = the demonstrations' states, 3 deterministic "
        "episodes), score 0.750"]
    unevaluated = TrainResult(Path("run"), 0, nan, nan, nan, nan, nan, Path("run/policy.onnx"))
    assert unevaluated.summary_lines(3, "opolo") == [
        "no evaluation: the task has no reward (an MJCF file), so only the policy is the result"]


def test_a_plots_title_names_an_mjcf_robot_by_its_file_name():
    from opolo_ros.sim.task_ids import task_label

    assert task_label("/work/main/models/robots/two_link_arm.xml") == "two_link_arm.xml"
    assert task_label("Hopper-v5") == "Hopper-v5"
