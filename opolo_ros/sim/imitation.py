"""How close a policy's motion is to its demonstrations: the evaluation of a task without a reward.

An MJCF robot has no reward to score a policy by, so its runs are evaluated on their states: the
*imitation distance* is the symmetric mean nearest-neighbour (chamfer) distance between the states
a deterministic policy visits and the demonstrations' states, each dimension in units of the
demonstrations' spread. Both directions count: the policy's states far from every demonstrated
state (it does something else), and demonstrated states the policy never comes near (it stops
short, or only holds the start). 0 is on the demonstrations; a random policy's distance, taken
with the same episodes, is the reference a run's evaluations are read against.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

SPREAD_FLOOR = 0.1  # a dimension's scale is at least this share of the median dimension's spread
CHUNK_ROWS = 1024  # rows of the distance matrix computed at once (memory: CHUNK_ROWS x len(b))


def demo_scale(demo_states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension centre and scale of the demonstrations' states: their mean and standard
    deviation, the deviation floored at SPREAD_FLOOR of the median one (a joint the demonstrations
    hold still would otherwise make any motion of it an unbounded distance)."""
    states = np.asarray(demo_states, dtype=np.float64)
    if states.ndim != 2 or not len(states):
        raise ValueError(f"demonstration states must be a non-empty 2-D array, got shape {states.shape}")
    std = states.std(axis=0)
    floor = max(SPREAD_FLOOR * float(np.median(std)), 1e-6)
    return states.mean(axis=0), np.maximum(std, floor)


def mean_nearest(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over the rows of `a` of the Euclidean distance to the nearest row of `b`."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    b_sq = (b * b).sum(axis=1)
    total = 0.0
    for start in range(0, len(a), CHUNK_ROWS):
        rows = a[start:start + CHUNK_ROWS]
        sq = (rows * rows).sum(axis=1)[:, None] + b_sq[None, :] - 2.0 * rows @ b.T
        total += float(np.sqrt(np.maximum(sq.min(axis=1), 0.0)).sum())
    return total / len(a)


def imitation_distance(policy_states: np.ndarray, demo_states: np.ndarray) -> float:
    """The symmetric chamfer distance of the module docstring, in demonstration-spread units; inf
    when the policy visited no finite state."""
    centre, scale = demo_scale(demo_states)
    visited = np.asarray(policy_states, dtype=np.float64)
    visited = visited[np.isfinite(visited).all(axis=1)] if visited.ndim == 2 else visited[:0]
    if not len(visited):
        return float("inf")
    p = (visited - centre) / scale
    d = (np.asarray(demo_states, dtype=np.float64) - centre) / scale
    return 0.5 * (mean_nearest(p, d) + mean_nearest(d, p))


def imitation_score(distance: float, random_distance: float) -> float:
    """1 - distance / the random policy's: 1 on the demonstrations, 0 as far as random actions (a
    normalised score for a task without a reward); NaN without a positive reference."""
    if not np.isfinite(random_distance) or random_distance <= 0:
        return float("nan")
    return 1.0 - distance / random_distance


def visited_states(policy: Callable[[np.ndarray], np.ndarray], make_env: Callable, episodes: int,
                   seed: int, obs_dim: int, stop: threading.Event | None = None) -> np.ndarray:
    """The observations (their first `obs_dim` values: no time feature) of `episodes`
    deterministic episodes of `policy` in envs from `make_env`, reset with seed, seed + 1, ..."""
    from opolo_ros.sim.envs import evaluate

    visited: list[np.ndarray] = []
    evaluate(policy, "", episodes, seed, stop=stop, make=make_env, visited=visited)
    return np.concatenate(visited)[:, :obs_dim]


def random_visited_states(make_env: Callable, episodes: int, seed: int, obs_dim: int,
                          stop: threading.Event | None = None) -> np.ndarray:
    """:func:`visited_states` of uniform random actions (the reference distance's states)."""
    from opolo_ros.sim.envs import random_policy

    return visited_states(random_policy(make_env, seed), make_env, episodes, seed, obs_dim, stop)


def demo_states_of(episodes: Sequence, obs_dim: int) -> np.ndarray:
    """All demonstration states of `episodes` (Episode objects), their first `obs_dim` values."""
    return np.concatenate([np.asarray(ep.obs)[:, :obs_dim] for ep in episodes])


class ImitationEvaluator:
    """A run's imitation evaluations (an MJCF task's): the demonstrations' states, the random
    policy's distance (taken at the first evaluation, with the same episode seeds) and the best
    distance so far. Envs come from `make_env`; observations are cut to `obs_dim` (no time feature)."""

    def __init__(self, make_env: Callable, demo_states: np.ndarray, episodes: int, seed: int,
                 random_distance: float = float("nan"), best: float = float("inf")) -> None:
        self.make_env, self.demo_states = make_env, np.asarray(demo_states)
        self.episodes, self.seed = episodes, seed
        self.obs_dim = self.demo_states.shape[1]
        self.random_distance, self.best = random_distance, best

    def __call__(self, policy: Callable[[np.ndarray], np.ndarray],
                 stop: threading.Event | None = None) -> tuple[float, float]:
        """(the policy's distance, the random policy's); EvaluationInterrupted on `stop`."""
        if not np.isfinite(self.random_distance):
            states = random_visited_states(self.make_env, self.episodes, self.seed, self.obs_dim, stop)
            self.random_distance = imitation_distance(states, self.demo_states)
        states = visited_states(policy, self.make_env, self.episodes, self.seed, self.obs_dim, stop)
        return imitation_distance(states, self.demo_states), self.random_distance

    def improved(self, distance: float) -> bool:
        """Whether `distance` is the run's best so far (then it is kept as the best)."""
        if not distance < self.best:
            return False
        self.best = distance
        return True
