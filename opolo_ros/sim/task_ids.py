"""Task ids: a Gymnasium id (``Hopper-v5``) or an MJCF file (``arm.xml``), and when two name one task.

Light on purpose (no Gymnasium, no MuJoCo): the actor checks a policy's task with it.
"""

from __future__ import annotations

from pathlib import Path


def is_mjcf(env_id: str) -> bool:
    return env_id.lower().endswith(".xml")


def same_task(a: str, b: str) -> bool:
    """Whether two env ids name one task: the same Gymnasium id, or the same MJCF file however its
    path is written (``./arm.xml``, ``arm.xml``, absolute)."""
    if is_mjcf(a) and is_mjcf(b):
        return Path(a).resolve() == Path(b).resolve()
    return a == b


def same_task_name(a: str, b: str) -> bool:
    """:func:`same_task` for ids from other machines (a policy's metadata): MJCF files compare by
    file name, since the path a policy was trained from need not exist where it runs."""
    if is_mjcf(a) and is_mjcf(b):
        return Path(a).name == Path(b).name
    return a == b
