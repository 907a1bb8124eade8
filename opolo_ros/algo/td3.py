"""TD3 on the environment reward (Fujimoto et al. 2018), used to train the experts.

It shares the policy and fused twin-critic networks, the replay buffer and the schedule with OPOLO;
only the losses differ (clipped double-Q target with target-policy smoothing, -Q1 policy loss).
"""

from __future__ import annotations

import copy

import torch

from opolo_ros.algo import losses
from opolo_ros.algo.base import Checkpointable, make_adam
from opolo_ros.algo.batch import StatePairs, Transitions
from opolo_ros.algo.config import TD3Config
from opolo_ros.algo.networks import Actor, TwinCritic, soft_update
from opolo_ros.algo.opolo import done_mask


class TD3Learner(Checkpointable):
    counter_names = ("critic_steps", "actor_steps")

    def __init__(self, obs_dim: int, act_dim: int, cfg: TD3Config) -> None:
        self.cfg = cfg
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.actor = Actor(obs_dim, act_dim, cfg.net.hidden)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = TwinCritic(obs_dim, act_dim, cfg.net.hidden)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.lr, cfg.net.fused_adam)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.lr, cfg.net.fused_adam)
        self.critic_steps = 0
        self.actor_steps = 0

    def update_critic(self, batch: Transitions) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        with torch.no_grad():
            noise = (torch.randn_like(batch.action) * cfg.target_noise).clamp(
                -cfg.target_noise_clip, cfg.target_noise_clip)
            next_a = (self.actor_target(batch.next_obs) + noise).clamp(-1.0, 1.0)
            next_q = self.critic_target(batch.next_obs, next_a).min(0).values
            target = losses.bellman_target(batch.reward, next_q, done_mask(batch, cfg.done_mode), cfg.gamma)
        q_sa = self.critic(batch.obs, batch.action)
        loss = losses.td3_critic_loss(q_sa, target)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        self.critic_steps += 1
        return {"critic/loss": loss.detach(), "critic/q": q_sa.detach().mean()}

    def update_actor(self, batch: Transitions) -> dict[str, torch.Tensor]:
        # Q_1 only, with the critic's parameters as constants: the gradient reaches the policy only.
        q1 = self.critic(batch.obs, self.actor(batch.obs), detach_params=True, first=1)[0]
        loss = losses.td3_actor_loss(q1)
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        self.actor_steps += 1
        soft_update(self.critic_target, self.critic, self.cfg.tau)
        soft_update(self.actor_target, self.actor, self.cfg.tau)
        return {"actor/loss": loss.detach()}

    def train_step(self, batch: Transitions, expert: StatePairs | None, policy_delay: int
                   ) -> dict[str, torch.Tensor]:
        metrics = self.update_critic(batch)
        if self.critic_steps % policy_delay == 0:
            metrics.update(self.update_actor(batch))
        return metrics

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "actor_target": self.actor_target, "critic": self.critic,
                "critic_target": self.critic_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt}
