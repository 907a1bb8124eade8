"""How often the real-time deploy loop misses its deadline: the shipped InvertedPendulum expert on
``/joint_states`` against the sim bridge in real-time mode, as ``test/test_deploy.py`` runs it.

Prints, per run, the steps taken, the episodes ended (the pendulum fell) and the bridge's ``held``
count (steps that found no new command since the previous one) at the given time scale. Load the
machine beside it to see the margin, e.g. three ``python3 -c "while True: pass"`` processes:

    .venv/bin/python bench/realtime_held.py --time-scale 4 2 --runs 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))

import test_deploy as td  # noqa: E402  (the test's graph: one definition of the deploy set-up)

from opolo_ros.launch_runner import GraphRunner  # noqa: E402
from opolo_ros.ros.runtime import isolated_domain_id  # noqa: E402
from opolo_ros.sim.tasks import control_period  # noqa: E402


def run(scale: float, seconds: float) -> str:
    with GraphRunner(td.realtime_specs(scale), isolated_domain_id()) as graph:
        bridge = graph.nodes["sim_bridge"]
        steps = int(round(seconds / control_period(bridge.env)))
        start = time.monotonic()
        graph.spin_until(lambda: bridge.steps >= steps or bridge.episodes > 0, timeout_s=seconds / scale * 8)
        wall = time.monotonic() - start
        return (f"time_scale {scale:g}: {bridge.steps} steps, {bridge.episodes} episodes ended, held "
                f"{bridge.held} ({bridge.held / max(bridge.steps, 1):.2%}), {wall:.1f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--time-scale", type=float, nargs="+", default=[4.0, 2.0])
    p.add_argument("--seconds", type=float, default=60.0, help="simulated seconds per run")
    p.add_argument("--runs", type=int, default=2, help="runs per time scale")
    args = p.parse_args()
    for scale in args.time_scale:
        for _ in range(args.runs):
            print(run(scale, args.seconds), flush=True)


if __name__ == "__main__":
    main()
