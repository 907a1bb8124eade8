"""Networks: the fused twin critic equals two plain MLPs; running normaliser statistics."""

import torch
from torch import nn

from opolo_ros.algo.networks import RunningNorm, TwinCritic, mlp, soft_update


def test_twin_critic_equals_two_plain_mlps():
    torch.manual_seed(0)
    critic = TwinCritic(5, 2, (8, 6))
    plain = [mlp(7, (8, 6), 1) for _ in range(2)]
    with torch.no_grad():
        for k, net in enumerate(plain):
            linears = [m for m in net if isinstance(m, nn.Linear)]
            for lin, w, b in zip(linears, critic.weights, critic.biases):
                lin.weight.copy_(w[k].T)
                lin.bias.copy_(b[k, 0])
    s, a = torch.randn(10, 5), torch.randn(10, 2)
    q = critic(s, a)
    assert q.shape == (2, 10)
    for k, net in enumerate(plain):
        assert torch.allclose(q[k], net(torch.cat([s, a], -1)).squeeze(-1), atol=1e-6)


def test_twin_critic_init_matches_linear_scale():
    torch.manual_seed(0)
    critic = TwinCritic(17, 6, (400, 300))
    w0 = critic.weights[0]
    bound = 1 / (23 ** 0.5)
    assert w0.abs().max() <= bound and w0.abs().max() > 0.9 * bound
    assert not torch.equal(w0[0], w0[1])  # the two critics start different


def test_running_norm_matches_numpy_statistics():
    torch.manual_seed(0)
    x = torch.randn(1000, 3) * torch.tensor([1.0, 5.0, 0.01]) + torch.tensor([2.0, -1.0, 0.0])
    norm = RunningNorm(3, std_floor=0.1)
    for chunk in x.split(97):
        norm.update(chunk)
    assert torch.allclose(norm.mean, x.mean(0), atol=1e-4)
    assert torch.allclose(norm.var, x.var(0, unbiased=False), rtol=1e-3)
    assert abs(norm.std[2].item() - 0.1) < 1e-7  # floor


def test_soft_update():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    before = a.weight.detach().clone()
    soft_update(a, b, 0.25)
    assert torch.allclose(a.weight, 0.75 * before + 0.25 * b.weight)
