"""Executes the schedule's plans against a learner, a replay buffer and expert data.

Shared by the direct loop and the ROS learner node, so both run exactly the same updates.
"""

from __future__ import annotations

import torch

from opolo_ros.algo.config import RunConfig
from opolo_ros.algo.opolo import OPOLOLearner
from opolo_ros.algo.schedule import Plan, Schedule
from opolo_ros.algo.td3 import TD3Learner
from opolo_ros.data.demos import ExpertDataset
from opolo_ros.data.replay import ReplayBuffer

Learner = OPOLOLearner | TD3Learner


def make_learner(cfg: RunConfig, obs_dim: int, act_dim: int) -> Learner:
    if cfg.algo == "opolo":
        return OPOLOLearner(obs_dim, act_dim, cfg.opolo)
    return TD3Learner(obs_dim, act_dim, cfg.td3)


def make_schedule(cfg: RunConfig) -> Schedule:
    adversarial = cfg.algo == "opolo"
    return Schedule(cfg.schedule, adversarial=adversarial, use_inverse=adversarial and cfg.opolo.lam > 0)


class UpdateRunner:
    def __init__(self, learner: Learner, schedule: Schedule, replay: ReplayBuffer,
                 experts: ExpertDataset | None) -> None:
        if isinstance(learner, OPOLOLearner) and experts is None:
            raise ValueError("OPOLO needs expert demonstrations")
        self.learner, self.schedule, self.replay, self.experts = learner, schedule, replay, experts
        self.batch_size = schedule.cfg.batch_size

    def _expert(self):
        return self.experts.sample(self.batch_size) if self.experts is not None else None

    def run(self, plan: Plan) -> dict[str, torch.Tensor]:
        """Run the plan's updates in order; returns the metrics of the last update of each kind."""
        metrics: dict[str, torch.Tensor] = {}
        learner, replay, bs = self.learner, self.replay, self.batch_size
        if isinstance(learner, OPOLOLearner):
            for _ in range(plan.inverse_pretrain):
                metrics.update(learner.update_inverse(replay.sample(bs)))
            for _ in range(plan.disc):
                metrics.update(learner.update_discriminator(replay.sample(bs), self._expert()))
            for _ in range(plan.inverse):
                metrics.update(learner.update_inverse(replay.sample(bs)))
        delay = self.schedule.cfg.policy_delay
        for _ in range(plan.critic):
            metrics.update(learner.train_step(replay.sample(bs), self._expert(), delay))
        return metrics

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict(), "replay": self.replay.state_dict(),
                "experts": self.experts.state_dict() if self.experts is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.replay.load_state_dict(state["replay"])
        if self.experts is not None and state["experts"] is not None:
            self.experts.load_state_dict(state["experts"])
