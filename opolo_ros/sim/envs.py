"""Gymnasium MuJoCo environments as the learner sees them: time feature, action scaling, evaluation."""

from __future__ import annotations

import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable

import gymnasium as gym
import mujoco
import numpy as np

# MuJoCo's own divergence checks: on NaN, inf or huge qpos / qvel / qacc it warns and resets mjData.
# BADCTRL: a command MuJoCo refused (non-finite or huge) and replaced by 0: the step did not apply
# the action a transition would record.
_DIVERGENCE_WARNINGS = tuple(int(w) for w in (mujoco.mjtWarning.mjWARN_BADQPOS,
                                              mujoco.mjtWarning.mjWARN_BADQVEL,
                                              mujoco.mjtWarning.mjWARN_BADQACC,
                                              mujoco.mjtWarning.mjWARN_BADCTRL))


MUJOCO_WARNINGS_SHOWN = 3  # of each kind; the rest are counted in mujoco_warning_counts
mujoco_warning_counts: Counter[str] = Counter()


def _on_mujoco_warning(text: str) -> None:
    kind = re.sub(r"\s*Time = [-+0-9.eE]+\.?", "", " ".join(text.split()))
    mujoco_warning_counts[kind] += 1
    n = mujoco_warning_counts[kind]
    if n <= MUJOCO_WARNINGS_SHOWN:
        more = " (further ones of this kind are counted, not printed)" if n == MUJOCO_WARNINGS_SHOWN else ""
        print(f"MuJoCo warning: {kind}{more}", file=sys.stderr, flush=True)


def route_mujoco_warnings() -> None:
    """Show each kind of MuJoCo warning a few times, then only count it.

    By default MuJoCo prints every warning and appends it to MUJOCO_LOG.TXT in the working folder:
    a model that diverges on every step (each divergence resets it, and the next one warns again)
    floods stderr and grows that file without bound. Divergence itself is reported by
    :class:`DivergenceGuard` and counted by its callers. Process-wide; idempotent.
    """
    if mujoco.get_mju_user_warning() is not _on_mujoco_warning:
        mujoco.set_mju_user_warning(_on_mujoco_warning)


def _divergence_count(env: gym.Env) -> int:
    data = getattr(env.unwrapped, "data", None)
    if not isinstance(data, mujoco.MjData):
        return 0
    return sum(int(data.warning[w].number) for w in _DIVERGENCE_WARNINGS)


class DivergenceGuard(gym.Wrapper):
    """Ends the episode at a step where the simulation diverged, with ``info["diverged"] = True``.

    MuJoCo resets its state by itself when the state blows up (an unstable model, a huge actuator
    gain), so without this the step would pass as an ordinary transition to the reset state, and the
    episode would go on from there; other envs may return NaN or inf. Such a step is reported as
    truncated; its transition is not a real one and callers drop it (sim_bridge, the direct loop).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        route_mujoco_warnings()

    def step(self, action):  # type: ignore[override]
        before = _divergence_count(self.env)
        obs, reward, terminated, truncated, info = self.env.step(action)
        finite = bool(np.all(np.isfinite(obs))) and math.isfinite(float(reward))
        if not finite or _divergence_count(self.env) != before:
            info = {**info, "diverged": True}
            truncated = True
        return obs, reward, terminated, truncated, info


class TimeFeature(gym.ObservationWrapper):
    """Append 1 - t / max_steps to the observation (released code, all tasks but the pendulums).

    It tells the critic how much of the time limit is left, so time-limit truncation is not aliased
    with a true terminal state.
    """

    def __init__(self, env: gym.Env, max_steps: int | None = None) -> None:
        super().__init__(env)
        self.max_steps = max_steps or env.spec.max_episode_steps or 1000
        low = np.append(env.observation_space.low, 0.0).astype(np.float32)
        high = np.append(env.observation_space.high, 1.0).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self._t = 0

    def reset(self, **kwargs):  # type: ignore[override]
        self._t = 0
        return super().reset(**kwargs)

    def step(self, action):  # type: ignore[override]
        self._t += 1
        return super().step(action)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.append(observation, 1.0 - self._t / self.max_steps).astype(np.float32)


def add_time_feature(episode_obs: np.ndarray, max_steps: int) -> np.ndarray:
    """The time feature for a recorded state sequence obs[0..T] (row t gets 1 - t / max_steps)."""
    t = np.arange(episode_obs.shape[0], dtype=np.float32)
    return np.concatenate([episode_obs, (1.0 - t / max_steps)[:, None]], axis=1).astype(np.float32)


def make_env(env_id: str, seed: int | None = None, time_feature: bool = False, **kwargs) -> gym.Env:
    """Create a Gymnasium env by id, with a clear error for an unknown id."""
    try:
        env = gym.make(env_id, **kwargs)
    except (gym.error.Error, ImportError) as exc:  # ImportError: a 'module:Env-v0' id's module
        raise ValueError(f"cannot create environment '{env_id}': {' '.join(str(exc).split())}") from exc
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ValueError(f"environment '{env_id}' has a non-continuous action space")
    if time_feature:
        env = TimeFeature(env)
    env = DivergenceGuard(env)
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


class EvaluationInterrupted(Exception):
    """A stop request arrived in the middle of an evaluation (see :func:`evaluate`)."""


def evaluate(policy: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int = 10,
             seed: int = 10_000, time_feature: bool = False,
             stop: threading.Event | None = None, make: Callable[[], gym.Env] | None = None,
             visited: list[np.ndarray] | None = None) -> np.ndarray:
    """Deterministic evaluation: returns of `episodes` episodes; `policy` maps obs -> env-unit action.
    Raises :class:`EvaluationInterrupted` at the first step after `stop` is set (a long evaluation
    must not hold up a stopping run; it is done again when the run resumes). An episode in which
    the policy returns a non-finite action scores NaN: MuJoCo would run it as 0 and the divergence
    guard end the episode, scoring a NaN policy like one that fell at once. `make` builds the env
    instead of the Gymnasium id (an MJCF task's); `visited` gets each episode's observations."""
    env = make() if make is not None else make_env(env_id, time_feature=time_feature)
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            done, total, states = False, 0.0, [obs]
            while not done:
                if stop is not None and stop.is_set():
                    raise EvaluationInterrupted
                action = policy(obs)
                if not np.isfinite(action).all():
                    total, done = math.nan, True
                    continue
                obs, r, term, trunc, _ = env.step(action)
                states.append(obs)
                total += float(r)
                done = term or trunc
            returns.append(total)
            if visited is not None:
                visited.append(np.asarray(states, dtype=np.float32))
    finally:
        env.close()
    return np.asarray(returns)


def random_policy_return(env_id: str, episodes: int = 10, seed: int = 20_000,
                         stop: threading.Event | None = None) -> float:
    """Mean return of uniform random actions: R_random of the normalised score. With `stop`,
    :class:`EvaluationInterrupted` as :func:`evaluate` raises it (10 random episodes of a task
    without termination take seconds: a run's first evaluation does this, not its start-up, which
    a signal must be able to end within 2 s)."""
    return float(evaluate(random_policy(lambda: make_env(env_id), seed), env_id, episodes, seed,
                          stop=stop).mean())


def random_policy(make: Callable[[], gym.Env], seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """Uniform random actions in the action space of the env `make` builds, seeded with `seed`."""
    env = make()
    space = env.action_space
    space.seed(seed)
    env.close()
    return lambda _obs: space.sample()


def normalised_score(ret: float, random_ret: float, expert_ret: float) -> float:
    """(R - R_random) / (R_expert - R_random)."""
    return (ret - random_ret) / (expert_ret - random_ret)


def score_line(normalised: float, expert_ret: float, random_ret: float) -> str:
    """The run summary's score line; demonstrations without returns (a robot's own bag) have none."""
    if math.isnan(expert_ret):
        return (f"normalised score: n/a (the demonstrations carry no expert return; random "
                f"{random_ret:.1f})")
    return f"normalised score: {normalised:.3f} (expert {expert_ret:.1f}, random {random_ret:.1f})"


def eval_line(step: int, mean: float, std: float, normalised: float) -> str:
    """One evaluation's progress line (the normalised score n/a, as in :func:`score_line`, without an
    expert return)."""
    norm = "n/a" if math.isnan(normalised) else f"{normalised:.3f}"
    return f"step {step}: eval return {mean:.1f} +- {std:.1f} (normalised {norm})"


def get_env_state(env: gym.Env) -> dict:
    """Physics and wrapper state of a MuJoCo env, so a resumed run continues the same episode."""
    base = env.unwrapped
    state: dict = {"np_random": base.np_random.bit_generator.state}
    if hasattr(base, "data"):
        state.update(qpos=base.data.qpos.copy(), qvel=base.data.qvel.copy(), time=float(base.data.time))
        if base.data.act.size:  # actuator activations (an MJCF robot's muscles or filtered actuators)
            state["act"] = base.data.act.copy()
    e = env
    while isinstance(e, gym.Wrapper):
        for attr in ("_elapsed_steps", "_t"):
            if hasattr(e, attr):
                state[f"{type(e).__name__}.{attr}"] = getattr(e, attr)
        e = e.env
    return state


def set_env_state(env: gym.Env, state: dict) -> None:
    base = env.unwrapped
    base.np_random.bit_generator.state = state["np_random"]
    if "qpos" in state:
        base.set_state(state["qpos"], state["qvel"])
        base.data.time = state["time"]
        if "act" in state:
            base.data.act[:] = state["act"]
    e = env
    while isinstance(e, gym.Wrapper):
        for attr in ("_elapsed_steps", "_t"):
            key = f"{type(e).__name__}.{attr}"
            if key in state:
                setattr(e, attr, state[key])
        e = e.env


def check_policy_fits(origin: object, obs_dim: int, act_dim: int, env_id: str, time_feature: bool,
                      trained_on: str = "") -> None:
    """A policy's dimensions against the environment's, and the task it was trained on (its
    metadata's ``env_id``, when both are Gymnasium ids), as a clear error before any rollout:
    Walker2d's expert has HalfCheetah's dimensions, and would record a bag labelled HalfCheetah."""
    from opolo_ros.sim.task_ids import is_mjcf
    from opolo_ros.sim.tasks import make_task_env  # tasks imports this module

    gymnasium_ids = not (is_mjcf(trained_on) or is_mjcf(env_id))
    if trained_on and trained_on != env_id and gymnasium_ids:
        raise ValueError(f"{origin} was trained on {trained_on} (its metadata's env_id), not {env_id}")
    env = make_task_env(env_id, time_feature=time_feature)  # a Gymnasium id or an MJCF file
    dims = (int(env.observation_space.shape[0]), int(env.action_space.shape[0]))
    env.close()
    if (obs_dim, act_dim) != dims:
        raise ValueError(f"{origin} takes obs_dim {obs_dim} and gives act_dim {act_dim}, but "
                         f"{env_id} {'with' if time_feature else 'without'} time feature has obs_dim "
                         f"{dims[0]} and act_dim {dims[1]}")
