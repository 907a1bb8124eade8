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


def test_d_and_p_i_keep_their_own_frequencies():
    """Every other test gives D and P_I one frequency: P_I on D's went unseen (a mutation test)."""
    s = Schedule(ScheduleConfig(disc_freq=500, inverse_freq=250, disc_steps=10, inverse_steps=50))
    assert s.plan(10_250) == Plan(inverse=50)
    assert s.plan(10_500) == Plan(disc=10, inverse=50)
    s = Schedule(ScheduleConfig(disc_freq=250, inverse_freq=500, disc_steps=10, inverse_steps=50))
    assert s.plan(10_250) == Plan(disc=10)


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


def test_a_run_too_short_for_any_gradient_step_is_warned_of():
    """total_steps below the warm-up (10k by default) trained nothing and said nothing."""
    from opolo_ros.algo.config import load_run_config
    from opolo_ros.train.runner import make_schedule, untrained_warning

    def warning(values: dict) -> str | None:
        cfg = load_run_config(None, values)
        return untrained_warning(cfg, make_schedule(cfg))

    assert warning({"total_steps": 5000}).startswith("total_steps 5000: no gradient step will run; the "
                                                     "first comes at 10000 env steps")
    cfg = {"total_steps": 249, "schedule": {"warmup_steps": 210, "train_freq": 50}}
    assert "the first comes at 250" in warning(cfg)  # the first multiple of train_freq
    cfg["total_steps"] = 250
    assert warning(cfg) is None
    assert "gradient_steps is 0" in warning({**cfg, "schedule": {**cfg["schedule"], "gradient_steps": 0}})
    schedule = make_schedule(load_run_config(None, cfg))
    assert schedule.first_update() == 250 and schedule.plan(250).critic > 0 and schedule.plan(249).critic == 0
