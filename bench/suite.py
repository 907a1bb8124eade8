"""Sample-efficiency benchmark on the paper's task suite: normalised score of OPOLO and OPOLO-x.

    .venv/bin/python bench/suite.py --tasks Hopper-v5 HalfCheetah-v5 --variants opolo opolo-x \
        --seeds 0 --at 100000 300000 1000000 --out bench/results/suite.json --plots bench/results/curves

Normalised score = (R - R_random) / (R_expert - R_random): R is the deterministic evaluation return
(10 episodes), R_expert the mean return of the 4 demonstration episodes, R_random a uniform random
policy's. Each task runs with its parameter file (config/<task>.yaml); OPOLO-x is the same with
lambda = 0 (no inverse-action regulariser). Runs resume from their run folders, so the benchmark can
be stopped and continued; cells not reached yet, or tasks without an expert bag in
models/demos/<task>, are reported as missing, never filled in. With --plots, one learning-curve PNG
per task from the runs' eval.csv files, which are copied next to it (<plots>/<run>/eval.csv);
--report makes the table and plots from the run folders without running anything (from those
copies too: --run-root bench/results/suite).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

from learning import run_seed

from opolo_ros.algo.config import load_run_config
from opolo_ros.data.demos import load_episodes
from opolo_ros.errors import exit_status
from opolo_ros.launch_runner import task_params_file
from opolo_ros.train.logger import RunLogger

VARIANTS = {"opolo": [], "opolo-x": ["opolo.lam=0"]}
# The paper's OPOLO, normalised to its own expert (Table "off-policy approaches").
PAPER_OPOLO = {"HalfCheetah-v5": 0.97, "Hopper-v5": 0.98, "Walker2d-v5": 1.01, "Swimmer-v5": 0.99,
               "Ant-v5": 1.04}


def task_config(env_id: str) -> str:
    path = task_params_file(env_id)
    if not path:
        raise SystemExit(f"no parameter file config/<task>.yaml for {env_id}")
    return path


def missing_demos(config: str) -> str:
    """Why this task cannot run yet ('' when it can)."""
    demos = Path(load_run_config(config).demos)
    return "" if demos.exists() else f"no expert demonstrations at {demos}"


def run_task(env_id: str, variants: list[str], seeds: list[int], at: list[int], run_root: str,
             sets: list[str], eval_every: int | None = None, report: bool = False) -> dict[str, dict]:
    config = task_config(env_id)
    why = missing_demos(config)
    if why:
        print(f"{env_id}: skipped, {why}", file=sys.stderr)
        return {v: {"missing": why} for v in variants}

    def one(variant: str, seed: int) -> dict[str, dict]:
        if report:  # what the run folder holds, nothing run
            csv = Path(run_root) / f"{env_id}_{variant}_seed{seed}" / "eval.csv"
            evals = {int(r["env_step"]): r for r in evaluations(csv)}
            rows = {a: evals[a] for a in at if a in evals}
        else:
            rows = run_seed(config, seed, at, [*sets, *VARIANTS[variant]], run_root, variant, eval_every)
        return {str(step): row for step, row in rows.items()}

    return {v: {str(seed): one(v, seed) for seed in seeds} for v in variants}


def cell(seed_rows: dict, step: int) -> str:
    """The mean score over the seeds that reached `step`; "(n=k of N)" when not all N did (a mean
    of fewer seeds looked like the whole one)."""
    if "missing" in seed_rows:
        return "missing"
    values = [rows[str(step)]["normalised"] for rows in seed_rows.values() if str(step) in rows]
    if not values:
        return "-"
    mean = sum(values) / len(values)
    if len(values) < len(seed_rows):
        return f"{mean:.2f} (n={len(values)} of {len(seed_rows)})"
    return f"{mean:.2f}" + (f" (n={len(values)})" if len(values) > 1 else "")


def step_label(step: int) -> str:
    """100000 -> 100k, 1000000 -> 1M, 2500 -> 2.5k (a column heading)."""
    for size, unit in ((1_000_000, "M"), (1000, "k")):
        if step >= size:
            return f"{step / size:g}{unit}"
    return str(step)


def table(results: dict[str, dict[str, dict]], at: list[int]) -> str:
    lines = ["| task | variant | " + " | ".join(step_label(a) for a in at) + " | paper OPOLO |",
             "|---|---|" + "---|" * len(at) + "---|"]
    for env_id, by_variant in results.items():
        for variant, seed_rows in by_variant.items():
            paper = PAPER_OPOLO.get(env_id, float("nan")) if variant == "opolo" else float("nan")
            lines.append(f"| {env_id} | {variant} | " + " | ".join(cell(seed_rows, a) for a in at)
                         + f" | {paper:.2f} |".replace("nan", "-"))
    return "\n".join(lines)


def evaluations(csv: Path) -> list[dict[str, float]]:
    """A log's evaluations by step, one per step (the last row of a step wins, as in a cell)."""
    by_step = {int(r["env_step"]): r for r in RunLogger.read_evaluations(csv)}
    return [by_step[k] for k in sorted(by_step)]


def spread(env_id: str, variants: list[str], seeds: list[int], run_root: str, after: int) -> list[str]:
    """Per run: its last evaluation, the range and mean of its evaluations after `after` steps and
    the first evaluation at 0.90 or more (the glance table's columns in BENCHMARKS.md)."""
    lines = []
    for variant in variants:
        for seed in seeds:
            csv = Path(run_root) / f"{env_id}_{variant}_seed{seed}" / "eval.csv"
            rows = evaluations(csv)
            if not rows:
                continue
            scored = [r for r in rows if math.isfinite(r["normalised"])]
            last = rows[-1]
            line = f"{env_id} {variant} seed {seed}: last {last['normalised']:.3f} at {int(last['env_step'])}"
            late = [r["normalised"] for r in scored if r["env_step"] > after]
            if late:
                line += (f"; after {step_label(after)}: {min(late):.3f}-{max(late):.3f}, "
                         f"mean {sum(late) / len(late):.3f} ({len(late)})")
            first = next((int(r["env_step"]) for r in scored if r["normalised"] >= 0.9), None)
            line += f"; first >= 0.90 at {first}" if first is not None else "; never >= 0.90"
            unscored = len(rows) - len(scored)
            lines.append(line + (f"; {unscored} evaluation(s) without a score left out" if unscored else ""))
    return lines


def plot(env_id: str, variants: list[str], seeds: list[int], run_root: str, out_dir: str) -> Path | None:
    from opolo_ros.plot import plot_curves

    groups = {v: [p for s in seeds if (p := Path(run_root) / f"{env_id}_{v}_seed{s}" / "eval.csv").is_file()]
              for v in variants}
    groups = {v: files for v, files in groups.items() if files}
    if not groups:
        return None
    copies = {v: [Path(out_dir) / log.parent.name / log.name for log in files] for v, files in groups.items()}
    for files in groups.values():  # the logs go next to the plot: it is drawn from those copies
        for log in files:
            copy = Path(out_dir) / log.parent.name / log.name
            if copy.resolve() == log.resolve():
                continue
            lost = sorted({int(r["env_step"]) for r in evaluations(copy)}
                          - {int(r["env_step"]) for r in evaluations(log)})
            if lost:  # a run started over (or another one) would replace a longer committed log
                print(f"{copy} kept: {log} lacks its evaluations at {lost[0]}..{lost[-1]} "
                      f"({len(lost)}); move one of them aside to replace it", file=sys.stderr)
                continue
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, copy)
    names = " and ".join({"opolo": "OPOLO", "opolo-x": "OPOLO-x"}[v] for v in groups)
    return plot_curves(copies, Path(out_dir) / f"{env_id}.png", title=f"{names} on {env_id}",
                       expert_return=expert_return(task_config(env_id)))


def expert_return(config: str) -> float:
    """Mean return of the demonstration episodes the runs imitate."""
    cfg = load_run_config(config)
    episodes = load_episodes(cfg.demos, **cfg.demo_options())[: cfg.num_demos or None]
    return sum(ep.ret for ep in episodes) / len(episodes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["Hopper-v5", "HalfCheetah-v5"], metavar="ENV_ID",
                   help="Gymnasium ids, each with config/<task>.yaml and models/demos/<task> (default: "
                        "%(default)s)")
    p.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["opolo", "opolo-x"],
                   help="opolo-x: the same with opolo.lam=0 (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0],
                   help="one run per seed (default: %(default)s)")
    p.add_argument("--at", type=int, nargs="+", default=[100_000, 300_000, 1_000_000], metavar="STEPS",
                   help="env steps the table reports; runs go to the largest (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a run config override for every run, as `opolo-ros train --set` (repeatable)")
    p.add_argument("--eval-every", type=int, help="evaluate this often (default: the smallest --at step)")
    p.add_argument("--run-root", default="runs/bench_suite",
                   help="run folders <task>_<variant>_seed<k> go here; rerunning resumes them (default: "
                        "%(default)s)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--plots", help="folder for one learning-curve PNG per task")
    p.add_argument("--report", action="store_true",
                   help="run nothing: table and plots from what the run folders hold (runs under way too)")
    p.add_argument("--after", type=int, default=300_000, metavar="STEP",
                   help="also print each run's last evaluation, the range and mean of its "
                        "evaluations after this step, and its first evaluation at 0.90 or more")
    args = p.parse_args(argv)

    results = {task: run_task(task, args.variants, args.seeds, args.at, args.run_root, args.set,
                              args.eval_every, args.report) for task in args.tasks}
    skipped = [task for task, by_variant in results.items()
               if any("missing" in seed_rows for seed_rows in by_variant.values())]
    print("\nNormalised score (R - R_random) / (R_expert - R_random), deterministic evaluation\n")
    print(table(results, args.at))
    for task in args.tasks:
        for line in spread(task, args.variants, args.seeds, args.run_root, args.after):
            print(line)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"set": args.set, "at": args.at, "results": results}, indent=1))
    if args.plots:
        for t in args.tasks:
            png = plot(t, args.variants, args.seeds, args.run_root, args.plots)
            if png:
                print(f"plot: {png}")
    if skipped and not args.report:  # nothing trained: a queue must not count the job done
        print(f"not run: {', '.join(skipped)} (no expert demonstrations)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
