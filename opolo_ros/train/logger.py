"""TensorBoard scalars plus a CSV of evaluations (for plots and BENCHMARKS.md tables)."""

from __future__ import annotations

import csv
import math
import os
from collections import deque
from pathlib import Path

import torch


def purge_step(resumed_at: int) -> int | None:
    """Where a run resumed at step `resumed_at` purges TensorBoard events from: what a crashed run
    logged after its checkpoint is logged again, and must not show twice. From the next step: the
    checkpoint's step logged its scalars before the checkpoint. (An evaluation the checkpoint owes
    at its own step is logged there by the resumed run; killed again before its next checkpoint,
    the run after logs it once more. Purging from the step itself would drop that step's other
    scalars for good, which the resumed run does not log again.) None for a fresh run."""
    return resumed_at + 1 if resumed_at else None


def time_to_go(remaining: int, done: int, elapsed_s: float) -> str:
    """A progress line's estimate of the time left: `remaining` steps at the rate of `done` steps
    in `elapsed_s`, as ``", about 37 min to go"``; ``""`` with nothing left or no rate yet."""
    if remaining <= 0 or done <= 0 or not elapsed_s > 0:
        return ""
    seconds = remaining * elapsed_s / done
    if seconds < 60:
        return ", under a minute to go"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f", about {minutes} min to go"
    return f", about {minutes // 60} h {minutes % 60:02d} min to go"


class TimeToGo:
    """A run's time left, at its rate over its last `window` marks (progress lines, 1000 steps
    apart) after step `after` (the warm-up's random steps, several times faster than training's:
    none said before it ends); evaluations and checkpoints weigh in as they recur (one every 2-10
    marks)."""

    def __init__(self, total_steps: int, after: int = 0, window: int = 20) -> None:
        self.total_steps, self.after = total_steps, after
        self._marks: deque[tuple[int, float]] = deque(maxlen=window + 1)

    def mark(self, step: int, now: float) -> str:
        """Note that `step` was reached at `now` (a monotonic clock); :func:`time_to_go` of it."""
        if step <= self.after:
            self._marks.clear()  # the window starts where the warm-up ends
        self._marks.append((step, now))
        first_step, first_t = self._marks[0]
        return time_to_go(self.total_steps - step, step - first_step, now - first_t)


def _cell(key: str, value: object) -> object:
    """An eval.csv cell: the step as an integer; an unknown value (a baseline of an older log, the
    return of a task without one, a NaN policy's) blank, as older logs have it and as a row that
    lacks the column is written (an MJCF run's rows were 'nan' once rewritten, blank when new)."""
    if key == "env_step":
        return int(value)  # type: ignore[call-overload]
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value


class RunLogger:
    # r_expert, r_random: the normalised score's R_expert and R_random (blank in older logs)
    EVAL_FIELDS = ("env_step", "return_mean", "return_std", "normalised", "wall_s", "r_expert", "r_random")
    # a task without a reward (an MJCF robot): its states' distance to the demonstrations', the
    # random policy's, and 1 - their ratio (opolo_ros.sim.imitation); written by such runs only
    IMITATION_FIELDS = ("imitation_distance", "imitation_random", "imitation_score")

    def __init__(self, run_dir: str | Path, tensorboard: bool = True, purge_from: int | None = None) -> None:
        """`purge_from`: TensorBoard hides earlier events at this step and later (:func:`purge_step`)."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=purge_from)
        self.eval_csv = self.run_dir / "eval.csv"

    def scalars(self, step: int, values: dict[str, float | torch.Tensor]) -> None:
        if self.writer is None:
            return
        for k, v in values.items():
            self.writer.add_scalar(k, float(v), step)

    def evaluation(self, row: dict[str, float]) -> None:
        """Append one evaluation row; rows past `env_step` (left by a crashed run) are dropped first."""
        rows = self.read_evaluations(self.eval_csv)
        rows = [r for r in rows if r["env_step"] < row["env_step"]] + [row]
        tmp = self.eval_csv.with_name(f".{self.eval_csv.name}.tmp")
        with open(tmp, "w", newline="") as f:  # then renamed: a crash never leaves half a file
            fields = self.EVAL_FIELDS
            if any(k in r for r in rows for k in self.IMITATION_FIELDS):
                fields += self.IMITATION_FIELDS
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in rows:
                w.writerow({k: _cell(k, r.get(k, "")) for k in fields})
        os.replace(tmp, self.eval_csv)

    @staticmethod
    def read_evaluations(path: str | Path, until: int | None = None) -> list[dict[str, float]]:
        """The rows of an eval.csv (all floats); with `until`, those at env steps up to it."""
        path = Path(path)
        if not path.is_file():
            return []
        with open(path) as f:
            rows = [{k: float(v) if v not in ("", None) else float("nan") for k, v in r.items()}
                    for r in csv.DictReader(f)]
        return [r for r in rows if until is None or r["env_step"] <= until]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
