"""Networks: policy, fused twin critic, discriminator D(s, s'), inverse action model P_I(s, s').

The twin critic is one module holding both Q networks as stacked weights: one parameter group for
the optimiser and one Polyak update for both. Actions inside the learner live in [-1, 1] (the tanh
range); scaling to the environment's bounds happens at the environment boundary and inside the
exported ONNX graph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden:
        layers += [nn.Linear(last, h), act()]
        last = h
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


class RunningNorm(nn.Module):
    """Running mean/std of a feature vector (Chan et al. parallel update), with a std floor.

    Stored as buffers so it travels with `state_dict` (checkpoints) and can be baked into ONNX.
    """

    def __init__(self, dim: int, std_floor: float = 0.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))
        self.std_floor = std_floor

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, self.mean.shape[0])
        n = x.shape[0]
        if n == 0:
            return
        x = x.double()  # the batch's variance of float32 values overflows float32 from |x| ~ 1e19
        b_mean = x.mean(0)
        b_var = x.var(0, unbiased=False)
        total = self.count + n
        mean, var = self.mean.double(), self.var.double()
        delta = b_mean - mean
        frac = float(n / total)
        m2 = var * float(self.count) + b_var * n + delta.pow(2) * float(self.count) * frac
        self.mean.copy_(mean + delta * frac)
        self.var.copy_(m2 / float(total))
        self.count.copy_(total)

    @property
    def std(self) -> torch.Tensor:
        return self.var.sqrt().clamp_min(max(self.std_floor, 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class Actor(nn.Module):
    """Deterministic policy: MLP with ReLU hidden layers and tanh output in [-1, 1]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.net = mlp(obs_dim, hidden, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class TwinCritic(nn.Module):
    """Two Q(s, a) MLPs held as stacked weights ([n, in, out], [n, 1, out]); returns shape [n, batch].

    One parameter group for the optimiser and one Polyak update for both critics. The forward pass
    runs one `addmm` per layer and critic on views of the stacked weights: on CPU at these sizes
    (batch 100-400, [400, 300]) MKL's plain GEMM is faster than its batched `baddbmm`, mostly in
    the backward pass (bench/profile_update.py).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n: int = 2) -> None:
        super().__init__()
        dims = [obs_dim + act_dim, *hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i, o in zip(dims[:-1], dims[1:]):
            w = torch.empty(n, i, o)
            b = torch.empty(n, 1, o)
            bound = 1.0 / math.sqrt(i)  # same init as nn.Linear
            for k in range(n):
                nn.init.kaiming_uniform_(w[k].T, a=math.sqrt(5))
            nn.init.uniform_(b, -bound, bound)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
        self.n = n

    def forward(self, obs: torch.Tensor, act: torch.Tensor, detach_params: bool = False,
                first: int | None = None) -> torch.Tensor:
        """Q_j(obs, act) for every critic j (or the `first` ones only), shape [n, batch].

        With `detach_params` the parameters enter as constants: gradients reach `obs`/`act` only
        (the policy step), and no weight gradient is computed or stored.
        """
        ws, bs = list(self.weights), list(self.biases)
        if detach_params:
            ws, bs = [w.detach() for w in ws], [b.detach() for b in bs]
        x = torch.cat([obs, act], dim=-1)
        per_w = [w.unbind(0) for w in ws]
        per_b = [b.unbind(0) for b in bs]
        last = len(ws) - 1
        outs = []
        for j in range(self.n if first is None else first):
            h = x
            for k in range(last + 1):
                h = torch.addmm(per_b[k][j], h, per_w[k][j])
                if k < last:
                    h = h.relu_()  # in place: addmm's backward does not need its output
            outs.append(h)
        return torch.cat(outs, dim=-1).T


class Discriminator(nn.Module):
    """D(s, s') as a logit; inputs optionally normalised with statistics of expert batches.

    `inputs` (normalisation) and `logits` (the network) are separate so that the gradient penalty
    acts in normalised input space: a unit-gradient constraint on raw states would cap how fast
    the logit can change across the small state differences that separate expert from agent.
    """

    def __init__(self, obs_dim: int, hidden: Sequence[int], normalize: bool, std_floor: float) -> None:
        super().__init__()
        self.norm = RunningNorm(obs_dim, std_floor) if normalize else None
        self.net = mlp(2 * obs_dim, hidden, 1, act=nn.Tanh)

    def inputs(self, s: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            s, s2 = self.norm(s), self.norm(s2)
        return torch.cat([s, s2], dim=-1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)

    def forward(self, s: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        return self.logits(self.inputs(s, s2))


class InverseModel(nn.Module):
    """Deterministic P_I(s, s') -> a in [-1, 1] units (linear output), optional input normalisation."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], normalize: bool,
                 std_floor: float) -> None:
        super().__init__()
        self.norm = RunningNorm(obs_dim, std_floor) if normalize else None
        self.net = mlp(2 * obs_dim, hidden, act_dim, act=nn.Tanh)

    def forward(self, s: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            s, s2 = self.norm(s), self.norm(s2)
        return self.net(torch.cat([s, s2], dim=-1))


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging target <- (1 - tau) target + tau source, fused over all tensors."""
    t = list(target.parameters())
    s = list(source.parameters())
    torch._foreach_lerp_(t, s, tau)
