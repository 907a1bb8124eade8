"""What a launch checks before any node starts, and what its nodes declare and export.

- every key of a parameter file goes to a node that declares it (rcl would ignore the others, so a
  typo would change a run silently): ``node_parameters`` refuses the rest, naming file, section and
  key; the table it checks against (``launch_runner.declared_parameters``) is compared here with
  what the real nodes declare;
- every shipped parameter file passes both paths (the direct loop's run config and the graph);
- demonstrations of another task are refused before the graph starts (the learner would only reject
  them and wait), and a launch stopped before training began does not claim a checkpoint;
- the learner node's exported policy carries the contract's metadata, ``seed`` included.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from opolo_ros import launch_runner as lr
from opolo_ros.algo.config import load_run_config

pytest.importorskip("rclpy")  # the node tables and describe() use opolo_ros.nodes

ROOT = Path(__file__).resolve().parents[1]
OPOLO_ROS = str(Path(sys.executable).parent / "opolo-ros")
EXPERT = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"
TASK_FILES = [p for p in sorted((ROOT / "config").glob("*.yaml"))
              if not p.name.startswith("deploy_")]


def ros_file(path: Path, sections: dict) -> Path:
    path.write_text(yaml.safe_dump({k: {"ros__parameters": v} for k, v in sections.items()}))
    return path


# --------------------------------------------------------------------------- parameter names

@pytest.mark.parametrize("section,params,match", [
    ("sim_bridge", {"max_ahed": 50}, r"section 'sim_bridge': unknown key 'max_ahed', not a parameter of "
                                     r"the sim_bridge node; did you mean 'max_ahead'\?"),
    ("/sim_bridge", {"replay_batch": 5, "env": "x"}, r"section '/sim_bridge': unknown key 'env'.*'env_id'"),
    ("robot/sim_bridge", {"policy_evry": 5}, r"section 'robot/sim_bridge': unknown key 'policy_evry'"),
    ("actor", {"command_qos": "reliable", "comand_qos": "x"}, r"the actor node; did you mean 'command_qos'"),
    ("demo_player", {"num_demo": 2}, r"the demo_player node; did you mean 'num_demos'"),
    ("learner", {"opolo": {"lamda": 1.0}}, r"section 'learner': unknown key 'opolo.lamda'.*'opolo.lam'"),
    ("/**", {"max_ahed": 50}, r"section '/\*\*': unknown key 'max_ahed', not a parameter of any "
                              r"opolo_ros node; did you mean 'max_ahead'\?"),
])
def test_node_parameters_refuse_keys_the_node_does_not_declare(tmp_path, section, params, match):
    path = ros_file(tmp_path / "p.yaml", {section: params})
    node = section.rsplit("/", 1)[-1]
    name = node if node != "**" else "sim_bridge"
    with pytest.raises(ValueError, match=match) as err:
        lr.node_parameters(path, name, "robot")
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_section_that_misspells_a_node_is_refused_other_nodes_sections_are_kept(tmp_path):
    path = ros_file(tmp_path / "p.yaml", {"sim_brige": {"max_ahead": 5}})
    with pytest.raises(ValueError, match=r"section 'sim_brige' names no opolo_ros node; did you mean "
                                         r"'sim_bridge'\?"):
        lr.node_parameters(path, "sim_bridge")
    path = ros_file(tmp_path / "q.yaml", {"robot/my_controller": {"gain": 2}, "sim_bridge": {"max_ahead": 5}})
    assert lr.node_parameters(path, "sim_bridge") == {"max_ahead": 5}

def test_shared_section_takes_any_nodes_parameters_and_names_resolve_to_executables(tmp_path):
    """`/**` reaches every node: a key one node declares is fine there (the others ignore it, as rcl
    makes them); a node named unlike its executable is checked against the executable's table."""
    path = ros_file(tmp_path / "p.yaml", {"/**": {"max_ahead": 3, "command_qos": "reliable", "seed": 1,
                                                  "use_sim_time": False},
                                          "bridge2": {"replay_batch": 7}})
    assert lr.node_parameters(path, "actor")["command_qos"] == "reliable"
    assert lr.node_parameters(path, "bridge2", executable="sim_bridge")["replay_batch"] == 7
    with pytest.raises(ValueError, match="not a parameter of the actor node"):
        lr.node_parameters(path, "bridge2", executable="actor")


@pytest.mark.parametrize("replacement,match", [
    # the review's repro: `max_ahed` in the sim_bridge section ran with max_ahead 0
    ("max_ahed: 50", r"section 'sim_bridge': unknown key 'max_ahed'.*'max_ahead'"),
    ("max_ahead: abc", r"parameter sim_bridge.max_ahead: expected an integer, got 'abc'"),
])
def test_sim_train_refuses_a_bad_key_or_value_in_another_nodes_section(tmp_path, replacement, match):
    text = (ROOT / "config" / "inverted_pendulum.yaml").read_text().replace("max_ahead: 50", replacement)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        lr.describe_launch("sim_train", [f"params_file:={path}", f"run_dir:={tmp_path / 'run'}"])


@pytest.mark.ros
def test_declared_parameter_tables_are_what_the_nodes_declare(tmp_path, ros_domain_id):
    """`declared_parameters` (read from the nodes' tables without starting them) against the real
    nodes of sim_train and record_expert, and the topic recorder (all six executables)."""
    graphs = [lr.describe_launch("sim_train", [f"run_dir:={tmp_path / 'run'}", "total_steps:=10"])[2],
              lr.describe_launch("record_expert", [f"output:={tmp_path / 'bag'}", f"model:={EXPERT}"])[2],
              [lr.NodeSpec("topic_recorder", "topic_recorder",
                           parameters={"topics": ["/x"], "output": str(tmp_path / "topics")})]]
    seen = set()
    for specs in graphs:
        with lr.GraphRunner(specs, ros_domain_id) as graph:
            for spec in specs:
                node = graph.nodes[spec.name]
                declared = set(node.list_parameters([], 0).names)
                assert declared == set(lr.declared_parameters(spec.executable)), spec.executable
                seen.add(spec.executable)
    assert seen == set(lr.NODE_CLASSES)


# --------------------------------------------------------------------------- shipped files

def demos_for(cfg, tmp_path: Path) -> str:
    """The task file's demonstrations, else the task's shipped ones, or (not recorded yet) an .npz
    of the task's dimensions."""
    for shipped in (ROOT / cfg.demos if cfg.demos else None, ROOT / "models" / "demos" / cfg.env_id):
        if shipped is not None and (shipped / "metadata.yaml").is_file():
            return str(shipped)
    from opolo_ros.data.demos import Episode, save_npz
    from opolo_ros.sim.tasks import make_task_env

    env = make_task_env(str(ROOT / cfg.env_id) if cfg.env_id.endswith(".xml") else cfg.env_id)
    obs_dim = env.observation_space.shape[0]
    env.close()
    path = tmp_path / f"{Path(cfg.env_id).name}.npz"
    save_npz(path, [Episode(np.zeros((20, obs_dim))) for _ in range(2)])
    return str(path)


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.name)
def test_every_shipped_task_file_passes_both_paths(path, tmp_path):
    cfg = load_run_config(path)  # the direct loop: `/**` + learner as the run config
    demos = f"demos:={demos_for(cfg, tmp_path)}"
    specs = lr.describe_launch("sim_train", [f"params_file:={path}", f"run_dir:={tmp_path}", demos])[2]
    by_name = {s.name: s.parameters for s in specs}
    # (an MJCF file's path made absolute: the package's models/robots/two_link_arm.xml)
    task = str(ROOT / cfg.env_id) if cfg.env_id.endswith(".xml") else cfg.env_id
    assert by_name["learner"]["env_id"] == by_name["sim_bridge"]["env_id"] == task
    for node in lr.NODE_CLASSES:  # any node of any launch file, in a namespace too
        lr.node_parameters(path, node)
        lr.node_parameters(path, node, "robot")


@pytest.mark.parametrize("name,args,match", [
    ("sim_train", ["resume:=maybe"], r"launch argument 'resume': expected true or false, got 'maybe'"),
    ("sim_train", ["max_ahead:=x"], r"launch argument 'max_ahead': expected an integer, got 'x'"),
    ("sim_train", ["policy_every:=1.5"], r"launch argument 'policy_every': expected an integer"),
    ("record_expert", ["episodes:=x"], r"launch argument 'episodes': expected an integer, got 'x'"),
    ("record_expert", ["skip_terminated:=maybe"], r"launch argument 'skip_terminated': expected true"),
    ("record_expert", ["seed:=-1"], r"launch argument 'seed': must not be negative, got -1"),
    ("record_expert", ["env:=HalfCheetah-v5", "model:=models/experts/Walker2d-v5.onnx"],
     r"Walker2d-v5.onnx was trained on Walker2d-v5 \(its metadata's env_id\), not HalfCheetah-v5"),
    ("record_expert", ["episodes:=0"], r"launch argument 'episodes': must be at least 1, got 0"),
    ("record_expert", ["storage:=foo"], r"launch argument 'storage': one of mcap, sqlite3, got 'foo'"),
    ("deploy", [f"model:={EXPERT}", "rate_hz:=x"], r"launch argument 'rate_hz': expected a number"),
    ("deploy", [f"model:={EXPERT}", "cpu_affinity:=0,x"],
     r"launch argument 'cpu_affinity' \(comma-separated\): expected an integer, got 'x'"),
    ("deploy", [f"model:={EXPERT}", "watch_model:=1"], r"launch argument 'watch_model': expected true or"),
    ("sim_train", ["run_dir:= "], r"launch argument 'run_dir' is blank \(' '\): give a value, or run_dir:="),
])
def test_typed_launch_arguments_name_the_argument_they_refuse(tmp_path, name, args, match):
    extra = {"sim_train": [f"run_dir:={tmp_path / 'run'}"], "record_expert": [f"output:={tmp_path / 'bag'}"]}
    with pytest.raises(ValueError, match=match):
        lr.describe_launch(name, [*args, *extra.get(name, [])])


def test_record_expert_refuses_an_existing_output_and_a_task_without_an_expert_before_nodes_start(tmp_path):
    """A walkthrough: an existing output:= was refused by the recorder only after the bridge and the
    actor had started (one line, but after their start-up lines), and env:=Hoper-v5 (a typo) said
    'models/experts/Hoper-v5.onnx: policy file not found', as if the model path were wrong."""
    (tmp_path / "bag").mkdir()
    with pytest.raises(FileExistsError, match=r"bag already exists; refusing to overwrite a bag"):
        lr.describe_launch("record_expert", [f"output:={tmp_path / 'bag'}"])
    for env in ("Hoper-v5", "InvertedDoublePendulum-v5"):
        with pytest.raises(FileNotFoundError, match=rf"no shipped expert for env '{env}' \(models/experts "
                                                    r"has: .*InvertedPendulum-v5.*\); give .* model:="):
            lr.describe_launch("record_expert", [f"env:={env}", f"output:={tmp_path / 'new'}"])
    assert not (tmp_path / "new").exists()


def test_deploy_checks_a_policys_own_joint_names_by_the_actors_rule(tmp_path):
    """A policy whose metadata names its joints (an MJCF robot's) was left to the actor by the
    launch, which checked only a Gymnasium task's joints: both now take the metadata's joint_names,
    else the task's, with one rule (sim.task_ids.joint_order_error), so the launch refuses them
    before any process starts. Their own order, and some of them in it, pass."""
    import shutil

    from opolo_ros.export.onnx_policy import stamp_metadata

    model = tmp_path / "arm.onnx"
    shutil.copy(EXPERT, model)
    stamp_metadata(model, {"joint_names": "slider,hinge"})
    with pytest.raises(ValueError, match=r"joints hinge,slider name the joints of InvertedPendulum-v5 \(the "
                                         r"policy .*arm.onnx\) in another order than its observation's, "
                                         r"slider,hinge: give joints in that order"):
        lr.describe_launch("deploy", [f"model:={model}", "joints:=hinge,slider"])
    for joints in ("slider,hinge", "hinge"):
        spec = lr.describe_launch("deploy", [f"model:={model}", f"joints:={joints}"])[2][0]
        assert spec.parameters["joints"] == joints.split(",")


def test_deploy_refuses_a_gymnasium_policys_own_joints_in_another_order(tmp_path):
    """`joints:=hinge,slider` with the shipped InvertedPendulum expert started, feeding it the hinge
    as the cart position (a walkthrough): only an MJCF policy's `joint_names` were checked, while
    training refuses such `demos_joints` for Gymnasium tasks too. A robot's own names still pass."""
    swapped = tmp_path / "swapped.yaml"
    swapped.write_text(yaml.safe_dump({"actor": {"ros__parameters": {"joints": ["hinge", "slider"]}}}))
    for given in (["joints:=hinge,slider"], [f"params_file:={swapped}"]):
        with pytest.raises(ValueError, match=r"joints hinge,slider name the joints of InvertedPendulum-v5 .* "
                                             r"another order than its observation's, slider,hinge"):
            lr.describe_launch("deploy", [f"model:={EXPERT}", *given])
    for joints in ("slider,hinge", "cart,pole"):
        spec = lr.describe_launch("deploy", [f"model:={EXPERT}", f"joints:={joints}"])[2][0]
        assert spec.parameters["joints"] == joints.split(",")


def test_sim_train_on_an_mjcf_model_without_demos_says_it_needs_them(tmp_path):
    with pytest.raises(ValueError, match=r"an MJCF task \(.*robot.xml\) needs demonstrations: demos:="):
        lr.describe_launch("sim_train", [f"env:={tmp_path / 'robot.xml'}", f"run_dir:={tmp_path / 'run'}"])


def test_typed_value_reads_yaml_scalars():
    assert lr.typed_value("1e-3", float, "x") == 0.001 and lr.typed_value("2", float, "x") == 2.0
    assert lr.typed_value("yes", bool, "x") is True

def test_the_shipped_deploy_files_pass_the_deploy_launch():
    path = ROOT / "config" / "deploy_inverted_pendulum.yaml"
    specs = lr.describe_launch("deploy", [f"model:={EXPERT}", f"params_file:={path}"])[2]
    assert specs[0].parameters["joints"] == ["slider", "hinge"]
    hopper = ROOT / "config" / "deploy_hopper.yaml"
    specs = lr.describe_launch("deploy", [f"model:={ROOT / 'models/experts/Hopper-v5.onnx'}",
                                          f"params_file:={hopper}"])[2]
    assert specs[0].parameters["time_feature_clock"] == 1000 and "joints" not in specs[0].parameters


# --------------------------------------------------------------------------- demonstrations, stop

def test_sim_train_refuses_demonstrations_of_another_task_before_any_node_starts(tmp_path):
    """The review's repro (a learner logging `rejected demonstration`, then waiting forever)."""
    with pytest.raises(ValueError, match=r"InvertedPendulum-v5 do not fit Hopper-v5: expert episode 0 has "
                                         r"obs_dim 4, the environment has 11"):
        lr.describe_launch("sim_train", ["params_file:=config/inverted_pendulum.yaml", "env:=Hopper-v5",
                                         "total_steps:=10", f"run_dir:={tmp_path / 'run'}"])
    assert not (tmp_path / "run").exists()


def test_demonstrations_of_another_task_with_the_same_obs_dim_are_refused(tmp_path):
    """HalfCheetah and Walker2d both observe 17 values: the bag's recorded task tells them apart."""
    with pytest.raises(ValueError, match=r"recorded on HalfCheetah-v5 \(the bag's metadata says so\), "
                                         r"not on Walker2d-v5"):
        args = ["params_file:=config/walker2d.yaml", "demos:=models/demos/HalfCheetah-v5"]
        lr.describe_launch("sim_train", [*args, f"run_dir:={tmp_path / 'run'}"])
    # an MJCF robot with the pendulum's joints (4 values) and the pendulum's bag: the check was
    # skipped for robot models (a walkthrough trained its arm on the pendulum's demonstrations)
    import gymnasium

    xml = tmp_path / "arm.xml"
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    with pytest.raises(ValueError, match=rf"recorded on InvertedPendulum-v5 \(the bag's metadata says so\), "
                                         rf"not on {re.escape(str(xml))}"):
        lr.describe_launch("sim_train", [f"env:={xml}", "demos:=models/demos/InvertedPendulum-v5",
                                         f"run_dir:={tmp_path / 'arm'}"])


def test_record_expert_takes_the_time_feature_from_the_expert_and_refuses_a_wrong_one(tmp_path):
    """The shipped Hopper expert sees the time feature: `auto` turns it on; `false` would feed it
    11 values for 12 inputs and record the watchdog's safe commands, so it is refused."""
    hopper = str(lr.package_path("models", "experts", "Hopper-v5.onnx"))
    args = ["env:=Hopper-v5", f"model:={hopper}", f"output:={tmp_path / 'bag'}"]
    bridge, _, recorder = lr.describe_launch("record_expert", args)[2]
    assert bridge.parameters["time_feature"] is True and recorder.parameters["drop_time_feature"] is True
    with pytest.raises(ValueError, match=r"takes obs_dim 12 .* Hopper-v5 without time feature "
                                         r"has obs_dim 11"):
        lr.describe_launch("record_expert", [*args, "time_feature:=false"])


@pytest.mark.ros
def test_launch_stopped_before_training_claims_no_checkpoint(tmp_path):
    """SIGINT while the learner still waits for demonstrations: exit 130, and no "checkpoint in"."""
    from opolo_ros.ros import runtime

    base = yaml.safe_load((ROOT / "config" / "inverted_pendulum.yaml").read_text())
    base["learner"]["ros__parameters"].update(num_demos=50, demo_settle_s=600.0, progress=False)
    params = tmp_path / "wait.yaml"
    params.write_text(yaml.safe_dump(base))
    run_dir = tmp_path / "run"
    env = dict(os.environ)
    runtime.apply_local_dds_env(env, overwrite=True)
    env[runtime.DOMAIN_ID_ENV] = str(runtime.isolated_domain_id())
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen([OPOLO_ROS, "launch", "sim_train", f"params_file:={params}",
                                 f"run_dir:={run_dir}"], cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=err)
    try:
        deadline = time.monotonic() + 120.0
        while "waiting for demonstrations on" not in log.read_text():  # every node is built
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120.0)
        stderr = log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10.0)
    assert proc.returncode == 130, stderr[-3000:]
    assert "opolo-ros launch: stopped after" in stderr and "(no checkpoint written)" in stderr, stderr[-3000:]
    assert "checkpoint in" not in stderr and not (run_dir / "checkpoint.pt").exists()
    assert not (run_dir / "launch_params.yaml").exists()  # the learner never took the folder


# --------------------------------------------------------------------------- exported metadata

@pytest.mark.ros
def test_learner_node_policy_carries_the_contract_metadata_with_seed(tmp_path, ros_domain_id, ros_node):
    from test_fault_tolerance import publish_random_demos, resume_learner_spec

    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.ros.runtime import spin_until

    spec = resume_learner_spec(tmp_path / "run")
    spec.parameters.update(seed=7, time_feature=True)
    rng = np.random.default_rng(0)
    with lr.GraphRunner([spec], ros_domain_id) as graph:
        both = publish_random_demos(ros_node, graph, rng)
        policy = tmp_path / "run" / "policy.onnx"  # the first export, before the first transition
        assert spin_until(both, policy.is_file, 60.0), graph.nodes["learner"].error
    meta = load_policy(policy).metadata
    assert meta.extra["seed"] == "7" and meta.extra["time_feature"] == "1"
    assert (meta.env_id, meta.obs_dim, meta.version) == ("InvertedPendulum-v5", 5, 0)
    assert meta.source == "opolo_ros learner opolo"


def test_sim_train_refuses_a_bridge_timeout_the_learner_would_not_wait_for(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("/**:\n  ros__parameters: {env_id: InvertedPendulum-v5}\n"
                      "sim_bridge:\n  ros__parameters: {learner_timeout_s: 15.0}\n")
    with pytest.raises(ValueError, match=r"sim_bridge.learner_timeout_s \(15 s\) must be below "
                                         r"learner.replay_gap_timeout_s \(10 s\)"):
        lr.describe_launch("sim_train", [f"params_file:={params}"])


def test_an_mjcf_run_gets_a_run_folder_named_after_its_file(tmp_path):
    """Without a task file every robot model trained in runs/default-graph (found by a walkthrough)."""
    import gymnasium

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_bags import pendulum_robot_demos

    xml = tmp_path / "arm.xml"
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    demos = pendulum_robot_demos(tmp_path / "arm_demos.npz")
    specs = lr.describe_launch("sim_train", [f"env:={xml}", f"demos:={demos}"])[2]
    assert next(s for s in specs if s.name == "learner").parameters["run_dir"] == "runs/opolo/arm-graph"
    # With another task's file as the template (README: "give a task file for short runs"), the
    # robot went into the pendulum's run folder (a walkthrough): its own, unless run_dir:= is given.
    pendulum = "params_file:=config/inverted_pendulum.yaml"
    for argv, run_dir in (([pendulum, f"env:={xml}", f"demos:={demos}"], "runs/opolo/arm-graph"),
                          ([pendulum, f"env:={xml}", f"demos:={demos}", "run_dir:=runs/mine"], "runs/mine"),
                          ([pendulum], "runs/opolo/InvertedPendulum-v5-graph"),
                          ([pendulum, "env:=InvertedPendulum-v5"], "runs/opolo/InvertedPendulum-v5-graph")):
        specs = lr.describe_launch("sim_train", argv)[2]
        assert next(s for s in specs if s.name == "learner").parameters["run_dir"] == run_dir, argv


def test_param_arguments_are_checked_within_the_ros_arguments(tmp_path):
    """`-p` keys the node does not declare are refused (rcl ignored them); only the ROS arguments are
    read (after `--ros-args`, up to `--`, as rcl parses them: a review found `-- -p x:=1` refused)."""
    from opolo_ros.nodes.common import check_params_files, ros_arguments

    assert ros_arguments(["learner", "-p", "a:=1", "--ros-args", "-p", "b:=2", "--", "-p", "c:=3",
                          "--ros-args", "-r", "x:=y"]) == ["-p", "b:=2", "-r", "x:=y"]
    with pytest.raises(ValueError, match="unknown key 'total_step', not a parameter of the learner node; "
                                         "did you mean 'total_steps'"):
        check_params_files(["learner", "--ros-args", "-p", "total_step:=10"], "learner")
    with pytest.raises(ValueError, match="-p learner:sed:=3: unknown key 'sed'"):
        check_params_files(["learner", "--ros-args", "-p", "learner:sed:=3"], "learner")
    for fine in (["learner", "--ros-args", "-p", "total_steps:=10", "--", "-p", "whatever:=1"],
                 ["learner", "-p", "whatever:=1"],  # not a ROS argument: the program's own
                 ["learner", "--ros-args", "-p", "other_node:whatever:=1"],  # another node's
                 ["learner", "--ros-args", "-r", "__ns:=/robot", "-p", "learner:whatever:=1"]):  # rcl's
        check_params_files(fine, "learner")


def test_sim_train_takes_the_bags_topic_joints_and_fields_from_arguments_or_either_file_section(tmp_path):
    """There were no launch arguments for them, and a task file's demo_player bag_topic/bag_joints
    were overwritten with the learner's empty values (a walkthrough); an MJCF robot's JointState bag
    was read in its first message's joint order, not the model's."""
    import sys

    import gymnasium

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_bags import F32, JS, SEC, _joint_state, _stream, _write_stream, robot_bag

    bag, _ = robot_bag(tmp_path / "robot")
    keys = {"demos_topic": "/joint_states", "demos_joints": "shoulder,elbow",
            "demos_fields": "velocity,position"}

    def parameters(argv: list[str]) -> tuple[dict, dict]:
        specs = {s.name: s.parameters for s in lr.describe_launch("sim_train", argv)[2]}
        return specs["learner"], specs["demo_player"]

    learner, player = parameters([f"demos:={bag}", f"run_dir:={tmp_path / 'a'}",
                                  *(f"{k}:={v}" for k, v in keys.items())])
    assert {k: learner[k] for k in keys} == keys
    assert (player["bag_topic"], player["bag_joints"], player["bag_fields"]) == tuple(keys.values())
    params = tmp_path / "task.yaml"
    params.write_text("/**:\n  ros__parameters: {env_id: InvertedPendulum-v5}\n"
                      "demo_player:\n  ros__parameters: {bag_topic: /joint_states, "
                      "bag_joints: 'shoulder,elbow', bag_fields: 'velocity,position'}\n")
    learner, player = parameters([f"params_file:={params}", f"demos:={bag}", f"run_dir:={tmp_path / 'b'}"])
    assert {k: learner[k] for k in keys} == keys
    assert (player["bag_topic"], player["bag_joints"], player["bag_fields"]) == tuple(keys.values())
    # An MJCF robot (the pendulum's model: joints slider, hinge) and a bag that lists them the other
    # way round: read in the model's order by name.
    xml = tmp_path / "arm.xml"
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    states = [(SEC + k * SEC // 50, _joint_state(["hinge", "slider"], [0.1 * k, -0.1 * k], [k, -k]))
              for k in range(5)]
    arm_bag = _write_stream(tmp_path / "arm_bag", {"/joint_states": (JS, states)})
    learner, player = parameters([f"env:={xml}", f"demos:={arm_bag}", f"run_dir:={tmp_path / 'c'}"])
    assert learner["demos_joints"] == player["bag_joints"] == "slider,hinge"
    # the model's joint names given in another order: scrambled observations (a walkthrough)
    with pytest.raises(ValueError, match=r"demos_joints hinge,slider names arm.xml's joints in another "
                                         r"order than the model's, slider,hinge"):
        parameters([f"env:={xml}", f"demos:={arm_bag}", "demos_joints:=hinge,slider",
                    f"run_dir:={tmp_path / 'c2'}"])
    # ... and a Gymnasium task's (the pendulum's model), checked there and by the direct loop
    with pytest.raises(ValueError, match=r"demos_joints hinge,slider names InvertedPendulum-v5's joints in "
                                         r"another order than the model's, slider,hinge"):
        parameters(["env:=InvertedPendulum-v5", f"demos:={arm_bag}", "demos_joints:=hinge,slider",
                    f"run_dir:={tmp_path / 'c4'}"])
    from opolo_ros.train.direct import check_demonstrations

    cfg = load_run_config(None, {"env_id": "InvertedPendulum-v5", "demos": str(arm_bag),
                                 "demos_topic": "/joint_states", "demos_joints": "hinge,slider"})
    with pytest.raises(ValueError, match="another order than the model's, slider,hinge"):
        check_demonstrations(cfg)
    check_demonstrations(dataclasses.replace(cfg, demos_joints="slider,hinge"))  # the model's order
    # ... and without demos_joints a Gymnasium task's bag is read by name in the model's order too
    # (it took the first message's order: hinge, slider trained on swapped observations unsaid)
    learner, player = parameters(["env:=InvertedPendulum-v5", f"demos:={arm_bag}",
                                  "demos_topic:=/joint_states", f"run_dir:={tmp_path / 'c5'}"])
    assert learner["demos_joints"] == player["bag_joints"] == "slider,hinge"
    # an array stream of the robot's observations is read as it is (no joints to select)
    arrays = _write_stream(tmp_path / "arm_arrays", {"/obs": (F32, _stream(np.zeros((5, 4))))})
    learner, player = parameters([f"env:={xml}", f"demos:={arrays}", f"run_dir:={tmp_path / 'c3'}"])
    assert learner["demos_joints"] == player["bag_joints"] == ""
    # ... and a bag whose joints are named otherwise says how to map them
    other = [(SEC + k * SEC // 50, _joint_state(["j1", "j2"], [0.1 * k, 0.0], [k, 0.0])) for k in range(5)]
    other_bag = _write_stream(tmp_path / "other_bag", {"/joint_states": (JS, other)})
    with pytest.raises(ValueError, match=r"read by the model's joint names, slider,hinge: a bag whose "
                                         r"joints are named otherwise needs demos_joints:="):
        parameters([f"env:={xml}", f"demos:={other_bag}", f"run_dir:={tmp_path / 'd'}"])
    # demo_player's own demos and num_demos in the task file (they were replaced by the defaults)
    params.write_text("/**:\n  ros__parameters: {env_id: InvertedPendulum-v5}\n"
                      f"demo_player:\n  ros__parameters: {{demos: {bag}, num_demos: 1, "
                      "bag_topic: /joint_states, bag_joints: 'shoulder,elbow'}\n")
    learner, player = parameters([f"params_file:={params}", f"run_dir:={tmp_path / 'e'}"])
    assert learner["demos"] == player["demos"] == str(bag)
    assert learner["num_demos"] == player["num_demos"] == 1
    # the player's num_demos 0 ("all") is the learner's too (it was refused: "must be at least 1")
    params.write_text(params.read_text().replace("num_demos: 1", "num_demos: 0"))
    learner, player = parameters([f"params_file:={params}", f"run_dir:={tmp_path / 'f'}"])
    assert learner["num_demos"] == player["num_demos"] == 0
    learner, player = parameters([f"params_file:={params}", f"run_dir:={tmp_path / 'g'}", "num_demos:=2"])
    assert learner["num_demos"] == player["num_demos"] == 2  # the argument wins


def test_a_signal_during_one_nodes_close_still_closes_the_others(ros_domain_id):
    """A second Ctrl-C while the graph closes raised out of the loop: the nodes after it in the
    close order were never closed (a recorder there left an unreadable MCAP bag). It cuts short the
    close it lands in, the others run, and the interrupt is raised after them."""
    specs = [lr.NodeSpec("actor", "first"), lr.NodeSpec("actor", "second")]
    graph = lr.GraphRunner(specs, ros_domain_id)
    closed = []
    first, second = graph.nodes["first"], graph.nodes["second"]
    first_close = first.close

    def interrupted_close() -> None:
        raise KeyboardInterrupt

    def recorded_close() -> None:
        closed.append("first")
        first_close()

    second.close, first.close = interrupted_close, recorded_close  # closed in reverse order
    with pytest.raises(KeyboardInterrupt):
        graph.close()
    assert closed == ["first"]


def test_sim_train_refuses_a_held_run_folder_or_another_seeds_checkpoint_before_any_node_starts(tmp_path):
    """The learner refused both only once the graph ran (13.8 s in, the demonstrations published:
    a walkthrough); the launch says so before starting a node."""
    from opolo_ros.algo.config import to_dict
    from opolo_ros.train.runlock import RunFolderLock

    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"")  # (only its presence counts here)
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(load_run_config(
        ROOT / "config" / "inverted_pendulum.yaml", {"run_dir": str(run)}))))
    argv = [f"run_dir:={run}"]
    lr.describe_launch("sim_train", [*argv, "seed:=0"])  # the checkpoint's seed: fine
    with pytest.raises(ValueError, match=rf"checkpoint {run}/checkpoint.pt was written with seed 0, not 1"):
        lr.describe_launch("sim_train", [*argv, "seed:=1"])
    lr.describe_launch("sim_train", [*argv, "seed:=1", "resume:=false"])  # starting over: no checkpoint read
    lock = RunFolderLock(run).acquire()  # another training holds the folder
    try:
        with pytest.raises(ValueError, match=rf"run folder {run} is in use by another training process"):
            lr.describe_launch("sim_train", [*argv, "seed:=0"])
    finally:
        lock.release()
    lr.describe_launch("sim_train", [*argv, "seed:=0"])
