"""Errors as users see them: one line, whatever the library that raised them put in the message."""

from __future__ import annotations


def one_line(err: BaseException) -> str:
    """An exception's message on one line (YAML, rcl and onnxruntime messages span several)."""
    return " ".join(str(err).split()) or type(err).__name__
