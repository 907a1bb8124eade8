"""A training run's evaluations, the same for both trainers (the direct loop and the graph's learner).

On a Gymnasium task: the deterministic policy's return over ``eval_episodes`` episodes and its
normalised score, against the random policy's return (taken at the first evaluation) and the
demonstrations' mean return. On an MJCF task, which has no reward: the imitation distance of the
policy's states to the demonstrations' (:mod:`opolo_ros.sim.imitation`). Each evaluation goes to
TensorBoard, ``eval.csv`` and one line; the best so far to ``policy_best.onnx`` (``keep_best``),
with the evaluation in its metadata. What a resume needs is checkpointed (:meth:`RunEvaluator.state`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from opolo_ros.algo.config import RunConfig
from opolo_ros.sim.envs import eval_line, evaluate, normalised_score, random_policy_return
from opolo_ros.sim.imitation import ImitationEvaluator, demo_states_of, imitation_score
from opolo_ros.sim.task_ids import is_mjcf
from opolo_ros.sim.tasks import make_task_env
from opolo_ros.train.logger import RunLogger

Policy = Callable[[np.ndarray], np.ndarray]


def evaluation_metadata(cfg: RunConfig, **values: float) -> dict[str, object]:
    """An evaluation as policy_best.onnx records it, in ``evaluate --stamp``'s keys: `values`
    (``return_mean``, ``imitation_distance``, ...) as ``eval_<name>``, with the episodes and seed."""
    return {**{f"eval_{key}": round(value, 4) for key, value in values.items()},
            "eval_episodes": cfg.eval_episodes, "eval_seed": 10_000 + cfg.seed}


def note_evaluation(mean: float, best_return: float, cfg: RunConfig, step: int,
                    export_best: Callable[[], object], say: Callable[[str], object]) -> float:
    """The best evaluation return after `mean` (both trainers): when it improves, the policy goes to
    policy_best.onnx (`keep_best`: RL curves dip) and reaching `stop_at_return` is said."""
    if not math.isfinite(mean) or mean <= best_return:  # a NaN evaluation is no best
        return best_return
    if cfg.keep_best:
        export_best()
    if mean >= cfg.stop_at_return:
        say(f"step {step}: evaluation reached stop_at_return={cfg.stop_at_return:g}; the run ends here")
    return mean


def mean_return(episodes: Sequence | None) -> float:
    """The demonstrations' mean return; NaN without episodes or without known returns (a robot's
    recorded joint states), without numpy's warning for an all-NaN mean."""
    returns = [ep.ret for ep in episodes or [] if not math.isnan(ep.ret)]
    return float(np.mean(returns)) if returns else math.nan


def stop_at_return_note(cfg: RunConfig) -> str:
    """A warning for ``stop_at_return`` on an MJCF task ('' otherwise): it never ends such a run."""
    if math.isfinite(cfg.stop_at_return) and is_mjcf(cfg.env_id):
        return (f"stop_at_return={cfg.stop_at_return:g} has no effect: an MJCF task has no return to "
                "evaluate")
    return ""


def imitation_line(step: int, distance: float, random_distance: float) -> str:
    return (f"step {step}: imitation distance {distance:.3f} (random actions {random_distance:.3f}, "
            f"0 = on the demonstrations), score {imitation_score(distance, random_distance):.3f}")


def evaluated_text(mean: float, std: float, imitation: tuple[float, float] | None) -> str:
    """A run's last evaluation in a few words (its final line)."""
    if imitation is not None:
        return f"imitation distance {imitation[0]:.3f} (random actions {imitation[1]:.3f})"
    return "no evaluation (no reward)" if math.isnan(mean) else f"eval return {mean:.1f} +- {std:.1f}"


class RunEvaluator:
    """The evaluations of one run of `cfg` (module docstring). `eval_steps`: the evaluation
    episodes' length an MJCF policy_best.onnx records (its run's ``eval_max_episode_steps``, else
    the training episodes')."""

    def __init__(self, cfg: RunConfig, eval_steps: int) -> None:
        self.cfg, self.eval_steps = cfg, eval_steps
        self.expert_return = math.nan  # the demonstrations' mean return (R_expert of the score)
        self.random_return = math.nan  # the random policy's (R_random), at the first evaluation
        self.best_return = -math.inf
        self.imitation: ImitationEvaluator | None = None  # an MJCF task's evaluation
        self.last_imitation: tuple[float, float] | None = None  # (distance, the random policy's)

    def use_demonstrations(self, episodes: Sequence, obs_dim: int) -> None:
        """The run's demonstration episodes (with the time feature when the run uses it): their mean
        return, and for an MJCF task the states the imitation distance measures against."""
        self.expert_return = mean_return(episodes)
        cfg = self.cfg
        if is_mjcf(cfg.env_id) and episodes:
            self.imitation = ImitationEvaluator(
                lambda: make_task_env(cfg.env_id, time_feature=cfg.time_feature,
                                      max_episode_steps=self.eval_steps),
                demo_states_of(episodes, obs_dim - int(cfg.time_feature)), cfg.eval_episodes,
                seed=10_000 + cfg.seed)

    def __call__(self, step: int, policy: Policy, logger: RunLogger, wall_s: float, *,
                 export_best: Callable[[Mapping[str, object]], object], say: Callable[[str], object],
                 stop: threading.Event | None = None) -> tuple[float, float]:
        """Evaluate `policy` at `step`: log it, export the best with `export_best(metadata)`; the
        return's mean and std (NaN for an MJCF task). EvaluationInterrupted on `stop`."""
        if is_mjcf(self.cfg.env_id):
            self._imitation(step, policy, logger, wall_s, export_best, say, stop)
            return math.nan, math.nan
        cfg = self.cfg
        if math.isnan(self.random_return):  # the score's baseline, at the first evaluation (stoppable)
            self.random_return = random_policy_return(cfg.env_id, cfg.eval_episodes, stop=stop)
        returns = evaluate(policy, cfg.env_id, cfg.eval_episodes, seed=10_000 + cfg.seed,
                           time_feature=cfg.time_feature, stop=stop)
        mean, std = float(returns.mean()), float(returns.std())
        norm = normalised_score(mean, self.random_return, self.expert_return)
        logger.scalars(step, {"eval/return": mean, "eval/return_std": std, "eval/normalised": norm})
        logger.evaluation({"env_step": step, "return_mean": mean, "return_std": std, "normalised": norm,
                           "wall_s": wall_s, "r_expert": self.expert_return, "r_random": self.random_return})
        say(eval_line(step, mean, std, norm))
        best = evaluation_metadata(cfg, return_mean=mean, return_std=std)
        self.best_return = note_evaluation(mean, self.best_return, cfg, step, lambda: export_best(best), say)
        return mean, std

    def _imitation(self, step: int, policy: Policy, logger: RunLogger, wall_s: float,
                   export_best: Callable[[Mapping[str, object]], object], say: Callable[[str], object],
                   stop: threading.Event | None) -> None:
        if self.imitation is None:  # (no demonstrations: a TD3 run, which an MJCF task refuses)
            return
        distance, random_distance = self.imitation(policy, stop)
        score = imitation_score(distance, random_distance)
        logger.scalars(step, {"eval/imitation_distance": distance, "eval/imitation_score": score})
        logger.evaluation({"env_step": step, "wall_s": wall_s, "imitation_distance": distance,
                           "imitation_random": random_distance, "imitation_score": score})
        say(imitation_line(step, distance, random_distance))
        self.last_imitation = (distance, random_distance)
        if self.imitation.improved(distance) and self.cfg.keep_best:
            export_best(evaluation_metadata(self.cfg, imitation_distance=distance,
                                            imitation_random=random_distance,
                                            max_episode_steps=self.eval_steps))

    def normalised(self, mean: float) -> float:
        return normalised_score(mean, self.random_return, self.expert_return)

    def state(self) -> dict[str, Any]:
        """The checkpoint's keys for a resume (those both trainers wrote before this class)."""
        return {"random_return": self.random_return, "best_return": self.best_return,
                "last_imitation": self.last_imitation,
                "imitation": ({"random": self.imitation.random_distance, "best": self.imitation.best}
                              if self.imitation is not None else None)}

    def restore(self, state: Mapping[str, Any]) -> None:
        """From a checkpoint (:meth:`state`'s keys; older checkpoints lack some)."""
        self.random_return = state.get("random_return", math.nan)
        self.best_return = state.get("best_return", -math.inf)
        imitation = state.get("imitation")
        if imitation and self.imitation is not None:
            self.imitation.random_distance, self.imitation.best = imitation["random"], imitation["best"]
        last = state.get("last_imitation")
        self.last_imitation = tuple(last) if last is not None else None
