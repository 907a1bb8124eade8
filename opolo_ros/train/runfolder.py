"""A run that starts over (``--no-resume``, ``resume: false``) in a folder that holds another.

Its files would mix with the new run's: TensorBoard shows both event files as one run, eval.csv
keeps the old rows before the new run's first evaluation, and the old best policy stays until a new
one beats it. They are moved, not deleted, into ``<run_dir>/previous-<date>-<time>/``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

RUN_FILES = ("checkpoint.pt", "config.yaml", "eval.csv", "tb", "policy.onnx", "policy_best.onnx",
             "learning_curve.png", "replay_journal.bin", "learner_params.yaml", "launch_params.yaml")
# (launch_params.yaml: `opolo-ros launch` writes the new run's once the learner has set these aside)


def set_aside_previous_run(run_dir: Path) -> Path | None:
    """Move the files of an earlier run out of `run_dir`; the folder they went to, None if none."""
    present = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    if not present:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, k = run_dir / f"previous-{stamp}", 1
    while dest.exists():
        dest, k = run_dir / f"previous-{stamp}-{k}", k + 1
    dest.mkdir()
    for path in present:
        os.replace(path, dest / path.name)
    return dest
