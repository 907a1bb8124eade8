"""bench/suite.py --report: the table and plots come from the run folders' logs, nothing is run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import suite  # noqa: E402

from opolo_ros.train.logger import RunLogger  # noqa: E402


def test_report_reads_the_logs_and_copies_them_next_to_the_plot(tmp_path: Path, capsys) -> None:
    runs, plots = tmp_path / "runs", tmp_path / "plots"
    log = RunLogger(runs / "InvertedPendulum-v5_opolo_seed0", tensorboard=False)
    for step, score in ((5000, 0.5), (10000, 0.9), (15000, 0.97)):
        log.evaluation({"env_step": step, "return_mean": 1000 * score, "return_std": 1.0,
                        "normalised": score, "wall_s": step / 100})
    low = RunLogger(runs / "InvertedPendulum-v5_opolo_seed1", tensorboard=False)
    low.evaluation({"env_step": 5000, "return_mean": 300.0, "return_std": 1.0, "normalised": 0.3,
                    "wall_s": 50.0})
    argv = ["--tasks", "InvertedPendulum-v5", "--variants", "opolo", "opolo-x", "--seeds", "0", "1",
            "--at", "10000", "20000", "--report", "--run-root", str(runs), "--plots", str(plots),
            "--out", str(tmp_path / "suite.json"), "--after", "5000"]
    assert suite.main(argv) == 0
    out = capsys.readouterr().out
    assert "| InvertedPendulum-v5 | opolo | 0.90 | - |" in out  # 20k not reached: never filled in
    assert "| InvertedPendulum-v5 | opolo-x | - | - |" in out
    assert ("InvertedPendulum-v5 opolo seed 0: last 0.970 at 15000; after 5k: 0.900-0.970, "
            "mean 0.935 (2); first >= 0.90 at 10000") in out
    assert "InvertedPendulum-v5 opolo seed 1: last 0.300 at 5000; never >= 0.90" in out
    cells = json.loads((tmp_path / "suite.json").read_text())["results"]["InvertedPendulum-v5"]
    assert list(cells["opolo"]["0"]) == ["10000"] and cells["opolo-x"]["0"] == {}
    assert (plots / "InvertedPendulum-v5.png").stat().st_size > 1000
    copy = plots / "InvertedPendulum-v5_opolo_seed0" / "eval.csv"
    assert copy.read_text() == log.eval_csv.read_text()

    # the copies are a run root of their own: the same report, drawn again from them
    again = ["--tasks", "InvertedPendulum-v5", "--variants", "opolo", "--seeds", "0", "--at", "10000",
             "--report", "--run-root", str(plots), "--plots", str(plots)]
    assert suite.main(again) == 0
    assert "| InvertedPendulum-v5 | opolo | 0.90 |" in capsys.readouterr().out
    assert copy.read_text() == log.eval_csv.read_text()
