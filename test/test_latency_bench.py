"""bench/latency.py: its system specs, and one short real run with policy swaps (real DDS, processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import latency as bench_latency  # noqa: E402


def test_system_specs_parse() -> None:
    plain = bench_latency.System.parse("actor")
    assert (plain.kind, plain.params, plain.swap_hz, plain.swap_new) == ("actor", {}, 0.0, True)
    swaps = bench_latency.System.parse("actor[swap_hz=10,swap_new=0,cpu_affinity=[0,1]]")
    assert swaps.swap_hz == 10.0 and not swaps.swap_new
    assert swaps.params == {"cpu_affinity": "[0,1]"}  # node parameters only; a list keeps its commas
    assert bench_latency.System.parse("actor[swap_hz=10]").swap_new
    with pytest.raises(ValueError, match="takes no parameters"):
        bench_latency.System.parse("baseline[executor=single]")
    with pytest.raises(ValueError, match="expected actor, baseline, echo"):
        bench_latency.System.parse("actr")


@pytest.mark.ros
def test_swaps_are_loaded_and_stale_versions_only_received(tmp_path: Path) -> None:
    out = tmp_path / "latency.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "latency.py"), "--duration", "1.5", "--warmup", "0.5",
         "--systems", "actor[swap_hz=10]", "actor[swap_hz=10,swap_new=0]", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    loaded, received = results["actor[swap_hz=10]"], results["actor[swap_hz=10,swap_new=0]"]
    for result in (loaded, received):
        assert result["swaps_sent"] >= 5 and result["answered"] > 0
        assert [w["swaps_sent"] for w in result["per_window"]] == [result["swaps_sent"]]
    # the start-up model, then each new version sent (keep-last-1 QoS may drop one that is followed
    # at once by the next, and the last may still be in flight at the stop); the stale ones are
    # decoded and skipped
    assert loaded["swaps_sent"] - 1 <= loaded["node"]["counters"]["swaps"] <= 1 + loaded["swaps_sent"]
    assert received["node"]["counters"]["swaps"] == 1


def _window(steal_s: float, missed: int) -> bench_latency.Window:
    rtt = np.full(10 - missed, 500.0)
    return bench_latency.Window(rtt_us=rtt, lateness_us=np.zeros(10), sent=10, driver_missed=0,
                                duplicates=0, cpu_s=0.1, wall_s=1.0, node={}, swaps_sent=0,
                                driver_cpu_s=0.1, steal_s=steal_s)


def test_windows_with_steal_time_are_measured_again_and_left_out(capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    cpus = os.cpu_count() or 1
    steal = [0.2 * cpus, 0.1 * cpus, 0.01 * cpus]  # 20 %, 10 %, 1 % of all CPUs over 1 s
    attempts: list[int] = []

    def once(attempt: int) -> bench_latency.Window:
        attempts.append(attempt)
        return _window(steal[attempt], missed=attempt)

    used, left_out = bench_latency.measure_clean(once, max_steal=4.0, retries=2)
    assert attempts == [0, 1, 2] and [w.missed_periods for w in used] == [2]
    assert [w.missed_periods for w in left_out] == [0, 1]
    system = bench_latency.System.parse("actor")
    result = bench_latency.combine(system, used, left_out)
    assert (result["windows"], result["excluded_windows"], result["missed_periods"]) == (1, 2, 2)
    assert [w["used"] for w in result["per_window"]] == [True, False, False]

    attempts.clear()
    used, left_out = bench_latency.measure_clean(once, max_steal=0.5, retries=1)
    assert attempts == [0, 1] and used == [] and len(left_out) == 2
    empty = bench_latency.combine(system, used, left_out)
    assert empty["windows"] == 0 and empty["excluded_windows"] == 2 and "p50_us" not in empty
    assert bench_latency.verdict({"actor": empty}, with_learner=False) == {}
    bench_latency.print_table({"actor": empty}, {})
    assert "no window with steal time under --max-steal (2 excluded)" in capsys.readouterr().out


@pytest.mark.ros
def test_policy_take_bench_decodes_every_message(tmp_path: Path) -> None:
    out = tmp_path / "take.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "policy_take.py"), "--messages", "3",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(out.read_text())["results"]  # the script checks each decoded model itself
    assert len(results) == 8 and all(r["count"] == 3 and r["p50_us"] > 0 for r in results.values())
