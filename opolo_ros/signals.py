"""Graceful stop on SIGINT/SIGTERM, shared by the nodes and the direct training loop (no ROS here)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_early_stop = threading.Event()
_interrupted = threading.Event()
_signal_name: list[str] = []  # the signal of the interrupt (for the command's message)


def raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    """A command's handler for SIGINT and SIGTERM: KeyboardInterrupt, remembered (:func:`interrupted`).

    A KeyboardInterrupt raised while a native extension initialises (``import mujoco``, ``import
    torch``) comes out as another exception (``ImportError: initialization failed``), or not at all
    (the import swallows it): so it is remembered. The command then ends as interrupted when it
    returns; :func:`stop_on_signals` (the training loop) stops at once on a remembered interrupt,
    and long loops can poll :func:`interrupt_event` (``evaluate``)."""
    _interrupted.set()
    _signal_name[:] = [signal.Signals(signum).name]
    raise KeyboardInterrupt(interrupt_message())


def interrupted() -> bool:
    """Whether :func:`raise_interrupt` has raised since :func:`clear_interrupted`."""
    return _interrupted.is_set()


def interrupt_event() -> threading.Event:
    """Set once :func:`raise_interrupt` has raised: a `stop` for loops that poll one."""
    return _interrupted


def interrupt_signal() -> str:
    """The name of the signal that interrupted (``""`` when none did)."""
    return _signal_name[0] if _signal_name and _interrupted.is_set() else ""


def interrupt_message() -> str:
    """What a command interrupted by :func:`raise_interrupt` says (the signal's name when known)."""
    name = interrupt_signal()
    return (f"stopped by {name}; " if name else "") + "what was written before is kept"


def clear_interrupted() -> None:
    """Forget an earlier interrupt (a new command in the same process: tests, a library caller)."""
    _interrupted.clear()


def catch_ignored_sigint() -> None:
    """A program started with SIGINT ignored (a script's background job: `node ... &`) loses a
    SIGINT that comes while it imports (seconds with torch and MuJoCo on a busy machine): its node
    then ran on for good. From here such a SIGINT is kept and :func:`stop_on_signals` honours it."""
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda _signum, _frame: _early_stop.set())


def exit_on_signals_while_starting(program: str, status: int = 0) -> None:
    """SIGINT or SIGTERM ends the process at once with `status` and one line on stderr, until a
    handler of the program's own replaces these (``run_node``'s). For a node program while it
    imports its modules (seconds with torch and MuJoCo on a busy machine), when nothing is written
    yet: SIGTERM would kill it without a word (status 143) and SIGINT print a traceback from inside
    ``import torch``. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        os.write(2, f"{program}: stopped by {signal.Signals(signum).name} while starting\n".encode())
        os._exit(status)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


@contextmanager
def hold_signals() -> Iterator[None]:
    """While inside: SIGINT and SIGTERM do nothing (a clean-up that a second Ctrl-C must not break
    off half-way: a bag's index and metadata, milliseconds). Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda _signum, _frame: None) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
    if _early_stop.is_set() or _interrupted.is_set():  # a SIGINT that came while the program
        stop.set()  # started (see above), or an interrupt a native import swallowed (raise_interrupt)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
