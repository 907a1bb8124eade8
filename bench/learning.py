"""Learning benchmark: OPOLO (direct loop) on one task over several seeds, evaluated at fixed steps.

    .venv/bin/python bench/learning.py --config config/inverted_pendulum.yaml --seeds 0 1 2 \
        --at 5000 10000 20000 --out bench/results/inverted_pendulum_learning.json

Runs resume from their run folders, so an interrupted benchmark continues where it stopped. Prints a
markdown table for BENCHMARKS.md (evaluation return mean +- std over deterministic episodes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from opolo_ros.algo.config import load_run_config, merge_overrides
from opolo_ros.errors import exit_status
from opolo_ros.train.direct import train_direct
from opolo_ros.train.logger import RunLogger


def run_seed(config: str, seed: int, at: list[int], sets: list[str], run_root: str,
             label: str = "", eval_every: int | None = None) -> dict[int, dict[str, float]]:
    """Train (or resume) one seed to max(at); its evaluations at the steps in `at`, by step.

    Evaluations come every min(at) steps when every step in `at` is a multiple of it (else at the
    config's `eval_every`), so they land exactly on the reported steps; `eval_every` overrides that.
    """
    base = load_run_config(config, merge_overrides(sets))
    if eval_every is None:
        eval_every = min(at) if all(a % min(at) == 0 for a in at) else base.eval_every
    name = f"{base.env_id}_{label or base.algo}_seed{seed}"
    run_dir = Path(run_root) / name
    overrides = {**merge_overrides(sets), "seed": seed, "run_dir": str(run_dir),
                 "total_steps": max(at), "eval_every": eval_every}
    train_direct(load_run_config(config, overrides))
    evals = {int(r["env_step"]): r for r in RunLogger.read_evaluations(run_dir / "eval.csv")}
    return {a: evals[a] for a in at if a in evals}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--at", type=int, nargs="+", default=[5000, 10000, 20000], help="env steps to report")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--run-root", default="runs/bench_learning")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)

    base = load_run_config(args.config, merge_overrides(args.set))
    rows = {seed: run_seed(args.config, seed, args.at, args.set, args.run_root) for seed in args.seeds}

    print(f"\n{base.algo} on {base.env_id}, evaluation return (mean +- std over {base.eval_episodes} "
          f"deterministic episodes)\n")
    print("| seed | " + " | ".join(f"{a // 1000}k steps" for a in args.at) + " |")
    print("|---" * (len(args.at) + 1) + "|")
    for seed, r in rows.items():
        cells = [f"{r[a]['return_mean']:.1f} +- {r[a]['return_std']:.1f}" if a in r else "-" for a in args.at]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"config": args.config, "set": args.set, "env_id": base.env_id,
                                              "results": {str(s): {str(a): v for a, v in r.items()}
                                                          for s, r in rows.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
