"""The schedule decides when each part updates, independently of the losses."""

import pytest

from opolo_ros.algo.config import ScheduleConfig
from opolo_ros.algo.schedule import Plan, Schedule


def test_released_code_schedule():
    s = Schedule(ScheduleConfig())
    assert s.random_action(9_999) and not s.random_action(10_000)
    assert s.plan(9_999).empty
    assert s.plan(10_000) == Plan(inverse_pretrain=2_500, disc=10, inverse=50, critic=1_000)
    assert s.plan(10_500) == Plan(disc=10, inverse=50)
    assert s.plan(10_001).empty
    assert s.plan(11_000) == Plan(disc=10, inverse=50, critic=1_000)


def test_critic_steps_due_matches_plans():
    for cfg in (ScheduleConfig(), ScheduleConfig(warmup_steps=250, train_freq=1, gradient_steps=1),
                ScheduleConfig(warmup_steps=130, train_freq=50, gradient_steps=25)):
        s = Schedule(cfg)
        total = 0
        for n in range(1, 13_000):
            total += s.plan(n).critic
            assert s.critic_steps_due(n) == total


def test_td3_and_opolo_x_skip_adversarial_parts():
    assert Schedule(ScheduleConfig(), adversarial=False).plan(10_000) == Plan(critic=1_000)
    assert Schedule(ScheduleConfig(), use_inverse=False).plan(10_000) == Plan(disc=10, critic=1_000)


def test_rejects_non_positive_frequencies():
    with pytest.raises(ValueError, match="train_freq"):
        Schedule(ScheduleConfig(train_freq=0))
