"""Launch descriptions against the package: executables, arguments, parameter files, parameter names.

The static checks parse the files with ``ast`` (no ``launch`` import, which is not installable
here); the description checks run each file's ``describe()`` (plain Python) and compare every
parameter a node is given with the parameters the node declares (its table:
``launch_runner.declared_parameters``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from opolo_ros import launch_runner as lr
from opolo_ros.algo.config import flatten

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))
REQUIRED_ARGS = {
    "sim_train": {"env", "demos", "seed", "namespace", "params_file", "total_steps", "run_dir"},
    "record_expert": {"env", "model", "seed", "namespace", "output", "episodes", "storage"},
    "deploy": {"model", "namespace", "observation_topic", "action_topic"},
}


def console_scripts() -> dict[str, str]:
    """setup.py's console_scripts, name -> 'module:function', read with ast."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    entries = [ast.literal_eval(e) for e in value.elts]
                    return {n.strip(): t.strip() for n, t in (e.split("=", 1) for e in entries)}
    raise AssertionError("setup.py has no console_scripts")


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


def declared_parameters(executable: str) -> set[str]:
    """What the node declares, from its table (test_launch_checks.py compares the tables with what the
    running nodes declare)."""
    pytest.importorskip("rclpy")  # the tables are in the node modules
    return set(lr.declared_parameters(executable))


def test_there_are_the_three_launch_files():
    assert {p.name.removesuffix(".launch.py") for p in LAUNCH_FILES} == set(REQUIRED_ARGS)


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_is_a_launch_description_with_documented_arguments(path):
    tree = ast.parse(path.read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"generate_launch_description", "describe"} <= functions
    top_imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    for node in top_imports:  # launch/launch_ros are imported lazily (by launch_description)
        module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
        assert not module.startswith(("launch", "rclpy")), f"{path.name} imports {module} at module level"
    args = calls(tree, "LaunchArg")
    names = []
    for call in args:
        assert len(call.args) == 3 and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                           for a in call.args), ast.unparse(call)
        name, default, description = (a.value for a in call.args)
        assert len(description) > 15, f"{name}: describe the argument"
        names.append(name)
    assert len(names) == len(set(names))
    assert REQUIRED_ARGS[path.name.removesuffix(".launch.py")] <= set(names)


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_nodes_are_package_executables(path):
    scripts = console_scripts()
    tree = ast.parse(path.read_text())
    specs = calls(tree, "NodeSpec")
    assert specs
    for call in specs:
        executable = call.args[0].value
        assert executable in scripts, f"{path.name}: {executable} is not a console_script in setup.py"
        module, function = scripts[executable].split(":")
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert f"def {function}(" in source, f"{scripts[executable]} does not exist"
    exits = [c for c in specs if any(k.arg == "exit_ends_launch" and ast.literal_eval(k.value) is True
                                     for k in c.keywords)]
    assert len(exits) == 1, f"{path.name}: exactly one node must end the launch (on_exit=Shutdown())"


def test_entry_points_of_all_nodes_exist():
    for name, target in console_scripts().items():
        module, function = target.split(":")
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert f"def {function}(" in source, f"console_script {name}: {target} does not exist"
    assert set(lr.NODE_CLASSES) == set(console_scripts()) - {"opolo-ros"}


def ros_parameter_files() -> list[Path]:
    return sorted(p for p in (ROOT / "config").glob("*.yaml")
                  if any(isinstance(v, dict) and "ros__parameters" in v
                         for v in (yaml.safe_load(p.read_text()) or {}).values()))


def launch_node_names() -> dict[str, str]:
    """Node name -> executable over all launch files."""
    out = {}
    for path in LAUNCH_FILES:
        for call in calls(ast.parse(path.read_text()), "NodeSpec"):
            out[call.args[1].value] = call.args[0].value
    return out


def test_task_parameter_files_exist():
    assert Path(lr.task_params_file("InvertedPendulum-v5")) == ROOT / "config" / "inverted_pendulum.yaml"
    assert ros_parameter_files(), "no ROS 2 parameter files in config/"


@pytest.mark.parametrize("path", ros_parameter_files(), ids=lambda p: p.name)
def test_parameter_file_sections_match_nodes_and_their_parameters(path):
    nodes = launch_node_names()
    sections = lr.read_params_file(path)
    shared = set(flatten(sections.get("/**", {})))
    for section, params in sections.items():
        if section == "/**":
            continue
        name = section.rsplit("/", 1)[-1]
        assert name in nodes, f"{path.name}: section {section!r} is no node of the launch files"
        unknown = set(flatten(params)) - declared_parameters(nodes[name])
        assert not unknown, f"{path.name}: {section} does not declare {sorted(unknown)}"
    everyone = set().union(*(declared_parameters(e) for e in set(nodes.values())))
    assert shared <= everyone, f"{path.name}: /** keys {sorted(shared - everyone)} are declared by no node"
    from opolo_ros.algo.config import load_run_config

    load_run_config(path)  # the learner section is a valid run config (the direct loop reads it too)


@pytest.mark.parametrize("name", sorted(REQUIRED_ARGS))
def test_described_nodes_get_only_parameters_they_declare(name, tmp_path):
    pytest.importorskip("rclpy")  # describe() uses opolo_ros.nodes helpers
    args = {"deploy": ["model:=models/experts/InvertedPendulum-v5.onnx"],
            "record_expert": [f"output:={tmp_path / 'bag'}"], "sim_train": [f"run_dir:={tmp_path}"]}[name]
    _, values, specs = lr.describe_launch(name, args)
    assert values.keys() >= REQUIRED_ARGS[name]
    ip_file = lr.read_params_file(lr.task_params_file("InvertedPendulum-v5"))
    shared = set(flatten(ip_file.get("/**", {})))  # given to every node, as rcl does
    for spec in specs:
        unknown = set(spec.parameters) - declared_parameters(spec.executable) - shared
        assert not unknown, f"{name}: {spec.name} is given undeclared parameters {sorted(unknown)}"
    assert sum(s.exit_ends_launch for s in specs) == 1


def test_sim_train_passes_one_max_ahead_to_bridge_and_actor(tmp_path):
    pytest.importorskip("rclpy")
    _, _, specs = lr.describe_launch("sim_train", ["max_ahead:=7", "seed:=3", f"run_dir:={tmp_path}",
                                                   "policy_every:=100"])
    by_name = {s.name: s.parameters for s in specs}
    assert by_name["sim_bridge"]["max_ahead"] == by_name["actor"]["swap_delay"] == 7
    assert by_name["sim_bridge"]["policy_every"] == by_name["learner"]["policy_every"] == 100
    assert by_name["sim_bridge"]["seed"] == by_name["actor"]["seed"] == by_name["learner"]["seed"] == 3
    assert by_name["learner"]["run_dir"] == str(tmp_path)
    assert by_name["actor"]["warmup_steps"] == by_name["learner"]["schedule.warmup_steps"]


def test_record_expert_gives_the_recorder_the_bridges_seed(tmp_path):
    """The bag's metadata records the seed of the simulation it came from."""
    pytest.importorskip("rclpy")
    _, _, specs = lr.describe_launch("record_expert", ["seed:=4", f"output:={tmp_path / 'bag'}"])
    by_name = {s.name: s.parameters for s in specs}
    assert by_name["demo_recorder"]["seed"] == by_name["sim_bridge"]["seed"] == 4
    # its replay subscriber is the recorder: no learner to wait for (the bridge waited 3 s for one)
    assert by_name["sim_bridge"]["learner_wait_s"] == 0.0


def test_sim_train_resume_is_the_files_unless_given(tmp_path):
    """A task file's learner ``resume: false`` holds; ``resume:=`` overrides it; neither: the node's
    default (true)."""
    pytest.importorskip("rclpy")
    sections = yaml.safe_load((ROOT / "config" / "inverted_pendulum.yaml").read_text())
    sections["learner"]["ros__parameters"]["resume"] = False
    path = tmp_path / "no_resume.yaml"
    path.write_text(yaml.safe_dump(sections))

    def learner_resume(*args: str) -> object:
        _, _, specs = lr.describe_launch("sim_train", [f"run_dir:={tmp_path / 'run'}", *args])
        return next(s for s in specs if s.name == "learner").parameters.get("resume", "node default")

    assert learner_resume(f"params_file:={path}") is False
    assert learner_resume(f"params_file:={path}", "resume:=true") is True
    assert learner_resume() == "node default"
    assert learner_resume("resume:=false") is False


def test_sim_train_refuses_a_bridge_episode_length_that_breaks_the_time_feature(tmp_path):
    """time_feature with the bridge's own max_episode_steps: the bridge's feature would be 1 - t/200,
    the demonstrations' and the learner's evaluation's 1 - t/1000 (a probe found it accepted)."""
    pytest.importorskip("rclpy")
    sections = yaml.safe_load((ROOT / "config" / "hopper.yaml").read_text())
    assert sections["learner"]["ros__parameters"]["time_feature"] is True
    sections.setdefault("sim_bridge", {"ros__parameters": {}})["ros__parameters"]["max_episode_steps"] = 200
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(sections))
    with pytest.raises(ValueError, match=r"sim_bridge.max_episode_steps \(200\) with time_feature: the "
                                         r"bridge's time feature would be 1 - t/200, .* 1 - t/1000"):
        lr.describe_launch("sim_train", [f"params_file:={path}", f"run_dir:={tmp_path / 'run'}"])
    sections["sim_bridge"]["ros__parameters"]["max_episode_steps"] = 1000  # the task's own: fine
    path.write_text(yaml.safe_dump(sections))
    lr.describe_launch("sim_train", [f"params_file:={path}", f"run_dir:={tmp_path / 'run'}"])



def test_an_mjcf_robots_episode_length_is_one_key_for_the_learner_and_the_bridge(tmp_path):
    """An MJCF robot trained with the time feature was tied to 1000 steps: the bridge's own
    max_episode_steps was refused, and the learner had none (a walkthrough). The run config's
    `max_episode_steps` (a /** key) is the learner's T, and the bridge's time limit unless its own
    section sets another; a Gymnasium task keeps its own limit."""
    pytest.importorskip("rclpy")
    import logging

    import numpy as np

    from opolo_ros.algo.config import load_run_config
    from opolo_ros.data.demos import Episode, save_npz
    from opolo_ros.train.stream import StreamHooks, StreamTrainer

    robot = tmp_path / "robot.xml"
    robot.write_text('<mujoco><worldbody><body><joint name="j" type="hinge"/><geom size="0.1"/></body>'
                     '</worldbody><actuator><motor joint="j" ctrlrange="-1 1"/></actuator></mujoco>')
    demos = tmp_path / "demos.npz"
    save_npz(demos, [Episode(np.zeros((5, 2), np.float32))])
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"max_episode_steps": 300}},
                                    "learner": {"ros__parameters": {"time_feature": True}}}))
    args = [f"env:={robot}", f"demos:={demos}", f"params_file:={path}", f"run_dir:={tmp_path / 'run'}"]
    _, _, specs = lr.describe_launch("sim_train", args)
    by_name = {s.name: s for s in specs}
    assert by_name["sim_bridge"].parameters["max_episode_steps"] == 300
    cfg = load_run_config(path, {"env_id": str(robot), "run_dir": str(tmp_path / "run")})
    trainer = StreamTrainer(cfg, policy_every=10**6, hooks=StreamHooks(lambda *_: None, lambda: None,
                                                                        logging.getLogger("T")))
    assert (cfg.max_episode_steps, trainer.max_steps) == (300, 300)  # the time feature's T
    trainer.close()
    _, _, specs = lr.describe_launch("sim_train", [*args, "max_episode_steps:=250"])  # the launch argument
    assert {s.name: s for s in specs}["sim_bridge"].parameters["max_episode_steps"] == 250
    path.write_text(yaml.safe_dump({"learner": {"ros__parameters": {"time_feature": True,
                                                                    "max_episode_steps": 300}},
                                    "sim_bridge": {"ros__parameters": {"max_episode_steps": 200}}}))
    with pytest.raises(ValueError, match=r"1 - t/200, .* 1 - t/300; set max_episode_steps for both"):
        lr.describe_launch("sim_train", args)
    with pytest.raises(ValueError, match=r"'max_episode_steps': sets an MJCF robot's time limit; Hopper-v5 "
                                         r"keeps the task's own \(leave it 0\), got 300"):
        load_run_config(None, {"env_id": "Hopper-v5", "max_episode_steps": 300})

def test_node_parameters_precedence_and_namespaces(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "/**": {"ros__parameters": {"seed": 1, "env_id": "A"}},
        "learner": {"ros__parameters": {"seed": 2, "opolo": {"lr": 0.1}}},
        "/robot/learner": {"ros__parameters": {"seed": 3}},
    }))
    assert lr.node_parameters(path, "learner") == {"seed": 2, "env_id": "A", "opolo.lr": 0.1}
    assert lr.node_parameters(path, "learner", "robot") == {"seed": 3, "env_id": "A", "opolo.lr": 0.1}
    assert lr.node_parameters(path, "actor") == {"seed": 1, "env_id": "A"}


def test_sections_apply_in_the_files_order_as_rcl_applies_them(tmp_path):
    """rcl gives a node the matching sections in the file's order, a later value over an earlier
    one (checked with rclpy): a learner section before /** loses to it. The launch and the direct
    loop applied /** first whatever the order. A plain section, which reaches a namespaced node
    only here, never overrides one that names the namespace."""
    path = tmp_path / "p.yaml"
    path.write_text("learner:\n  ros__parameters: {seed: 4}\n/**:\n  ros__parameters: {seed: 1}\n")
    assert lr.node_parameters(path, "learner") == {"seed": 1}
    from opolo_ros.algo.config import load_run_config

    assert load_run_config(path).seed == 1
    path.write_text("/robot/learner:\n  ros__parameters: {seed: 3}\n/**:\n  ros__parameters: {seed: 1}\n"
                    "learner:\n  ros__parameters: {seed: 2}\n")
    assert lr.node_parameters(path, "learner") == {"seed": 2}
    assert lr.node_parameters(path, "learner", "robot") == {"seed": 1}  # /** after /robot/learner


@pytest.mark.parametrize("top", ["robot1", "/robot1"])
def test_nested_namespace_sections_reach_the_namespaced_node(tmp_path, top):
    """rcl reads `robot1: {actor: {ros__parameters: ...}}` as /robot1/actor's section; the launch
    dropped it without a word (its safety settings with it)."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({top: {"actor": {"ros__parameters": {"max_action_rate": 2.0}},
                                          "ros__parameters": {"rate_hz": 5.0}}}))
    assert lr.node_parameters(path, "actor", "robot1") == {"max_action_rate": 2.0}
    assert lr.node_parameters(path, "actor") == {}  # another namespace's
    assert lr.read_params_file(path)[top] == {"rate_hz": 5.0}  # the section of a node named robot1


@pytest.mark.parametrize("key,reaches", [
    ("/*/actor", True), ("/robot1/**", True), ("/robot1/*", True), ("/*/*", True), ("robot1/*", True),
    ("/**/robot1/actor", True), ("/*", False), ("/robot2/**", False), ("/*/learner", False),
])
def test_wildcard_sections_reach_the_nodes_rcl_gives_them_to(tmp_path, key, reaches):
    """rcl applies `/robot1/**`, `/*/actor` and the like (checked against rclpy: a node /robot1/actor
    declaring the parameter); the launch dropped them, a deploy's safety settings with them."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({key: {"ros__parameters": {"max_action_rate": 2.0}},
                                    "/robot1/actor": {"ros__parameters": {"rate_hz": 5.0}}}))
    expected = {"max_action_rate": 2.0, "rate_hz": 5.0} if reaches else {"rate_hz": 5.0}
    assert lr.node_parameters(path, "actor", "robot1") == expected
    path.write_text(yaml.safe_dump({key: {"ros__parameters": {"max_action_rat": 2.0}}}))
    if reaches:  # a wildcard section may reach any node: its keys are checked as /**'s are
        with pytest.raises(ValueError, match="max_action_rat"):
            lr.node_parameters(path, "actor", "robot1")


def test_a_namespaced_learner_section_sets_the_launchs_run_config(tmp_path):
    """sim_train's learner took `robot1: {learner: ...}`'s node keys but the run config's defaults over
    its run-config keys (gamma 0.99 where the file said 0.9); a file with only that section was read
    as a plain run config and refused."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"robot1": {"learner": {"ros__parameters": {
        "env_id": "InvertedPendulum-v5", "total_steps": 1234, "td3": {"gamma": 0.9}}}}}))
    assert lr.run_config(path, namespace="robot1").total_steps == 1234
    assert lr.run_config(path).total_steps != 1234  # not the learner outside robot1
    _, _, specs = lr.describe_launch("sim_train", [f"params_file:={path}", "namespace:=robot1",
                                                   f"run_dir:={tmp_path / 'run'}"])
    learner = next(spec for spec in specs if spec.name == "learner")
    assert learner.parameters["total_steps"] == 1234 and learner.parameters["td3.gamma"] == 0.9


@pytest.mark.parametrize("text,match", [
    ("actor: &a\n  sub: *a\n", "section 'actor/sub' holds itself"),
    ("ros__parameters:\n  seed: 3\n", "'ros__parameters' at the top level"),
    # rcl refuses these three (checked with rclpy's --params-file); the launch read them as no
    # parameters, or as a section that reaches no node
    ("actor:\n  ros__parameters:\n", "got None \\(give \\{\\} for none"),
    ("/r*/actor:\n  ros__parameters: {rate_hz: 5.0}\n", "token 'r\\*' \\(a wildcard is a whole name token"),
    ("robot-1:\n  actor:\n    ros__parameters: {}\n", "section 'robot-1/actor' has the name token 'robot-1'"),
])
def test_parameter_files_of_odd_shapes_are_one_line_errors(tmp_path, text, match):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        lr.read_params_file(path)


@pytest.mark.parametrize("section,match", [
    ({"actor": {"ros_parameters": {"joints": ["hinge"]}}}, "section 'actor' holds 'ros_parameters', not "
                                                           "'ros__parameters'"),
    ({"robot1": {"actor": {"ros__params": {"rate_hz": 5.0}}}}, "section 'robot1/actor' holds 'ros__params'"),
    ({"actor": {"rate_hz": 5.0}}, "'actor/rate_hz' is 5.0, outside any 'ros__parameters'"),
])
def test_sections_rcl_refuses_are_errors_not_skipped(tmp_path, section, match):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"seed": 1}}, **section}))
    with pytest.raises(ValueError, match=match):
        lr.read_params_file(path)
    expert = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"
    with pytest.raises(ValueError, match=match):  # the deploy launch started without them before
        lr.describe_launch("deploy", [f"model:={expert}", f"params_file:={path}"])


def test_argument_parsing_errors():
    assert lr.parse_arguments(["env:=Hopper-v5", "demos:=a:=b"]) == {"env": "Hopper-v5", "demos": "a:=b"}
    with pytest.raises(ValueError, match="name:=value"):
        lr.parse_arguments(["env=Hopper-v5"])
    with pytest.raises(ValueError, match="unknown launch argument"):
        lr.resolve_arguments([lr.LaunchArg("env", "", "the task id")], {"enf": "x"})
    with pytest.raises(FileNotFoundError, match="available: deploy, record_expert, sim_train"):
        lr.find_launch_file("nope")
    assert lr.task_name("HalfCheetah-v5") == "half_cheetah" and lr.task_name("robots/arm.xml") == "arm"


def test_a_launch_file_that_fails_to_load_is_one_line(tmp_path):
    (tmp_path / "syn.launch.py").write_text("x = (\n")
    (tmp_path / "boom.launch.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    with pytest.raises(ValueError, match=r"cannot load launch file .*syn.launch.py \(line 1\): SyntaxError"):
        lr.load_launch_module(tmp_path / "syn.launch.py")
    with pytest.raises(ValueError, match=r"boom.launch.py: RuntimeError: boom second line$"):
        lr.load_launch_module(tmp_path / "boom.launch.py")

    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ValueError, match=r"notes.txt is not a launch file"):
        lr.find_launch_file(str(text))


def test_a_launch_file_without_its_arguments_or_describe_is_one_line(tmp_path):
    """A Python file that is no launch file of ours (no ARGUMENTS, or no describe()) is refused by
    what it lacks when loaded, not an AttributeError later (a mutation test)."""
    (tmp_path / "bare.launch.py").write_text("def describe(args):\n    return []\n")
    with pytest.raises(ValueError, match=r"bare.launch.py has no ARGUMENTS \(see opolo_ros.launch_runner\)"):
        lr.load_launch_module(tmp_path / "bare.launch.py")
    (tmp_path / "args.launch.py").write_text("ARGUMENTS = []\n")
    with pytest.raises(ValueError, match=r"args.launch.py has no describe"):
        lr.load_launch_module(tmp_path / "args.launch.py")


@pytest.mark.parametrize("text,kind,match", [
    ("true", int, r"'n': expected an integer, got 'true'"),
    ("false", float, r"'n': expected a number, got 'false'"),
    ("3", bool, r"'n': expected true or false, got '3'"),
])
def test_a_launch_argument_of_another_type_is_refused(text, kind, match):
    """A bool is no number: `episodes:=true` was taken as 1 (a mutation test)."""
    with pytest.raises(ValueError, match=match):
        lr.typed_value(text, kind, "launch argument 'n'")
    assert lr.typed_value("2", float, "n") == 2.0 and lr.typed_value("true", bool, "n") is True
