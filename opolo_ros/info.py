"""``opolo-ros info PATH``: what a policy, a robot model, or a demonstration file holds.

A robotics engineer's first questions before deploying or training: which inputs does this ONNX
policy take and in which order, which joints and actuators does this MJCF model give a policy, and
which topics and episodes does this bag hold. One function per kind of file; each returns the lines
to print.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from opolo_ros.data.demos import Episode, cut_last_note, recorded_period
from opolo_ros.errors import counted

NONE_READ = "  demonstrations: none read"  # the line for a bag the options make no episodes of


def info_lines(path: Path, demo_options: dict[str, object], given: Sequence[str] = ()) -> list[str]:
    """The description of `path` by its kind: .onnx, .xml (MJCF), .npz, else a rosbag2 bag.
    `given`: the demonstration options the user set (as `--topic`), refused for a policy or a model,
    which they do not describe (a ValueError: they were ignored without a word)."""
    if not path.exists():
        raise FileNotFoundError(f"not found: {path}")
    kind = {".onnx": "an ONNX policy", ".xml": "an MJCF model"}.get(path.suffix.lower(), "")
    if kind and given:
        raise ValueError(f"{', '.join(given)} select demonstrations in a bag or .npz; {path} is {kind}")
    if path.suffix.lower() == ".onnx":
        return policy_lines(path)
    if path.suffix.lower() == ".xml":
        return mjcf_lines(path)
    return demonstration_lines(path, demo_options)


def _values(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def policy_lines(path: Path) -> list[str]:
    from opolo_ros.export.onnx_policy import REQUIRED_KEYS, TIME_FEATURE_STEPS_KEY, load_policy

    meta = load_policy(path).metadata
    inputs = counted(meta.obs_dim, "value")
    if meta.time_feature:
        clock = (f"time_feature_clock:={meta.time_feature_steps}, T the training episode length,"
                 if meta.time_feature_steps else "time_feature_clock:=T, the training episode length,")
        inputs += (f" (the last is the time feature 1 - t/T: deploy with {clock} and "
                   f"{counted(meta.obs_dim - 1, 'observation value')})")
    lines = [f"ONNX policy {path}",
             f"  trained on: {meta.env_id} (step {meta.training_step}, version {meta.version}, "
             f"{meta.source})",
             f"  input 'obs': {inputs}",
             f"  output 'action': {counted(meta.act_dim, 'value')} within low {_values(meta.action_low)}, "
             f"high {_values(meta.action_high)}"]
    extra = {k: v for k, v in meta.extra.items()
             if k not in REQUIRED_KEYS and k not in ("time_feature", TIME_FEATURE_STEPS_KEY)}
    lines += [f"  {key}: {value}" for key, value in sorted(extra.items())]
    return lines


def mjcf_lines(path: Path) -> list[str]:
    import mujoco

    from opolo_ros.sim.tasks import MjcfEnv

    env = MjcfEnv(path)
    names = env.joints[0]
    low, high = env.action_space.low, env.action_space.high
    actuators = [mujoco.mj_id2name(env.model, mujoco.mjtObj.mjOBJ_ACTUATOR, a) or f"actuator{a}"
                 for a in range(env.model.nu)]
    lines = [f"MJCF model {path}",
             f"  observation: {counted(2 * len(names), 'value')}: the positions of {', '.join(names)}, "
             "then their velocities",
             f"  action: {counted(len(actuators), 'value')}: "
             + ", ".join(f"{a} [{lo:g}, {hi:g}]" for a, lo, hi in zip(actuators, low, high)),
             f"  control period: {env.dt:g} s ({1 / env.dt:g} Hz): timestep {env.model.opt.timestep:g} s x "
             f"frame_skip {env.frame_skip}",
             f"  JointState demonstrations / deploy: demos_joints:={','.join(names)} / "
             f"joints:={','.join(names)}"]
    lines += [f"  note: {note}" for note in env.notes]
    env.close()
    return lines


def _episode_lines(episodes: list[Episode]) -> list[str]:
    lengths = [len(ep.obs) for ep in episodes]
    returns = np.array([ep.ret for ep in episodes], dtype=np.float64)
    known = returns[~np.isnan(returns)]
    said = (f"returns {', '.join(f'{r:.1f}' for r in returns)}" if known.size == returns.size
            else "returns unknown" if not known.size
            else f"returns {known.size} known, mean {known.mean():.1f}")
    lines = [f"  demonstrations: {counted(len(episodes), 'episode')} of obs_dim {episodes[0].obs.shape[1]}, "
             f"{sum(lengths) - len(lengths)} transitions (states per episode: "
             f"{', '.join(map(str, lengths[:20]))}{', ...' if len(lengths) > 20 else ''}); {said}"]
    period = recorded_period(episodes)
    if period is not None:  # a stream's, from its time stamps: the task's control step should match
        lines.append(f"  recorded at {1 / period:.4g} Hz (a state every {period:.4g} s, the median)")
    cut = cut_last_note(episodes)
    if cut:
        lines.append(f"  note: {cut}")
    joints, fields = episodes[0].meta.get("joints"), episodes[0].meta.get("fields")
    if joints and fields:  # a JointState bag: the order its values make the observation in
        plural = {"position": "positions", "velocity": "velocities", "effort": "efforts"}
        lines.append(f"  observation: the {' then '.join(plural.get(f, f) for f in fields)} of joints "
                     f"{','.join(joints)}, in this order (demos_joints / deploy joints)")
    return lines


def demonstration_lines(path: Path, demo_options: dict[str, object]) -> list[str]:
    """A bag's topics, metadata and episodes; a folder of several bags: each bag's, then whether
    they make one demonstration set (training's ``--demos FOLDER`` reads them as one)."""
    if path.suffix == ".npz":
        return [f"demonstration file {path}", *_read_lines(path, demo_options)]
    from opolo_ros.data.bags import bag_topics, read_bag_metadata

    lines, bags = [], bag_topics(path)
    for bag, topics in bags:
        lines.append(f"rosbag2 bag {bag}")
        lines += [f"  {name} [{kind}]: {count} messages" for name, kind, count in topics]
        if bag.is_dir():
            custom = read_bag_metadata(bag)
            lines += [f"  {key}: {value}" for key, value in sorted(custom.items())
                      if key in ("env_id", "expert", "seed", "source", "interrupted")]
        if len(bags) > 1:
            lines += _read_lines(bag, demo_options)
    if len(bags) == 1:
        return lines + _read_lines(path, demo_options)
    return [*lines, f"folder {path}, as one demonstration set (--demos {path}):",
            *_read_lines(path, demo_options)]


def _read_lines(path: Path, demo_options: dict[str, object]) -> list[str]:
    """The episodes read from `path` with the options, or that none were and why."""
    from opolo_ros.data.demos import load_episodes

    try:
        episodes = load_episodes(path, **demo_options)  # type: ignore[arg-type]
    except ValueError as err:  # BagError: which topic or option would make it readable
        options = ("" if path.suffix == ".npz" else  # (an .npz is read as it is: no options)
                   " [here the options are --topic, --joints, --fields, --episode-gap, --obs-field]")
        return [f"{NONE_READ} ({err}){options}"]
    return _episode_lines(episodes)
