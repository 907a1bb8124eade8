"""Seconds a learner's checkpoint takes to write, by replay size: what a stop costs (README: nodes
stop within 2 s; the learner writes its checkpoint first).

    .venv/bin/python bench/checkpoint_time.py --transitions 100000 1000000 --tasks Hopper-v5 Ant-v5

Fills a replay buffer of the task's sizes (observation with the time feature, action) with
random transitions, builds the task's OPOLO learner ([400, 300]), and times the runner's
state_dict and the atomic write (`save_checkpoint`: temporary file, fsync, rename) into
`--dir` (default runs/checkpoint_time, on the disk the run folders use), then deletes the file:
a full checkpoint (periodic ones), then the light one a stop writes since session 19 (no replay
rows: the last full checkpoint and the replay journal hold them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from opolo_ros.errors import exit_status

SIZES = {"Hopper-v5": (12, 3), "HalfCheetah-v5": (18, 6), "Walker2d-v5": (18, 6), "Ant-v5": (106, 8)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--tasks", nargs="+", default=["Hopper-v5", "Ant-v5"], choices=sorted(SIZES))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dir", type=Path, default=Path("runs/checkpoint_time"))
    args = p.parse_args(argv)

    from opolo_ros.algo.config import RunConfig
    from opolo_ros.data.demos import Episode, ExpertDataset
    from opolo_ros.data.replay import ReplayBuffer
    from opolo_ros.train.checkpoint import save_checkpoint
    from opolo_ros.train.runner import UpdateRunner, make_learner, make_schedule

    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / "checkpoint.pt"
    print("| task | transitions | checkpoint | file MB | state_dict s | write s (fsync, rename) | total s |")
    print("|---|---|---|---|---|---|---|")
    for task in args.tasks:
        obs_dim, act_dim = SIZES[task]
        cfg = RunConfig()
        for n in args.transitions:
            replay = ReplayBuffer(obs_dim, act_dim, n)
            rng = np.random.default_rng(0)
            for start in range(0, n, 100_000):
                k = min(100_000, n - start)
                replay.add(rng.normal(size=(k, obs_dim)), rng.uniform(-1, 1, (k, act_dim)),
                           rng.normal(size=(k, obs_dim)), rng.normal(size=k), np.zeros(k), np.zeros(k))
            experts = ExpertDataset([Episode(rng.normal(size=(1001, obs_dim)))], obs_dim)
            runner = UpdateRunner(make_learner(cfg, obs_dim, act_dim), make_schedule(cfg), replay, experts)
            for kind in ("full", "stop (light)"):
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    state = {"runner": runner.state_dict(replay_rows=kind == "full")}
                    t1 = time.perf_counter()
                    save_checkpoint(path, state)
                    t2 = time.perf_counter()
                    del state
                    print(f"| {task} | {n} | {kind} | {path.stat().st_size / 1e6:.1f} | {t1 - t0:.2f} | "
                          f"{t2 - t1:.2f} | {t2 - t0:.2f} |", flush=True)
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
