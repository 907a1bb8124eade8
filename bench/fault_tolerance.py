"""What crash safety costs: the replay journal's overhead on the ROS graph's learner throughput.

journal
    The cost of one :meth:`ReplayJournal.append` + :meth:`ReplayJournal.sync` (one replay batch
    written, and fsynced or not) for batches of 1 and 50 InvertedPendulum transitions, median of
    ``--appends``. In the learner the fsync runs while it trains on the batch.

throughput
    ``launch/sim_train.launch.py``'s graph in one process (as ``bench/graph_vs_direct.py``), with
    the learner's journal off, on without fsync (the default), and on with fsync, for the file's
    ``max_ahead`` (50: a batch of about 50 transitions per acknowledgement) and for ``max_ahead 0``
    (one transition per batch: the most appends per step). Each system is warmed up past the
    warm-up and the inverse-model pre-training (not timed), then timed for ``--steps`` env steps
    per round, the systems taking turns in a rotating order for ``--rounds`` rounds.

        .venv/bin/python bench/fault_tolerance.py journal --json bench/fault_tolerance_journal.json
        .venv/bin/python bench/fault_tolerance.py throughput --steps 500 --rounds 5 \\
            --json bench/fault_tolerance_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

from opolo_ros.data.journal import JournalRecord, ReplayJournal  # noqa: E402
from opolo_ros.errors import exit_status  # noqa: E402

IP_FIELDS = 2 * 4 + 1 + 3  # InvertedPendulum: obs_dim 4, act_dim 1
JOURNAL_MODES = {"no journal": {"journal": False}, "journal": {"journal": True, "journal_fsync": False},
                 "journal+fsync": {"journal": True, "journal_fsync": True}}


def journal(args: argparse.Namespace) -> dict:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:  # the disk the run folders live on
        for fsync in (False, True):
            for rows in (1, 50):
                j = ReplayJournal(Path(tmp) / f"j{fsync}{rows}.bin", IP_FIELDS, fsync=fsync)
                j.open()
                record = JournalRecord(0, 1, 0, np.zeros((rows, IP_FIELDS), np.float32))
                times = []
                for _ in range(args.appends):
                    t0 = time.perf_counter()
                    j.append(record)
                    j.sync()  # what the learner waits for before acknowledging the batch
                    times.append(time.perf_counter() - t0)
                j.close()
                key = f"{rows} transition{'s' if rows > 1 else ''}, {'fsync' if fsync else 'no fsync'}"
                out[key] = statistics.median(times) * 1e6
                print(f"append of {key}: {out[key]:.1f} us (median of {args.appends})", flush=True)
    return {"append_us": out}


def throughput(args: argparse.Namespace) -> dict:
    import torch
    from graph_vs_direct import DEFAULT_CONFIG, GraphSystem, graph_specs, time_rounds, write_params

    from opolo_ros.algo.config import load_run_config

    torch.set_num_threads(1)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    base = load_run_config(DEFAULT_CONFIG)
    warm = max(base.schedule.warmup_steps, base.schedule.batch_size) + 10
    total = warm + args.steps * args.rounds + 500
    learner = {"total_steps": total, "eval_every": 0, "checkpoint_every": 0, "export_every": 0,
               "progress": False, "torch_threads": 1}
    params = write_params(DEFAULT_CONFIG, work / "params.yaml", learner)
    demos = str(ROOT / base.demos)
    domain = 150 + os.getpid() % 50
    systems = {}
    for ahead in ("", "0"):
        for mode, extra in JOURNAL_MODES.items():
            name = f"max_ahead {ahead or 50}, {mode}"
            systems[name] = (ahead, extra, domain + len(systems))

    def graph_system(name: str, ahead: str, extra: dict, domain_id: int) -> GraphSystem:
        specs = graph_specs(params, demos, 0, work / name.replace(" ", "_").replace(",", ""), ahead)
        next(s for s in specs if s.name == "learner").parameters.update(extra)
        return GraphSystem(specs, domain_id)

    makers = {name: (lambda n=name, a=ahead, e=extra, d=dom: graph_system(n, a, e, d))
              for name, (ahead, extra, dom) in systems.items()}
    rates = time_rounds(makers, warm, args.steps, args.rounds)
    median = {name: statistics.median(v) for name, v in rates.items()}
    return {"steps_per_round": args.steps, "rounds": args.rounds, "steps_per_sec": rates,
            "median_steps_per_sec": median,
            "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "platform": platform.platform()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    j = sub.add_parser("journal")
    j.add_argument("--appends", type=int, default=2000)
    j.add_argument("--json")
    t = sub.add_parser("throughput")
    t.add_argument("--steps", type=int, default=500)
    t.add_argument("--rounds", type=int, default=5)
    t.add_argument("--work", default="/tmp/opolo_fault_tolerance")
    t.add_argument("--json")
    args = parser.parse_args()
    result = journal(args) if args.command == "journal" else throughput(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
