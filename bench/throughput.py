"""Training throughput, side by side in one run: env steps/s of SB3 TD3, our OPOLO and our TD3.

All three train on HalfCheetah-v5 with [400, 300] policy and critic MLPs, batch 100 and about one
critic update per environment step (policy every 2nd critic step):

* sb3_td3: Stable-Baselines3 TD3, train_freq 1, gradient_steps 1, policy_delay 2, N(0, 0.1) noise.
* opolo:   this package's direct loop (`DirectTrainer.env_step`, i.e. env -> actor -> replay ->
           schedule -> learner) with the paper's schedule: 1,000 critic steps every 1,000 env steps
           (UTD 1), 10 D steps and 50 P_I steps every 500 env steps.
* td3:     the same direct loop with algo td3 (same schedule without D and P_I).

Each system is built and warmed up first (random-action warm-up, P_I pre-training, first update
burst), then timed for `--steps` env steps per round; the systems take turns within every round, in
a rotating order, so background load spreads over all of them. Warm-up and construction are not
timed. The OPOLO demonstrations are 4 synthetic random-action episodes written to a temporary .npz
(their content does not matter for speed).

    .venv/bin/python bench/throughput.py --steps 3000 --rounds 3 --threads 1 --json bench/throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

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


class Ours:
    def __init__(self, algo: str, capacity: int, seed: int, demos: str, threads: int,
                 run_dir: str, overrides: dict | None = None) -> None:
        from opolo_ros.algo.config import load_run_config, update_dataclass
        from opolo_ros.train.direct import DirectTrainer

        self.name = algo
        sched = {"warmup_steps": WARMUP, "inverse_pretrain_steps": 2_500, "disc_freq": 500,
                 "disc_steps": 10, "inverse_freq": 500, "inverse_steps": 50,
                 "train_freq": TRAIN_FREQ, "gradient_steps": TRAIN_FREQ, "policy_delay": 2,
                 "batch_size": BATCH, "buffer_size": capacity, "exploration_noise": 0.1}
        cfg = {"env_id": ENV_ID, "algo": algo, "seed": seed, "total_steps": capacity,
               "demos": demos if algo == "opolo" else "", "torch_threads": threads,
               "progress": False, "run_dir": run_dir, "schedule": sched,
               "opolo": {"net": {"hidden": list(HIDDEN)}}, "td3": {"net": {"hidden": list(HIDDEN)}}}
        run_cfg = load_run_config(overrides=cfg)
        if overrides:
            run_cfg = update_dataclass(run_cfg, overrides)
        self.trainer = DirectTrainer(run_cfg)

    def warm_up(self) -> None:
        self.run(WARMUP + TRAIN_FREQ)

    def run(self, steps: int) -> None:
        env_step = self.trainer.env_step
        for _ in range(steps):
            env_step()

    def counters(self) -> dict[str, int]:
        return {"env_steps": self.trainer.step, "critic_updates": self.trainer.learner.critic_steps}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000,
                   help="timed env steps per system per round (rounded up to a multiple of 1000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for every system")
    p.add_argument("--systems", default="sb3_td3,opolo,td3")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="write the results here as JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for our systems, e.g. opolo.net.fused_first_layer=true")
    args = p.parse_args(argv)
    steps = -(-args.steps // TRAIN_FREQ) * TRAIN_FREQ  # whole update bursts in every window
    torch.set_num_threads(args.threads)
    from opolo_ros.algo.config import merge_overrides

    overrides = merge_overrides(args.set)
    capacity = WARMUP + TRAIN_FREQ + steps * args.rounds
    names = [s.strip() for s in args.systems.split(",") if s.strip()]

    with tempfile.TemporaryDirectory() as tmp:
        demos = str(Path(tmp) / "demos.npz")
        write_demos(Path(demos))
        systems = []
        setup_s = {}
        for name in names:
            t = time.perf_counter()
            sysm = (SB3TD3(capacity, args.seed) if name == "sb3_td3" else
                    Ours(name, capacity, args.seed, demos, args.threads, str(Path(tmp) / name), overrides))
            sysm.warm_up()
            setup_s[name] = time.perf_counter() - t
            systems.append(sysm)
            print(f"# {name}: built and warmed up in {setup_s[name]:.1f} s", file=sys.stderr)

        rates: dict[str, list[float]] = {s.name: [] for s in systems}
        updates: dict[str, list[float]] = {s.name: [] for s in systems}
        for rnd in range(args.rounds):
            order = systems[rnd % len(systems):] + systems[:rnd % len(systems)]
            for s in order:
                before = s.counters()
                t = time.perf_counter()
                s.run(steps)
                dt = time.perf_counter() - t
                after = s.counters()
                n = after["env_steps"] - before["env_steps"]
                rates[s.name].append(n / dt)
                updates[s.name].append((after["critic_updates"] - before["critic_updates"]) / n)
                print(f"# round {rnd + 1} {s.name}: {n / dt:.1f} steps/s "
                      f"({updates[s.name][-1]:.2f} critic updates/step), load {os.getloadavg()[0]:.2f}",
                      file=sys.stderr)

    mean = {k: statistics.mean(v) for k, v in rates.items()}
    result = {
        "env": ENV_ID, "hidden": list(HIDDEN), "batch": BATCH, "steps_per_round": steps,
        "rounds": args.rounds, "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "overrides": args.set,
        "steps_per_s": rates, "mean_steps_per_s": mean,
        "critic_updates_per_step": {k: statistics.mean(v) for k, v in updates.items()},
        "setup_s": setup_s,
    }
    if "sb3_td3" in mean:
        result["ratio_vs_sb3"] = {k: v / mean["sb3_td3"] for k, v in mean.items() if k != "sb3_td3"}
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
          f"{res['cpu']} ({res['cpu_count']} cores, shared).\n")
    print("| system | env steps/s (mean) | per round | critic updates/step | vs SB3 TD3 |")
    print("|---|---|---|---|---|")
    labels = {"sb3_td3": "SB3 TD3 2.9 (reference)", "opolo": "OPOLO (ours, D + P_I included)",
              "td3": "TD3 (ours)"}
    for name, mean in res["mean_steps_per_s"].items():
        per = ", ".join(f"{x:.0f}" for x in res["steps_per_s"][name])
        ratio = res.get("ratio_vs_sb3", {}).get(name)
        ratio_s = "1.00x" if name == "sb3_td3" else (f"{ratio:.2f}x" if ratio is not None else "-")
        print(f"| {labels.get(name, name)} | {mean:.1f} | {per} | "
              f"{res['critic_updates_per_step'][name]:.2f} | {ratio_s} |")
    print(f"\nCommand: `{res['command']}`")


if __name__ == "__main__":
    main()
