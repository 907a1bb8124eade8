"""`opolo-ros` commands end on SIGTERM the way they end on SIGINT: one line, status 130.

The training loop stops gracefully on its own (test_direct.py); outside it (setting up, evaluating,
recording, or a second signal while the loop saves) SIGTERM used to end the process silently with
status 143.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from opolo_ros import cli

EXPERT = Path(__file__).resolve().parents[1] / "models" / "experts" / "InvertedPendulum-v5.onnx"


def test_sigterm_during_a_command_is_one_line_and_status_130(capsys) -> None:
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    start = time.monotonic()
    try:
        status = cli.main(["evaluate", str(EXPERT), "--episodes", "1000"])  # about a minute
    finally:
        timer.cancel()
    assert status == 130 and time.monotonic() - start < 10.0
    err = capsys.readouterr().err
    want = "opolo-ros evaluate: interrupted: stopped by SIGTERM; what was written before is kept"
    assert err.strip() == want
    assert signal.getsignal(signal.SIGTERM) is before  # restored
