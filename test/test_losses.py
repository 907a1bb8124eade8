"""Each loss against values computed by hand on tiny tensors."""

import math

import pytest
import torch

from opolo_ros.algo import losses

T = torch.tensor


def test_f_star_quadratic_and_pq_family():
    y = T([-2.0, 1.0, 3.0])
    assert torch.allclose(losses.f_star(y, 2.0), T([2.0, 0.5, 4.5]))
    assert torch.allclose(losses.f_star(y, 3.0), T([8 / 3, 1 / 3, 9.0]))
    assert torch.allclose(losses.f_star(y, 1.5), y.abs() ** 1.5 / 1.5)


def test_bellman_target_masks_terminals():
    out = losses.bellman_target(T([1.0, 2.0]), T([10.0, 20.0]), T([1.0, 0.0]), 0.5)
    assert torch.allclose(out, T([6.0, 2.0]))
    # gamma 0.5 is also 1 - gamma: 0.9 tells gamma from 1 - gamma (a mutation test's survivor)
    out = losses.bellman_target(T([1.0, 2.0]), T([10.0, 20.0]), T([1.0, 0.0]), 0.9)
    assert torch.allclose(out, T([10.0, 2.0]))


def test_reward_is_minus_log_one_minus_d_with_clipping():
    """r = -log(1 - D), with 1 - D clipped to [eps_low, 1 - eps_high]: both clips are the exact floor/cap."""
    r = losses.reward_from_logits(T([0.0, 100.0, -100.0, 2.0, -1e4]))
    assert r[0].item() == pytest.approx(math.log(2.0), rel=1e-6)
    assert r[1].item() == pytest.approx(-math.log(1e-4), rel=1e-5)  # 1 - D clipped at 1e-4
    floor = -math.log1p(-1e-8)  # 1 - D clipped at 1 - 1e-8: r never below ~1e-8 (unclipped: ~0)
    assert r[2].item() == pytest.approx(floor, rel=1e-3) and r[4].item() == pytest.approx(floor, rel=1e-3)
    d = 1 / (1 + math.exp(-2.0))
    assert r[3].item() == pytest.approx(-math.log(1 - d), rel=1e-6)
    # a larger eps_high: the floor -log(1 - 1e-3) ~ 1.0005e-3 takes over at logits below about -6.9
    logits = T([-10.0, -100.0, -5.0])
    r = losses.reward_from_logits(logits, eps_high=1e-3)
    floor = -math.log1p(-1e-3)
    assert r[0].item() == pytest.approx(floor, rel=1e-3) and r[1].item() == pytest.approx(floor, rel=1e-3)
    assert r[2].item() == pytest.approx(math.log1p(math.exp(-5.0)), rel=1e-5)  # ~6.7e-3: not clipped
    r64 = losses.reward_from_logits(logits.double(), eps_low=0.5, eps_high=1e-3)  # the floor in float64 too
    assert r64[1].item() == pytest.approx(floor, rel=1e-9) and r64[2].item() == pytest.approx(
        math.log1p(math.exp(-5.0)), rel=1e-9)
    # and eps_low caps r at -log(eps_low)
    assert losses.reward_from_logits(T([3.0]), eps_low=0.5).item() == pytest.approx(math.log(2.0), rel=1e-6)


def test_bernoulli_entropy_and_discriminator_loss():
    assert losses.bernoulli_entropy(T([0.0, 0.0])).item() == pytest.approx(math.log(2), rel=1e-6)

    def entropy(p: float) -> float:
        return -p * math.log(p) - (1 - p) * math.log(1 - p)

    # away from logit 0, where the (1 - p) * logit term counts: p = sigmoid(2), sigmoid(-1)
    p1, p2 = 1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(1.0))
    assert losses.bernoulli_entropy(T([2.0, -1.0])).item() == pytest.approx(
        (entropy(p1) + entropy(p2)) / 2, rel=1e-6)
    loss = losses.discriminator_loss(T([0.0]), T([0.0]), entropy_coef=1e-3)
    assert loss.item() == pytest.approx(2 * math.log(2) - 1e-3 * math.log(2), rel=1e-6)
    # confident and right: expert logit 10, policy logit -10 -> small loss
    good = losses.discriminator_loss(T([10.0]), T([-10.0]), entropy_coef=0.0)
    assert good.item() == pytest.approx(2 * math.log1p(math.exp(-10)), rel=1e-2)  # float32


def test_gradient_penalty_of_a_linear_discriminator():
    def disc(x):  # D = 3 x0 + 4 x1: |grad| = 5 everywhere -> (5 - 1)^2 = 16
        return 3 * x[:, 0] + 4 * x[:, 1]

    gp = losses.gradient_penalty(disc, torch.randn(5, 2), torch.randn(5, 2), torch.rand(5, 1))
    assert gp.item() == pytest.approx(16.0, rel=1e-6)


def test_gradient_penalty_is_taken_at_the_interpolated_point():
    def disc(x):  # D = |x|^2: grad 2x, so |grad| tells where it was taken
        return x.pow(2).sum(dim=-1)

    expert, policy = T([[1.0, 0.0], [0.0, 2.0]]), T([[0.0, 1.0], [0.0, 0.0]])
    eps = T([[0.25], [0.5]])
    # x = eps * expert + (1 - eps) * policy = (0.25, 0.75), (0, 1): |grad| = 2 sqrt(0.625), 2
    expected = ((2 * math.sqrt(0.625) - 1) ** 2 + (2.0 - 1) ** 2) / 2
    assert losses.gradient_penalty(disc, expert, policy, eps).item() == pytest.approx(expected, rel=1e-6)


def test_gradient_penalty_is_zero_for_a_unit_gradient_and_differentiable():
    w = torch.tensor([0.6, 0.8], requires_grad=True)
    gp = losses.gradient_penalty(lambda x: x @ w, torch.randn(4, 2), torch.randn(4, 2), torch.rand(4, 1))
    assert gp.item() == pytest.approx(0.0, abs=1e-10)
    gp.backward()
    assert w.grad is not None


def test_inverse_model_loss_mse_plus_l2():
    loss = losses.inverse_model_loss(T([[1.0, 2.0]]), T([[0.0, 0.0]]), [T([[1.0, 2.0]])], l2=0.1)
    assert loss.item() == pytest.approx(2.5 + 0.1 * 0.5 * 5.0)
    assert losses.inverse_model_loss(T([[1.0, 2.0]]), T([[0.0, 0.0]])).item() == pytest.approx(2.5)


def test_dice_critic_loss_by_hand():
    q_sa = T([[1.0, 2.0], [3.0, 4.0]])
    target = T([2.0, 2.0])
    q_init = T([[1.0, 5.0], [3.0, 0.0]])  # min over critics [1, 0], mean 0.5
    # 2 * 0.5 * (1 - 0.9) * 0.5 = 0.05; residuals c1 [1, 0] -> 0.25; c2 [-1, -2] -> 1.25
    loss = losses.dice_critic_loss(q_sa, target, q_init, alpha=0.5, gamma=0.9)
    assert loss.item() == pytest.approx(0.05 + 0.25 + 1.25)


def test_dice_critic_loss_with_alpha_1_is_the_papers_objective_per_critic():
    """The paper's J = (1 - g) E[Q(s0, pi(s0))] + E[f*(y - Q(s, a))] for one critic; the twin
    critics' residual terms are summed, so with equal critics alpha = 1 (not 0.5) is twice J."""
    q = T([0.3, -1.2, 2.0])
    target, q_init = T([1.0, 0.5, 1.5]), T([0.7, 0.1, -0.4])
    gamma = 0.99
    paper = (1 - gamma) * q_init.mean() + (0.5 * (target - q) ** 2).mean()
    twins = losses.dice_critic_loss(torch.stack([q, q]), target, torch.stack([q_init, q_init]),
                                    alpha=1.0, gamma=gamma)
    assert twins.item() == pytest.approx(2 * paper.item())


def test_dice_actor_loss_by_hand_with_clipping():
    q_init = T([[1.0, 5.0], [3.0, 0.0]])
    residual = T([[-1.0, 3.0], [200.0, 0.5]])  # clip to [0, 100]: [[0, 3], [100, 0.5]]
    loss = losses.dice_actor_loss(q_init, alpha=0.5, gamma=0.9, residual=residual, residual_clip=100.0)
    expected = -0.05 - ((0.0 + 4.5) / 2 + (5000.0 + 0.125) / 2)
    assert loss.item() == pytest.approx(expected)
    assert losses.dice_actor_loss(q_init, alpha=0.5, gamma=0.9).item() == pytest.approx(-0.05)
    only_residual = losses.dice_actor_loss(None, alpha=0.5, gamma=0.9, residual=residual)
    assert only_residual.item() == pytest.approx(expected + 0.05)
    with pytest.raises(ValueError):
        losses.dice_actor_loss(None, alpha=0.5, gamma=0.9)


def test_linear_surrogate_has_the_given_value_and_gradient():
    x = T([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    grad = T([[0.25, 1.0], [-2.0, 0.0]])
    s = losses.linear_surrogate(x * 2.0, grad, T(7.5))
    assert s.item() == 7.5
    s.backward()
    assert torch.equal(x.grad, 2.0 * grad)  # chain rule through x * 2


def test_inverse_regulariser_is_weighted_mse_with_no_gradient_to_pi_i():
    a_pi = T([[0.5, -0.5]], requires_grad=True)
    a_inv = T([[0.0, 0.5]], requires_grad=True)
    reg = losses.inverse_regulariser(a_pi, a_inv, lam=0.1)
    assert reg.item() == pytest.approx(0.1 * (0.25 + 1.0) / 2)
    reg.backward()
    assert a_pi.grad is not None and a_inv.grad is None


def test_td3_losses_by_hand():
    q_sa = T([[1.0, 2.0], [3.0, 4.0]])
    assert losses.td3_critic_loss(q_sa, T([2.0, 2.0])).item() == pytest.approx(0.5 + 2.5)
    assert losses.td3_actor_loss(T([1.0, 3.0])).item() == pytest.approx(-2.0)


def test_the_residual_clip_cuts_the_gradient_below_zero_and_saturates_it_above_the_clip():
    """d/d delta of -f*(clip(delta)) with f*(y) = y^2 / 2: 0 for delta < 0, -delta inside [0, c],
    -c above c (a plain clamp gave 0 there: the largest residuals taught the policy nothing)."""
    residual = T([[-1.0, 3.0], [150.0, 0.5]]).requires_grad_()
    loss = losses.dice_actor_loss(None, alpha=0.5, gamma=0.9, residual=residual, residual_clip=100.0)
    assert loss.item() == pytest.approx(-((0.0 + 4.5) / 2 + (5000.0 + 0.125) / 2))
    loss.backward()
    torch.testing.assert_close(residual.grad, T([[0.0, -3.0], [-100.0, -0.5]]) / 2)
    unclipped = T([[150.0]]).requires_grad_()
    losses.dice_actor_loss(None, 0.5, 0.9, unclipped, residual_clip=float("inf")).backward()
    assert unclipped.grad.item() == -150.0
