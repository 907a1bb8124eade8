"""ONNX inference right after the thread slept: what a 1 kHz node pays that a tight loop does not.

The actor's inference (``BoundPolicy``: tuned session, I/O binding) takes about 8 us in a tight
loop, but 40-75 us inside the node at 1 kHz. Between two observations the node's thread sleeps;
this script times the same call, in one process and without DDS, after each of these gaps:

- ``hot``: none, call after call (the tight loop of ``bench/actor_micro.py``);
- ``busy``: a Python busy-wait of ``--gap-us`` (the core stays awake and with this thread);
- ``sleep``: ``time.sleep`` of ``--gap-us`` (the thread gives up the core, as the node does).

for each model: the shipped experts named by ``--models`` and ``linear``, a policy with no hidden
layer exported by the project's own exporter (one Gemm, the tanh and the rescaling: the least a
policy graph can do), which shows what is left when the weights are negligible. Variants take
turns over ``--rounds`` rounds; the table shows the median over rounds of each round's p50 and p99.

    .venv/bin/python bench/inference_wake.py --rounds 3 --calls 3000 --out bench/results/inference_wake.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from opolo_ros.algo.networks import Actor
from opolo_ros.errors import exit_status
from opolo_ros.export.onnx_policy import BoundPolicy, export_policy, load_policy

ROOT = Path(__file__).resolve().parents[1]
MODES = ("hot", "busy", "sleep")


def waiter(mode: str, gap_s: float) -> Callable[[], None]:
    if mode == "hot":
        return lambda: None
    if mode == "sleep":
        return lambda: time.sleep(gap_s)

    def busy() -> None:
        end = time.perf_counter() + gap_s
        while time.perf_counter() < end:
            pass
    return busy


def time_calls(policy: BoundPolicy, obs: np.ndarray, wait: Callable[[], None], calls: int,
               warmup: int) -> np.ndarray:
    """Microseconds per `policy(obs)`, each after `wait()`, the first `warmup` calls dropped."""
    out = np.empty(calls + warmup)
    for i in range(calls + warmup):
        wait()
        t0 = time.perf_counter_ns()
        policy(obs)
        out[i] = time.perf_counter_ns() - t0
    return out[warmup:] / 1000.0


def policies(names: list[str], tmp: Path) -> dict[str, tuple[BoundPolicy, np.ndarray]]:
    """Name -> (bound policy, an observation for it): the shipped experts named, then `linear` (no
    hidden layer) with the dimensions of the first one."""
    out = {}
    for name in names:
        path = ROOT / "models" / "experts" / f"{name}.onnx"
        if not path.is_file():
            raise FileNotFoundError(f"no shipped expert {path}")
        policy = load_policy(path)
        out[name] = BoundPolicy(policy), np.zeros(policy.metadata.obs_dim, np.float32)
    first = load_policy(ROOT / "models" / "experts" / f"{names[0]}.onnx").metadata
    linear = export_policy(Actor(first.obs_dim, first.act_dim, ()), tmp / "linear.onnx",
                           action_low=list(first.action_low), action_high=list(first.action_high),
                           metadata={"env_id": first.env_id})
    out["linear"] = BoundPolicy(load_policy(linear)), np.zeros(first.obs_dim, np.float32)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["InvertedPendulum-v5", "Hopper-v5"],
                   help="shipped experts (models/experts/<name>.onnx)")
    p.add_argument("--gap-us", type=float, default=1000.0, help="busy-wait / sleep before each call (us)")
    p.add_argument("--calls", type=int, default=3000, help="timed calls per variant and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, help="write the table's figures and every round's as JSON")
    args = p.parse_args(argv)
    if args.calls < 100 or args.rounds < 1 or args.gap_us <= 0:
        p.error("--calls >= 100, --rounds >= 1 and --gap-us > 0 are required")

    rounds: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bound = policies(args.models, Path(tmp))
        for r in range(args.rounds):
            for name, (policy, obs) in bound.items():
                for mode in MODES:
                    us = time_calls(policy, obs, waiter(mode, args.gap_us / 1e6), args.calls,
                                    warmup=args.calls // 10)
                    rounds.setdefault(f"{name} {mode}", []).append(
                        (float(np.percentile(us, 50)), float(np.percentile(us, 99))))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    rows = {k: {"p50_us": float(np.median([a for a, _ in v])), "p99_us": float(np.median([b for _, b in v])),
                "rounds": v} for k, v in rounds.items()}
    gap = f"{args.gap_us:g} us"
    print(f"| model | hot p50 / p99 | after a {gap} busy-wait | after a {gap} sleep |")
    print("|---|---|---|---|")
    for name in [*args.models, "linear"]:
        cells = [f"{rows[f'{name} {m}']['p50_us']:.1f} / {rows[f'{name} {m}']['p99_us']:.1f}" for m in MODES]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "gap_us": args.gap_us,
                                        "calls": args.calls, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
