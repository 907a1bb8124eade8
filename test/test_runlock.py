"""One training process per run folder: the second one gets a clear error, a crash leaves no stale lock."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_direct import small_cfg

from opolo_ros.train.direct import DirectTrainer
from opolo_ros.train.runlock import RunFolderInUse, RunFolderLock
from opolo_ros.train.stream import StreamHooks, StreamTrainer

HOLD = "import sys, time; from opolo_ros.train.runlock import RunFolderLock; " \
       "RunFolderLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(60)"


def test_a_second_lock_is_refused_until_the_first_is_released(tmp_path: Path) -> None:
    first = RunFolderLock(tmp_path / "run").acquire()
    with pytest.raises(RunFolderInUse, match=rf"run folder .*run is in use .*\(pid {os.getpid()}\)"):
        RunFolderLock(tmp_path / "run").acquire()
    first.release()
    second = RunFolderLock(tmp_path / "run").acquire()
    assert second.held and not first.held
    second.release()


def test_a_killed_process_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderInUse, match=rf"\(pid {holder.pid}\)"):
            RunFolderLock(tmp_path / "run").acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        holder.stdout.close()
    RunFolderLock(tmp_path / "run").acquire().release()


def test_trainers_refuse_a_run_folder_in_use_before_touching_it(tmp_path: Path) -> None:
    cfg = small_cfg(tmp_path, "unused.npz", "td3")
    lock = RunFolderLock(cfg.run_dir).acquire()
    try:
        with pytest.raises(RunFolderInUse):
            DirectTrainer(cfg).train()
        hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("stream"))
        stream = StreamTrainer(cfg, policy_every=100, hooks=hooks)
        with pytest.raises(RunFolderInUse):
            stream.start(None, resume=True, journal=True, journal_fsync=False)
        stream.close()
        # nothing written there: no config, checkpoint or journal
        assert sorted(p.name for p in Path(cfg.run_dir).iterdir()) == [".lock"]
    finally:
        lock.release()
    assert DirectTrainer(cfg).train().env_steps == cfg.total_steps  # free again: trains


def test_lock_file_says_this_process_and_a_second_acquire_is_a_no_op(tmp_path: Path) -> None:
    """Survivors of a mutation spot check: a longer pid left in the file by an earlier holder stayed
    behind the new one (the error named a wrong pid); acquire twice on one lock refused itself."""
    (tmp_path / ".lock").write_text("123456789\n")
    lock = RunFolderLock(tmp_path).acquire()
    try:
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
        assert lock.acquire() is lock
    finally:
        lock.release()


def test_previous_runs_and_kept_configs_are_never_overwritten_within_one_second(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """A third start-over (or resume at one step) within the same second: the numbered names go on."""
    from opolo_ros.train import runfolder

    monkeypatch.setattr(runfolder.time, "strftime", lambda *_: "20261128-120000")
    moved = []
    for k in range(3):
        (tmp_path / "config.yaml").write_text(f"run: {k}\n")
        moved.append(runfolder.set_aside_previous_run(tmp_path))
    assert len(set(moved)) == 3 and [(p / "config.yaml").read_text() for p in moved] == [
        f"run: {k}\n" for k in range(3)]
    run = tmp_path / "resumed"
    run.mkdir()
    for k in range(4):
        runfolder.write_run_config(run, {"lr": k}, step=100)
    kept = sorted(p.name for p in run.glob("config-until-step100*.yaml"))
    assert kept == ["config-until-step100-1.yaml", "config-until-step100-2.yaml", "config-until-step100.yaml"]


def test_a_run_folder_that_is_a_file_is_named_as_such(tmp_path: Path) -> None:
    """A run_dir that is a file, or has a file on its path, is refused as "not a folder" naming it
    (mkdir's own FileExistsError for the first said nothing of the kind) (a mutation test)."""
    (tmp_path / "file").write_text("")
    for run_dir in (tmp_path / "file", tmp_path / "file" / "run"):
        with pytest.raises(NotADirectoryError, match=rf"run folder {run_dir} is not a folder"):
            RunFolderLock(run_dir).acquire()


def test_starting_over_sets_aside_every_file_of_the_earlier_run(tmp_path: Path) -> None:
    """Every file a run leaves in its folder (the learner's journal and parameters, the launch
    record, the best policy, ...) is moved aside by a start-over; other files stay (a mutation test)."""
    from opolo_ros.train import runfolder

    names = ["checkpoint.pt", "config.yaml", "eval.csv", "policy.onnx", "policy_best.onnx",
             "learning_curve.png", "replay_journal.bin", "replay_base.pt", "learner_params.yaml",
             "launch_params.yaml", "config-until-step5.yaml"]
    for name in names:
        (tmp_path / name).write_text(name)
    (tmp_path / "tb").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    dest = runfolder.set_aside_previous_run(tmp_path)
    assert sorted(p.name for p in dest.iterdir()) == sorted([*names, "tb"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([dest.name, "notes.txt"])


def test_a_run_config_is_kept_aside_only_when_a_resume_changed_it(tmp_path: Path) -> None:
    """config-until-step<N>.yaml is written only for a resume past step 0 under other values: not
    for the same values again, not at step 0 (nothing ran under the old file) (a mutation test)."""
    from opolo_ros.train import runfolder

    assert runfolder.write_run_config(tmp_path, {"lr": 1}, step=0) is None
    assert runfolder.write_run_config(tmp_path, {"lr": 2}, step=0) is None
    assert runfolder.write_run_config(tmp_path, {"lr": 2}, step=100) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    kept = runfolder.write_run_config(tmp_path, {"lr": 3}, step=100)
    assert kept == tmp_path / "config-until-step100.yaml" and kept.read_text() == "lr: 2\n"


def test_an_option_added_to_the_code_at_its_default_is_no_config_change(tmp_path: Path) -> None:
    """A run resumed after the code gained a config key (session 26's eval_max_episode_steps) said
    "resuming under config values changed: eval_max_episode_steps: (unset) -> 0" and kept its old
    config.yaml aside, though it goes on as it ran. The same key at another value is a change."""
    from opolo_ros.algo.config import RunConfig, to_dict
    from opolo_ros.train import runfolder
    from opolo_ros.train.checkpoint import config_changes

    current = to_dict(RunConfig())
    saved = {k: v for k, v in current.items() if k != "eval_max_episode_steps"}
    saved["opolo"] = {k: v for k, v in current["opolo"].items() if k != "lam"}
    assert config_changes(saved, current) == []
    assert config_changes(saved, {**current, "eval_max_episode_steps": 3000}) == [
        "eval_max_episode_steps: (unset) -> 3000"]
    assert config_changes(current, saved) == ["eval_max_episode_steps: 0 -> (unset)",
                                              f"opolo.lam: {current['opolo']['lam']} -> (unset)"]
    runfolder.write_run_config(tmp_path, saved, step=0)
    assert runfolder.write_run_config(tmp_path, current, step=100) is None
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == current
    kept = runfolder.write_run_config(tmp_path, {**current, "eval_max_episode_steps": 3000}, step=200)
    assert kept == tmp_path / "config-until-step200.yaml"
    (tmp_path / "config.yaml").write_text("{torn: [")
    assert runfolder.write_run_config(tmp_path, current, step=300) == tmp_path / "config-until-step300.yaml"
