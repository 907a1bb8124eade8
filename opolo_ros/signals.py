"""Graceful stop on SIGINT/SIGTERM, shared by the nodes and the direct training loop (no ROS here)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_early_stop = threading.Event()


def catch_ignored_sigint() -> None:
    """A program started with SIGINT ignored (a script's background job: `node ... &`) loses a
    SIGINT that comes while it imports (seconds with torch and MuJoCo on a busy machine): its node
    then ran on for good. From here such a SIGINT is kept and :func:`stop_on_signals` honours it."""
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda _signum, _frame: _early_stop.set())


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While inside: the first SIGINT/SIGTERM sets `stop`, a second raises KeyboardInterrupt.

    Handlers can only be installed from the main thread; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    if _early_stop.is_set():  # a SIGINT that came while the program started (see above)
        stop.set()
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
