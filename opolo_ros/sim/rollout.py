"""Roll out a policy and keep the state sequence: how expert demonstrations are produced."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opolo_ros.data.demos import Episode
from opolo_ros.sim.envs import make_env


def rollout_episodes(policy: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int,
                     seed: int = 0, time_feature: bool = False) -> list[Episode]:
    """Run `episodes` deterministic episodes; each keeps obs[0..T] as seen by the env (no time
    feature: the learner adds it when its run uses one) and the env return."""
    env = make_env(env_id, time_feature=time_feature)
    out = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            states, total, done = [obs], 0.0, False
            while not done:
                obs, r, term, trunc, _ = env.step(policy(obs))
                states.append(obs)
                total += float(r)
                done = term or trunc
            seq = np.asarray(states, dtype=np.float32)
            if time_feature:
                seq = seq[:, :-1]
            out.append(Episode(seq, total, {"env_id": env_id, "seed": seed + k, "terminated": bool(term)}))
    finally:
        env.close()
    return out
