"""OPOLO learns InvertedPendulum-v5 from the 4 shipped state-only expert episodes, in a CI budget.

It cannot show that the discriminator works: with D never trained the same run reaches 1000 too
(the P_I regulariser and the survival bonus suffice here; BENCHMARKS.md, "What the InvertedPendulum
learning test cannot show"). D is tested by unit tests (test_opolo.py, test_losses.py)."""

from pathlib import Path

import pytest

from opolo_ros.algo.config import load_run_config
from opolo_ros.train.direct import train_direct

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_opolo_learns_inverted_pendulum_from_shipped_demos(tmp_path):
    cfg = load_run_config(ROOT / "config" / "inverted_pendulum.yaml", {
        "demos": str(ROOT / "models" / "demos" / "InvertedPendulum-v5"),
        "run_dir": str(tmp_path / "run"), "total_steps": 8000, "eval_every": 0, "eval_episodes": 5,
        "checkpoint_every": 0, "export_every": 0, "progress": False,
        "opolo": {"net": {"hidden": [64, 64]}},
    })
    result = train_direct(cfg, resume=False)
    assert result.expert_return == pytest.approx(1000.0)
    assert result.random_return < 30.0
    # "Well above random": random actions balance for ~8 steps; a learned policy for hundreds.
    assert result.eval_mean >= 300.0, result
    assert (tmp_path / "run" / "policy.onnx").is_file()
