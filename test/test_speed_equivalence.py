"""The fast update paths give the same updates as the straightforward ones.

The learners' `train_step` reuses the policy forward between the critic and the policy step,
evaluates the twin critic with one GEMM per layer and critic, freezes the critic in the policy step
by detaching its parameters, and uses fused Adam; `compile_critic` runs the critic loss through
torch.compile. Each is checked here against a plain reference written from the losses (separate
forwards, batched `baddbmm` critic, `requires_grad` toggling, foreach Adam). Everything runs in
float64, so that "the same maths" can be checked tightly: reordered float32 sums could flip the sign
of near-zero gradients, which Adam turns into +-lr steps.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from opolo_ros.algo import losses
from opolo_ros.algo.base import LossGraph
from opolo_ros.algo.batch import StatePairs, Transitions
from opolo_ros.algo.config import NetworkConfig, OPOLOConfig, TD3Config
from opolo_ros.algo.networks import TwinCritic
from opolo_ros.algo.opolo import OPOLOLearner
from opolo_ros.algo.td3 import TD3Learner

OBS, ACT, B = 5, 3, 32
SMALL = NetworkConfig(hidden=(48, 40), disc_hidden=(32, 32), inverse_hidden=(32, 32))
STEPS = 6  # critic steps; policy every 2nd
TOL = dict(rtol=1e-9, atol=1e-11)


@pytest.fixture(autouse=True)
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def batches(n: int, seed: int = 1) -> list[tuple[Transitions, StatePairs]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        term = (torch.rand(B, generator=g) < 0.2).double()
        t = Transitions(torch.randn(B, OBS, generator=g), torch.rand(B, ACT, generator=g) * 2 - 1,
                        torch.randn(B, OBS, generator=g), term, torch.zeros(B), torch.randn(B, generator=g))
        e = StatePairs(torch.randn(B, OBS, generator=g) + 0.5, torch.randn(B, OBS, generator=g) + 0.5)
        out.append((t, e))
    return out


def ref_q(critic: TwinCritic, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
    """Both critics with batched matrix multiplies on the stacked weights: [2, B]."""
    x = torch.cat([obs, act], -1).unsqueeze(0).expand(critic.n, -1, -1)
    for k, (w, b) in enumerate(zip(critic.weights, critic.biases)):
        x = torch.baddbmm(b, x, w)
        if k < len(critic.weights) - 1:
            x = torch.relu(x)
    return x.squeeze(-1)


def polyak(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.mul_(1 - tau).add_(tau * s)


class ReferenceOPOLO:
    """One OPOLO critic step (+ policy step every 2nd) written out plainly on a learner's modules."""

    def __init__(self, lrn: OPOLOLearner) -> None:
        self.lrn = lrn
        self.critic_opt = torch.optim.Adam(lrn.critic.parameters(), lr=lrn.cfg.lr, foreach=True)
        self.actor_opt = torch.optim.Adam(lrn.actor.parameters(), lr=lrn.cfg.lr, foreach=True)
        self.steps = 0

    def step(self, t: Transitions, e: StatePairs) -> None:
        lrn, cfg = self.lrn, self.lrn.cfg
        mask = torch.ones_like(t.terminated) if cfg.done_mode == "ignore" else 1 - t.terminated
        with torch.no_grad():
            r = losses.reward_from_logits(lrn.disc(t.obs, t.next_obs), cfg.reward_eps_low,
                                          cfg.reward_eps_high)
            next_q = ref_q(lrn.critic_target, t.next_obs, lrn.actor(t.next_obs)).min(0).values
            target = r + cfg.gamma * mask * next_q
            a0 = lrn.actor(t.obs)
        q_sa = ref_q(lrn.critic, t.obs, t.action)
        loss = losses.dice_critic_loss(q_sa, target, ref_q(lrn.critic, t.obs, a0), cfg.alpha, cfg.gamma,
                                       cfg.f_q)
        self.critic_opt.zero_grad()
        loss.backward()
        policy_due = (self.steps + 1) % 2 == 0
        simultaneous = cfg.policy_update == "simultaneous"
        if policy_due and simultaneous:  # policy gradient from the critic before its step
            self.actor_backward(t, e, r, mask, q_sa.detach())
        self.critic_opt.step()
        self.steps += 1
        if not policy_due:
            return
        if not simultaneous:
            self.actor_backward(t, e, r, mask, q_sa.detach())
        self.actor_opt.step()
        polyak(lrn.critic_target, lrn.critic, cfg.tau)

    def actor_backward(self, t: Transitions, e: StatePairs, r: torch.Tensor, mask: torch.Tensor,
                       q_sa: torch.Tensor) -> None:
        lrn, cfg = self.lrn, self.lrn.cfg
        lrn.critic.requires_grad_(False)
        residual = None
        if cfg.residual_mode == "residual":
            q_next = ref_q(lrn.critic, t.next_obs, lrn.actor(t.next_obs))
            residual = r + cfg.gamma * mask * q_next - q_sa
        loss = losses.dice_actor_loss(ref_q(lrn.critic, t.obs, lrn.actor(t.obs)), cfg.alpha, cfg.gamma,
                                      residual, cfg.f_q, cfg.residual_clip)
        if cfg.lam > 0:
            loss = loss + losses.inverse_regulariser(lrn.actor(e.obs), lrn.inverse(e.obs, e.next_obs),
                                                     cfg.lam)
        self.actor_opt.zero_grad()
        loss.backward()
        lrn.critic.requires_grad_(True)


def opolo(**kw) -> OPOLOLearner:
    net = dataclasses.replace(SMALL, **{k: kw.pop(k) for k in ("fused_adam",) if k in kw})
    torch.manual_seed(0)
    lrn = OPOLOLearner(OBS, ACT, OPOLOConfig(net=net, **kw))
    with torch.no_grad():  # a trained-looking D and P_I, and a target that differs from the critic
        for p in [*lrn.disc.parameters(), *lrn.inverse.parameters(), *lrn.critic_target.parameters()]:
            p.add_(0.05 * torch.randn_like(p))
    lrn.disc.norm.update(torch.randn(64, OBS) * 2 + 1)
    lrn.inverse.norm.update(torch.randn(64, OBS) - 1)
    return lrn


def assert_same_modules(a, b, **tol) -> None:
    for name, ma in a.modules().items():
        mb = b.modules()[name]
        for (pn, pa), pb in zip(ma.state_dict().items(), mb.state_dict().values()):
            diff = (pa - pb).abs().max()
            assert torch.allclose(pa, pb, **(tol or TOL)), f"{name}.{pn}: max diff {diff:.3g}"


@pytest.mark.parametrize("policy_update", ["sequential", "simultaneous"])
@pytest.mark.parametrize("residual_mode", ["residual", "stop_gradient"])
@pytest.mark.parametrize("lam", [0.1, 0.0])
def test_opolo_train_step_equals_reference(residual_mode, lam, policy_update):
    kw = dict(residual_mode=residual_mode, lam=lam, policy_update=policy_update)
    fast, plain = opolo(**kw), opolo(**kw)
    ref = ReferenceOPOLO(plain)
    for t, e in batches(STEPS):
        fast.train_step(t, e, policy_delay=2)
        ref.step(t, e)
    assert_same_modules(fast, plain)
    fresh = opolo(**kw)
    changed = any(not torch.equal(p, q) for p, q in zip(fast.actor.parameters(), fresh.actor.parameters()))
    assert changed and fast.critic_steps == STEPS and fast.actor_steps == STEPS // 2


def test_policy_update_orders_differ():
    """The option is not inert: sequential and simultaneous updates part after the first policy step."""
    seq, sim = opolo(policy_update="sequential"), opolo(policy_update="simultaneous")
    for t, e in batches(2):
        seq.train_step(t, e, policy_delay=2)
        sim.train_step(t, e, policy_delay=2)
    assert all(torch.equal(p, q) for p, q in zip(seq.critic.parameters(), sim.critic.parameters()))
    assert not torch.allclose(next(seq.actor.parameters()), next(sim.actor.parameters()), **TOL)


def test_train_step_equals_separate_critic_and_actor_updates():
    """The fused step (shared policy forward) against the public step-by-step methods."""
    fast, slow = opolo(residual_mode="residual"), opolo(residual_mode="residual")
    for k, (t, e) in enumerate(batches(STEPS)):
        fast.train_step(t, e, policy_delay=2)
        _, cached = slow._critic_step(t)
        if k % 2:
            slow.update_actor(t, e, cached)
    assert_same_modules(fast, slow)


def test_fused_adam_equals_foreach_adam_for_every_part():
    fused, foreach = opolo(fused_adam=True), opolo(fused_adam=False)
    assert fused.critic_opt.defaults["fused"] and not foreach.critic_opt.defaults["fused"]
    for k, (t, e) in enumerate(batches(STEPS)):
        for lrn in (fused, foreach):
            torch.manual_seed(k)  # the gradient-penalty interpolation draws from the global RNG
            lrn.update_discriminator(t, e)
            lrn.update_inverse(t)
            lrn.train_step(t, e, policy_delay=2)
    assert_same_modules(fused, foreach)


def test_twin_critic_first_and_detached_parameters():
    torch.manual_seed(0)
    critic = TwinCritic(OBS, ACT, (16, 8))
    obs, act = torch.randn(B, OBS), torch.randn(B, ACT, requires_grad=True)
    assert torch.allclose(critic(obs, act), ref_q(critic, obs, act), **TOL)
    assert torch.allclose(critic(obs, act, first=1), ref_q(critic, obs, act)[:1], **TOL)
    q = critic(obs, act, detach_params=True)
    (g,) = torch.autograd.grad(q.sum(), act)
    (g_ref,) = torch.autograd.grad(ref_q(critic, obs, act).sum(), act)
    assert torch.allclose(g, g_ref, **TOL)
    critic(obs, act, detach_params=True).sum().backward()
    assert all(p.grad is None for p in critic.parameters())


def test_td3_train_step_equals_reference():
    cfg = TD3Config(net=SMALL)
    torch.manual_seed(0)
    fast = TD3Learner(OBS, ACT, cfg)
    torch.manual_seed(0)
    plain = TD3Learner(OBS, ACT, cfg)
    c_opt = torch.optim.Adam(plain.critic.parameters(), lr=cfg.lr, foreach=True)
    a_opt = torch.optim.Adam(plain.actor.parameters(), lr=cfg.lr, foreach=True)
    for k, (t, _) in enumerate(batches(STEPS)):
        torch.manual_seed(k)  # target-policy smoothing noise
        fast.train_step(t, None, policy_delay=2)
        torch.manual_seed(k)
        with torch.no_grad():
            noise = (torch.randn_like(t.action) * cfg.target_noise).clamp(-cfg.target_noise_clip,
                                                                            cfg.target_noise_clip)
            next_a = (plain.actor_target(t.next_obs) + noise).clamp(-1, 1)
            y = t.reward + cfg.gamma * (1 - t.terminated) * ref_q(plain.critic_target, t.next_obs,
                                                                   next_a).min(0).values
        c_opt.zero_grad()
        losses.td3_critic_loss(ref_q(plain.critic, t.obs, t.action), y).backward()
        c_opt.step()
        if k % 2:
            plain.critic.requires_grad_(False)
            a_opt.zero_grad()
            losses.td3_actor_loss(ref_q(plain.critic, t.obs, plain.actor(t.obs))[0]).backward()
            a_opt.step()
            plain.critic.requires_grad_(True)
            polyak(plain.critic_target, plain.critic, cfg.tau)
            polyak(plain.actor_target, plain.actor, cfg.tau)
    assert_same_modules(fast, plain)


def test_loss_graph_falls_back_to_eager_when_compiled_graph_fails():
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    graph = LossGraph(lambda x: ((w * x).sum(),), compile=False)

    def broken(*_):
        raise RuntimeError("no C++ compiler")

    graph.compiled = broken  # as if torch.compile had failed on first use
    with pytest.warns(RuntimeWarning, match="running it eagerly"):
        (loss,) = graph.backward(opt, torch.tensor([1.0, 2.0, 3.0]))
    assert loss.item() == 6.0 and torch.equal(w.grad, torch.tensor([1.0, 2.0, 3.0]))
    assert graph.compiled is None  # eager from now on



def test_a_compiled_backward_that_fails_part_way_leaves_no_input_gradient():
    """The simultaneous policy update reads pi(s0)'s gradient from the critic's backward pass: one
    that failed part-way left a partial gradient there, which the eager retry added to (a review)."""
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    graph = LossGraph(lambda inputs: ((w * inputs[0]).sum(),), compile=False)

    def fails_in_backward(inputs):
        (5 * inputs[0]).sum().backward()  # a partial gradient reaches the input, then the failure
        raise RuntimeError("backward failed")

    graph.compiled = fails_in_backward
    with pytest.warns(RuntimeWarning, match="running it eagerly"):
        graph.backward(opt, (x,))
    assert torch.equal(x.grad, torch.ones(3))  # d(w . x)/dx alone


@pytest.mark.slow
@pytest.mark.parametrize("policy_update", ["sequential", "simultaneous"])
def test_compiled_critic_loss_equals_eager(policy_update):
    """torch.compile of the critic loss (about half a minute to compile on a small CPU); in the
    simultaneous update the compiled graph also differentiates with respect to pi(s0)."""
    compiled = opolo(compile_critic=True, policy_update=policy_update)
    eager = opolo(policy_update=policy_update)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="torch.compile of the")  # no silent fallback
        for t, e in batches(STEPS):
            compiled.train_step(t, e, policy_delay=2)
            eager.train_step(t, e, policy_delay=2)
    assert compiled._critic_graph.compiled is not None
    assert_same_modules(compiled, eager, rtol=1e-7, atol=1e-9)
