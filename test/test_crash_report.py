"""A native crash inside a test still prints where it happened.

rclpy's EventsExecutor re-enables :mod:`faulthandler` on ``sys.stderr`` when it is made; under
pytest that is the test's capture file, gone with the process. The conftest sends those calls back
to the terminal: a CI run that dies of a segfault names the test and the line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros
TEST_DIR = Path(__file__).resolve().parent

CRASHING = textwrap.dedent("""
    import ctypes

    from opolo_ros.nodes.common import make_executor
    from opolo_ros.ros import runtime


    def test_crashes_after_an_events_executor(ros_domain_id):
        context = runtime.init_context(ros_domain_id, args=[])
        executor = make_executor(context, "events")
        assert type(executor).__name__ == "EventsExecutor"
        ctypes.string_at(0)  # a segfault
""")


def test_segfault_after_an_events_executor_prints_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TEST_DIR), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                           "--rootdir", str(tmp_path), "test_crashing.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -11, proc.stdout + proc.stderr
    assert "Fatal Python error: Segmentation fault" in proc.stderr, proc.stderr
    assert "in test_crashes_after_an_events_executor" in proc.stderr, proc.stderr
