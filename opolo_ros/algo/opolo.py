"""OPOLO learner (Algorithm 1): discriminator, inverse action model, critic/policy saddle point.

One `update_*` method per learned part, each taking minibatches and returning metrics (tensors, so
the hot loop never forces a `.item()`). *When* each runs is decided by `algo.schedule`, not here.

Per critic step, with the replay minibatch (s, a, s') also serving as virtual initial states s0 = s:
  r        = -log(1 - D(s, s'))                       (current D, no gradient)
  y        = r + gamma * mask * min_j Qtarg_j(s', pi(s'))
  J_critic = 2 alpha (1 - gamma) E[min_j Q_j(s0, pi(s0))] + sum_j E[f*(y - Q_j(s, a))]
and every `policy_delay` critic steps the policy ascends the same objective (plus the P_I
regulariser), then the target critic is Polyak-averaged. There is no target policy (as in the
authors' code).
"""

from __future__ import annotations

import torch

from opolo_ros.algo import losses
from opolo_ros.algo.base import Checkpointable, LossGraph, make_adam
from opolo_ros.algo.batch import StatePairs, Transitions
from opolo_ros.algo.config import OPOLOConfig
from opolo_ros.algo.networks import Actor, Discriminator, InverseModel, TwinCritic, soft_update


def done_mask(batch: Transitions, done_mode: str) -> torch.Tensor:
    """1 where the backup bootstraps. 'ignore': always (released code); 'terminal': not at true ends.

    Time-limit truncation is not a terminal state, so it bootstraps in both modes.
    """
    if done_mode == "ignore":
        return torch.ones_like(batch.terminated)
    return 1.0 - batch.terminated


class OPOLOLearner(Checkpointable):
    counter_names = ("critic_steps", "actor_steps", "disc_steps", "inverse_steps")

    def __init__(self, obs_dim: int, act_dim: int, cfg: OPOLOConfig) -> None:
        self.cfg = cfg
        self.obs_dim, self.act_dim = obs_dim, act_dim
        net = cfg.net
        self.actor = Actor(obs_dim, act_dim, net.hidden)
        self.critic = TwinCritic(obs_dim, act_dim, net.hidden)
        self.critic_target = TwinCritic(obs_dim, act_dim, net.hidden)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        self.disc = Discriminator(obs_dim, net.disc_hidden, cfg.normalize_disc, cfg.norm_std_floor)
        self.inverse = InverseModel(obs_dim, act_dim, net.inverse_hidden, cfg.normalize_inverse,
                                    cfg.norm_std_floor)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.lr, net.fused_adam)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.lr, net.fused_adam)
        self.disc_opt = make_adam(self.disc.parameters(), cfg.disc_lr, net.fused_adam)
        self.inverse_opt = make_adam(self.inverse.parameters(), cfg.inverse_lr, net.fused_adam)
        self._critic_graph = LossGraph(self.critic_loss, cfg.compile_critic, "OPOLO critic loss")
        self._inverse_weights = [m.weight for m in self.inverse.net if isinstance(m, torch.nn.Linear)]
        self.critic_steps = 0
        self.actor_steps = 0
        self.disc_steps = 0
        self.inverse_steps = 0

    # ------------------------------------------------------------------ discriminator
    def update_discriminator(self, policy: Transitions | StatePairs, expert: StatePairs
                             ) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        if self.disc.norm is not None:  # statistics of expert states only (released code)
            self.disc.norm.update(torch.cat([expert.obs, expert.next_obs]))
        x_e = self.disc.inputs(expert.obs, expert.next_obs)
        x_p = self.disc.inputs(policy.obs, policy.next_obs)
        e_logits, p_logits = self.disc.logits(x_e), self.disc.logits(x_p)
        loss = losses.discriminator_loss(e_logits, p_logits, cfg.disc_entropy_coef)
        if cfg.disc_gp_coef > 0:  # in normalised input space (see Discriminator)
            eps = torch.rand(x_e.shape[0], 1, device=x_e.device)
            loss = loss + cfg.disc_gp_coef * losses.gradient_penalty(self.disc.logits, x_e, x_p, eps)
        self.disc_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.disc_opt.step()
        self.disc_steps += 1
        with torch.no_grad():
            acc = 0.5 * ((e_logits > 0).float().mean() + (p_logits < 0).float().mean())
        return {"disc/loss": loss.detach(), "disc/accuracy": acc}

    # ------------------------------------------------------------------ inverse model
    def update_inverse(self, batch: Transitions) -> dict[str, torch.Tensor]:
        if self.inverse.norm is not None:
            self.inverse.norm.update(torch.cat([batch.obs, batch.next_obs]))
        pred = self.inverse(batch.obs, batch.next_obs)
        loss = losses.inverse_model_loss(pred, batch.action, self._inverse_weights, self.cfg.inverse_l2)
        self.inverse_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.inverse_opt.step()
        self.inverse_steps += 1
        return {"inverse/loss": loss.detach()}

    # ------------------------------------------------------------------ critic / policy
    @torch.no_grad()
    def reward(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        return losses.reward_from_logits(self.disc(obs, next_obs), self.cfg.reward_eps_low,
                                         self.cfg.reward_eps_high)

    def update_critic(self, batch: Transitions) -> dict[str, torch.Tensor]:
        return self._critic_step(batch)[0]

    def critic_loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor,
                    mask: torch.Tensor, a_obs: torch.Tensor, a_next: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Critic loss given pi(s) and pi(s'); returns (loss, r, Q(s, a), Q(s0, pi(s0))), the last
        three detached.

        The replay states double as the virtual initial states s0 = s. `a_obs` = pi(s0) carries no
        autograd history; it may require gradient (the simultaneous policy update reads it).
        """
        cfg = self.cfg
        b = obs.shape[0]
        with torch.no_grad():
            r = self.reward(obs, next_obs)
            next_q = self.critic_target(next_obs, a_next).min(0).values
            target = losses.bellman_target(r, next_q, mask, cfg.gamma)
        q = self.critic(torch.cat([obs, obs]), torch.cat([action, a_obs]))
        q_sa, q_init = q[:, :b], q[:, b:]
        loss = losses.dice_critic_loss(q_sa, target, q_init, cfg.alpha, cfg.gamma, cfg.f_q)
        return loss, r, q_sa.detach(), q_init.detach()

    def _critic_backward(self, batch: Transitions,
                         a_pi: tuple[torch.Tensor, torch.Tensor] | None = None
                         ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...], torch.Tensor]:
        """Critic gradients, no step; returns (metrics, (r, mask, Q(s, a)), Q(s0, pi(s0))).

        `a_pi` = (pi(s), pi(s')) without autograd history, if the caller has them already.
        """
        b = batch.obs.shape[0]
        mask = done_mask(batch, self.cfg.done_mode)
        if a_pi is None:
            with torch.no_grad():
                a = self.actor(torch.cat([batch.obs, batch.next_obs]))  # pi(s0 = s) and pi(s')
            a_pi = (a[:b], a[b:])
        loss, r, q_sa, q_init = self._critic_graph.backward(self.critic_opt, batch.obs, batch.action,
                                                            batch.next_obs, mask, *a_pi)
        metrics = {"critic/loss": loss.detach(), "critic/q": q_sa.mean(), "reward/mean": r.mean()}
        return metrics, (r, mask, q_sa), q_init

    def _critic_step(self, batch: Transitions,
                     a_pi: tuple[torch.Tensor, torch.Tensor] | None = None
                     ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Critic update; also returns (r, mask, Q(s, a)) for the policy step on the same batch."""
        metrics, cached, _ = self._critic_backward(batch, a_pi)
        self.critic_opt.step()
        self.critic_steps += 1
        return metrics, cached

    def _actor_rows(self, batch: Transitions, expert: StatePairs | None) -> list[torch.Tensor]:
        """States the policy loss evaluates pi on, in order: s, s' (residual mode), s_E (lam > 0)."""
        parts = [batch.obs]
        if self.cfg.residual_mode == "residual":
            parts.append(batch.next_obs)
        if self.cfg.lam > 0 and expert is not None:
            parts.append(expert.obs)
        return parts

    def actor_loss(self, batch: Transitions, expert: StatePairs | None,
                   cached: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                   a_all: torch.Tensor | None = None,
                   init: tuple[torch.Tensor, torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Policy loss (to minimise). `cached` = (r, mask, Q(s, a)) from the critic step, else recomputed;
        `a_all` = pi of the `_actor_rows` states (with gradient), else computed here; `init` =
        (Q(s0, pi(s0)), d critic loss / d pi(s0)) from a critic backward pass with these parameters:
        the s0 term then needs no critic pass of its own (simultaneous update)."""
        cfg = self.cfg
        b = batch.obs.shape[0]
        use_reg = cfg.lam > 0 and expert is not None
        residual_grad = cfg.residual_mode == "residual"
        x = torch.cat(self._actor_rows(batch, expert))
        if a_all is None:
            a_all = self.actor(x)
        n_q = 2 * b if residual_grad else b
        first = 0 if init is None else b  # rows whose Q this pass computes: [first, n_q)
        # The critic's parameters enter as constants: the gradient reaches the policy only.
        q_all = (self.critic(x[first:n_q], a_all[first:n_q], detach_params=True) if n_q > first
                 else None)
        residual = None
        if residual_grad:
            if cached is None:
                with torch.no_grad():
                    cached = (self.reward(batch.obs, batch.next_obs), done_mask(batch, cfg.done_mode),
                              self.critic(batch.obs, batch.action))
            r, mask, q_sa = cached
            residual = r + cfg.gamma * mask * q_all[:, b - first:] - q_sa
        if init is None:
            loss = losses.dice_actor_loss(q_all[:, :b], cfg.alpha, cfg.gamma, residual, cfg.f_q,
                                          cfg.residual_clip)
        else:
            # The critic loss's s0 term is +2a(1-g) E[min Q(s0, pi(s0))]; the policy's is its negative.
            q_init, grad_init = init
            init_value = 2.0 * cfg.alpha * (1.0 - cfg.gamma) * q_init.min(0).values.mean()
            loss = losses.linear_surrogate(a_all[:b], -grad_init, -init_value)
            if residual is not None:
                loss = loss + losses.dice_actor_loss(None, cfg.alpha, cfg.gamma, residual, cfg.f_q,
                                                     cfg.residual_clip)
        metrics = {"actor/dice_loss": loss.detach()}
        if use_reg:
            with torch.no_grad():
                a_inv = self.inverse(expert.obs, expert.next_obs)
            reg = losses.inverse_regulariser(a_all[n_q:], a_inv, cfg.lam)
            loss = loss + reg
            metrics["actor/inverse_reg"] = reg.detach()
        return loss, metrics

    def update_actor(self, batch: Transitions, expert: StatePairs | None,
                     cached: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                     a_all: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        loss, metrics = self.actor_loss(batch, expert, cached, a_all)
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        self.actor_steps += 1
        soft_update(self.critic_target, self.critic, self.cfg.tau)
        return metrics

    def train_step(self, batch: Transitions, expert: StatePairs | None, policy_delay: int
                   ) -> dict[str, torch.Tensor]:
        """One critic step, and a policy + target step every `policy_delay` critic steps.

        The policy step reuses r and Q(s, a) of the critic step (values before the critic's update),
        which saves a D and a critic forward per policy step; and the critic step takes pi(s), pi(s')
        from the policy step's forward (the policy does not change in between), which saves a policy
        forward. Same updates as `update_critic` then `update_actor(batch, expert, cached)`.
        """
        if (self.critic_steps + 1) % policy_delay:
            return self._critic_step(batch)[0]
        if self.cfg.policy_update == "simultaneous":
            return self._simultaneous_step(batch, expert)
        b = batch.obs.shape[0]
        a_all = self.actor(torch.cat(self._actor_rows(batch, expert)))
        if self.cfg.residual_mode == "residual":
            a_pi = (a_all[:b].detach(), a_all[b:2 * b].detach())
        else:
            with torch.no_grad():
                a_pi = (a_all[:b].detach(), self.actor(batch.next_obs))
        metrics, cached = self._critic_step(batch, a_pi)
        metrics.update(self.update_actor(batch, expert, cached, a_all))
        return metrics

    def _simultaneous_step(self, batch: Transitions, expert: StatePairs | None
                           ) -> dict[str, torch.Tensor]:
        """Critic and policy step from the same parameters: the critic's backward pass also yields
        d loss / d pi(s0), which the policy's s0 term reuses; then both optimisers step."""
        b = batch.obs.shape[0]
        a_all = self.actor(torch.cat(self._actor_rows(batch, expert)))
        a_obs = a_all[:b].detach().requires_grad_(True)
        if self.cfg.residual_mode == "residual":
            a_next = a_all[b:2 * b].detach()
        else:
            with torch.no_grad():
                a_next = self.actor(batch.next_obs)
        metrics, cached, q_init = self._critic_backward(batch, (a_obs, a_next))
        loss, actor_metrics = self.actor_loss(batch, expert, cached, a_all, init=(q_init, a_obs.grad))
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        self.critic_opt.step()
        self.critic_steps += 1
        self.actor_steps += 1
        soft_update(self.critic_target, self.critic, self.cfg.tau)
        metrics.update(actor_metrics)
        return metrics

    # ------------------------------------------------------------------ acting / state
    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target,
                "disc": self.disc, "inverse": self.inverse}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt,
                "disc_opt": self.disc_opt, "inverse_opt": self.inverse_opt}
