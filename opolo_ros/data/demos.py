"""State-only expert demonstrations: typed episodes, validation, (s, s') sampling, .npz storage.

An episode is the state sequence obs[0..T] of one expert run (T + 1 rows, no actions). Bag files
(rosbag2) are read by `data.bags`; this module is the in-memory form and a compact .npz form.
torch is imported only by :class:`ExpertDataset`, so the demo player and recorder nodes start (and
stop) without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from opolo_ros.algo.batch import StatePairs


# Training data (demonstrations, replay) beyond this is refused: one value of 1e30 overflowed the
# normalisers' variance (float32) and turned every network into NaN; MuJoCo itself takes 1e10 for
# a diverged simulation.
MAX_TRAINING_ABS = 1e10
# time_feature: demonstrations whose longest episode is shorter than this share of the time limit T
# are warned of (:func:`short_episodes_note`); a few steps short of T (an expert that fell at the end)
# is no news
SHORT_EPISODE_SHARE = 0.9


@dataclass
class Episode:
    obs: np.ndarray  # [T + 1, obs_dim] float32
    ret: float = float("nan")  # environment return of the expert run, if known
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.obs = np.asarray(self.obs, dtype=np.float32)
        if self.obs.ndim != 2 or self.obs.shape[0] < 2:
            raise ValueError(f"an episode needs obs of shape [T+1 >= 2, obs_dim], got {self.obs.shape}")
        if not np.all(np.isfinite(self.obs)):
            raise ValueError("episode observations contain NaN or inf")
        if self.obs.size and float(np.abs(self.obs).max()) > MAX_TRAINING_ABS:
            step, col = np.argwhere(np.abs(self.obs) > MAX_TRAINING_ABS)[0]
            raise ValueError(f"episode observation {step} has {self.obs[step, col]:.3g} at index {col}, "
                             f"beyond +-{MAX_TRAINING_ABS:g} (it would overflow the normalisers)")


def save_npz(path: str | Path, episodes: list[Episode], **meta: str) -> None:
    arrays = {f"obs_{k}": ep.obs for k, ep in enumerate(episodes)}
    arrays["returns"] = np.asarray([ep.ret for ep in episodes], dtype=np.float64)
    np.savez_compressed(path, **arrays, **{f"meta_{k}": np.asarray(v) for k, v in meta.items()})


def load_npz(path: str | Path) -> list[Episode]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"demonstration file not found: {path}")
    try:
        data = np.load(path)  # allow_pickle stays off: a demonstration file holds plain arrays
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path} is not a readable .npz of demonstrations "
                         f"({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is a single .npy array, not an .npz of demonstrations (obs_<k> arrays)")
    with data:
        names = sorted((k for k in data.files if k.startswith("obs_")), key=lambda k: (len(k), k))
        n = len(names)
        if n == 0:
            raise ValueError(f"{path} holds no episodes (no obs_<k> arrays)")
        missing = next((f"obs_{k}" for k in range(n) if f"obs_{k}" not in names), None)
        if missing is not None:  # (a KeyError's traceback before)
            held = ", ".join(names[:5]) + (", ..." if n > 5 else "")
            raise ValueError(f"{path}: its {n} episodes must be the arrays obs_0 .. obs_{n - 1}, and "
                             f"{missing} is not there (it holds {held})")
        returns = np.asarray(data["returns"]) if "returns" in data.files else np.full(n, np.nan)
        if returns.shape != (n,):  # (an IndexError's traceback before, for fewer)
            raise ValueError(f"{path}: 'returns' has shape {returns.shape}, not one value per episode ({n})")
        return [Episode(data[f"obs_{k}"], float(returns[k])) for k in range(n)]


class ExpertDataset:
    """All (s, s') pairs of the expert episodes, sampled uniformly with its own generator."""

    def __init__(self, episodes: list[Episode], obs_dim: int, seed: int = 0) -> None:
        import torch

        if not episodes:
            raise ValueError("no expert episodes given")
        for k, ep in enumerate(episodes):
            if ep.obs.shape[1] != obs_dim:
                raise ValueError(f"expert episode {k} has obs_dim {ep.obs.shape[1]}, "
                                 f"the environment has {obs_dim}")
        self.episodes = episodes
        self.obs = torch.from_numpy(np.concatenate([ep.obs[:-1] for ep in episodes]))
        self.next_obs = torch.from_numpy(np.concatenate([ep.obs[1:] for ep in episodes]))
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.obs.shape[0]

    def sample(self, batch_size: int) -> StatePairs:
        import torch

        from opolo_ros.algo.batch import StatePairs

        idx = torch.randint(len(self), (batch_size,), generator=self.generator)
        return StatePairs(self.obs[idx], self.next_obs[idx])

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def split_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (``demos_joints``, ``demos_fields``), blanks left out."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def load_episodes(path: str | Path, topic: str = "", joints: str = "",
                  fields: str = "position,velocity", episode_gap_s: float = 0.5,
                  obs_field: str = "") -> list[Episode]:
    """State-only episodes from a .npz file or a rosbag2 bag / folder of bags (see `data.bags`):
    from `topic` ("" = automatic); JointState `joints` ("a,b" in policy order; "" = the first
    message's order) and `fields`; `episode_gap_s` splits observation streams; `obs_field`
    ("pose.pose,twist.twist"; "" = none) makes the observation of any other type. The bag options
    are the run config's `demos_*` keys (`RunConfig.demo_options()`)."""
    path = Path(path)
    if path.suffix == ".npz":
        return load_npz(path)
    from opolo_ros.data.bags import read_demonstrations  # rosbags is only needed for bags

    return read_demonstrations(path, topic=topic or None, joints=split_names(joints) or None,
                               fields=split_names(fields), episode_gap_s=episode_gap_s,
                               obs_field=split_names(obs_field) or None)


def recorded_period(episodes: list[Episode]) -> float | None:
    """The seconds between recorded states (the median of the episodes' own, which a stream bag's
    reader measures from its time stamps); None for demonstrations that do not say (an .npz, the
    project's demonstration layout)."""
    periods = [float(ep.meta["period_s"]) for ep in episodes if ep.meta.get("period_s")]
    return float(np.median(periods)) if periods else None


def rate_note(episodes: list[Episode], control_period_s: float | None) -> str | None:
    """A warning when the demonstrations' states were recorded at another rate than the task's
    control step (more than 10 % off): each (s, s') pair then spans another time than a policy's
    step, and OPOLO imitates transitions the policy cannot make. None when they agree or either is
    not known."""
    period = recorded_period(episodes)
    if period is None or not control_period_s or abs(period / control_period_s - 1.0) <= 0.1:
        return None
    return (f"the demonstrations' states come every {period:.4g} s ({1 / period:.4g} Hz), the task's "
            f"control step is {control_period_s:.4g} s ({1 / control_period_s:.4g} Hz): each (s, s') pair "
            f"spans {period / control_period_s:.3g} control steps. Record them at the task's rate (a "
            "bag's time stamps are its recorder's clock: a simulation run faster than real time is "
            "recorded faster), or, for an MJCF robot, set its control step with <custom><numeric "
            "name=\"frame_skip\" data=\"N\"/></custom> (timestep x N)")


def short_episodes_note(episodes: list[Episode], time_limit_steps: int | None) -> str | None:
    """A warning for a ``time_feature`` run whose demonstrations' longest episode is shorter than
    SHORT_EPISODE_SHARE of the time limit T: the discriminator never sees an expert state with a time
    feature below 1 - longest/T, so late in the learner's episodes its reward says nothing. Only the
    longest is compared (states cannot tell an expert that fell from a recording cut short). None
    when it is long enough, or for no episodes or no T."""
    if not episodes or not time_limit_steps:
        return None
    lengths = sorted(len(ep.obs) - 1 for ep in episodes)
    longest = lengths[-1]
    if longest >= SHORT_EPISODE_SHARE * time_limit_steps:
        return None
    counts = f"{lengths[0]}..{longest}" if lengths[0] != longest else f"{longest}"
    which = f"{len(lengths)} demonstration episodes have" if len(lengths) > 1 else "demonstration episode has"
    return (f"time_feature is on with a time limit of T={time_limit_steps} steps, but the {which} "
            f"{counts} steps: no expert state has a time feature below "
            f"{1 - longest / time_limit_steps:.3g}, so the learner's reward says nothing in the last "
            f"{time_limit_steps - longest} steps of its episodes. Record full-length episodes, set "
            f"max_episode_steps to {longest} (an MJCF robot), or set time_feature: false")


def cut_last_note(episodes: list[Episode]) -> str | None:
    """A warning when a recorded stream's last episode is shorter than every other one, which all
    have one length (a task's time limit): a recording stopped mid-episode (``--duration``, a
    signal) ends with a part of one, which the reader cannot tell from a whole one. Only for state
    streams (episodes that carry their recording's ``period_s``): an expert recorder writes whole
    episodes. None otherwise, or for fewer than 3 episodes (nothing to compare with)."""
    if len(episodes) < 3 or not episodes[-1].meta.get("period_s"):
        return None
    lengths = [len(ep.obs) for ep in episodes]
    if len(set(lengths[:-1])) != 1 or lengths[-1] >= lengths[0]:
        return None
    return (f"the last demonstration episode has {lengths[-1]} states, every other one {lengths[0]}: "
            "a recording cut off mid-episode (its duration, a stop)? It is used as it is; leave it out "
            f"with num_demos: {len(episodes) - 1}")


def recorded_on_other_task(path: object, episodes: list[Episode], env_id: str) -> str | None:
    """Why `episodes` (of `path`) are not `env_id`'s: the task their bag records (its metadata's
    ``env_id``; an MJCF file compared by file name) is another; None when it is the same or not
    said. Training refuses them with it, ``evaluate --demos`` too: HalfCheetah's and Walker2d's
    states both have 17 values, a robot model of the pendulum's joints 4 like the pendulum's."""
    from opolo_ros.sim.task_ids import same_task_name

    recorded = {str(ep.meta.get("env_id", "")) for ep in episodes} - {""}
    other = sorted(t for t in recorded if not same_task_name(t, env_id))
    if not other:
        return None
    return (f"demonstrations {path} were recorded on {', '.join(other)} (the bag's metadata says so), "
            f"not on {env_id}")
