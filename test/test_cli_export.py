"""`opolo-ros export`: a checkpoint's policy to ONNX, with the run folder's own config by default."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import yaml

from opolo_ros import cli
from opolo_ros.algo.config import load_run_config, to_dict
from opolo_ros.export.onnx_policy import load_policy

ROOT = Path(__file__).resolve().parents[1]


def checkpoint_of(run: Path, trainer: str = "direct", **values: object) -> Path:
    """The checkpoint (untrained networks) and config.yaml of a small TD3 run in `run`, written by
    `trainer`: the direct loop ("direct") or the learner node's StreamTrainer ("learner")."""
    from opolo_ros.train.direct import DirectTrainer
    from opolo_ros.train.stream import StreamHooks, StreamTrainer

    cfg = load_run_config(None, {"algo": "td3", "env_id": "InvertedPendulum-v5", "run_dir": str(run),
                                 "progress": False, "eval_episodes": 1, "td3": {"net": {"hidden": [32, 32]}},
                                 **values})
    if trainer == "direct":
        DirectTrainer(cfg).save()
    else:
        hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("export-test"))
        stream = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
        stream.start(None, resume=False, journal=False, journal_fsync=False)
        stream.save()
        stream.close()
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return run / "checkpoint.pt"


def test_export_takes_the_config_next_to_the_checkpoint(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)  # the task file's demos path is relative to the repository root
    run = tmp_path / "run"
    small = ["total_steps=300", "eval_every=300", "checkpoint_every=300", "export_every=300",
             "eval_episodes=1", "progress=false", "schedule.warmup_steps=200",
             "schedule.inverse_pretrain_steps=5", "schedule.train_freq=50", "schedule.gradient_steps=5",
             "opolo.net.hidden=[32,32]", "seed=3"]
    argv = ["train", "--config", "config/inverted_pendulum.yaml", "--run-dir", str(run)]
    assert cli.main([*argv, *[a for s in small for a in ("--set", s)]]) == 0
    out = tmp_path / "exported.onnx"
    assert cli.main(["export", str(run / "checkpoint.pt"), str(out)]) == 0  # no --config
    meta = load_policy(out).metadata
    assert (meta.env_id, meta.obs_dim, meta.extra["seed"]) == ("InvertedPendulum-v5", 4, "3")

    # no demonstrations needed: from another folder the config's relative demos path does not exist
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["export", str(run / "checkpoint.pt"), str(tmp_path / "far.onnx")]) == 0
    assert load_policy(tmp_path / "far.onnx").metadata.training_step == 300

    capsys.readouterr()  # an output that is the checkpoint itself (or any file but an .onnx) is refused
    before = (run / "checkpoint.pt").read_bytes()
    for output in (run / "checkpoint.pt", run / "config.yaml"):
        assert cli.main(["export", str(run / "checkpoint.pt"), str(output)]) == 2
        assert "exists and is no ONNX file to replace" in capsys.readouterr().err
    assert (run / "checkpoint.pt").read_bytes() == before

    (run / "config.yaml").unlink()
    capsys.readouterr()
    assert cli.main(["export", str(run / "checkpoint.pt"), str(tmp_path / "again.onnx")]) == 2
    err = capsys.readouterr().err
    assert "no --config given and no" in err and "config.yaml" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "again.onnx").exists()



def test_export_of_a_torch_file_that_is_no_checkpoint_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    import torch

    config = str(ROOT / "config" / "inverted_pendulum.yaml")
    for name, content in (("dict.pt", {"a": 1}), ("list.pt", [1, 2]), ("noconfig.pt", {"config": {}})):
        torch.save(content, tmp_path / name)
        assert cli.main(["export", str(tmp_path / name), str(tmp_path / "x.onnx"), "--config", config]) == 2
        err = capsys.readouterr().err
        assert "is not an opolo_ros checkpoint" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.onnx").exists()
    torch.save({"a": 1}, tmp_path / "ck.pt")
    assert cli.main(["export", str(tmp_path / "ck.pt"), str(tmp_path), "--config", config]) == 2
    assert f"output {tmp_path} is a folder" in capsys.readouterr().err


def test_export_offers_only_the_options_that_apply_to_it(capsys) -> None:
    """It offered train's --demos, --total-steps, --run-dir and --seed (a walkthrough)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", "--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert "--config" in shown and "--set" in shown
    for flag in ("--demos", "--total-steps", "--run-dir", "--seed", "--env-id"):
        assert flag not in shown
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", "checkpoint.pt", "out.onnx", "--seed", "3"])
    assert exit_info.value.code == 2


def test_the_seed_and_time_feature_in_the_metadata_are_the_checkpoints(tmp_path: Path) -> None:
    """`--seed 3` wrote seed=3 into a seed-0 policy; a --config of another seed wrote its seed, and
    one without the run's time feature could not export it at all."""
    checkpoint = checkpoint_of(tmp_path / "run", seed=3, time_feature=True)
    other = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    other.update(seed=0, time_feature=False)
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    out = tmp_path / "out.onnx"
    assert cli.main(["export", str(checkpoint), str(out), "--config", str(tmp_path / "other.yaml")]) == 0
    meta = load_policy(out).metadata
    assert (meta.extra["seed"], meta.time_feature, meta.obs_dim) == ("3", True, 5)


@pytest.mark.parametrize("trainer", ["direct", "learner"])
def test_the_metadata_names_the_trainer_that_wrote_the_checkpoint(tmp_path: Path, trainer: str) -> None:
    """A learner node's checkpoint was exported as 'opolo_ros direct ...', its own policy.onnx says
    'opolo_ros learner ...'."""
    checkpoint = checkpoint_of(tmp_path / "run", trainer)
    assert cli.main(["export", str(checkpoint), str(tmp_path / "out.onnx")]) == 0
    assert load_policy(tmp_path / "out.onnx").metadata.source == f"opolo_ros {trainer} td3"


@pytest.mark.parametrize("trainer", ["direct", "learner"])
def test_export_writes_the_checkpoints_control_period_else_the_tasks(tmp_path: Path, trainer: str) -> None:
    """The exported policy says the control period it was trained at (the env's dt), for the deploy
    launch's rate: checkpoints record it; older ones, with or without their policy's sizes, take it
    from the task's environment."""
    import torch

    from opolo_ros.sim.tasks import control_period, make_task_env

    dt = control_period(make_task_env("InvertedPendulum-v5"))
    checkpoint = checkpoint_of(tmp_path / "run", trainer)
    state = torch.load(checkpoint, weights_only=False)
    assert state["policy_io"]["control_period_s"] == dt == pytest.approx(0.04)
    without_period = {**state, "policy_io": {k: v for k, v in state["policy_io"].items()
                                             if k != "control_period_s"}}
    without_io = {k: v for k, v in state.items() if k != "policy_io"}
    for name, content in (("new", state), ("no_period", without_period), ("no_io", without_io)):
        torch.save(content, checkpoint)
        out = tmp_path / f"{name}.onnx"
        assert cli.main(["export", str(checkpoint), str(out)]) == 0
        assert load_policy(out).metadata.control_period_s == dt, name


def test_an_mjcf_runs_checkpoint_exports_without_its_model_file(tmp_path: Path, capsys) -> None:
    """A run folder moved to another machine: export rebuilt the env and failed with 'MJCF file not
    found', though only the networks are rebuilt. The checkpoint now holds the sizes and bounds; an
    older one without them says how to give the file, and takes it under another path."""
    import gymnasium
    import torch

    xml = tmp_path / "robot" / "inverted_pendulum.xml"
    xml.parent.mkdir()
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    checkpoint = checkpoint_of(tmp_path / "run", "learner", env_id=str(xml), time_feature=True)
    moved = tmp_path / "elsewhere" / xml.name
    moved.parent.mkdir()
    xml.rename(moved)
    from opolo_ros.sim.tasks import mjcf_joint_names

    mjcf_joint_names.cache_clear()  # read while the file was there (another process's export reads anew)
    out = tmp_path / "out.onnx"
    assert cli.main(["export", str(checkpoint), str(out)]) == 0
    meta = load_policy(out).metadata
    assert (meta.env_id, meta.obs_dim, meta.act_dim, meta.time_feature) == (str(xml), 5, 1, True)
    assert (meta.action_low, meta.action_high) == ((-3.0,), (3.0,))
    assert meta.control_period_s == 0.02  # the file's timestep (one per step): from the checkpoint
    # its joints too: the export without the file named none, and a deploy actor took them in any
    # order (a walkthrough)
    assert meta.joint_names == ("slider", "hinge") and "warning" not in capsys.readouterr().err

    state = torch.load(checkpoint, weights_only=False)  # the joints not recorded yet: said
    torch.save({**state, "policy_io": {k: v for k, v in state["policy_io"].items() if k != "joint_names"}},
               checkpoint)
    assert cli.main(["export", str(checkpoint), str(tmp_path / "nameless.onnx")]) == 0
    assert load_policy(tmp_path / "nameless.onnx").metadata.joint_names == ()
    assert (f"warning: the policy's metadata will not name its joints: the checkpoint does not record them "
            f"and {xml} is not here") in capsys.readouterr().err

    state = torch.load(checkpoint, weights_only=False)  # sizes recorded, the period not yet
    torch.save({**state, "policy_io": {k: v for k, v in state["policy_io"].items()
                                       if k != "control_period_s"}}, checkpoint)
    assert cli.main(["export", str(checkpoint), str(tmp_path / "unknown.onnx")]) == 0
    assert load_policy(tmp_path / "unknown.onnx").metadata.control_period_s is None  # left out

    state = torch.load(checkpoint, weights_only=False)  # as written before checkpoints held them
    del state["policy_io"]
    torch.save(state, checkpoint)
    capsys.readouterr()
    assert cli.main(["export", str(checkpoint), str(tmp_path / "old.onnx")]) == 2
    err = capsys.readouterr().err
    assert f"{xml} is not there: give the file with --set env_id=path/to/{xml.name}" in err
    assert len(err.strip().splitlines()) == 1
    assert cli.main(["export", str(checkpoint), str(tmp_path / "old.onnx"), "--set", f"env_id={moved}"]) == 0
    again = load_policy(tmp_path / "old.onnx").metadata
    assert (again.obs_dim, again.action_low, again.action_high) == (5, (-3.0,), (3.0,))
    assert again.control_period_s == 0.02  # from the file given


def test_an_mjcf_models_frame_skip_is_the_exported_control_period(tmp_path: Path) -> None:
    """A model that controls every 4th MuJoCo step (its ``frame_skip`` numeric) is trained and
    deployed at 4 x its timestep: the learner's checkpoint, and so the export, record that."""
    import gymnasium

    asset = (Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text()
    xml = tmp_path / "pendulum_skip4.xml"
    xml.write_text(asset.replace("<worldbody>", '<custom><numeric name="frame_skip" data="4"/></custom>'
                                                "<worldbody>", 1))
    checkpoint = checkpoint_of(tmp_path / "run", "learner", env_id=str(xml))
    assert cli.main(["export", str(checkpoint), str(tmp_path / "out.onnx")]) == 0
    assert load_policy(tmp_path / "out.onnx").metadata.control_period_s == 0.08  # 0.02 s x 4


def test_a_file_that_is_no_checkpoint_says_what_it_is_in_one_line(tmp_path: Path, capsys) -> None:
    """An ONNX policy given as the checkpoint said 'UnpicklingError: invalid load key' (a walkthrough),
    without a config.yaml next to it 'no --config given'; a text file 'Memo value not found'."""
    run = tmp_path / "run"
    checkpoint_of(run)
    policy = run / "policy.onnx"
    policy.write_bytes((ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx").read_bytes())
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "noise.bin").write_bytes(bytes(range(256)) * 4)
    shipped = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"  # no config.yaml beside it
    onnx_policy = f"{policy} is an ONNX policy, not a checkpoint (a run folder's checkpoint.pt)"
    for given, said in ((policy, onnx_policy),
                        (shipped, f"{shipped} is an ONNX policy, not a checkpoint"),
                        (run / "config.yaml", "config.yaml is a text file, not a checkpoint"),
                        (tmp_path / "empty.pt", "cannot be read (the file is empty)"),
                        (tmp_path / "noise.bin", "cannot be read (not a torch file: a damaged checkpoint, "
                                                 "or another kind of file)")):
        assert cli.main(["export", str(given), str(tmp_path / "out.onnx")]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err
        assert "Error" not in err, err  # no exception names: what the file is instead
    assert not (tmp_path / "out.onnx").exists()


def test_a_run_trained_on_a_gpu_exports_on_a_machine_without_one(tmp_path: Path) -> None:
    """Its config's device: cuda stopped the export ('torch sees no CUDA device'), though the
    checkpoint is loaded onto the CPU and the export runs there."""
    checkpoint = checkpoint_of(tmp_path / "run")
    config = tmp_path / "run" / "config.yaml"
    config.write_text(config.read_text().replace("device: cpu", "device: cuda"))
    assert "device: cuda" in config.read_text()
    assert cli.main(["export", str(checkpoint), str(tmp_path / "out.onnx")]) == 0
    assert load_policy(tmp_path / "out.onnx").metadata.obs_dim == 4


def without_control_period(model: Path, out: Path) -> Path:
    """A copy of `model` as exports wrote it before they recorded `control_period_s`."""
    import onnx

    proto = onnx.load(str(model))
    props = {p.key: p.value for p in proto.metadata_props if p.key != "control_period_s"}
    del proto.metadata_props[:]
    for key, value in props.items():
        proto.metadata_props.add(key=key, value=value)
    onnx.save(proto, str(out))
    assert load_policy(out).metadata.control_period_s is None
    return out


def test_evaluate_stamp_records_the_tasks_control_period_where_the_model_has_none(tmp_path: Path,
                                                                                   capsys) -> None:
    """`evaluate --stamp` on a model exported before exports recorded `control_period_s` (the
    experts shipped before session 19) adds its task's period, so the actor can compare its own
    rate with it; a period a model records is left alone."""
    old = without_control_period(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx",
                                 tmp_path / "old.onnx")

    assert cli.main(["evaluate", str(old), "--episodes", "1", "--stamp"]) == 0
    assert "and its task's control period (0.04 s)" in capsys.readouterr().out
    meta = load_policy(old).metadata
    assert (meta.control_period_s, meta.extra["eval_episodes"]) == (pytest.approx(0.04), "1")

    from opolo_ros.export.onnx_policy import stamp_metadata

    stamp_metadata(old, {"control_period_s": 0.01})  # a period the model records stays its own
    assert cli.main(["evaluate", str(old), "--episodes", "2", "--stamp"]) == 0
    meta = load_policy(old).metadata
    assert (meta.control_period_s, meta.extra["eval_episodes"]) == (pytest.approx(0.01), "2")
    # evaluated on another task (--env-id): that task's period is not the model's, and is not stamped
    other = without_control_period(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx",
                                   tmp_path / "other.onnx")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*InvertedPendulum-v4 is out of date", DeprecationWarning)
        assert cli.main(["evaluate", str(other), "--env-id", "InvertedPendulum-v4", "--episodes", "1",
                         "--stamp"]) == 0
    assert "control period" not in capsys.readouterr().out
    meta = load_policy(other).metadata
    assert (meta.control_period_s, meta.extra["eval_episodes"]) == (None, "1")


def test_a_time_feature_policy_records_its_T_for_the_deploy_clock(tmp_path: Path) -> None:
    """A deploy actor must be told T of the time feature 1 - t/T (time_feature_clock): the metadata
    did not say it, and `info` and the actor's hints said "1000 for the Gymnasium MuJoCo tasks",
    wrong for a robot with its own max_episode_steps. The policy now records it: a Gymnasium task's
    limit, an MJCF robot's max_episode_steps, none without the time feature; the shipped time-feature
    experts carry theirs (stamped: 1000)."""
    from opolo_ros.train.direct import policy_metadata

    def meta(**values: object) -> dict:
        return policy_metadata(load_run_config(None, values), training_step=1, version=1, trainer="t",
                               control_period_s=None)

    robot = tmp_path / "arm.xml"
    robot.write_text('<mujoco><worldbody><body><joint name="j" type="hinge"/><geom size="0.1"/></body>'
                     '</worldbody><actuator><motor joint="j" ctrlrange="-1 1"/></actuator></mujoco>')
    assert meta(env_id="Hopper-v5", time_feature=True)["time_feature_steps"] == 1000
    assert meta(env_id="Swimmer-v5", time_feature=True)["time_feature_steps"] == 1000
    assert meta(env_id=str(robot), time_feature=True, max_episode_steps=300)["time_feature_steps"] == 300
    assert meta(env_id=str(robot), time_feature=True)["time_feature_steps"] == 1000
    assert "time_feature_steps" not in meta(env_id="Hopper-v5")
    for name in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5"):
        assert load_policy(ROOT / "models" / "experts" / f"{name}.onnx").metadata.time_feature_steps == 1000
    # what `evaluate --demos` measures an MJCF policy over by default, as its run evaluated it: the
    # episode length (with the time feature or without) and the demonstrations it learned from
    robot_meta = meta(env_id=str(robot), max_episode_steps=150, num_demos=2)
    assert (robot_meta["max_episode_steps"], robot_meta["num_demos"]) == (150, 2)
    assert meta(env_id=str(robot))["max_episode_steps"] == 1000
    assert "max_episode_steps" not in meta(env_id="Hopper-v5") and meta(env_id="Hopper-v5")["num_demos"] == 4
    assert "num_demos" not in meta(env_id="Hopper-v5", algo="td3")
