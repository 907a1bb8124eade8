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
    assert "| InvertedPendulum-v5 | opolo | 0.90 (n=1 of 2) | - |" in out  # 20k not reached: never filled in
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


def _log(run: Path, rows: list[tuple[int, float]]) -> RunLogger:
    log = RunLogger(run, tensorboard=False)
    for step, score in rows:
        log.evaluation({"env_step": step, "return_mean": 1000 * score, "return_std": 1.0,
                        "normalised": score, "wall_s": step / 100})
    return log


def test_a_cell_of_fewer_seeds_says_so_and_summaries_take_each_step_once(tmp_path: Path, capsys) -> None:
    """A mean over the seeds that reached a step printed like the mean of all (review); a step
    logged twice counted twice in "after", a NaN made the mean nan; 1M was headed "1000k"."""
    runs = tmp_path / "runs"
    _log(runs / "InvertedPendulum-v5_opolo_seed0", [(500_000, 0.8), (1_000_000, 1.0)])
    _log(runs / "InvertedPendulum-v5_opolo_seed1", [(500_000, 0.6)])
    seed2 = runs / "InvertedPendulum-v5_opolo_seed2" / "eval.csv"
    seed2.parent.mkdir(parents=True)
    seed2.write_text("env_step,return_mean,return_std,normalised,wall_s\n"
                     "600000,1.0,0.0,0.2,1\n400000,1.0,0.0,nan,1\n600000,1.0,0.0,0.95,2\n")
    argv = ["--tasks", "InvertedPendulum-v5", "--variants", "opolo", "--seeds", "0", "1", "2",
            "--at", "500000", "1000000", "--report", "--run-root", str(runs), "--after", "300000"]
    assert suite.main(argv) == 0
    out = capsys.readouterr().out
    assert "| task | variant | 500k | 1M | paper OPOLO |" in out
    assert "| InvertedPendulum-v5 | opolo | 0.70 (n=2 of 3) | 1.00 (n=1 of 3) | - |" in out
    assert ("InvertedPendulum-v5 opolo seed 2: last 0.950 at 600000; after 300k: 0.950-0.950, mean 0.950 "
            "(1); first >= 0.90 at 600000; 1 evaluation(s) without a score left out") in out
    assert suite.step_label(2500) == "2.5k" and suite.step_label(2_000_000) == "2M"


def test_a_shorter_log_does_not_replace_a_longer_copy(tmp_path: Path, capsys, monkeypatch) -> None:
    """--plots copies each run's log next to the plot: a run started over replaced a committed 1M log.
    The plot is drawn from the copies (it was drawn from the shorter log it kept out)."""
    import opolo_ros.plot

    drawn: list[dict] = []
    plot_curves = opolo_ros.plot.plot_curves

    def spy(groups, *args, **kwargs):
        drawn.append(groups)
        return plot_curves(groups, *args, **kwargs)

    monkeypatch.setattr(opolo_ros.plot, "plot_curves", spy)
    runs, plots = tmp_path / "runs", tmp_path / "plots"
    committed = _log(plots / "InvertedPendulum-v5_opolo_seed0", [(5000, 0.5), (10000, 0.9)]).eval_csv
    before = committed.read_text()
    _log(runs / "InvertedPendulum-v5_opolo_seed0", [(5000, 0.4)])
    argv = ["--tasks", "InvertedPendulum-v5", "--variants", "opolo", "--seeds", "0", "--at", "5000",
            "--report", "--run-root", str(runs), "--plots", str(plots)]
    assert suite.main(argv) == 0
    assert "kept: " in capsys.readouterr().err and committed.read_text() == before
    assert drawn[-1] == {"opolo": [committed]}
    _log(runs / "InvertedPendulum-v5_opolo_seed0", [(10000, 0.95), (15000, 1.0)])  # now longer: copied
    assert suite.main(argv) == 0
    assert committed.read_text() == (runs / "InvertedPendulum-v5_opolo_seed0" / "eval.csv").read_text()


def test_a_task_without_demonstrations_is_a_failed_run_not_a_done_one(tmp_path: Path, monkeypatch) -> None:
    """A job started where the demonstrations are not (another folder) trained nothing and exited
    0, so the queue marked it done for good."""
    monkeypatch.chdir(tmp_path)  # config/<task>.yaml found; its relative demos path not
    monkeypatch.setattr(suite, "task_config", lambda env_id: str(ROOT / "config" / "inverted_pendulum.yaml"))
    argv = ["--tasks", "InvertedPendulum-v5", "--variants", "opolo", "--seeds", "0", "--at", "100",
            "--run-root", str(tmp_path / "runs")]
    assert suite.main(argv) == 2
    assert suite.main([*argv, "--report"]) == 0  # a report of what is there is no failure
    assert not (tmp_path / "runs").exists()


def test_the_mean_curve_spans_only_the_steps_every_seed_reached() -> None:
    """Past the shorter seed's last evaluation the "mean" was the longer seed alone (review)."""
    from opolo_ros.plot import seed_mean

    def run(points: dict[int, float]) -> dict[int, dict[str, float]]:
        return {k: {"return_mean": v} for k, v in points.items()}

    common, mean, low, high = seed_mean([run({10: 1.0, 20: 3.0, 30: 9.0}), run({10: 3.0, 20: 5.0, 25: 7.0})])
    assert common == [10, 20] and list(mean) == [2.0, 4.0]
    assert list(low) == [1.0, 3.0] and list(high) == [3.0, 5.0]
    assert seed_mean([run({10: 1.0}), run({20: 2.0})])[0] == []
