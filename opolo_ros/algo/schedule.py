"""The update schedule: which updates run after each environment step, apart from the losses.

Released-code defaults (see ScheduleConfig): uniform random actions for the first `warmup_steps`;
at the end of warm-up, `inverse_pretrain_steps` P_I steps; then every `disc_freq` env steps
`disc_steps` D steps, every `inverse_freq` steps `inverse_steps` P_I steps, and every `train_freq`
steps `gradient_steps` critic steps (the policy every `policy_delay`-th critic step).
"""

from __future__ import annotations

from dataclasses import dataclass

from opolo_ros.algo.config import ScheduleConfig


@dataclass(frozen=True)
class Plan:
    """Updates to run now, in this order: P_I pre-training, D, P_I, critic/policy."""

    inverse_pretrain: int = 0
    disc: int = 0
    inverse: int = 0
    critic: int = 0

    @property
    def empty(self) -> bool:
        return not (self.inverse_pretrain or self.disc or self.inverse or self.critic)


class Schedule:
    def __init__(self, cfg: ScheduleConfig, adversarial: bool = True, use_inverse: bool = True) -> None:
        for name in ("disc_freq", "inverse_freq", "train_freq", "policy_delay", "batch_size"):
            if getattr(cfg, name) <= 0:
                raise ValueError(f"schedule.{name} must be positive, got {getattr(cfg, name)}")
        self.cfg = cfg
        self.adversarial = adversarial
        self.use_inverse = use_inverse and adversarial

    def random_action(self, env_step: int) -> bool:
        """Whether the action for env step `env_step` (0-based) is uniform random (warm-up)."""
        return env_step < self.cfg.warmup_steps

    def first_update(self) -> int:
        """The env step count at which the first critic step comes (what :meth:`plan` gives)."""
        c = self.cfg
        start = max(c.warmup_steps, c.batch_size)
        return -(-start // c.train_freq) * c.train_freq

    def plan(self, env_steps_done: int) -> Plan:
        """Updates due once `env_steps_done` transitions are in the replay buffer."""
        c = self.cfg
        n = env_steps_done
        start = max(c.warmup_steps, c.batch_size)
        if n < start:
            return Plan()
        pretrain = c.inverse_pretrain_steps if (self.use_inverse and n == start) else 0
        return Plan(
            inverse_pretrain=pretrain,
            disc=c.disc_steps if self.adversarial and n % c.disc_freq == 0 else 0,
            inverse=c.inverse_steps if self.use_inverse and n % c.inverse_freq == 0 else 0,
            critic=c.gradient_steps if n % c.train_freq == 0 else 0,
        )

    def critic_steps_due(self, env_steps_done: int) -> int:
        """Total critic steps the schedule has asked for after `env_steps_done` env steps."""
        c = self.cfg
        start = max(c.warmup_steps, c.batch_size)
        if env_steps_done < start:
            return 0
        first = -(-start // c.train_freq) * c.train_freq  # first multiple of train_freq >= start
        if env_steps_done < first:
            return 0
        return ((env_steps_done - first) // c.train_freq + 1) * c.gradient_steps
