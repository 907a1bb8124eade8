"""Configs: paper defaults, YAML overrides, clear errors on bad input."""

from pathlib import Path

import pytest
import yaml

from opolo_ros.algo.config import RunConfig, ScheduleConfig, load_run_config, merge_overrides

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_the_papers():
    cfg = RunConfig()
    assert cfg.opolo.net.hidden == (400, 300)
    assert (cfg.opolo.gamma, cfg.opolo.lr, cfg.opolo.lam) == (0.99, 3e-4, 0.1)
    s = cfg.schedule
    assert (s.batch_size, s.train_freq, s.gradient_steps) == (100, 1000, 1000)
    assert (s.disc_freq, s.disc_steps, s.inverse_freq, s.inverse_steps) == (500, 10, 500, 50)
    assert s.update_to_data == 1.0


def test_every_default_is_the_papers_or_the_released_codes():
    """Each default of /work/shared/algorithm-notes.md and README's named-options table (a changed
    default went unnoticed by every test but for the few above: a mutation test)."""
    cfg = RunConfig()
    o, s, t = cfg.opolo, cfg.schedule, cfg.td3
    assert (o.net.hidden, o.net.disc_hidden, o.net.inverse_hidden) == ((400, 300), (256, 256), (256, 256))
    assert (o.gamma, o.tau, o.lr, o.disc_lr, o.inverse_lr) == (0.99, 0.005, 3e-4, 3e-4, 3e-4)
    assert (o.alpha, o.f_q, o.residual_clip, o.lam) == (0.1, 2.0, 100.0, 0.1)
    assert (o.disc_entropy_coef, o.disc_gp_coef, o.inverse_l2) == (1e-3, 10.0, 1e-3)
    assert (o.reward_eps_low, o.reward_eps_high, o.norm_std_floor) == (1e-4, 1e-8, 0.1)
    assert (o.normalize_disc, o.normalize_inverse) == (True, True)
    assert (o.residual_mode, o.done_mode, o.policy_update) == ("stop_gradient", "terminal", "sequential")
    assert (s.warmup_steps, s.inverse_pretrain_steps, s.policy_delay) == (10_000, 2_500, 2)
    assert (s.batch_size, s.buffer_size, s.exploration_noise) == (100, 1_000_000, 0.1)
    assert (t.net.hidden, t.gamma, t.tau, t.lr) == ((400, 300), 0.99, 0.005, 3e-4)
    assert (t.target_noise, t.target_noise_clip, t.done_mode) == (0.2, 0.5, "terminal")  # Fujimoto et al.
    assert (cfg.num_demos, cfg.time_feature) == (4, False)  # 4 expert episodes per task
    assert ScheduleConfig(train_freq=4, gradient_steps=1).update_to_data == 0.25  # critic steps per env step


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("env_id: Hopper-v5\nopolo:\n  lam: 0.01\n  net: {hidden: [64, 64]}\n"
                 "schedule:\n  batch_size: 256\n")
    cfg = load_run_config(p, merge_overrides(["opolo.residual_mode=residual", "seed=3"]))
    assert cfg.env_id == "Hopper-v5" and cfg.seed == 3
    assert cfg.opolo.lam == 0.01 and cfg.opolo.net.hidden == (64, 64)
    assert cfg.opolo.residual_mode == "residual" and cfg.schedule.batch_size == 256


@pytest.mark.parametrize("text,match", [
    ("schedule:\n  batch_sise: 3\n",
     r"unknown key 'schedule.batch_sise' \(did you mean 'schedule.batch_size'\? "),
    ("totl_steps: 5\n", r"unknown key 'totl_steps' \(did you mean 'total_steps'\? known: algo, "),
    ("schedule:\n  batch_size: many\n", "schedule.batch_size.*integer"),
    ("opolo:\n  residual_mode: sometimes\n", "opolo.residual_mode.*must be one of"),
    ("opolo:\n  normalize_disc: 3\n", "true/false"),
    ("schedule: [1, 2]\n", "config 'schedule': expected a mapping"),
    ("env_id: [unclosed\n", "not valid YAML"),
    ("learner: 5\n", "section 'learner' must hold a 'ros__parameters' mapping"),
    ("schedule:\n  warmup_steps: 5\nseed: 1\nschedule:\n  batch_size: 8\n",  # the first block dropped
     r"duplicate key 'schedule' \(line 4\)"),
    ("/**:\n  ros__parameters: {seed: 1}\nlearner: [1]\n", "section 'learner' must hold a 'ros__parameters'"),
    # the launch refused these (rcl does) and `opolo-ros train` took them: a file that trained
    # directly failed `make train`, or lost its section without a word
    ("learner:\n  ros__parameters:\n", r"'learner' must hold a 'ros__parameters' mapping.*got None"),
    ("/**:\n  ros__parameters: {seed: 1}\nlerner:\n  ros__parameters: {total_steps: 5}\n",
     r"section 'lerner' names no opolo_ros node; did you mean 'learner'\?"),
    ("/**:\n  ros__parameters: {seed: 1}\nlearner:\n  ros_parameters: {total_steps: 5}\n",
     r"section 'learner' holds 'ros_parameters', not 'ros__parameters'"),
    ("/**:\n  ros__parameters: {seed: 1}\n/l*:\n  ros__parameters: {total_steps: 5}\n",
     r"name token 'l\*' \(a wildcard is a whole name token"),
])
def test_bad_yaml_gives_clear_errors(tmp_path, text, match):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_run_config(p)


def test_yaml_merge_keys_still_work_beside_the_duplicate_key_check(tmp_path):
    p = tmp_path / "merge.yaml"
    p.write_text("base: &base {warmup_steps: 7, batch_size: 8}\nschedule:\n  <<: *base\n  batch_size: 9\n")
    from opolo_ros.algo.config import read_yaml

    assert read_yaml(p)["schedule"] == {"warmup_steps": 7, "batch_size": 9}
    p.write_text("? [a, b]\n: 1\n")
    with pytest.raises(ValueError, match="not valid YAML"):  # an unhashable key: one line, as before
        read_yaml(p)


def test_missing_file_and_bad_override(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_run_config(tmp_path / "nope.yaml")
    with pytest.raises(ValueError, match="key=value"):
        merge_overrides(["seed"])
    with pytest.raises(ValueError, match=r"override 'total_steps=\[1,': the value is not valid YAML"):
        merge_overrides(["total_steps=[1,"])
    with pytest.raises(ValueError, match="not valid YAML"):
        merge_overrides(["seed=!!python/name:os.system"])
    with pytest.raises(ValueError, match=r"the key 'schedule..batch_size' has an empty part"):
        merge_overrides(["schedule..batch_size=5"])


@pytest.mark.parametrize("override,match", [
    ("total_steps=-1", r"'total_steps': must be at least 1, got -1"),
    ("eval_episodes=0", r"'eval_episodes': must be at least 1, got 0"),
    ("num_demos=-1", r"'num_demos': must not be negative"),
    ("eval_every=-5", r"'eval_every': must not be negative"),
    ("seed=-1", r"'seed': must not be negative"),  # Gymnasium would refuse it deep in the first reset
    ("schedule.exploration_noise=-0.1", r"'schedule.exploration_noise': must not be negative"),
    ("schedule.buffer_size=0", r"'schedule.buffer_size': must be at least 1"),
    # session 15 (a probe): each of these ran to the end with exit 0, learning from meaningless values
    ("opolo.gamma=1.5", r"'opolo.gamma': must be between 0 and 1 \(exclusive\), got 1.5"),
    ("td3.gamma=0", r"'td3.gamma': must be between 0 and 1"),
    ("opolo.tau=.nan", r"'opolo.tau': must be in \(0, 1\], got nan"),
    ("opolo.lr=.inf", r"'opolo.lr': must be a finite number > 0, got inf"),
    ("td3.lr=0", r"'td3.lr': must be a finite number > 0"),
    ("opolo.lam=-1", r"'opolo.lam': must be a finite number >= 0"),
    ("td3.target_noise_clip=-0.5", r"'td3.target_noise_clip': must be a finite number >= 0"),
    ("opolo.f_q=1", r"'opolo.f_q': must be a finite number > 1"),
    ("opolo.norm_std_floor=0", r"'opolo.norm_std_floor': must be a finite number > 0"),
    ("opolo.reward_eps_low=0", r"low in \(0, 1\)"),  # log(0) at the first reward
    ("opolo.reward_eps_low=2", r"'opolo.reward_eps_low' / 'opolo.reward_eps_high': low in \(0, 1\)"),
    ("schedule.exploration_noise=.inf", r"'schedule.exploration_noise': must be a finite number >= 0"),
    ("stop_at_return=-.inf", r"'stop_at_return': must be a finite return, or .inf \(off\)"),
    ("stop_at_return=.nan", r"'stop_at_return': must be a finite return"),
    ("demos_episode_gap_s=.nan", r"'demos_episode_gap_s': must be > 0 seconds"),
    ("total_steps=.inf", r"'total_steps': expected an integer, got inf"),  # was an OverflowError
    ("opolo.net.hidden=[0]", r"'opolo.net.hidden': expected a list of positive integers, got \[0\]"),
    ("opolo.net.hidden=[true]", r"'opolo.net.hidden': expected a list of positive integers"),
    ("seed=4294967296", r"'seed': must be at most 4294967295"),
    ("torch_threads=100000", r"'torch_threads': must be at most 256"),  # segfaulted the learner
    ("run_dir=''", r"'run_dir': must name a folder"),  # ran in the working folder, over its config.yaml
    # a mutation test: each of these was taken (2.5 steps as 2, true as seed 1, a negative count of
    # critic steps as none, an algorithm no trainer has, a reward clip whose log is of 0 or less)
    ("total_steps=2.5", r"'total_steps': expected an integer, got 2.5"),
    ("seed=true", r"'seed': expected an integer, got True"),
    ("schedule.gradient_steps=-1", r"'schedule.gradient_steps': must not be negative"),
    ("algo=sac", r"'algo': must be one of \('opolo', 'td3'\), got 'sac'"),
    ("opolo.reward_eps_high=0.99995", r"low in \(0, 1\), high in \[0, 1\), their sum < 1"),

])
def test_values_no_run_can_use_are_refused(override, match):
    with pytest.raises(ValueError, match=match):
        load_run_config(None, merge_overrides([override]))
    load_run_config(None, merge_overrides(["eval_every=0", "checkpoint_every=0"]))  # 0: off, allowed


def test_the_edges_of_the_allowed_ranges_are_allowed():
    """tau 1 (a hard target copy), the largest seed numpy takes: in range (a mutation test)."""
    cfg = load_run_config(None, merge_overrides(["opolo.tau=1", "td3.tau=1", "seed=4294967295"]))
    assert (cfg.opolo.tau, cfg.td3.tau, cfg.seed) == (1.0, 1.0, 2**32 - 1)


def test_overrides_of_one_section_and_values_with_an_equals_sign_are_all_kept(tmp_path):
    """`--set opolo.lr=... --set opolo.lam=...`: both (the second mapping replaced the first, which was
    lost without a word); a parameter file's sections that set keys of one group merge as rcl merges
    them; a value holding '=' is the whole text after the first one (a mutation test)."""
    sets = ["opolo.lr=0.001", "opolo.lam=0.5", "opolo.net.hidden=[8]", "opolo.net.disc_hidden=[4]"]
    assert merge_overrides(sets) == {"opolo": {"lr": 1e-3, "lam": 0.5,
                                               "net": {"hidden": [8], "disc_hidden": [4]}}}
    cfg = load_run_config(None, merge_overrides(["opolo.lr=1e-3", "opolo.lam=0.5", "run_dir=runs/lr=1e-3"]))
    assert (cfg.opolo.lr, cfg.opolo.lam, cfg.run_dir) == (1e-3, 0.5, "runs/lr=1e-3")
    path = ros_file(tmp_path, {"/**": {"opolo": {"lr": 1e-3}, "schedule": {"batch_size": 8}},
                               "learner": {"opolo": {"lam": 0.5}, "schedule.warmup_steps": 7}})
    cfg = load_run_config(path)
    assert (cfg.opolo.lr, cfg.opolo.lam) == (1e-3, 0.5)
    assert (cfg.schedule.batch_size, cfg.schedule.warmup_steps) == (8, 7)


def test_ros_parameter_file_gives_the_learner_section(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("/**:\n  ros__parameters:\n    env_id: Hopper-v5\n    seed: 4\n    use_sim_time: false\n"
                 "learner:\n  ros__parameters:\n    opolo:\n      lam: 0.01\n    policy_every: 3\n"
                 "    schedule.batch_size: 64\n"
                 "sim_bridge:\n  ros__parameters:\n    seed: 99\n    realtime: false\n")
    cfg = load_run_config(p)
    assert (cfg.env_id, cfg.seed, cfg.opolo.lam) == ("Hopper-v5", 4, 0.01)
    assert cfg.schedule.batch_size == 64  # a dotted key is the nested one, as for the learner node
    # The learner node's own parameters (policy_every) are no run-config keys; other nodes' sections
    # are not read by the direct loop (the launch checks them against those nodes).



def test_wildcard_and_any_namespace_sections_reach_the_direct_loops_learner(tmp_path):
    """As rcl gives them to a /learner node (and the launch to its learner): `/*` and `/**/learner`."""
    path = tmp_path / "params.yaml"
    path.write_text("/**:\n  ros__parameters: {seed: 1, total_steps: 7}\n"
                    "/*:\n  ros__parameters: {seed: 2}\n"
                    "/**/learner:\n  ros__parameters: {num_demos: 3}\n"
                    "/robot1/*:\n  ros__parameters: {seed: 9}\n")
    cfg = load_run_config(path)
    assert (cfg.seed, cfg.total_steps, cfg.num_demos) == (2, 7, 3)

def ros_file(tmp_path, sections: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({k: {"ros__parameters": v} for k, v in sections.items()}))
    return path


@pytest.mark.parametrize("sections,match", [
    ({"learner": {"total_step": 300}},
     r"params.yaml, section 'learner': unknown key 'total_step', not a parameter of the learner node; "
     r"did you mean 'total_steps'\?"),
    ({"/learner": {"opolo": {"lamda": 1.0}}}, r"section '/learner': unknown key 'opolo.lamda'.*'opolo.lam'"),
    ({"learner": {"warmup_steps": 10}}, r"'warmup_steps', not a parameter of the learner node; "
                                        r"did you mean 'schedule.warmup_steps'\?"),
    ({"/**": {"sed": 3}}, r"section '/\*\*': unknown key 'sed'.*did you mean 'seed'\?"),
    ({"/**": {"schedule": {"batch_sise": 3}}}, r"section '/\*\*': unknown key 'schedule.batch_sise'"),
])
def test_unknown_keys_of_the_run_sections_are_refused_with_the_closest_known_key(tmp_path, sections, match):
    """A typo in the sections the direct loop reads must not change the run silently. (`opolo-ros
    train` passes every node's parameter names for `/**`; the learner's alone here, without rclpy.)"""
    with pytest.raises(ValueError, match=match):
        load_run_config(ros_file(tmp_path, {**sections, "sim_bridge": {"max_ahead": 0}}), node_names=())


def test_the_shared_section_may_hold_any_nodes_parameters(tmp_path):
    """`/**` goes to every node: a sim_bridge or actor parameter there is fine (other nodes ignore it),
    a name no node declares is not (that needs the nodes' tables, so rclpy)."""
    pytest.importorskip("rclpy")
    from opolo_ros.launch_runner import package_parameter_names

    names = package_parameter_names()  # what opolo-ros train passes in
    shared = {"/**": {"max_ahead": 5, "command_qos": "reliable", "seed": 2}}
    cfg = load_run_config(ros_file(tmp_path, shared), node_names=names)
    assert cfg.seed == 2
    with pytest.raises(ValueError, match=r"unknown key 'max_ahed', not a parameter of any opolo_ros node; "
                                         r"did you mean 'max_ahead'\?"):
        load_run_config(ros_file(tmp_path, {"/**": {"max_ahed": 5}}), node_names=names)


SHIPPED_CONFIGS = sorted((ROOT / "config").glob("*.yaml")) + \
    sorted((ROOT / "config" / "experts").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: str(p.relative_to(ROOT / "config")))
def test_every_shipped_config_loads_for_the_direct_loop(path):
    cfg = load_run_config(path)
    assert cfg.algo == ("td3" if path.parent.name == "experts" else "opolo")


def test_exponent_without_dot_is_a_number(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("opolo:\n  lr: 1e-4\n")
    assert load_run_config(p, merge_overrides(["opolo.disc_lr=3e-5"])).opolo.lr == 1e-4
    assert load_run_config(p, merge_overrides(["opolo.disc_lr=3e-5"])).opolo.disc_lr == 3e-5


def test_binary_config_file_and_garbage_npz_demos_are_one_line(tmp_path):
    from opolo_ros.data.demos import load_npz

    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=r"c.yaml is not a text \(UTF-8\) file"):
        load_run_config(binary)
    garbage = tmp_path / "bad.npz"
    garbage.write_bytes(b"not an npz at all")
    with pytest.raises(ValueError, match=r"bad.npz is not a readable .npz of demonstrations") as exc:
        load_npz(garbage)
    assert "\n" not in str(exc.value)


def test_name_lists_take_a_yaml_list_or_text_and_an_empty_override_is_empty(tmp_path):
    """demos_joints was text only ('slider,hinge') while the actor's joints was a list only: a task
    file writing both alike was refused for one of them. Both forms are taken by both now."""
    from opolo_ros.nodes.common import ParameterError, coerce

    p = tmp_path / "c.yaml"
    p.write_text("demos_joints: [slider, hinge]\ndemos_fields: [position]\n")
    cfg = load_run_config(p)
    assert (cfg.demos_joints, cfg.demos_fields) == ("slider,hinge", "position")
    assert load_run_config(p, merge_overrides(["demos_joints="])).demos_joints == ""  # not YAML's null
    with pytest.raises(ValueError, match="config 'demos_topic': expected a string"):
        load_run_config(None, {"demos_topic": ["/a", "/b"]})  # one topic, not a list of names
    with pytest.raises(ValueError, match="config 'demos_joints': expected a string"):
        load_run_config(None, {"demos_joints": [1, 2]})
    assert coerce("demos_joints", ["slider", "hinge"], "") == "slider,hinge"  # the learner's parameter
    assert coerce("bag_joints", ["slider", "hinge"], "") == "slider,hinge"  # demo_player's own
    assert coerce("joints", "slider, hinge", [""]) == ["slider", "hinge"]  # -p joints:=slider,hinge
    with pytest.raises(ParameterError, match="parameter 'task': expected str"):
        coerce("task", ["a"], "")
