"""bench/reward_parts.py: the reward terms it reports add up to the episode's return."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import reward_parts  # noqa: E402

from opolo_ros.export.onnx_policy import load_policy  # noqa: E402
from opolo_ros.sim.envs import make_env  # noqa: E402


def test_terms_sum_to_the_return_and_the_hopper_expert_moves_forward() -> None:
    model = ROOT / "models" / "experts" / "Hopper-v5.onnx"
    policy = load_policy(model)
    env = make_env("Hopper-v5", time_feature=policy.metadata.time_feature)
    parts = reward_parts.episode_parts(policy, env, seed=10_000)
    terms = sum(v for k, v in parts.items() if k.startswith("reward_"))
    assert set(parts) >= {"reward_forward", "reward_ctrl", "reward_survive", "x_travel"}
    assert terms == pytest.approx(parts["return"], rel=1e-6)
    assert parts["x_travel"] > 1.0 and parts["steps"] > 100


def test_held_time_feature_reaches_the_policy() -> None:
    """The held value replaces 1 - t/T: a policy that returns its last input shows it."""
    seen: list[float] = []

    def policy(obs):
        seen.append(float(obs[0, -1]))
        return np.zeros((1, 3), np.float32)

    env = make_env("Hopper-v5", time_feature=True)
    reward_parts.episode_parts(policy, env, seed=0, hold_time_feature=0.25)
    assert seen and set(seen) == {0.25}
    seen.clear()
    reward_parts.episode_parts(policy, env, seed=0)
    assert seen[0] == 1.0 and seen[1] < 1.0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="--episodes"):
        reward_parts.main([str(ROOT / "models" / "experts" / "Hopper-v5.onnx"), "--episodes", "0"])
    with pytest.raises(ValueError, match="takes no time feature"):
        reward_parts.main([str(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"),
                           "--hold-time-feature", "1"])
