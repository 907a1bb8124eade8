"""Learning-curve plots from a run's ``eval.csv`` (written by :class:`RunLogger`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from opolo_ros.train.logger import RunLogger


def draw_run_curve(run_dir: Path, title: str, expert_return: float,
                   warn: Callable[[str], object]) -> Path | None:
    """A run folder's learning_curve.png from its eval.csv; None without evaluations (an MJCF task:
    no reward) or when drawing fails (said through `warn`: a missing plot must not lose a run)."""
    if not (run_dir / "eval.csv").is_file():
        return None
    try:
        return plot_learning_curve(run_dir / "eval.csv", run_dir / "learning_curve.png", title=title,
                                   expert_return=expert_return)
    except Exception as err:
        warn(f"no learning-curve plot: {err}")
        return None


def plot_learning_curve(eval_csv: str | Path, output: str | Path, title: str = "",
                        expert_return: float | None = None) -> Path:
    """Evaluation return (mean +- std) against environment steps, as a PNG."""
    return plot_curves({"": [eval_csv]}, output, title=title, expert_return=expert_return)


def plot_curves(groups: Mapping[str, Sequence[str | Path]], output: str | Path, title: str = "",
                expert_return: float | None = None, max_step: int | None = None) -> Path:
    """One curve per group (label -> eval.csv files of its seeds): mean over seeds, min-max band.

    A single file per group shows its own evaluation std as the band instead. `max_step` leaves out
    later evaluations (runs of different lengths compared over the same span).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for label, files in groups.items():
        runs = [RunLogger.read_evaluations(f, until=max_step) for f in files]
        runs = [r for r in runs if r]
        if not runs:
            raise ValueError(f"no evaluations in {', '.join(map(str, files))}")
        steps = sorted({row["env_step"] for run in runs for row in run})
        table = np.full((len(runs), len(steps)), np.nan)
        std = np.full(len(steps), np.nan)
        for i, run in enumerate(runs):
            for row in run:
                j = steps.index(row["env_step"])
                table[i, j] = row["return_mean"]
                std[j] = row["return_std"]
        mean = np.nanmean(table, axis=0)
        if len(runs) == 1:
            low, high = mean - np.nan_to_num(std), mean + np.nan_to_num(std)
        else:
            low, high = np.nanmin(table, axis=0), np.nanmax(table, axis=0)
        name = f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})" if label else None
        line, = ax.plot(steps, mean, marker="o", markersize=3, label=name)
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    if expert_return is not None and np.isfinite(expert_return):
        ax.axhline(expert_return, color="gray", linestyle="--", label="expert")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    if title:
        ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
