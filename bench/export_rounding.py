"""How far float32 policies are from their exact (float64) function, in ONNX Runtime and in PyTorch.

The exporter's check (opolo_ros/export/onnx_policy.py) lets the ONNX output be off the float64
PyTorch policy by 1e-5 plus ROUNDING_FACTOR times PyTorch's own float32 error. This measures the
ratio of the two errors on random [400, 300] policies with weights scaled up (as training grows
them), on the exporter's verification inputs, in half action ranges.

    .venv/bin/python bench/export_rounding.py > bench/results/export_rounding.txt
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from opolo_ros.algo.networks import Actor
from opolo_ros.export.onnx_policy import export_errors, export_policy, load_policy, verification_inputs
from opolo_ros.train.direct import exit_status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=12)
    p.add_argument("--scales", type=float, nargs="+", default=[1.0, 3.0, 6.0, 10.0])
    args = p.parse_args(argv)
    ratios = []
    print("| seed | obs_dim | weight scale | ONNX vs exact | PyTorch float32 vs exact | ratio |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            obs_dim = (11, 17, 27, 105)[seed % 4]
            for scale in args.scales:
                torch.manual_seed(seed)
                actor = Actor(obs_dim, 6, (400, 300))
                with torch.no_grad():
                    for param in actor.parameters():
                        param.mul_(scale)
                path = export_policy(actor, Path(tmp) / "p.onnx", action_low=-1.0, action_high=1.0,
                                     metadata={"env_id": "random"}, verify=False)
                x = verification_inputs(obs_dim, np.random.default_rng(0))
                with torch.no_grad():
                    pytorch = actor(torch.from_numpy(x)).numpy()
                    exact = actor.double()(torch.from_numpy(x).double()).numpy()
                onnx_err, pytorch_err = export_errors(load_policy(path)(x), pytorch, exact, np.ones(6))
                ratios.append(onnx_err / pytorch_err)
                print(f"| {seed} | {obs_dim} | {scale:g} | {onnx_err:.2e} | {pytorch_err:.2e} "
                      f"| {ratios[-1]:.2f} |")
    print(f"\nratio ONNX error / PyTorch error over {len(ratios)} policies: "
          f"{min(ratios):.2f} to {max(ratios):.2f}, median {float(np.median(ratios)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
