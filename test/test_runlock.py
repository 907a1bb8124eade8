"""One training process per run folder: the second one gets a clear error, a crash leaves no stale lock."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
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
