"""A run that starts over (``--no-resume``, ``resume: false``) in a folder that holds another.

Its files would mix with the new run's: TensorBoard shows both event files as one run, eval.csv
keeps the old rows before the new run's first evaluation, and the old best policy stays until a new
one beats it. They are moved, not deleted, into ``<run_dir>/previous-<date>-<time>/``.

A run resumed under changed config values keeps the config it ran under until then beside the new
``config.yaml`` (``config-until-step<N>.yaml``), so the folder still says what produced its results.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

RUN_FILES = ("checkpoint.pt", "config.yaml", "eval.csv", "tb", "policy.onnx", "policy_best.onnx",
             "learning_curve.png", "replay_journal.bin", "replay_base.pt", "learner_params.yaml",
             "launch_params.yaml")
# (launch_params.yaml: `opolo-ros launch` writes the new run's once the learner has set these aside)


def set_aside_previous_run(run_dir: Path) -> Path | None:
    """Move the files of an earlier run out of `run_dir`; the folder they went to, None if none."""
    present = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    present += sorted(run_dir.glob("config-until-step*.yaml"))
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


def write_text_atomic(path: Path, text: str) -> None:
    """`text` into a temporary file beside `path`, renamed over it: a crash never leaves half a
    file (a torn config.yaml was kept by the next resume as the config the run had used)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _changed(path: Path, config: dict[str, Any]) -> bool:
    """Whether the config file at `path` holds other values than `config` (a file that does not
    read as a config counts as changed: it is kept)."""
    from opolo_ros.train.checkpoint import config_changes

    try:
        old = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError):
        return True
    return not isinstance(old, dict) or bool(config_changes(old, config))


def write_run_config(run_dir: Path, config: dict[str, Any], step: int) -> Path | None:
    """Write the run's ``config.yaml``. When it held other values and the run is past step 0 (it
    resumes under changed values), that file is kept as ``config-until-step<step>.yaml`` first
    (not for options added to the code since, at their defaults: ``config_changes``); returns the
    kept file's path, None when nothing was kept."""
    path = run_dir / "config.yaml"
    text = yaml.safe_dump(config, sort_keys=False)
    kept = None
    if step > 0 and path.is_file() and path.read_text() != text and _changed(path, config):
        kept, k = run_dir / f"config-until-step{step}.yaml", 1
        while kept.exists():  # resumed at the same step twice, each time with other values
            kept, k = run_dir / f"config-until-step{step}-{k}.yaml", k + 1
        os.replace(path, kept)
    write_text_atomic(path, text)
    return kept
