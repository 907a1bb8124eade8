"""The ROS graph against the direct loop: throughput at the same update ratio, and learning parity.

The graph is ``launch/sim_train.launch.py``'s node list composed in one process (what
``opolo-ros launch sim_train`` runs: sim_bridge + actor + learner + demo_player, one executor,
real DDS on an isolated domain); the direct loop is ``DirectTrainer`` (env -> actor -> replay ->
schedule -> learner in one thread). Both use the same parameter file, seed and schedule.

throughput
    Each system is built and run past the warm-up and the inverse-model pre-training (not timed),
    then timed for ``--steps`` env steps per round, the systems taking turns in a rotating order
    within each of ``--rounds`` rounds, so background load spreads over all. Systems: ``direct``;
    ``graph`` with the parameter file's ``max_ahead``; ``graph_strict`` with ``max_ahead: 0``
    (the bridge alternates with the learner). Each graph runs on its own ROS domain. A graph is
    paused between its rounds by not spinning its executor. Steps/s of a graph = transitions its
    learner consumed (and trained on) per second.

        .venv/bin/python bench/graph_vs_direct.py throughput --steps 2000 --rounds 3 \
            --json bench/graph_vs_direct_throughput.json

parity
    Complete runs (``--total-steps``, evaluations every ``--eval-every``) of both systems per seed;
    every run's eval.csv goes to ``--out``/<system>_seed<k>/, the curves to ``--out``/parity.png and
    a summary (final and per-step mean returns; per run the mean return over its evaluations, and an
    exact permutation test of graph against direct on those) to ``--out``/parity.json. Runs already
    finished in ``--out`` are reused, so the work can be split over processes (``--systems``,
    ``--seeds``). ``graph2`` is the graph with a second bridge + actor pair in namespace robot2
    (its seed + 1000), both feeding the one learner (README, "More than one bridge"); its
    ``total_steps`` count the transitions of both.

        .venv/bin/python bench/graph_vs_direct.py parity --seeds 0 1 2 --total-steps 10000 \
            --eval-every 1000 --out bench/results/parity_ip
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

from opolo_ros.algo.config import deep_merge, load_run_config  # noqa: E402
from opolo_ros.errors import exit_status  # noqa: E402
from opolo_ros.launch_runner import GraphRunner, load_launch_module  # noqa: E402
from opolo_ros.train.direct import DirectTrainer  # noqa: E402
from opolo_ros.train.logger import RunLogger  # noqa: E402

DEFAULT_CONFIG = ROOT / "config" / "inverted_pendulum.yaml"
SYSTEMS = ("direct", "graph", "graph2")  # parity: graph2 is the graph with a second bridge + actor pair


def write_params(config: Path, out: Path, learner: dict) -> Path:
    """`config` with learner overrides (nested) merged in: one file both systems read."""
    data = yaml.safe_load(config.read_text())

    deep_merge(data["learner"]["ros__parameters"], learner)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def graph_specs(params: Path, demos: str, seed: int, run_dir: Path, max_ahead: str = ""):
    module = load_launch_module(ROOT / "launch" / "sim_train.launch.py")
    values = {a.name: a.default for a in module.ARGUMENTS}
    values.update(params_file=str(params), demos=demos, seed=str(seed), run_dir=str(run_dir),
                  max_ahead=max_ahead, resume="false")
    return module.describe(values)


# ------------------------------------------------------------------------------------ throughput

class DirectSystem:
    def __init__(self, cfg) -> None:
        self.trainer = DirectTrainer(cfg)

    def run(self, steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            self.trainer.env_step()
        return steps / (time.perf_counter() - t0)

    def close(self) -> None:
        self.trainer.env.close()


class GraphSystem:
    def __init__(self, specs, domain_id: int) -> None:
        self.graph = GraphRunner(specs, domain_id)
        self.learner = self.graph.nodes["learner"]

    def run(self, steps: int) -> float:
        trainer = self.learner.trainer
        start = trainer.step
        t0 = time.perf_counter()
        if not self.graph.spin_until(lambda: trainer.step >= start + steps or self.graph.done(), 900):
            raise RuntimeError("graph round timed out")
        if self.learner.error is not None:
            raise RuntimeError(f"learner failed: {self.learner.error}")
        return (trainer.step - start) / (time.perf_counter() - t0)

    def close(self) -> None:
        self.graph.close()


def time_rounds(makers: dict[str, Callable[[], DirectSystem | GraphSystem]], warm: int, steps: int,
                rounds: int) -> dict[str, list[float]]:
    """Build every system and run it past `warm` steps (not timed), then time `steps` env steps per
    system per round, the systems taking turns in a rotating order; steps/s per system and round."""
    built: dict[str, DirectSystem | GraphSystem] = {}
    try:
        for name, make in makers.items():
            built[name] = make()
            built[name].run(warm)  # warm-up, P_I pre-training, first updates: not timed
        rates: dict[str, list[float]] = {name: [] for name in built}
        names = list(built)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                rates[name].append(built[name].run(steps))
                print(f"round {r + 1}: {name} {rates[name][-1]:.1f} steps/s", flush=True)
    finally:
        for system in built.values():
            system.close()
    return rates


def throughput(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(1)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    base = load_run_config(args.config)
    warm = max(base.schedule.warmup_steps, base.schedule.batch_size) + 10
    total = warm + args.steps * args.rounds + 500
    learner = {"total_steps": total, "eval_every": 0, "checkpoint_every": 0, "export_every": 0,
               "progress": False, "torch_threads": 1}
    params = write_params(Path(args.config), work / "params.yaml", learner)
    demos = args.demos or str(ROOT / base.demos)
    cfg = load_run_config(params, {"demos": demos, "seed": args.seed, "run_dir": str(work / "direct")})
    systems = {"direct": lambda: DirectSystem(cfg)}
    domain = 150 + os.getpid() % 50
    for k, (name, ahead) in enumerate((("graph", ""), ("graph_strict", "0"))):
        systems[name] = (lambda a=ahead, n=name, d=domain + k:
                         GraphSystem(graph_specs(params, demos, args.seed, work / n, a), d))
    rates = time_rounds(systems, warm, args.steps, args.rounds)
    median = {name: statistics.median(v) for name, v in rates.items()}
    result = {
        "config": str(args.config), "seed": args.seed, "steps_per_round": args.steps, "rounds": args.rounds,
        "update_to_data": cfg.schedule.update_to_data, "hidden": list(cfg.opolo.net.hidden),
        "batch_size": cfg.schedule.batch_size, "steps_per_sec": rates, "median_steps_per_sec": median,
        "graph_over_direct": median["graph"] / median["direct"],
        "graph_strict_over_direct": median["graph_strict"] / median["direct"],
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "platform": platform.platform()},
    }
    return result


# ---------------------------------------------------------------------------------------- parity

def run_direct(params: Path, demos: str, seed: int, run_dir: Path) -> None:
    from opolo_ros.train.direct import train_direct

    cfg = load_run_config(params, {"demos": demos, "seed": seed, "run_dir": str(run_dir)})
    train_direct(cfg, resume=False)


def run_graph(params: Path, demos: str, seed: int, run_dir: Path, domain_id: int, bridges: int = 1) -> None:
    specs = graph_specs(params, demos, seed, run_dir)
    for k in range(1, bridges):  # each further pair in its own namespace, with its own seed
        specs += [dataclasses.replace(s, namespace=f"robot{k + 1}",
                                      parameters={**s.parameters, "seed": seed + 1000 * k})
                  for s in specs if s.executable in ("sim_bridge", "actor") and not s.namespace]
    with GraphRunner(specs, domain_id) as graph:
        graph.spin_until(graph.done)
        if graph.nodes["learner"].error is not None:
            raise RuntimeError(graph.nodes["learner"].error)


def permutation_p(a: list[float], b: list[float]) -> float:
    """Exact two-sided permutation test of the difference of means: the share of all relabellings
    of the pooled runs whose |mean difference| is at least the observed one (seed noise alone gives
    p >= 0.05 95 % of the time; with 3 runs per side the smallest possible p is 0.1)."""
    pooled, n = a + b, len(a)
    observed = abs(statistics.mean(a) - statistics.mean(b))
    splits = list(itertools.combinations(range(len(pooled)), n))
    extreme = 0
    for idx in splits:
        left = [pooled[i] for i in idx]
        right = [pooled[i] for i in range(len(pooled)) if i not in idx]
        extreme += abs(statistics.mean(left) - statistics.mean(right)) >= observed - 1e-9
    return extreme / len(splits)


def parity(args: argparse.Namespace) -> dict:
    from opolo_ros.plot import plot_curves

    out = Path(args.out)
    base = load_run_config(args.config)
    demos = args.demos or str(ROOT / base.demos)
    learner = {"eval_every": args.eval_every, "checkpoint_every": 0, "export_every": 0, "progress": False,
               "torch_threads": 1, "eval_episodes": args.eval_episodes}
    if args.total_steps:
        learner["total_steps"] = args.total_steps
    params = write_params(Path(args.config), out / "params.yaml", learner)
    cfg = load_run_config(params)
    domain = args.domain if args.domain is not None else 150 + os.getpid() % 50
    for seed in args.seeds:
        for system in args.systems:
            run_dir = out / f"{system}_seed{seed}"
            rows = RunLogger.read_evaluations(run_dir / "eval.csv")
            if rows and rows[-1]["env_step"] >= cfg.total_steps:
                continue
            shutil.rmtree(run_dir, ignore_errors=True)
            t0 = time.perf_counter()
            if system == "direct":
                run_direct(params, demos, seed, run_dir)
            else:
                run_graph(params, demos, seed, run_dir, domain, bridges=2 if system == "graph2" else 1)
            (run_dir / "wall_s.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
            print(f"{system} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    groups = {s: [out / f"{s}_seed{k}" / "eval.csv" for k in args.seeds
                  if (out / f"{s}_seed{k}" / "eval.csv").is_file()] for s in SYSTEMS}
    groups = {s: files for s, files in groups.items() if files}
    summary: dict = {"config": str(args.config), "env_id": cfg.env_id, "total_steps": cfg.total_steps,
                     "seeds": args.seeds, "eval_episodes": cfg.eval_episodes, "runs": {}}
    for files in groups.values():
        for f in files:
            rows = RunLogger.read_evaluations(f)
            summary["runs"][f.parent.name] = {int(r["env_step"]): round(r["return_mean"], 1) for r in rows}
    for system, files in groups.items():
        finals = [RunLogger.read_evaluations(f)[-1]["return_mean"] for f in files]
        if finals:
            summary[f"{system}_final_mean"] = statistics.mean(finals)
            summary[f"{system}_final_std"] = statistics.pstdev(finals)
    areas = {system: [statistics.mean(r["return_mean"] for r in RunLogger.read_evaluations(f)) for f in files]
             for system, files in groups.items()}
    summary["mean_over_evaluations"] = {k: [round(x, 1) for x in v] for k, v in areas.items()}
    for other in ("graph", "graph2"):
        if len(areas.get("direct", [])) >= 2 and len(areas.get(other, [])) >= 2:
            key = "permutation_p" if other == "graph" else f"permutation_p_{other}"
            summary[key] = permutation_p(areas["direct"], areas[other])
    if len(groups) >= 2:
        plot_curves(groups, out / "parity.png",
                    title=f"{cfg.env_id}: ROS graph vs direct loop ({len(args.seeds)} seeds)")
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--config", default=str(DEFAULT_CONFIG))
    t.add_argument("--demos", default="")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--work", default="/tmp/opolo_graph_vs_direct")
    t.add_argument("--json")
    q = sub.add_parser("parity")
    q.add_argument("--config", default=str(DEFAULT_CONFIG))
    q.add_argument("--demos", default="")
    q.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    q.add_argument("--systems", nargs="+", default=["direct", "graph"], choices=SYSTEMS)
    q.add_argument("--total-steps", dest="total_steps", type=int, default=0)
    q.add_argument("--eval-every", dest="eval_every", type=int, default=1000)
    q.add_argument("--eval-episodes", dest="eval_episodes", type=int, default=10)
    q.add_argument("--out", default="bench/results/parity_ip")
    q.add_argument("--domain", type=int, default=None,
                   help="ROS_DOMAIN_ID of the graph runs (default 150 + pid %% 50); give parity runs "
                        "side by side distinct domains")
    args = p.parse_args()
    result = throughput(args) if args.mode == "throughput" else parity(args)
    text = json.dumps(result, indent=2)
    print(text)
    target = getattr(args, "json", None)
    if args.mode == "parity":
        target = Path(args.out) / "parity.json"
    if target:
        Path(target).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
