"""What a policy's return is made of: per episode, the sum of each `reward_*` term and the x travel.

A return can hide the behaviour: an Ant that stands still collects its healthy reward of 1 per step
(about 1000) and looks half-way to walking. This runs the ONNX policy deterministically in its task
(the time feature from the model's metadata) and prints each Gymnasium reward term summed over the
episode, with the distance the root body moved along x.

    .venv/bin/python bench/reward_parts.py runs/experts/Ant-v5/policy.onnx --episodes 3

`--hold-time-feature V` shows what a time-feature policy does without its episode clock.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from opolo_ros.errors import exit_status
from opolo_ros.export.onnx_policy import load_policy
from opolo_ros.sim.envs import check_policy_fits, make_env


def episode_parts(policy, env, seed: int, hold_time_feature: float | None = None) -> dict[str, float]:
    """One deterministic episode: its return, length, x travel and each summed `reward_*` term.
    With `hold_time_feature`, the policy sees that value instead of the time feature 1 - t/T (the
    observation's last entry), as it would on a robot that has no episode clock."""
    obs, _ = env.reset(seed=seed)
    data = env.unwrapped.data
    x0 = float(data.qpos[0])
    parts: dict[str, float] = {"return": 0.0, "steps": 0.0}
    while True:
        seen = np.array(obs, np.float32)
        if hold_time_feature is not None:
            seen[-1] = hold_time_feature
        action = policy(seen[None])[0]
        obs, reward, terminated, truncated, info = env.step(action)
        parts["return"] += float(reward)
        parts["steps"] += 1
        for key, value in info.items():
            if key.startswith("reward_"):
                parts[key] = parts.get(key, 0.0) + float(value)
        if terminated or truncated:
            break
    parts["x_travel"] = float(data.qpos[0]) - x0
    return parts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--seed", type=int, default=10_000, help="first episode's reset seed")
    p.add_argument("--hold-time-feature", type=float, metavar="V",
                   help="give a time-feature policy V instead of 1 - t/T")
    args = p.parse_args(argv)
    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    policy = load_policy(args.model)
    meta = policy.metadata
    if args.hold_time_feature is not None and not meta.time_feature:
        raise ValueError(f"--hold-time-feature: {args.model} takes no time feature")
    check_policy_fits(str(args.model), meta.obs_dim, meta.act_dim, meta.env_id, meta.time_feature)
    env = make_env(meta.env_id, time_feature=meta.time_feature)
    print(f"{args.model}: {meta.env_id}, training step {meta.training_step}")
    returns = []
    try:
        for k in range(args.episodes):
            parts = episode_parts(policy, env, args.seed + k, args.hold_time_feature)
            returns.append(parts["return"])
            print(f"seed {args.seed + k}: " + ", ".join(f"{key} {value:.2f}" for key, value in parts.items()))
    finally:
        env.close()
    print(f"return {np.mean(returns):.1f} +- {np.std(returns):.1f} over {len(returns)} episodes")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
