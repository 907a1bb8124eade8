"""bench/ship_expert.py, the queue's last step of an expert run, on a scratch project folder.

Uses the shipped InvertedPendulum expert as the candidate: evaluating it (10 episodes) and recording
4 demonstrations take a few seconds.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import experts_table  # noqa: E402
import ship_expert  # noqa: E402

from opolo_ros.data.bags import read_bag_metadata  # noqa: E402
from opolo_ros.data.demos import load_episodes  # noqa: E402
from opolo_ros.export.onnx_policy import load_policy  # noqa: E402

TASK = "InvertedPendulum-v5"
EXPERT = ROOT / "models" / "experts" / f"{TASK}.onnx"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with a finished expert run and nothing shipped."""
    run = tmp_path / "runs" / "experts" / TASK
    run.mkdir(parents=True)
    shutil.copyfile(EXPERT, run / "policy_best.onnx")
    (run / "eval.csv").write_text("env_step,return_mean\n10000,1000.0\n")
    return tmp_path


def _ship(root: Path, *args: str) -> int:
    return ship_expert.main(["--task", TASK, "--root", str(root), "--episodes", "3", *args])


def test_ships_model_demos_log_and_table(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _ship(project) == 0
    model = project / "models" / "experts" / f"{TASK}.onnx"
    meta = load_policy(model).metadata
    assert meta.env_id == TASK
    assert float(meta.extra["eval_return_mean"]) == pytest.approx(1000.0)  # stamped by evaluate
    episodes = load_episodes(project / "models" / "demos" / TASK)
    assert len(episodes) == 4 and all(ep.obs.shape[1] == 4 for ep in episodes)
    assert read_bag_metadata(project / "models" / "demos" / TASK)["returns"]
    assert (project / "bench" / "results" / "experts" / f"{TASK}_eval.csv").read_text().startswith("env_step")
    table = (project / "models" / "experts" / "README.md").read_text()
    assert f"| {TASK} | >= 1000 | 1000.0 +- 0.0 |" in table
    assert "| Hopper-v5 | >= 3000 | missing |" in table  # the scratch folder has no other expert
    out = capsys.readouterr().out
    assert "shipped (1000.0 >= 1000)" in out and f"bench/results/experts/{TASK}_eval.csv, " in out

    # Again: already shipped, kept as it is.
    stamp = model.stat().st_mtime_ns
    assert _ship(project) == 0
    assert model.stat().st_mtime_ns == stamp
    assert "shipped already" in capsys.readouterr().out

    # Half shipped (demos lost): refused until --replace.
    shutil.rmtree(project / "models" / "demos" / TASK)
    assert _ship(project) == 2
    assert "half shipped" in capsys.readouterr().err
    assert _ship(project, "--replace") == 0
    assert len(load_episodes(project / "models" / "demos" / TASK)) == 4


def test_below_target_ships_nothing(project: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(experts_table.TARGETS, TASK, 1001)
    assert _ship(project) == 1
    assert "below the target 1001" in capsys.readouterr().out
    assert not (project / "models").exists()
    assert not (project / "bench").exists()

    # --below-target ships it, and the table says so.
    assert _ship(project, "--below-target") == 0
    assert "1000.0, BELOW the target 1001" in capsys.readouterr().out
    table = (project / "models" / "experts" / "README.md").read_text()
    assert f"| {TASK} | >= 1001 | 1000.0 +- 0.0 (below target) |" in table
    assert len(load_episodes(project / "models" / "demos" / TASK)) == 4


def test_bad_candidates_exit_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ship_expert.main(["--task", "Hopper-v5", "--root", str(project),
                             "--model", str(EXPERT)]) == 2
    assert "a policy for InvertedPendulum-v5, not Hopper-v5" in capsys.readouterr().err
    (project / "runs" / "experts" / TASK / "policy_best.onnx").unlink()
    assert _ship(project) == 2
    assert "no model at" in capsys.readouterr().err
    assert not (project / "models").exists()
