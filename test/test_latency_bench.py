"""bench/latency.py: its system specs, and one short real run with policy swaps (real DDS, processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
