"""OPOLO learner behaviour: gradient routing of each option, done handling, D and P_I learn."""

import dataclasses

import pytest
import torch

from opolo_ros.algo import losses
from opolo_ros.algo.batch import StatePairs, Transitions
from opolo_ros.algo.config import NetworkConfig, OPOLOConfig
from opolo_ros.algo.opolo import OPOLOLearner, done_mask

OBS, ACT, B = 3, 2, 16
SMALL = NetworkConfig(hidden=(32, 32), disc_hidden=(32, 32), inverse_hidden=(32, 32))


def make(**kw) -> OPOLOLearner:
    torch.manual_seed(0)
    return OPOLOLearner(OBS, ACT, OPOLOConfig(net=SMALL, **kw))


def batch(terminated=0.0, truncated=0.0, seed=1) -> Transitions:
    g = torch.Generator().manual_seed(seed)
    return Transitions(torch.randn(B, OBS, generator=g), torch.rand(B, ACT, generator=g) * 2 - 1,
                       torch.randn(B, OBS, generator=g), torch.full((B,), terminated),
                       torch.full((B,), truncated), torch.zeros(B))


def expert(seed=2) -> StatePairs:
    g = torch.Generator().manual_seed(seed)
    return StatePairs(torch.randn(B, OBS, generator=g), torch.randn(B, OBS, generator=g))


def actor_grads(learner: OPOLOLearner, loss: torch.Tensor) -> list[torch.Tensor]:
    return torch.autograd.grad(loss, list(learner.actor.parameters()), allow_unused=True,
                               retain_graph=True)


def positive_residual_cache(learner, b):
    r = torch.ones(B)
    return r, torch.ones(B), torch.full((2, B), -50.0)  # Q(s, a) far below: residual > 0


def test_residual_mode_routes_policy_gradient_through_next_state_q():
    b = batch()
    res = make(residual_mode="residual", alpha=0.0, lam=0.0)
    with torch.no_grad():  # the target critic a copy of the critic no more: which one is used shows
        for p in res.critic_target.parameters():
            p.add_(0.05 * torch.randn_like(p))
    cache = positive_residual_cache(res, b)
    loss, _ = res.actor_loss(b, None, cache)
    assert any(g is not None and g.abs().sum() > 0 for g in actor_grads(res, loss))
    # exactly the gradient of f*(r + gamma Q(s', pi(s')) - Q(s, a)): through the next state's action
    r, mask, q_sa = cache
    residual = r + res.cfg.gamma * mask * res.critic(b.next_obs, res.actor(b.next_obs)) - q_sa
    ref = losses.dice_actor_loss(None, res.cfg.alpha, res.cfg.gamma, residual, res.cfg.f_q,
                                 res.cfg.residual_clip)
    for g, h in zip(actor_grads(res, loss), actor_grads(res, ref)):
        assert torch.allclose(g, h)

    stop = make(residual_mode="stop_gradient", alpha=0.0, lam=0.0)
    loss, _ = stop.actor_loss(b, None, positive_residual_cache(stop, b))
    assert all(g is None or g.abs().sum() == 0 for g in actor_grads(stop, loss))


def test_stop_gradient_mode_equals_initial_state_term_only():
    b = batch()
    lrn = make(residual_mode="stop_gradient", lam=0.0)
    loss, _ = lrn.actor_loss(b, None)
    q0 = lrn.critic(b.obs, lrn.actor(b.obs)).min(0).values.mean()
    ref = -2 * lrn.cfg.alpha * (1 - lrn.cfg.gamma) * q0
    for g, h in zip(actor_grads(lrn, loss), actor_grads(lrn, ref)):
        assert torch.allclose(g, h)


def test_residual_clipped_at_zero_gives_no_gradient_when_negative():
    b = batch()
    lrn = make(residual_mode="residual", alpha=0.0, lam=0.0)
    cache = (torch.zeros(B), torch.ones(B), torch.full((2, B), 1e4))  # residual < 0 everywhere
    loss, _ = lrn.actor_loss(b, None, cache)
    assert all(g is None or g.abs().sum() == 0 for g in actor_grads(lrn, loss))


def test_actor_update_touches_only_the_policy():
    lrn = make(residual_mode="residual")
    with torch.no_grad():  # make critic and target differ so the Polyak step is visible
        for p in lrn.critic.parameters():
            p.add_(0.01)
    before = {k: [p.clone() for p in m.parameters()] for k, m in lrn.modules().items()}
    lrn.update_actor(batch(), expert(), positive_residual_cache(lrn, None))
    for k, m in lrn.modules().items():
        changed = any(not torch.equal(p, q) for p, q in zip(m.parameters(), before[k]))
        assert changed == (k in ("actor", "critic_target")), k
        assert all(p.grad is None for p in m.parameters()) or k == "actor", k


def test_inverse_regulariser_pulls_policy_towards_inverse_model():
    lrn = make(alpha=0.0, lam=1.0, residual_mode="stop_gradient")
    e = expert()
    dist = lambda: (lrn.actor(e.obs) - lrn.inverse(e.obs, e.next_obs)).pow(2).mean().item()  # noqa: E731
    d0 = dist()
    for _ in range(50):
        lrn.update_actor(batch(), e)
    assert dist() < 0.5 * d0


def test_lambda_zero_is_opolo_x_and_ignores_the_inverse_model():
    def loss_and_grads(lam: float, inverse_scale: float) -> tuple[float, list[torch.Tensor]]:
        lrn = make(lam=lam)
        with torch.no_grad():  # another inverse model: only a loss that reads it can change
            for p in lrn.inverse.parameters():
                p.mul_(inverse_scale)
        loss, metrics = lrn.actor_loss(batch(), expert())
        assert ("actor/inverse_reg" in metrics) == (lam > 0)
        return loss.item(), actor_grads(lrn, loss)

    for lam, reads_it in ((0.0, False), (1.0, True)):
        (a, grads_a), (b, grads_b) = loss_and_grads(lam, 1.0), loss_and_grads(lam, 3.0)
        same = a == b and all(torch.equal(x, y) for x, y in zip(grads_a, grads_b))
        assert same != reads_it, (lam, a, b)


@pytest.mark.parametrize("mode", ["ignore", "terminal"])
def test_done_handling(mode):
    t = batch(terminated=1.0)
    tr = batch(truncated=1.0)
    assert torch.all(done_mask(tr, mode) == 1.0)  # truncation always bootstraps
    assert torch.all(done_mask(t, mode) == (1.0 if mode == "ignore" else 0.0))
    # At true terminations the 'terminal' critic loss does not depend on the target critic.
    losses = []
    for scale in (1.0, 100.0):
        lrn = make(done_mode=mode)
        with torch.no_grad():
            for p in lrn.critic_target.parameters():
                p.mul_(scale)
        losses.append(lrn._critic_step(t)[0]["critic/loss"].item())
    assert (losses[0] == pytest.approx(losses[1])) == (mode == "terminal")


def test_discriminator_separates_two_known_distributions():
    torch.manual_seed(0)
    lrn = OPOLOLearner(OBS, ACT, OPOLOConfig(net=SMALL))
    g = torch.Generator().manual_seed(0)

    def pairs(mu):
        s = mu + 0.3 * torch.randn(64, OBS, generator=g)
        return StatePairs(s, s + 0.1)

    for _ in range(400):
        lrn.update_discriminator(pairs(-1.0), pairs(1.0))
    e, p = pairs(1.0), pairs(-1.0)
    m = lrn.update_discriminator(p, e)
    assert m["disc/accuracy"].item() > 0.95
    assert lrn.reward(e.obs, e.next_obs).mean() > lrn.reward(p.obs, p.next_obs).mean() + 0.5
    # D's normaliser saw expert states only (mean ~ +1), per the released code.
    assert torch.allclose(lrn.disc.norm.mean, torch.full((OBS,), 1.05), atol=0.1)


def test_inverse_model_recovers_actions_of_a_linear_system():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    A = torch.eye(OBS) + 0.1 * torch.randn(OBS, OBS, generator=g)
    Bm = torch.randn(ACT, OBS, generator=g)

    def data(n):
        s = torch.randn(n, OBS, generator=g)
        a = torch.rand(n, ACT, generator=g) * 2 - 1
        return Transitions(s, a, s @ A.T + a @ Bm, torch.zeros(n), torch.zeros(n), torch.zeros(n))

    cfg = dataclasses.replace(OPOLOConfig(net=SMALL), inverse_lr=1e-3, inverse_l2=0.0)
    lrn = OPOLOLearner(OBS, ACT, cfg)
    for _ in range(1500):
        lrn.update_inverse(data(100))
    test = data(500)
    with torch.no_grad():
        err = (lrn.inverse(test.obs, test.next_obs) - test.action).pow(2).mean().item()
    assert err < 0.01  # actions are uniform in [-1, 1]: variance 1/3


def test_discriminator_separates_states_that_differ_by_little_in_raw_units():
    # A balanced pendulum (expert) vs a drifting one: raw differences of ~0.1. The gradient penalty
    # acts in normalised input space, so the 1-Lipschitz constraint does not cap the logit there.
    torch.manual_seed(0)
    lrn = OPOLOLearner(OBS, ACT, OPOLOConfig(net=SMALL))
    g = torch.Generator().manual_seed(1)

    def pairs(mu, sd):
        s = mu + sd * torch.randn(64, OBS, generator=g)
        return StatePairs(s, s + sd * torch.randn(64, OBS, generator=g))

    for _ in range(300):
        lrn.update_discriminator(pairs(0.1, 0.05), pairs(0.0, 0.01))
    m = lrn.update_discriminator(pairs(0.1, 0.05), pairs(0.0, 0.01))
    assert m["disc/accuracy"].item() > 0.9


def test_load_state_dict_keeps_the_configured_learning_rates():
    """A resumed run takes networks, Adam moments and counters from the checkpoint, and its
    learning rates from its own config (a changed lr applies)."""
    a = make(lr=1e-3)
    a.update_critic(batch())
    a.update_inverse(batch())
    b = make(lr=5e-4, disc_lr=2e-4)
    b.load_state_dict(a.state_dict())
    assert [g["lr"] for g in b.critic_opt.param_groups] == [5e-4]
    assert [g["lr"] for g in b.disc_opt.param_groups] == [2e-4]
    for name, opt_a in a.optimizers().items():  # every optimiser's moments and step counts
        moments_a = opt_a.state_dict()["state"]
        moments_b = b.optimizers()[name].state_dict()["state"]
        assert moments_a.keys() == moments_b.keys()
        for k in moments_a:
            for key in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(moments_a[k][key], moments_b[k][key]), (name, k, key)
    assert a.critic_opt.state_dict()["state"] and a.inverse_opt.state_dict()["state"]  # updated above
    for name, module in a.modules().items():  # every network, the target critic's included
        for x, y in zip(module.state_dict().values(), b.modules()[name].state_dict().values()):
            assert torch.equal(x, y), name
    assert [getattr(b, n) for n in b.counter_names] == [getattr(a, n) for n in a.counter_names]
    assert a.critic_steps == 1 and a.inverse_steps == 1


def test_opolo_x_schedules_no_inverse_model_update_and_opolo_does():
    """lam = 0 (OPOLO-x): make_schedule plans no P_I pre-training or P_I steps; lam > 0 plans both."""
    from opolo_ros.algo.config import load_run_config
    from opolo_ros.train.runner import make_schedule

    schedule = {"warmup_steps": 100, "batch_size": 32, "train_freq": 10, "inverse_freq": 20,
                "disc_freq": 20, "inverse_pretrain_steps": 7, "inverse_steps": 3, "disc_steps": 2,
                "gradient_steps": 5}

    def totals(lam: float) -> dict[str, int]:
        plans = make_schedule(load_run_config(None, {"schedule": schedule, "opolo": {"lam": lam}}))
        steps = [plans.plan(n) for n in range(1, 301)]
        return {kind: sum(getattr(p, kind) for p in steps)
                for kind in ("inverse_pretrain", "inverse", "disc", "critic")}

    opolo_x, opolo = totals(0.0), totals(0.1)
    assert opolo_x["inverse_pretrain"] == 0 and opolo_x["inverse"] == 0
    assert opolo["inverse_pretrain"] == 7 and opolo["inverse"] == 3 * 11  # at steps 100, 120, ..., 300
    # the rest of the schedule is the same: the discriminator and the critic still train
    assert opolo_x["disc"] == opolo["disc"] == 2 * 11
    assert opolo_x["critic"] == opolo["critic"] == 5 * 21  # at steps 100, 110, ..., 300


def test_lambda_weighs_the_inverse_regulariser():
    """Not only whether the policy loss reads P_I (above) but with what weight: lam (a mutation test
    set the weight to 1 and only the float64 reference of test_speed_equivalence saw it)."""
    e = expert()
    regs = {}
    for lam in (0.3, 0.6):
        lrn = make(lam=lam)
        _, metrics = lrn.actor_loss(batch(), e)
        regs[lam] = metrics["actor/inverse_reg"].item()
        assert regs[lam] == pytest.approx(lam * losses.inverse_regulariser(
            lrn.actor(e.obs), lrn.inverse(e.obs, e.next_obs), 1.0).item(), rel=1e-5)
        assert regs[lam] > 0
    assert regs[0.6] == pytest.approx(2 * regs[0.3], rel=1e-5)


def test_p_i_normaliser_takes_the_replay_states_and_leaves_d_s_alone():
    lrn = make()
    assert lrn.inverse.norm is not None and lrn.disc.norm is not None  # released: both normalise
    zeros = torch.zeros(B)
    d_count = float(lrn.disc.norm.count)
    lrn.update_inverse(Transitions(torch.full((B, OBS), 4.0), torch.zeros(B, ACT), torch.full((B, OBS), 2.0),
                                   zeros, zeros, zeros))
    assert torch.allclose(lrn.inverse.norm.mean, torch.full((OBS,), 3.0), atol=1e-4)  # s and s'
    assert float(lrn.inverse.norm.count) == pytest.approx(2 * B, abs=1e-3)
    assert float(lrn.disc.norm.count) == d_count


def _runner(policy_delay: int):
    """An UpdateRunner over a replay of states +7 and expert episodes of states -7."""
    import numpy as np

    from opolo_ros.algo.config import ScheduleConfig
    from opolo_ros.algo.schedule import Schedule
    from opolo_ros.data.demos import Episode, ExpertDataset
    from opolo_ros.data.replay import ReplayBuffer
    from opolo_ros.train.runner import UpdateRunner

    replay = ReplayBuffer(OBS, ACT, capacity=128, seed=0)
    n = 64
    replay.add(np.full((n, OBS), 7.0), np.zeros((n, ACT)), np.full((n, OBS), 7.0), np.zeros(n),
               np.zeros(n), np.zeros(n))
    experts = ExpertDataset([Episode(np.full((10, OBS), -7.0, np.float32), 0.0)], OBS, seed=0)
    schedule = Schedule(ScheduleConfig(batch_size=B, policy_delay=policy_delay))
    return UpdateRunner(make(), schedule, replay, experts)


@pytest.mark.parametrize("delay,critic,actor", [(2, 4, 2), (3, 6, 2), (1, 3, 3)])
def test_the_update_runner_runs_each_part_of_a_plan_with_the_policy_delay(delay, critic, actor):
    """The runner is what the schedule's plans become: every count, P_I pre-training included, and
    the policy delay (mutation tests that skipped the pre-training or ignored the delay survived)."""
    from opolo_ros.algo.schedule import Plan

    runner = _runner(delay)
    lrn = runner.learner
    runner.run(Plan(inverse_pretrain=3, disc=2, inverse=1, critic=critic))
    assert (lrn.inverse_steps, lrn.disc_steps, lrn.critic_steps, lrn.actor_steps) == (4, 2, critic, actor)


def test_the_update_runner_trains_d_on_replay_against_expert_states():
    """D separates the replay's transitions (+7) from the expert's (-7), each on its own side: D
    trained on expert against expert survived a mutation test (the learning test passes without
    the adversarial part: with lam 5 the P_I regulariser alone learns InvertedPendulum)."""
    from opolo_ros.algo.schedule import Plan

    runner = _runner(2)
    lrn = runner.learner
    seen = []
    update = lrn.update_discriminator
    lrn.update_discriminator = lambda policy, expert: seen.append((policy, expert)) or update(policy, expert)
    runner.run(Plan(disc=2))
    assert len(seen) == 2
    for policy, expert_pairs in seen:
        assert (policy.obs == 7).all() and (policy.next_obs == 7).all()
        assert (expert_pairs.obs == -7).all() and (expert_pairs.next_obs == -7).all()
