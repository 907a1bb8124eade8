"""Compare finished (or running) training runs of one task side by side: an option ablation.

Each ``--run LABEL=RUN`` names a run folder with an ``eval.csv`` (the direct loop's, written by
``opolo-ros train`` or ``bench/suite.py``), or such a CSV file itself (a committed log, e.g.
``bench/results/ablation/Hopper-v5_residual_seed0_eval.csv``). Prints a markdown table of the
normalised score at the ``--at`` steps, its mean over every evaluation in ``--window`` (less
sensitive to a single dip of a noisy curve than one point), and the best evaluation; writes the
curves to ``--plot`` and the numbers to ``--json``. ``--until STEP`` leaves out later evaluations,
so runs that went on longer than the others are compared over the same span (table, best, plot).

    .venv/bin/python bench/ablation.py --at 100000 200000 300000 --window 100000 300000 \\
        --run stop_gradient=runs/bench_suite/Hopper-v5_opolo_seed0 \\
        --run residual=runs/ablation_residual/Hopper-v5_opolo_seed0 \\
        --plot bench/results/ablation/Hopper-v5_residual.png --json bench/results/ablation/residual.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from opolo_ros.errors import exit_status
from opolo_ros.train.logger import RunLogger


def parse_run(text: str) -> tuple[str, Path]:
    """``LABEL=RUN`` -> (label, the run's evaluation CSV: RUN itself, or RUN/eval.csv)."""
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=RUN_DIR or LABEL=EVAL_CSV, got {text!r}")
    return label, Path(path) if path.endswith(".csv") else Path(path) / "eval.csv"


def summarise(rows: list[dict], at: list[int], window: tuple[int, int]) -> dict:
    by_step = {int(r["env_step"]): r["normalised"] for r in rows}
    in_window = [v for s, v in by_step.items() if window[0] <= s <= window[1]]
    best = max(by_step.items(), key=lambda kv: kv[1]) if by_step else (0, float("nan"))
    return {"at": {a: by_step.get(a) for a in at}, "last_step": max(by_step, default=0),
            "window_mean": statistics.mean(in_window) if in_window else None,
            "window_evals": len(in_window), "best": best[1], "best_step": best[0]}


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(summaries: dict[str, dict], at: list[int], window: tuple[int, int]) -> str:
    head = (["run"] + [f"{a // 1000}k" for a in at]
            + [f"mean {window[0] // 1000}k-{window[1] // 1000}k (evals)", "best (step)", "last step"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, s in summaries.items():
        cells = [label] + [fmt(s["at"][a]) for a in at]
        cells += [f"{fmt(s['window_mean'])} ({s['window_evals']})",
                  f"{fmt(s['best'])} ({s['best_step'] // 1000}k)", f"{s['last_step'] // 1000}k"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=parse_run, action="append", required=True, metavar="LABEL=RUN_DIR|EVAL_CSV")
    p.add_argument("--at", type=int, nargs="+", default=[100_000, 200_000, 300_000])
    p.add_argument("--window", type=int, nargs=2, default=[100_000, 300_000], metavar=("FROM", "TO"))
    p.add_argument("--plot", help="write the learning curves here (PNG)")
    p.add_argument("--title", default="")
    p.add_argument("--expert-return", dest="expert_return", type=float, help="dashed line in the plot")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--until", type=int, help="leave out evaluations after this env step")
    args = p.parse_args(argv)
    window = (args.window[0], args.window[1])
    summaries = {}
    for label, csv in args.run:
        if not csv.is_file():
            print(f"ablation.py: error: {csv} not found", file=sys.stderr)
            return 2
        summaries[label] = summarise(RunLogger.read_evaluations(csv, until=args.until), args.at, window)
    print(table(summaries, args.at, window))
    if args.plot:
        from opolo_ros.plot import plot_curves

        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot_curves({label: [csv] for label, csv in args.run}, args.plot,
                    title=args.title, expert_return=args.expert_return, max_step=args.until)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"runs": {k: str(v) for k, v in args.run}, "window": window,
                                               "until": args.until, "summaries": summaries}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
