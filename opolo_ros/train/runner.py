"""Executes the schedule's plans against a learner, a replay buffer and expert data.

Shared by the direct loop and the ROS learner node, so both run exactly the same updates.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TypeVar

import torch

from opolo_ros.algo.batch import StatePairs, Transitions
from opolo_ros.algo.config import RunConfig
from opolo_ros.algo.opolo import OPOLOLearner
from opolo_ros.algo.schedule import Plan, Schedule
from opolo_ros.algo.td3 import TD3Learner
from opolo_ros.data.demos import ExpertDataset
from opolo_ros.data.replay import ReplayBuffer

Learner = OPOLOLearner | TD3Learner
T = TypeVar("T", Transitions, StatePairs)
PLAN_KINDS = tuple(f.name for f in dataclasses.fields(Plan))  # in the order UpdateRunner.run runs them


def resolve_device(name: str) -> torch.device:
    """`cpu`, `cuda`, `cuda:N`, or `auto` (cuda when available); a clear error for the rest."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"config 'device': {name!r} is not a device (cpu, cuda, cuda:N, auto)") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"config 'device': {name!r} asked for, but torch sees no CUDA device")
    return device


def make_learner(cfg: RunConfig, obs_dim: int, act_dim: int) -> Learner:
    learner: Learner
    if cfg.algo == "opolo":
        learner = OPOLOLearner(obs_dim, act_dim, cfg.opolo)
    else:
        learner = TD3Learner(obs_dim, act_dim, cfg.td3)
    learner.to(resolve_device(cfg.device))
    return learner


def _to(batch: T, device: torch.device) -> T:
    return type(batch)(*(t.to(device, non_blocking=True) for t in batch))


def make_schedule(cfg: RunConfig) -> Schedule:
    adversarial = cfg.algo == "opolo"
    return Schedule(cfg.schedule, adversarial=adversarial, use_inverse=adversarial and cfg.opolo.lam > 0)


def untrained_warning(cfg: RunConfig, schedule: Schedule) -> str | None:
    """What to warn of when no gradient step would run in the whole run (a policy that stays the
    random initial one, which nothing else would say), else None."""
    s = cfg.schedule
    if s.gradient_steps == 0:
        return "schedule.gradient_steps is 0: no gradient step will run, the policy stays untrained"
    if schedule.first_update() <= cfg.total_steps:
        return None
    return (f"total_steps {cfg.total_steps}: no gradient step will run; the first comes at "
            f"{schedule.first_update()} env steps (after max(schedule.warmup_steps, schedule.batch_size)"
            f" = {max(s.warmup_steps, s.batch_size)}, at a multiple of schedule.train_freq, "
            f"{s.train_freq}): the policy stays untrained")


class UpdateRunner:
    def __init__(self, learner: Learner, schedule: Schedule, replay: ReplayBuffer,
                 experts: ExpertDataset | None) -> None:
        if isinstance(learner, OPOLOLearner) and experts is None:
            raise ValueError("OPOLO needs expert demonstrations")
        self.learner, self.schedule, self.replay, self.experts = learner, schedule, replay, experts
        self.batch_size = schedule.cfg.batch_size
        # Replay and expert data stay in (CPU) host memory; each minibatch goes to the learner's device.
        self.device = next(learner.actor.parameters()).device
        self._move = self.device.type != "cpu"

    def _sample(self) -> Transitions:
        if len(self.replay) == 0:  # every step so far was void: not a sampling bug
            raise ValueError("no transition stored when the first update came: every step so far was "
                             "void (the simulation diverged on each; an unstable model or huge gains?)")
        batch = self.replay.sample(self.batch_size)
        return _to(batch, self.device) if self._move else batch

    def _expert(self) -> StatePairs | None:
        if self.experts is None:
            return None
        batch = self.experts.sample(self.batch_size)
        return _to(batch, self.device) if self._move else batch

    def run(self, plan: Plan) -> dict[str, torch.Tensor]:
        """Run the plan's updates in order; returns the metrics of the last update of each kind."""
        metrics: dict[str, torch.Tensor] = {}
        learner = self.learner
        if isinstance(learner, OPOLOLearner):
            for _ in range(plan.inverse_pretrain):
                metrics.update(learner.update_inverse(self._sample()))
            for _ in range(plan.disc):
                metrics.update(learner.update_discriminator(self._sample(), self._expert()))
            for _ in range(plan.inverse):
                metrics.update(learner.update_inverse(self._sample()))
        delay = self.schedule.cfg.policy_delay
        for _ in range(plan.critic):
            metrics.update(learner.train_step(self._sample(), self._expert(), delay))
        return metrics

    def run_until_stopped(self, plan: Plan, stop: threading.Event,
                          on_update: Callable[[Plan], None] | None = None
                          ) -> tuple[dict[str, torch.Tensor], Plan | None]:
        """Run the plan one update at a time (the same updates in the same order as `run`), checking
        `stop` before each; returns the metrics and the part of the plan not run (None: all ran).
        `on_update(rest)` is called after each update with what is left."""
        metrics: dict[str, torch.Tensor] = {}
        for kind in PLAN_KINDS:
            while getattr(plan, kind):
                if stop.is_set():
                    return metrics, plan
                metrics.update(self.run(Plan(**{kind: 1})))
                plan = dataclasses.replace(plan, **{kind: getattr(plan, kind) - 1})
                if on_update is not None:
                    on_update(plan)
        return metrics, None

    def state_dict(self, replay_rows: bool = True) -> dict:
        return {"learner": self.learner.state_dict(), "replay": self.replay.state_dict(rows=replay_rows),
                "experts": self.experts.state_dict() if self.experts is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.replay.load_state_dict(state["replay"])
        if self.experts is not None and state["experts"] is not None:
            self.experts.load_state_dict(state["experts"])
