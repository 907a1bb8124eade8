"""Roll out a policy and keep the state sequence: how expert demonstrations are produced."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator

import numpy as np

from opolo_ros.data.demos import Episode
from opolo_ros.sim.envs import make_env


def iter_episodes(policy: Callable[[np.ndarray], np.ndarray], env_id: str, seed: int = 0,
                  time_feature: bool = False) -> Iterator[Episode]:
    """Deterministic episodes reset with seed, seed + 1, ... for as long as the caller takes them;
    each keeps obs[0..T] as seen by the env (no time feature: the learner adds it when its run uses
    one), the env return, and in ``meta`` its seed and whether it ended by termination (a fall)
    rather than the time limit. Close the generator (or exhaust it) to close the env."""
    env = make_env(env_id, time_feature=time_feature)
    try:
        for k in itertools.count():
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
            yield Episode(seq, total, {"env_id": env_id, "seed": seed + k, "terminated": bool(term)})
    finally:
        env.close()


def rollout_episodes(policy: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int,
                     seed: int = 0, time_feature: bool = False,
                     into: list[Episode] | None = None) -> list[Episode]:
    """The first `episodes` episodes of `iter_episodes`, appended to `into` (a new list by default)
    as each one ends: a caller broken off by an interrupt still holds the finished ones there."""
    kept = [] if into is None else into
    with contextlib.closing(iter_episodes(policy, env_id, seed, time_feature)) as source:
        for ep in itertools.islice(source, episodes):
            kept.append(ep)
    return kept


def complete_episodes(policy: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int,
                      seed: int = 0, time_feature: bool = False, max_tries: int | None = None,
                      into: list[Episode] | None = None,
                      skipped: list[int] | None = None) -> tuple[list[Episode], list[int]]:
    """The first `episodes` episodes of `iter_episodes` that end at the time limit, not by
    termination (an expert that falls now and then still gives demonstrations of the behaviour),
    and the seeds of those skipped; both lists filled as the episodes end (`into`, `skipped`: the
    caller's, as in :func:`rollout_episodes`). Raises ValueError (the policy is not expert enough)
    after `max_tries` episodes (default: 5 per episode asked for) without enough of them."""
    max_tries = 5 * episodes if max_tries is None else max_tries
    kept = [] if into is None else into
    skipped = [] if skipped is None else skipped
    with contextlib.closing(iter_episodes(policy, env_id, seed, time_feature)) as source:
        for ep in itertools.islice(source, max_tries):
            if ep.meta["terminated"]:
                skipped.append(ep.meta["seed"])
                continue
            kept.append(ep)
            if len(kept) == episodes:
                return kept, skipped
    raise ValueError(f"only {len(kept)} of {max_tries} {env_id} episodes "
                     f"(seeds {seed}..{seed + max_tries - 1}) reached the time limit without terminating; "
                     f"{episodes} were asked for")
