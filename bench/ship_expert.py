"""Ship a trained expert once it meets its target: the ONNX model, 4 demonstrations, its eval log, the table.

    .venv/bin/python bench/ship_expert.py --task Walker2d-v5     (model: runs/experts/<task>/policy_best.onnx)

1. evaluates a copy of the model (`opolo-ros evaluate --episodes 10 --stamp`, seeds 10000..10009);
2. below the task's target (bench/experts_table.py): prints the figure, changes nothing, exits 1
   (unless `--below-target`: ships it anyway, marked "below target" in the table, so that the
   OPOLO runs of a task whose expert training has stalled can start; say so where it is used);
3. else: models/experts/<task>.onnx (stamped), 4 episodes recorded with `opolo-ros record
   --skip-terminated` into models/demos/<task>/ (MCAP; episodes that end in a fall are skipped,
   their seeds kept in the bag's metadata), the run's eval.csv into bench/results/experts/<task>_eval.csv, and
   models/experts/README.md regenerated. Committing them is left to you.
An expert already shipped is kept (exit 0) unless `--replace` is given. Exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import experts_table

from opolo_ros import cli
from opolo_ros.errors import exit_status
from opolo_ros.export.onnx_policy import load_policy

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True, choices=sorted(experts_table.TARGETS))
    p.add_argument("--model", help="candidate ONNX (default: runs/experts/<task>/policy_best.onnx)")
    p.add_argument("--episodes", type=int, default=10, help="evaluation episodes")
    p.add_argument("--demos", type=int, default=4, help="demonstration episodes to record")
    p.add_argument("--replace", action="store_true", help="replace an expert and demos shipped before")
    p.add_argument("--below-target", action="store_true",
                   help="ship an expert that evaluates below the task's target (marked in the table)")
    p.add_argument("--root", type=Path, default=ROOT,
                   help="project folder holding runs/, models/ and bench/results/ (default: this checkout)")
    args = p.parse_args(argv)
    root = args.root

    task, target = args.task, experts_table.TARGETS[args.task]
    source = Path(args.model) if args.model else root / "runs" / "experts" / task / "policy_best.onnx"
    model, demos = root / "models" / "experts" / f"{task}.onnx", root / "models" / "demos" / task
    if not source.is_file():
        print(f"ship_expert: error: no model at {source}", file=sys.stderr)
        return 2
    trained_on = load_policy(source).metadata.env_id
    if trained_on != task:
        print(f"ship_expert: error: {source} is a policy for {trained_on}, not {task}", file=sys.stderr)
        return 2
    if (model.exists() or demos.exists()) and not args.replace:
        if model.exists() and demos.exists():
            print(f"ship_expert: {task} is shipped already ({model}, {demos}); --replace to replace it")
            return 0
        print(f"ship_expert: error: {task} is half shipped ({model} and {demos} should both exist); "
              "--replace to ship it again", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        candidate, recorded = Path(tmp) / model.name, Path(tmp) / task  # the bag is named after it
        shutil.copyfile(source, candidate)
        status = cli.main(["evaluate", str(candidate), "--episodes", str(args.episodes), "--stamp"])
        if status:
            return status
        mean = float(load_policy(candidate).metadata.extra["eval_return_mean"])
        if mean < target and not args.below_target:
            print(f"ship_expert: {task}: {source} returns {mean:.1f}, below the target {target}; "
                  "nothing shipped (--below-target ships it anyway)")
            return 1
        status = cli.main(["record", "--model", str(candidate), "--episodes", str(args.demos),
                           "--output", str(recorded), "--skip-terminated"])
        if status:
            return status
        # Both in place only once both exist: an interrupted ship leaves nothing half done but
        # these two moves (then: --replace).
        if args.replace:
            model.unlink(missing_ok=True)
            shutil.rmtree(demos, ignore_errors=True)
        model.parent.mkdir(parents=True, exist_ok=True)
        demos.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(recorded, demos)
        shutil.move(candidate, model)
    log = source.parent / "eval.csv"
    copied = ""
    if log.is_file():
        results = root / "bench" / "results" / "experts"
        results.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, results / f"{task}_eval.csv")
        copied = f"bench/results/experts/{task}_eval.csv, "
    experts_table.main(root)
    verdict = f"{mean:.1f} >= {target}" if mean >= target else f"{mean:.1f}, BELOW the target {target}"
    print(f"ship_expert: {task} shipped ({verdict}); commit {model.relative_to(root)}, "
          f"{demos.relative_to(root)}/, {copied}models/experts/README.md"
          + ("" if copied else f" (no eval.csv next to {source.name}: no training log to keep)"))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
