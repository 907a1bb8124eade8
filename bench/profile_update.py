"""Profile OPOLO's update on HalfCheetah shapes (obs 17, act 6, [400, 300], batch 100), no env.

Times each part of the learner (critic + policy `train_step`, D step, P_I step, replay and expert
sampling) in CPU time of this process (less sensitive to other jobs on a shared machine than wall
time), then prints the top of cProfile and of torch.profiler for `train_step`. Variants given with
`--variant name:key=value,key=value` (keys of OPOLOConfig, e.g. `net.fused_adam=false`) are timed
side by side, interleaved, so their ratio is meaningful even under background load. The key
`autocast=bfloat16` is not a config key: it runs each update under `torch.autocast("cpu", bfloat16)`
(oneDNN's AMX/AVX-512 bf16 GEMMs where the CPU has them), a probe, not a learner option.

    .venv/bin/python bench/profile_update.py --variant fused: --variant foreach:net.fused_adam=false
    .venv/bin/python bench/profile_update.py --variant fp32: --variant bf16:autocast=bfloat16
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from opolo_ros.algo.config import OPOLOConfig, update_dataclass
from opolo_ros.algo.opolo import OPOLOLearner
from opolo_ros.data.demos import Episode, ExpertDataset
from opolo_ros.data.replay import ReplayBuffer
from opolo_ros.errors import exit_status

OBS, ACT, BATCH, POLICY_DELAY = 17, 6, 100, 2


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, rest = text.partition(":")
    values: dict = {}
    for item in filter(None, rest.split(",")):
        key, _, raw = item.partition("=")
        node = values
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        import yaml

        node[parts[-1]] = yaml.safe_load(raw)
    return name or "default", values


class Setup:
    def __init__(self, name: str, overrides: dict, seed: int = 0) -> None:
        self.name = name
        torch.manual_seed(seed)
        overrides = dict(overrides)
        dtype = overrides.pop("autocast", None)
        self.context = (contextlib.nullcontext if dtype is None else
                        lambda: torch.autocast("cpu", dtype=getattr(torch, dtype)))
        cfg = update_dataclass(OPOLOConfig(), overrides)
        self.learner = OPOLOLearner(OBS, ACT, cfg)
        rng = np.random.default_rng(seed)
        n = 20_000
        self.replay = ReplayBuffer(OBS, ACT, n, seed=seed)
        self.replay.add(rng.normal(size=(n, OBS)), rng.uniform(-1, 1, (n, ACT)), rng.normal(size=(n, OBS)),
                        rng.normal(size=n), np.zeros(n), np.zeros(n))
        eps = [Episode(rng.normal(size=(1001, OBS)).astype(np.float32)) for _ in range(4)]
        self.experts = ExpertDataset(eps, OBS, seed=seed)

    def train_steps(self, n: int) -> None:
        lrn, rb, ex = self.learner, self.replay, self.experts
        for _ in range(n):
            with self.context():  # per update: autocast's weight-cast cache lives until the exit
                lrn.train_step(rb.sample(BATCH), ex.sample(BATCH), POLICY_DELAY)

    def disc_steps(self, n: int) -> None:
        for _ in range(n):
            with self.context():
                self.learner.update_discriminator(self.replay.sample(BATCH), self.experts.sample(BATCH))

    def inverse_steps(self, n: int) -> None:
        for _ in range(n):
            with self.context():
                self.learner.update_inverse(self.replay.sample(BATCH))

    def sampling(self, n: int) -> None:
        for _ in range(n):
            self.replay.sample(BATCH)
            self.experts.sample(BATCH)


PARTS = {"train_step (critic + policy/2)": ("train_steps", 20), "D step": ("disc_steps", 10),
         "P_I step": ("inverse_steps", 20), "replay + expert sample": ("sampling", 200)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", action="append", default=[], help="name:key=value,... (repeatable)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=10, help="interleaved repetitions per part")
    p.add_argument("--profile", default="first", help="variant to profile ('first', a name, or 'none')")
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    variants = [parse_variant(v) for v in (args.variant or ["default:"])]
    setups = []
    for name, ov in variants:
        s = Setup(name, ov)
        t = time.perf_counter()
        s.train_steps(2 * POLICY_DELAY)  # includes any compilation
        s.disc_steps(2)
        s.inverse_steps(2)
        print(f"# {name}: first updates (incl. any compilation) {time.perf_counter() - t:.1f} s")
        setups.append(s)

    print(f"\nCPU time per call in ms (median of {args.reps} interleaved reps; torch threads "
          f"{torch.get_num_threads()})\n")
    header = "| part | " + " | ".join(s.name for s in setups) + " |"
    if len(setups) > 1:
        header += " | ".join(f" {s.name}/{setups[0].name}" for s in setups[1:]) + " |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for label, (method, n) in PARTS.items():
        times: dict[str, list[float]] = {s.name: [] for s in setups}
        for rep in range(args.reps):
            order = setups if rep % 2 == 0 else setups[::-1]
            for s in order:
                t = time.process_time()
                getattr(s, method)(n)
                times[s.name].append((time.process_time() - t) / n * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = f"| {label} | " + " | ".join(f"{med[s.name]:.3f}" for s in setups) + " |"
        if len(setups) > 1:
            row += " | ".join(f" {med[s.name] / med[setups[0].name]:.2f}" for s in setups[1:]) + " |"
        print(row)

    target = None if args.profile == "none" else (
        setups[0] if args.profile == "first" else next(s for s in setups if s.name == args.profile))
    if target is None:
        return
    print(f"\n## cProfile of 200 train_steps ({target.name}), by own time\n")
    pr = cProfile.Profile()
    pr.enable()
    target.train_steps(200)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(args.rows)
    print(out.getvalue())
    print(f"## torch.profiler of 100 train_steps ({target.name}), by self CPU time\n")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        target.train_steps(100)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
