"""Learning-curve plots from a run's ``eval.csv`` (written by :class:`RunLogger`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from opolo_ros.train.logger import RunLogger


def _by_step(rows: list[dict[str, float]]) -> dict[int, dict[str, float]]:
    """Evaluation rows by step (the last row of a step wins); steps without a finite return left out."""
    return {int(r["env_step"]): r for r in rows if np.isfinite(r["return_mean"])}


def seed_mean(runs: Sequence[Mapping[int, Mapping[str, float]]]
              ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """The steps every run (:func:`_by_step`) was evaluated at, and the mean, min and max return
    over the runs there."""
    common = sorted(set.intersection(*(set(run) for run in runs))) if runs else []
    if not common:
        return [], np.zeros(0), np.zeros(0), np.zeros(0)
    table = np.array([[run[k]["return_mean"] for k in common] for run in runs])
    return common, table.mean(axis=0), table.min(axis=0), table.max(axis=0)


def draw_run_curve(run_dir: Path, title: str, expert_return: float,
                   warn: Callable[[str], object]) -> Path | None:
    """A run folder's learning_curve.png from its eval.csv (an MJCF task's: its imitation distance,
    :func:`plot_imitation_curve`); None without evaluations or when drawing fails (said through
    `warn`: a missing plot must not lose a run)."""
    if not (run_dir / "eval.csv").is_file():
        return None
    try:
        rows = RunLogger.read_evaluations(run_dir / "eval.csv")
        if rows and "imitation_distance" in rows[0]:
            return plot_imitation_curve(run_dir / "eval.csv", run_dir / "learning_curve.png", title=title)
        return plot_learning_curve(run_dir / "eval.csv", run_dir / "learning_curve.png", title=title,
                                   expert_return=expert_return)
    except Exception as err:
        warn(f"no learning-curve plot: {err}")
        return None


def plot_imitation_curve(eval_csv: str | Path, output: str | Path, title: str = "") -> Path:
    """A task without a reward: the imitation distance against environment steps, with the random
    policy's as the reference line (0 is on the demonstrations)."""
    rows = [r for r in RunLogger.read_evaluations(eval_csv) if np.isfinite(r["imitation_distance"])]
    if not rows:
        raise ValueError(f"no imitation evaluations in {eval_csv}")
    fig, ax = _axes()
    ax.plot([r["env_step"] for r in rows], [r["imitation_distance"] for r in rows], marker="o", markersize=3,
            label="policy")
    ax.axhline(rows[-1]["imitation_random"], color="gray", linestyle="--", label="random actions")
    label = "imitation distance (0 = the demonstrations)"
    if all(r["imitation_distance"] > 0 for r in rows):  # distances over orders of magnitude
        ax.set_yscale("log")
        label = "imitation distance (log scale)"
    return _save(fig, ax, output, label, title)


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6.4, 4.0), dpi=120)


def _save(fig, ax, output: str | Path, ylabel: str, title: str) -> Path:
    import matplotlib.pyplot as plt

    ax.set_xlabel("environment steps")
    ax.set_ylabel(ylabel)
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


def plot_learning_curve(eval_csv: str | Path, output: str | Path, title: str = "",
                        expert_return: float | None = None) -> Path:
    """Evaluation return (mean +- std) against environment steps, as a PNG."""
    return plot_curves({"": [eval_csv]}, output, title=title, expert_return=expert_return)


def plot_curves(groups: Mapping[str, Sequence[str | Path]], output: str | Path, title: str = "",
                expert_return: float | None = None, max_step: int | None = None) -> Path:
    """One curve per group (label -> eval.csv files of its seeds).

    Several seeds: the mean and min-max band over the steps every seed was evaluated at, and each
    seed's own curve as a thin line (a mean over the seeds that happened to reach a step was drawn
    as the mean of all, and runs of different lengths or evaluation grids made it jump). A single
    file shows its own evaluation std as the band. `max_step` leaves out later evaluations (runs of
    different lengths compared over the same span).
    """
    fig, ax = _axes()
    for label, files in groups.items():
        runs = [_by_step(RunLogger.read_evaluations(f, until=max_step)) for f in files]
        runs = [r for r in runs if r]
        if not runs:
            raise ValueError(f"no evaluations in {', '.join(map(str, files))}")
        if len(runs) == 1:
            steps = sorted(runs[0])
            mean = np.array([runs[0][k]["return_mean"] for k in steps])
            std = np.nan_to_num(np.array([runs[0][k]["return_std"] for k in steps]))
            line, = ax.plot(steps, mean, marker="o", markersize=3, label=label or None)
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
            continue
        color = None
        for run in runs:  # each seed, thin
            steps = sorted(run)
            thin, = ax.plot(steps, [run[k]["return_mean"] for k in steps], linewidth=0.7, alpha=0.45,
                            color=color)
            color = thin.get_color()
        common, mean, low, high = seed_mean(runs)
        name = f"{label} (mean of {len(runs)} seeds)" if label else f"mean of {len(runs)} seeds"
        if not common:
            thin.set_label(f"{label} ({len(runs)} seeds, no common evaluation step)")
            continue
        ax.plot(common, mean, marker="o", markersize=3, color=color, label=name)
        ax.fill_between(common, low, high, color=color, alpha=0.2)
    if expert_return is not None and np.isfinite(expert_return):
        ax.axhline(expert_return, color="gray", linestyle="--", label="expert")
    return _save(fig, ax, output, "evaluation return", title)
