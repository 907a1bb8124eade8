"""Task ids: a Gymnasium id (``Hopper-v5``) or an MJCF file (``arm.xml``), and when two name one task.

Light on purpose (no Gymnasium, no MuJoCo): the actor checks a policy's task, and the order of its
``joints``, with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def is_mjcf(env_id: str) -> bool:
    return env_id.lower().endswith(".xml")


def task_label(env_id: str) -> str:
    """A task's short name for titles: an MJCF file's name without its folders (a plot's title
    held the whole absolute path the graph resolves, and was cut off), else the Gymnasium id."""
    return Path(env_id).name if is_mjcf(env_id) else env_id


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


def reordered_joints(names: Sequence[str], model: Sequence[str]) -> list[str] | None:
    """`names` in the `model`'s joint order where they are the model's own joints (all of them, or
    some) in another order; None where they are in its order, or name joints the model does not
    have (a real robot's). The one rule of training's ``demos_joints``, the deploy launch's and the
    actor's ``joints``."""
    where = {name: k for k, name in enumerate(model)}
    if not names or not all(n in where for n in names):
        return None
    ordered = sorted(names, key=where.__getitem__)
    return ordered if list(names) != ordered else None


def joint_order_error(joints: Sequence[str], model: Sequence[str], policy: str) -> str | None:
    """Why an actor's `joints` cannot feed `policy` (its description, for the message), whose
    observation holds the `model`'s joints in that order: they name them in another order
    (:func:`reordered_joints`); None when they do not."""
    ordered = reordered_joints(joints, model)
    if ordered is None:
        return None
    return (f"joints {','.join(joints)} name the joints of {policy} in another order than its "
            f"observation's, {','.join(ordered)}: give joints in that order")
