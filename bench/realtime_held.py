"""How often the real-time deploy loop misses its deadline: the shipped InvertedPendulum expert on
``/joint_states`` against the sim bridge in real-time mode, as ``test/test_deploy.py`` runs it.

Prints, per run, the steps taken, the episodes ended (the pendulum fell), the bridge's ``held``
count (steps that found no new command since the previous one) and its ``stale`` count (steps
whose command answers an older joint state than the newest one, held steps included; the actor
echoes the stamp it answers) and the most steps a command was behind (``max_lag``) at the given
time scale. With the direct env, one command held for two steps (two steps behind) topples the
expert in 11 of 12 tries, one step behind never (``--probe``). Load the
machine beside it to see the margin, e.g. three ``python3 -c "while True: pass"`` processes:

    .venv/bin/python bench/realtime_held.py --time-scale 4 2 --runs 2
    .venv/bin/python bench/realtime_held.py --probe
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))

import test_deploy as td  # noqa: E402  (the test's graph: one definition of the deploy set-up)

from opolo_ros.errors import exit_status  # noqa: E402
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
                f"{bridge.held} ({bridge.held / max(bridge.steps, 1):.2%}), stale {bridge.stale} of "
                f"{bridge.answered} ({bridge.stale / max(bridge.answered, 1):.2%}), max lag "
                f"{bridge.max_lag}, {wall:.1f} s")


def probe(holds: tuple[int, ...] = (1, 2, 3), seeds: int = 3,
          at: tuple[int, ...] = (50, 200, 400, 700)) -> None:
    """The expert on the direct env, its command held (zero-order) for n steps once per episode."""
    import gymnasium as gym
    import numpy as np

    from opolo_ros.export.onnx_policy import load_policy

    policy = load_policy(td.EXPERT)

    def fell(start: int, n: int, seed: int) -> bool:
        env = gym.make(td.ENV, max_episode_steps=1500)
        obs, _ = env.reset(seed=seed)
        action = np.zeros(1)
        for t in range(1500):
            if not start <= t < start + n:
                action = policy(obs.astype(np.float32))
            obs, _, terminated, _, _ = env.step(action)
            if terminated:
                return True
        return False

    for n in holds:
        falls = sum(fell(start, n, seed) for seed in range(seeds) for start in at)
        print(f"command held for {n} step(s) (up to {n} steps behind): fell in {falls} of "
              f"{seeds * len(at)} episodes", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--time-scale", type=float, nargs="+", default=[4.0, 2.0])
    p.add_argument("--seconds", type=float, default=60.0, help="simulated seconds per run")
    p.add_argument("--runs", type=int, default=2, help="runs per time scale")
    p.add_argument("--probe", action="store_true",
                   help="instead: how many held steps in a row the expert survives (direct env, no ROS)")
    args = p.parse_args()
    if args.probe:
        probe()
        return
    for scale in args.time_scale:
        for _ in range(args.runs):
            print(run(scale, args.seconds), flush=True)


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
