"""Training throughput, side by side in one run: env steps/s of SB3 TD3, our OPOLO and our TD3.

All systems train on HalfCheetah-v5 with [400, 300] policy and critic MLPs, batch 100 and about one
critic update per environment step (policy every 2nd critic step):

* sb3_td3:  Stable-Baselines3 TD3, train_freq 1, gradient_steps 1, policy_delay 2, N(0, 0.1) noise.
* opolo:    this package's direct loop (`DirectTrainer.env_step`: env -> actor -> replay -> schedule
            -> learner) with the paper's schedule: 1,000 critic steps every 1,000 env steps (UTD 1),
            10 D steps and 50 P_I steps every 500 env steps; the package's default options.
* opolo_residual / opolo_stop_gradient: the same with that `opolo.residual_mode`.
* opolo_simultaneous: opolo with `opolo.policy_update=simultaneous` (one critic backward serves
  the critic and the policy step).
* opolo_compiled: opolo with `opolo.compile_critic=true` (compilation is part of the warm-up; its
            time is reported).
* td3:      the same direct loop with algo td3 (same schedule without D and P_I).

Each system runs in its own worker process (its own torch state; `--baseline-src DIR` adds the same
systems importing opolo_ros from another source tree, for a before/after comparison in one run).
Each is built and warmed up first, one at a time (random-action warm-up, P_I pre-training, first
update burst, any compilation), then timed for `--steps` env steps per round; the systems take
turns within every round, in a rotating order, so background load spreads over all of them.
Reported: env steps per second of wall-clock time (the figure of merit) and per second of the
worker's CPU time (less sensitive to other jobs on a shared machine). The OPOLO demonstrations are
4 synthetic random-action episodes in a temporary .npz (their content does not matter for speed).

    .venv/bin/python bench/throughput.py --steps 3000 --rounds 3 --threads 1 \
        --json bench/results/throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from opolo_ros.errors import exit_status

ENV_ID = "HalfCheetah-v5"
HIDDEN = (400, 300)
BATCH = 100
WARMUP = 1_000  # random-action env steps before learning starts (all systems)
TRAIN_FREQ = 1_000  # our schedule: gradient_steps critic steps every train_freq env steps


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_demos(path: Path, episodes: int = 4, length: int = 1000, seed: int = 0) -> None:
    """Random-action HalfCheetah rollouts as state-only episodes (only their shape matters here)."""
    import gymnasium as gym

    from opolo_ros.data.demos import Episode, save_npz

    env = gym.make(ENV_ID)
    env.action_space.seed(seed)
    eps = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        rows, ret = [obs], 0.0
        for _ in range(length):
            obs, r, term, trunc, _ = env.step(env.action_space.sample())
            rows.append(obs)
            ret += float(r)
            if term or trunc:
                break
        eps.append(Episode(np.asarray(rows, dtype=np.float32), ret))
    env.close()
    save_npz(path, eps)


class SB3TD3:
    name = "sb3_td3"

    def __init__(self, capacity: int, seed: int) -> None:
        import gymnasium as gym
        from stable_baselines3 import TD3
        from stable_baselines3.common.noise import NormalActionNoise

        env = gym.make(ENV_ID)
        n = env.action_space.shape[0]
        self.model = TD3("MlpPolicy", env, learning_rate=3e-4, buffer_size=capacity,
                         learning_starts=WARMUP, batch_size=BATCH, tau=0.005, gamma=0.99,
                         train_freq=1, gradient_steps=1, policy_delay=2,
                         action_noise=NormalActionNoise(np.zeros(n), 0.1 * np.ones(n)),
                         policy_kwargs={"net_arch": list(HIDDEN)}, seed=seed, device="cpu", verbose=0)
        self._first = True

    def warm_up(self) -> None:
        self.run(WARMUP + TRAIN_FREQ)

    def run(self, steps: int) -> None:
        self.model.learn(steps, reset_num_timesteps=self._first, progress_bar=False)
        self._first = False

    def counters(self) -> dict[str, int]:
        return {"env_steps": int(self.model.num_timesteps), "critic_updates": int(self.model._n_updates)}


SYSTEMS = {  # name: (algo, config overrides, table label)
    "opolo": ("opolo", {}, "OPOLO (ours, D + P_I included)"),
    "opolo_residual": ("opolo", {"opolo": {"residual_mode": "residual"}}, "OPOLO residual mode (ours)"),
    "opolo_stop_gradient": ("opolo", {"opolo": {"residual_mode": "stop_gradient"}},
                            "OPOLO stop_gradient mode (ours)"),
    "opolo_compiled": ("opolo", {"opolo": {"compile_critic": True}}, "OPOLO + compile_critic (ours)"),
    "opolo_simultaneous": ("opolo", {"opolo": {"policy_update": "simultaneous"}},
                           "OPOLO + simultaneous policy update (ours)"),
    "td3": ("td3", {}, "TD3 (ours)"),
}


class Ours:
    def __init__(self, name: str, capacity: int, seed: int, demos: str, threads: int,
                 run_dir: str, overrides: dict | None = None) -> None:
        from opolo_ros.algo.config import load_run_config, update_dataclass
        from opolo_ros.train.direct import DirectTrainer

        self.name = name
        algo, system_overrides, _ = SYSTEMS[name]
        sched = {"warmup_steps": WARMUP, "inverse_pretrain_steps": 2_500, "disc_freq": 500,
                 "disc_steps": 10, "inverse_freq": 500, "inverse_steps": 50,
                 "train_freq": TRAIN_FREQ, "gradient_steps": TRAIN_FREQ, "policy_delay": 2,
                 "batch_size": BATCH, "buffer_size": capacity, "exploration_noise": 0.1}
        cfg = {"env_id": ENV_ID, "algo": algo, "seed": seed, "total_steps": capacity,
               "demos": demos if algo == "opolo" else "", "torch_threads": threads,
               "progress": False, "run_dir": run_dir, "schedule": sched,
               "opolo": {"net": {"hidden": list(HIDDEN)}}, "td3": {"net": {"hidden": list(HIDDEN)}}}
        run_cfg = load_run_config(overrides=cfg)
        for extra in (system_overrides, overrides):
            if extra:
                run_cfg = update_dataclass(run_cfg, extra)
        self.options = ({"residual_mode": run_cfg.opolo.residual_mode, "lam": run_cfg.opolo.lam}
                        if algo == "opolo" else {})
        self.trainer = DirectTrainer(run_cfg)

    def warm_up(self) -> None:
        self.run(WARMUP + TRAIN_FREQ)

    def run(self, steps: int) -> None:
        env_step = self.trainer.env_step
        for _ in range(steps):
            env_step()

    def counters(self) -> dict[str, int]:
        return {"env_steps": self.trainer.step, "critic_updates": self.trainer.learner.critic_steps}


def git_commit(path: str | Path) -> str:
    """HEAD of the git tree at `path` (with '+dirty' if it has uncommitted changes), or ''."""
    try:
        run = lambda *a: subprocess.run(["git", "-C", str(path), *a], capture_output=True,  # noqa: E731
                                        text=True, timeout=10).stdout.strip()
        head = run("rev-parse", "--short", "HEAD")
        return head + ("+dirty" if head and run("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def worker(args: argparse.Namespace) -> None:
    """One system in its own process: build and warm up, then run timed windows on request.

    Protocol, one JSON object per line: it prints {"ready": ...} once warmed up, then for each
    "run N" line on stdin it runs N env steps and prints the wall and CPU seconds they took.
    """
    torch.set_num_threads(args.threads)
    from opolo_ros.algo.config import merge_overrides

    t = time.perf_counter()
    name = args.worker
    system = (SB3TD3(args.capacity, args.seed) if name == "sb3_td3" else
              Ours(name, args.capacity, args.seed, args.demos, args.threads, args.run_dir,
                   merge_overrides(args.set)))
    system.warm_up()
    import opolo_ros

    out = sys.stdout
    out.write(json.dumps({"ready": time.perf_counter() - t, "options": getattr(system, "options", {}),
                          "source": str(Path(opolo_ros.__file__).parent.parent),
                          "threads": torch.get_num_threads()}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "run":
            break
        before = system.counters()
        t, c = time.perf_counter(), time.process_time()
        system.run(int(cmd[1]))
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        after = system.counters()
        out.write(json.dumps({"wall": wall, "cpu": cpu, "steps": after["env_steps"] - before["env_steps"],
                              "updates": after["critic_updates"] - before["critic_updates"]}) + "\n")
        out.flush()


class Worker:
    def __init__(self, label: str, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.label, self.name = label, name
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", name, *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self.read()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark worker {self.label} died (exit code {self.proc.wait()})")
        return json.loads(line)

    def run(self, steps: int) -> dict:
        self.proc.stdin.write(f"run {steps}\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> dict | None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000,
                   help="timed env steps per system per round (rounded up to a multiple of 1000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for every system")
    p.add_argument("--systems", default="sb3_td3,opolo,td3",
                   help=f"comma-separated, from sb3_td3,{','.join(SYSTEMS)}")
    p.add_argument("--baseline-src", default="",
                   help="also run these systems (not sb3_td3) with the opolo_ros package found in this "
                        "source tree, e.g. a `git worktree` of an older commit: a before/after run")
    p.add_argument("--baseline-systems", default="", help="systems for --baseline-src (default: --systems)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="write the results here as JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for all our systems, e.g. opolo.net.fused_adam=false")
    # internal: one system in a worker process
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--capacity", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--demos", default="", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return None

    steps = -(-args.steps // TRAIN_FREQ) * TRAIN_FREQ  # whole update bursts in every window
    capacity = WARMUP + TRAIN_FREQ + steps * args.rounds
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    plan = [(n, n, None) for n in names]
    if args.baseline_src:
        base_names = [s.strip() for s in (args.baseline_systems or args.systems).split(",") if s.strip()]
        plan += [(f"{n}@baseline", n, args.baseline_src) for n in base_names if n != "sb3_td3"]
    for _, n, _ in plan:
        if n != "sb3_td3" and n not in SYSTEMS:
            p.error(f"unknown system {n!r}")

    workers: list[Worker] = []
    setup_s: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        demos = str(Path(tmp) / "demos.npz")
        write_demos(Path(demos))
        try:
            for label, name, src in plan:  # warm up one at a time: no contention, honest setup times
                env = dict(os.environ)
                if src:
                    env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
                wargv = ["--threads", str(args.threads), "--seed", str(args.seed), "--capacity",
                         str(capacity), "--demos", demos, "--run-dir", str(Path(tmp) / label)]
                for item in args.set:
                    wargv += ["--set", item]
                w = Worker(label, name, wargv, env)
                setup_s[label] = w.info["ready"]
                workers.append(w)
                print(f"# {label}: built and warmed up in {setup_s[label]:.1f} s "
                      f"(opolo_ros from {w.info['source']})", file=sys.stderr)

            rates: dict[str, list[float]] = {w.label: [] for w in workers}
            cpu_rates: dict[str, list[float]] = {w.label: [] for w in workers}
            updates: dict[str, list[float]] = {w.label: [] for w in workers}
            for rnd in range(args.rounds):
                k = rnd % len(workers)
                for w in workers[k:] + workers[:k]:
                    r = w.run(steps)
                    n = r["steps"]
                    rates[w.label].append(n / r["wall"])
                    cpu_rates[w.label].append(n / r["cpu"])
                    updates[w.label].append(r["updates"] / n)
                    print(f"# round {rnd + 1} {w.label}: {n / r['wall']:.1f} steps/s "
                          f"({n / r['cpu']:.1f} per CPU s, {updates[w.label][-1]:.2f} critic updates/step), "
                          f"load {os.getloadavg()[0]:.2f}", file=sys.stderr)
        finally:
            for w in workers:
                w.close()

    mean = {k: statistics.mean(v) for k, v in rates.items()}
    cpu_mean = {k: statistics.mean(v) for k, v in cpu_rates.items()}
    result = {
        "env": ENV_ID, "hidden": list(HIDDEN), "batch": BATCH, "steps_per_round": steps,
        "rounds": args.rounds, "torch_threads": workers[0].info["threads"], "torch": torch.__version__,
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "overrides": args.set,
        "baseline_src": args.baseline_src, "commit": git_commit(Path(__file__).resolve().parent.parent),
        "baseline_commit": git_commit(args.baseline_src) if args.baseline_src else "",
        "steps_per_s": rates, "mean_steps_per_s": mean, "cpu_steps_per_s": cpu_rates,
        "mean_cpu_steps_per_s": cpu_mean, "options": {w.label: w.info["options"] for w in workers},
        "critic_updates_per_step": {k: statistics.mean(v) for k, v in updates.items()},
        "setup_s": setup_s,
    }
    if "sb3_td3" in mean:
        result["ratio_vs_sb3"] = {k: v / mean["sb3_td3"] for k, v in mean.items() if k != "sb3_td3"}
        result["cpu_ratio_vs_sb3"] = {k: v / cpu_mean["sb3_td3"] for k, v in cpu_mean.items()
                                      if k != "sb3_td3"}
    cmd = " ".join([".venv/bin/python", "bench/throughput.py", *(argv if argv is not None else sys.argv[1:])])
    result["command"] = cmd
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def print_table(res: dict) -> None:
    print(f"Throughput on {res['env']}, [400, 300] MLPs, batch {res['batch']}, ~1 critic update per env "
          f"step; {res['rounds']} rounds x {res['steps_per_round']} timed env steps per system, "
          f"torch {res['torch']} CPU, {res['torch_threads']} torch thread(s), "
          f"{res['cpu']} ({res['cpu_count']} cores, shared); commit {res.get('commit') or '?'}.\n")
    print("| system | env steps/s (mean) | per round | vs SB3 TD3 | steps per CPU-s | vs SB3 (CPU) "
          "| critic updates/step | warm-up s |")
    print("|---|---|---|---|---|---|---|---|")
    labels = {"sb3_td3": "SB3 TD3 2.9 (reference)", **{k: v[2] for k, v in SYSTEMS.items()}}
    for name, mean in res["mean_steps_per_s"].items():
        per = ", ".join(f"{x:.0f}" for x in res["steps_per_s"][name])
        ratio = "1.00x" if name == "sb3_td3" else (
            f"{res['ratio_vs_sb3'][name]:.2f}x" if "ratio_vs_sb3" in res else "-")
        cpu_ratio = "1.00x" if name == "sb3_td3" else (
            f"{res['cpu_ratio_vs_sb3'][name]:.2f}x" if "cpu_ratio_vs_sb3" in res else "-")
        opts = res["options"].get(name) or {}
        base, _, tag = name.partition("@")
        label = labels.get(base, base) + (f" [{opts['residual_mode']}]" if "residual_mode" in opts else "")
        if tag:
            label += f", {tag} ({res.get('baseline_commit') or res['baseline_src']})"
        print(f"| {label} | {mean:.1f} | {per} | {ratio} | {res['mean_cpu_steps_per_s'][name]:.1f} | "
              f"{cpu_ratio} | {res['critic_updates_per_step'][name]:.2f} | {res['setup_s'][name]:.0f} |")
    print(f"\nCommand: `{res['command']}`")


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
