"""Atomic checkpoint files: a crash while saving never leaves a half-written checkpoint."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from opolo_ros.algo.config import flatten
from opolo_ros.data.journal import fsync_dir


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or cannot resume this run (a one-line condition)."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (a full disk, most often); the previous one is kept."""


class CheckpointAborted(Exception):
    """A save given up because a stop was requested while it wrote; the previous checkpoint is kept."""


class _StopWriter:
    """A file for ``torch.save`` that gives up (:class:`CheckpointAborted`) at the first write after
    `stop` is set: torch writes each tensor in one call, so a stop waits for one tensor at most
    (about 0.1 s for a 1M-row replay field here), not for the whole file (Ant's 1M transitions:
    896 MB, 6.5-8.3 s, against the 2 s a node has to stop)."""

    def __init__(self, f: Any, stop: threading.Event) -> None:
        self.f, self.stop = f, stop

    def write(self, data: Any) -> int:
        if self.stop.is_set():
            raise CheckpointAborted("a stop was requested while the checkpoint was written")
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def save_checkpoint(path: str | Path, state: dict[str, Any], stop: threading.Event | None = None) -> None:
    """Write `state` to a temporary file next to `path`, then rename it over `path` (and make the
    rename durable). Temporary files of a save that was killed (``kill -9`` mid-write) are removed
    first: one writer per run folder (its lock), so none of them is in use. A failed write raises
    :class:`CheckpointWriteError` in one line naming the file and the disk's free space (torch's
    own message for a full disk names neither) and leaves the previous checkpoint as it was. With
    `stop`, a stop request while it writes raises :class:`CheckpointAborted` (the temporary file
    removed, the previous checkpoint kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f if stop is None else _StopWriter(f, stop))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if not isinstance(err, Exception) or isinstance(err, CheckpointAborted):
            raise
        free = shutil.disk_usage(path.parent).free / 2**20
        kept = "the previous checkpoint is kept" if path.is_file() else "no checkpoint yet"
        raise CheckpointWriteError(f"could not write checkpoint {path} ({' '.join(str(err).split())}; "
                                   f"{free:.0f} MiB free on its disk): {kept}") from err
    fsync_dir(path.parent)  # the rename, durable (the file is in place whatever this says)


def load_checkpoint(path: str | Path, start_over: str = "") -> dict[str, Any]:
    """A checkpoint's state; CheckpointError (one line, ending with `start_over`: how to start
    afresh) for a file that cannot be read or is no training run's checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    how = f"; {start_over}" if start_over else ""
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # corrupt or truncated, or no torch file at all
        raise CheckpointError(f"{unreadable(path, exc)}{how}") from exc
    config = state.get("config") if isinstance(state, dict) else None
    if not (isinstance(config, dict) and {"env_id", "algo"} <= config.keys()
            and {"step", "runner"} <= state.keys()):
        raise CheckpointError(f"checkpoint {path} is not an opolo_ros checkpoint (a torch file holding a "
                              f"{type(state).__name__}, without the 'config', 'step' and 'runner' entries "
                              f"a training run writes){how}")
    return state


TORCH_MAGIC = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive, its legacy pickle format


def unreadable(path: Path, exc: Exception) -> str:
    """Why torch cannot load `path`, in one line: the error of a torch file (a corrupt or truncated
    checkpoint); what the file is instead for the rest (an ONNX policy, a text file, nothing)."""
    with path.open("rb") as f:
        head = f.read(512)
    if head.startswith(TORCH_MAGIC):
        return f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc})"
    if is_onnx_model(path, head):
        return f"{path} is an ONNX policy, not a checkpoint (a run folder's checkpoint.pt)"
    if not head:
        return f"checkpoint {path} cannot be read (the file is empty)"
    if _is_text(head):
        return f"{path} is a text file, not a checkpoint (a run folder's checkpoint.pt)"
    return (f"checkpoint {path} cannot be read (not a torch file: a damaged checkpoint, or another kind "
            "of file)")


def is_onnx_model(path: Path, head: bytes) -> bool:
    """Whether `path` holds an ONNX model with a graph (it begins with its ir_version field)."""
    if not head.startswith(b"\x08"):
        return False
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # ImportError, or protobuf's DecodeError for anything else
        return False
    return model.ir_version > 0 and len(model.graph.node) > 0


def _is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:  # a character cut by the end of `head` is still text
        return err.start >= len(head) - 3 and b"\x00" not in head
    return b"\x00" not in head


def torch_rng_state() -> dict[str, Any]:
    """torch's generator states for a checkpoint: the CPU one, and each CUDA device's when CUDA is
    in use (the gradient penalty draws on the networks' device)."""
    in_use = torch.cuda.is_available() and torch.cuda.is_initialized()
    cuda = torch.cuda.get_rng_state_all() if in_use else None
    return {"torch_rng": torch.get_rng_state(), "cuda_rng": cuda}


def restore_torch_rng(state: dict[str, Any]) -> None:
    """Undo :func:`torch_rng_state`. CUDA states are restored only onto as many devices as were saved
    (a checkpoint written on a GPU resumes on a CPU machine, with fresh CUDA draws if any)."""
    torch.set_rng_state(state["torch_rng"])
    cuda = state.get("cuda_rng")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)


class TrainingDiverged(ValueError):
    """The networks hold NaN or inf: nothing is written over the last good checkpoint or policy."""


def non_finite(learner: Any) -> list[str]:
    """The learner's tensors (parameters and buffers, normalisers included) with a NaN or inf."""
    return [f"{name}.{key}" for name, module in learner.modules().items()
            for key, tensor in module.state_dict().items()
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]


def check_finite(learner: Any, step: int, writing: str) -> None:
    """TrainingDiverged (one line) before `writing` would put non-finite networks on disk: a run that
    went to NaN kept training, exported NaN policies and overwrote its good checkpoint and best
    policy, and exited 0 (a probe found it)."""
    bad = non_finite(learner)
    if bad:
        shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        raise TrainingDiverged(f"training diverged by step {step}: NaN or inf in {shown}; {writing} not "
                               "written (the last checkpoint and policies are as they were). Lower the "
                               "learning rates, or look for absurd values in the demonstrations")


GRAPH_SOURCE = "learner node"  # a checkpoint's "source": written by the learner node (its state differs)


def _load_error(exc: Exception) -> str:
    """torch's load error in one line: "Error(s) in loading state_dict for Actor:" alone said
    nothing; its next line says which tensor does not fit."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head = lines[0].removeprefix("Error(s) in loading state_dict for ").rstrip(":")
    return f"{head}: {lines[1]}" if len(lines) > 1 and lines[0].endswith(":") else lines[0]


def policy_io(obs_dim: int, act_dim: int, action_low: Any, action_high: Any,
              control_period_s: float, joint_names: Sequence[str] = ()) -> dict[str, Any]:
    """What a checkpoint records of its policy besides the networks (its "policy_io"): observation
    and action sizes, action bounds, the control period (the env's dt, which the exported policy's
    metadata carries for deployment) and an MJCF task's observed joints (its ``joint_names``, by
    which a deploy actor checks the order of its `joints`), so that it exports without the
    environment (an MJCF task's file need not be there)."""
    return {"obs_dim": int(obs_dim), "act_dim": int(act_dim),
            "action_low": [float(v) for v in action_low], "action_high": [float(v) for v in action_high],
            "control_period_s": float(control_period_s), "joint_names": [str(n) for n in joint_names]}


def trainer_of(state: dict[str, Any]) -> str:
    """The trainer that wrote a checkpoint, as a policy's metadata names it (its `source`): "learner"
    (the learner node's StreamTrainer, which marks its checkpoints) or "direct" (the direct loop)."""
    return "learner" if state.get("source") == GRAPH_SOURCE else "direct"


# Config values that set the shapes of networks, normalisers or replay: a change in one of these is
# what stops a checkpoint from loading, so they are named first.
SHAPE_KEYS = ("time_feature", "net.", "normalize_", "schedule.buffer_size", "fused_adam")


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: saved -> current`` for every config value that differs (dotted names), those that
    set shapes first (SHAPE_KEYS), then the rest alphabetically. A key the saved config lacks (an
    option added to the code since) at its default is no change: the run goes on as it ran."""
    from opolo_ros.algo.config import RunConfig, to_dict

    old, new = flatten(saved), flatten(current)
    defaults = flatten(to_dict(RunConfig()))
    changed = [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)
               and not (k not in old and k in defaults and new.get(k) == defaults[k])]
    changed.sort(key=lambda k: (not any(part in k for part in SHAPE_KEYS), k))
    return [f"{k}: {old.get(k, '(unset)')} -> {new.get(k, '(unset)')}" for k in changed]


def _listing(changes: list[str], most: int = 6) -> str:
    """The first `most` changes, and how many more."""
    return "; ".join(changes[:most]) + (f"; and {len(changes) - most} more" if len(changes) > most else "")


def _also_changed(changes: list[str], named: tuple[str, ...]) -> str:
    """The changed values other than those `named` already, so that one refusal names them all."""
    others = [c for c in changes if c.split(": ", 1)[0] not in named]
    return f" (also changed: {_listing(others)})" if others else ""


def check_same_task(saved: dict[str, Any], config: dict[str, Any], path: str | Path, start_over: str) -> None:
    from opolo_ros.sim.task_ids import same_task

    if not same_task(saved["env_id"], config["env_id"]) or saved["algo"] != config["algo"]:
        also = _also_changed(config_changes(saved, config), ("env_id", "algo"))
        raise CheckpointError(f"checkpoint {path} is for {saved['algo']} on {saved['env_id']}, "
                              f"not {config['algo']} on {config['env_id']}{also}; {start_over}")


def expert_return_note(state: dict[str, Any], expert_return: float) -> str:
    """A warning when the demonstrations' mean return (R_expert of the normalised score) differs
    from the one the checkpoint's run scored against ('' when it does not, or either is unknown):
    the bag was replaced, or ``num_demos`` changed, and one eval.csv would hold scores of two
    scales without a word (its ``r_expert`` column says which)."""
    saved = float(state.get("expert_return", math.nan))
    if not (math.isfinite(saved) and math.isfinite(expert_return)) or math.isclose(saved, expert_return,
                                                                                   rel_tol=1e-9):
        return ""
    return (f"the demonstrations' mean return (R_expert of the normalised score) is {expert_return:.1f}, "
            f"the run scored against {saved:.1f} until its checkpoint: normalised scores before and "
            "after differ in scale (eval.csv's r_expert column)")


def resume_changes(state: dict[str, Any], config: dict[str, Any], path: str | Path,
                   start_over: str) -> list[str]:
    """The config changes a training run resumes under (to report them), after refusing those that
    make it another experiment: another seed (the restored random state is the old seed's; the
    evaluation seeds would change), or OPOLO <-> OPOLO-x (``opolo.lam`` 0 against > 0)."""
    saved = state["config"]
    check_same_task(saved, config, path, start_over)
    changes = config_changes(saved, config)
    if saved.get("seed") != config.get("seed"):
        also = _also_changed(changes, ("seed",))
        raise CheckpointError(f"checkpoint {path} was written with seed {saved.get('seed')}, not "
                              f"{config.get('seed')}{also}: a resumed run goes on with its own "
                              f"seed's random state; resume with seed {saved.get('seed')}, or {start_over}")
    old_lam, new_lam = (c.get("opolo", {}).get("lam") for c in (saved, config))
    if saved.get("algo") == "opolo" and old_lam is not None and (old_lam == 0) != (new_lam == 0):
        names = {True: "OPOLO-x (opolo.lam 0)", False: f"OPOLO (opolo.lam {old_lam})"}
        raise CheckpointError(f"checkpoint {path} is a run of {names[old_lam == 0]}, not of "
                              f"{'OPOLO-x' if new_lam == 0 else 'OPOLO'} (opolo.lam {new_lam})"
                              f"{_also_changed(changes, ('opolo.lam',))}; {start_over}")
    return changes


def changes_note(changes: list[str]) -> str:
    return f"resuming under config values changed since the checkpoint: {'; '.join(changes)}"


def restore_runner(runner: Any, state: dict[str, Any], config: dict[str, Any], path: str | Path,
                   start_over: str) -> None:
    """Load a checkpoint's runner state (networks, optimisers, normalisers, replay) into `runner`.

    CheckpointError with one clear line when the checkpoint cannot resume under `config`: another
    task or algorithm, or networks and replay of other shapes (a changed option such as the time
    feature), naming the config values that changed. `start_over` says how to start afresh.
    """
    saved = state["config"]
    check_same_task(saved, config, path, start_over)
    try:
        runner.load_state_dict(state["runner"])
        bad = non_finite(runner.learner)
        if bad:
            raise CheckpointError(f"checkpoint {path} holds NaN or inf ({', '.join(bad[:4])}): a run that "
                                  f"diverged; {start_over}")
    except CheckpointError:
        raise
    except (RuntimeError, ValueError, KeyError) as exc:
        changes = config_changes(saved, config)
        shown = _listing(changes)
        detail = _load_error(exc)
        raise CheckpointError(f"checkpoint {path} does not fit this config ({detail[:200]}); changed "
                              f"since it was written: {shown or 'nothing in the config'}. Resume with the "
                              f"config it was written with, or {start_over}") from None
