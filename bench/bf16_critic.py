"""Probe: the twin critic's forward + backward with bfloat16 GEMMs on fp32 master weights.

The throughput issue's last untried lever on this CPU (it has AMX bf16: a lone [100, 400] x
[400, 300] GEMM runs 3-5x faster in bf16). Three versions of one step of both critics on
(obs 17 + act 6) -> 400 -> 300 -> 1, each `square().mean().backward()`:

- fp32: `addmm` per layer, as `TwinCritic` runs it;
- bf16-mid: the 400 x 300 layer through a custom autograd function (inputs and grads cast to
  bf16, weight cast once per step as a cache refreshed after each optimiser step would be;
  outputs and gradients back to fp32), the small layers in fp32;
- autocast: `torch.autocast("cpu", bfloat16)` around the forward pass.

Timed interleaved in one process, 1 torch thread, at the batch sizes given (100: the benchmark's
batch; 300: the three critic inputs of OPOLO's DICE loss stacked). A probe, not a learner option.

    .venv/bin/python bench/bf16_critic.py --batch 100 300 --rounds 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd import Function

from opolo_ros.errors import exit_status

BF16 = torch.bfloat16
DIMS = (23, 400, 300, 1)


class Bf16Linear(Function):
    """y = x @ w + b with the GEMMs in bf16; `wb` is w already cast (a per-step cache)."""

    @staticmethod
    def forward(ctx, x, w, b, wb):  # noqa: ANN001, ANN205 (autograd signature)
        xb = x.to(BF16)
        ctx.save_for_backward(xb, wb)
        return torch.mm(xb, wb).float().add_(b)

    @staticmethod
    def backward(ctx, gy):  # noqa: ANN001, ANN205
        xb, wb = ctx.saved_tensors
        gyb = gy.to(BF16)
        gx = torch.mm(gyb, wb.t()).float() if ctx.needs_input_grad[0] else None
        return gx, torch.mm(xb.t(), gyb).float(), gy.sum(0), None


def critics(seed: int = 0) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        shapes = zip(DIMS[:-1], DIMS[1:])
        ws = [(torch.randn(i, o, generator=g) / i ** 0.5).requires_grad_() for i, o in shapes]
        bs = [torch.zeros(o, requires_grad=True) for o in DIMS[1:]]
        out.append((ws, bs))
    return out


def forward(nets: list, x: torch.Tensor, mid_bf16: bool) -> torch.Tensor:
    outs = []
    for ws, bs in nets:
        h = x
        for k, (w, b) in enumerate(zip(ws, bs)):
            if mid_bf16 and k == 1:
                h = Bf16Linear.apply(h, w, b, w.detach().to(BF16))
            else:
                h = torch.addmm(b, h, w)
            if k < len(ws) - 1:
                h = h.relu_()
        outs.append(h)
    return torch.cat(outs, -1)


def step(nets: list, x: torch.Tensor, mode: str) -> None:
    if mode == "autocast":
        with torch.autocast("cpu", dtype=BF16):
            q = forward(nets, x, False)
        q = q.float()
    else:
        q = forward(nets, x, mode == "bf16-mid")
    q.square().mean().backward()


def timed(fn: Callable[[], None], calls: int) -> float:
    for _ in range(10):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[100, 300])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=100, help="steps per timing")
    args = p.parse_args()
    torch.set_num_threads(1)
    nets = critics()
    for batch in args.batch:
        x = torch.randn(batch, DIMS[0])
        for r in range(args.rounds):
            ms = {mode: timed(lambda m=mode, x=x: step(nets, x, m), args.calls)
                  for mode in ("fp32", "bf16-mid", "autocast")}
            print(f"batch {batch} round {r + 1}: " + ", ".join(
                f"{name} {v:.2f} ms ({ms['fp32'] / v:.2f}x)" for name, v in ms.items()), flush=True)
        with torch.no_grad():
            ref, low = forward(nets, x, False), forward(nets, x, True)
        print(f"batch {batch}: Q relative error of bf16-mid {((low - ref).norm() / ref.norm()).item():.1e}")


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
