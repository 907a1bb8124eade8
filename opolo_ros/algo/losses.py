"""OPOLO and TD3 losses as pure functions of tensors.

Conventions: twin-critic values have shape [2, batch]; rewards, masks and targets have shape [batch].
Each function returns a scalar loss; nothing here touches networks' parameters or optimisers, except
`gradient_penalty`, which needs the discriminator as a function to differentiate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F


def f_star(y: torch.Tensor, q: float = 2.0) -> torch.Tensor:
    """Convex conjugate of f(x) = |x|^p / p, that is f*(y) = |y|^q / q with 1/p + 1/q = 1."""
    if q == 2.0:
        return 0.5 * y * y
    return y.abs().pow(q) / q


def bellman_target(reward: torch.Tensor, next_q: torch.Tensor, mask: torch.Tensor, gamma: float
                   ) -> torch.Tensor:
    """r + gamma * mask * Q(s', a'); mask is 0 at true terminations (or all ones: no done handling)."""
    return reward + gamma * mask * next_q


def reward_from_logits(logits: torch.Tensor, eps_low: float = 1e-4, eps_high: float = 1e-8
                       ) -> torch.Tensor:
    """r(s, s') = -log(1 - D(s, s')), with 1 - D clipped to [eps_low, 1 - eps_high].

    Computed as -clamp(logsigmoid(-logit)) so that it is exact for large |logit|.
    """
    log_one_minus_d = F.logsigmoid(-logits)
    lo, hi = math.log(eps_low), math.log1p(-eps_high)
    return -log_one_minus_d.clamp(lo, hi)


def bernoulli_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean entropy of Bernoulli(sigmoid(logits))."""
    p = torch.sigmoid(logits)
    return ((1.0 - p) * logits - F.logsigmoid(logits)).mean()


def discriminator_loss(expert_logits: torch.Tensor, policy_logits: torch.Tensor,
                       entropy_coef: float = 1e-3) -> torch.Tensor:
    """GAN loss with expert = 1, replay = 0, minus an entropy bonus (released code)."""
    bce_e = F.binary_cross_entropy_with_logits(expert_logits, torch.ones_like(expert_logits))
    bce_p = F.binary_cross_entropy_with_logits(policy_logits, torch.zeros_like(policy_logits))
    entropy = bernoulli_entropy(torch.cat([expert_logits, policy_logits]))
    return bce_e + bce_p - entropy_coef * entropy


def gradient_penalty(disc: Callable[[torch.Tensor], torch.Tensor], expert: torch.Tensor,
                     policy: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """mean((|grad_x D(x)| - 1)^2) at x = eps * expert + (1 - eps) * policy (WGAN-GP / DAC).

    `expert`/`policy` are D's (normalised, concatenated) inputs; `disc` maps them to logits.
    """
    x = (eps * expert + (1 - eps) * policy).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(disc(x).sum(), x, create_graph=True)
    return (grad.norm(dim=-1) - 1.0).pow(2).mean()


def inverse_model_loss(pred: torch.Tensor, action: torch.Tensor,
                       weights: list[torch.Tensor] | tuple[torch.Tensor, ...] = (),
                       l2: float = 0.0) -> torch.Tensor:
    """MSE of the deterministic P_I (max likelihood under a fixed-variance Gaussian) + l2 * sum |W|^2 / 2."""
    loss = F.mse_loss(pred, action)
    if l2 and weights:
        loss = loss + l2 * 0.5 * sum(w.pow(2).sum() for w in weights)
    return loss


def dice_critic_loss(q_sa: torch.Tensor, target: torch.Tensor, q_init: torch.Tensor, alpha: float,
                     gamma: float, f_q: float = 2.0) -> torch.Tensor:
    """Critic side of the saddle point: min_Q 2a(1-g) E[min_j Q_j(s0, pi(s0))] + sum_j E[f*(y - Q_j(s,a))].

    q_sa: [2, B] Q_j(s, a); target: [B] stop-gradient r + gamma Q_targ(s', pi(s')); q_init: [2, B]
    Q_j(s0, pi(s0)) with pi detached.
    """
    init_term = 2.0 * alpha * (1.0 - gamma) * q_init.min(0).values.mean()
    residual = target.unsqueeze(0) - q_sa
    return init_term + f_star(residual, f_q).mean(-1).sum()


def clip_residual(residual: torch.Tensor, clip: float) -> torch.Tensor:
    """clamp(delta, 0, clip) in value. Its gradient is 0 below 0 (the paper clips the residual to
    above 0 for the policy gradient) and 1 above it, also beyond `clip`: there f*(.) passes on
    f*'(clip), as AlgaeDICE's saturating clip does, where a plain clamp would drop the largest
    residuals' gradient altogether."""
    positive = residual.clamp(min=0.0)
    return positive - (positive - clip).clamp(min=0.0).detach()


def dice_actor_loss(q_init: torch.Tensor | None, alpha: float, gamma: float,
                    residual: torch.Tensor | None = None, f_q: float = 2.0,
                    residual_clip: float = 100.0) -> torch.Tensor:
    """Policy side: max_pi 2a(1-g) E[min_j Q_j(s0, pi(s0))] + sum_j E[f*(clip(delta_j, 0, c))].

    `residual` is delta_j = r + gamma Q_j(s', pi(s')) - Q_j(s, a), shape [2, B], carrying gradient
    to pi through Q_j(s', pi(s')) (the paper / AlgaeDICE form); None drops the term, which is what
    the released code's stop-gradient form amounts to (its clipped term has no policy gradient).
    The clip is :func:`clip_residual`'s: no gradient below 0, a saturated one above `c`.
    `q_init` None leaves the s0 term out (the caller adds it, see `linear_surrogate`).
    """
    terms = []
    if q_init is not None:
        terms.append(-2.0 * alpha * (1.0 - gamma) * q_init.min(0).values.mean())
    if residual is not None:
        terms.append(-f_star(clip_residual(residual, residual_clip), f_q).mean(-1).sum())
    if not terms:
        raise ValueError("dice_actor_loss needs q_init, residual or both")
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def linear_surrogate(x: torch.Tensor, grad: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A scalar equal to `value` whose gradient with respect to `x` is `grad` (first order).

    Lets one backward pass serve two losses: the gradient a loss has already sent to an input is
    passed on to whatever produced that input, at the cost of one multiply-add.
    """
    return value.detach() + (grad.detach() * (x - x.detach())).sum()


def inverse_regulariser(policy_action: torch.Tensor, inverse_action: torch.Tensor, lam: float
                        ) -> torch.Tensor:
    """lambda * E_(s,s')~expert[(pi(s) - P_I(s, s'))^2]: the deterministic form of -log pi(P_I(s,s')|s)."""
    return lam * F.mse_loss(policy_action, inverse_action.detach())


def td3_critic_loss(q_sa: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """sum_j MSE(Q_j(s, a), y) with y = r + gamma * mask * min_j Q_targ_j(s', pi_targ(s') + noise)."""
    return (q_sa - target.unsqueeze(0)).pow(2).mean(-1).sum()


def td3_actor_loss(q1_pi: torch.Tensor) -> torch.Tensor:
    """-E[Q_1(s, pi(s))]."""
    return -q1_pi.mean()
