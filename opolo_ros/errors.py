"""Errors as users see them: one line, whatever the library that raised them put in the message."""

from __future__ import annotations

import sys
from collections.abc import Callable


def one_line(err: BaseException) -> str:
    """An exception's message on one line (YAML, rcl and onnxruntime messages span several)."""
    return " ".join(str(err).split()) or type(err).__name__


def counted(n: int, word: str) -> str:
    """`n` `word`s, in the singular for one ("1 value", "0 values", "2 joints")."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def short_repr(value: object, limit: int = 60) -> str:
    """`value`'s repr for a one-line error, cut at `limit` characters (a whole YAML section is not)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def exit_status(main: Callable[[], int | None], name: str) -> int:
    """`main()`'s status for a script: bad input (ValueError, a missing or unreadable file) gives
    one line on stderr and 2, a signal (KeyboardInterrupt, the training loops' TrainingInterrupted
    among them) one line and 130, as the `opolo-ros` commands do."""
    try:
        status = main()
        return status if isinstance(status, int) else 0  # (a script may return its results)
    except (ValueError, OSError) as exc:
        print(f"{name}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"{name}: interrupted: {one_line(exc) if str(exc) else 'stopped'}", file=sys.stderr)
        return 130
