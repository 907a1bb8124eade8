"""How long `opolo-ros launch sim_train` takes to end on SIGINT sent right after its learner got
the demonstrations (a new run: where the random-policy baseline used to run, unstoppable).

    .venv/bin/python bench/stop_at_start.py [--source DIR] [--rounds 3] [--params config/swimmer.yaml]

`--source`: the tree whose code runs (a worktree of another commit, for a side-by-side run); the
run folders go to a temporary folder. Prints, per round, the seconds from the signal to the exit,
the exit status, and the launch's last line.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--params", default="config/swimmer.yaml")
    parser.add_argument("--domain", default="222", help="ROS_DOMAIN_ID for the launches")
    args = parser.parse_args()
    env = dict(os.environ, ROS_DOMAIN_ID=args.domain, PYTHONPATH=args.source)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            proc = subprocess.Popen([sys.executable, "-m", "opolo_ros.cli", "launch", "sim_train",
                                     f"params_file:={args.params}", f"run_dir:={tmp}/run{k}",
                                     "total_steps:=5000"], cwd=args.source, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                for line in proc.stdout:
                    if "expert transitions" in line:  # the learner has its demonstrations
                        break
                time.sleep(0.2)
                sent = time.monotonic()
                proc.send_signal(signal.SIGINT)
                out = proc.communicate(timeout=120)[0]
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            last = out.strip().splitlines()[-1] if out.strip() else ""
            print(f"round {k}: {time.monotonic() - sent:.2f} s to exit, status {proc.returncode}: {last}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
