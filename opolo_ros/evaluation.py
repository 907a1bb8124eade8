"""The `opolo-ros evaluate` and `opolo-ros compare` commands.

``evaluate``: a policy's deterministic return on a Gymnasium task and, with ``--demos``, the
imitation distance of its states to demonstrations' (:mod:`opolo_ros.sim.imitation`), which is
all an MJCF model (no reward) gets; by default over the episodes and demonstrations its run was
measured on (the policy's metadata). ``compare``: a recording's distance to demonstrations.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from opolo_ros import signals
from opolo_ros.errors import counted
from opolo_ros.sim.task_ids import is_mjcf

if TYPE_CHECKING:
    import numpy as np


def cmd_evaluate(args: argparse.Namespace) -> int:
    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.sim.envs import check_policy_fits, evaluate
    from opolo_ros.sim.tasks import make_task_env

    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    policy = load_policy(args.model)
    meta = policy.metadata
    env_id = args.env_id or meta.env_id
    if is_mjcf(env_id) and not args.demos:
        raise ValueError(f"{env_id} is an MJCF model, which has no reward: give --demos (the demonstrations "
                         "to measure the policy's motion against: the imitation distance)")
    time_feature = meta.time_feature
    if args.max_episode_steps and not is_mjcf(env_id):
        raise ValueError(f"--max-episode-steps sets an MJCF model's time limit; {env_id} keeps its own")
    check_policy_fits(args.model, meta.obs_dim, meta.act_dim, env_id, time_feature)
    steps = args.max_episode_steps or ((meta.max_episode_steps or meta.time_feature_steps or 0)
                                       if is_mjcf(env_id) else 0)  # an MJCF model's: as trained
    make = lambda: make_task_env(env_id, time_feature=time_feature, max_episode_steps=steps)  # noqa: E731
    demos = _evaluation_demos(args, policy, env_id) if args.demos else None
    _check_control_period(args.model, meta.control_period_s, env_id)
    visited: list[np.ndarray] = []
    returns = evaluate(policy, env_id, args.episodes, seed=args.seed, time_feature=time_feature,
                       stop=signals.interrupt_event(),  # an interrupt a native import swallowed
                       make=make, visited=visited)
    longest = max(len(v) for v in visited) - 1  # steps of the longest episode
    values: dict[str, object] = {"eval_episodes": len(returns), "eval_seed": args.seed}
    if not is_mjcf(env_id):
        print(f"{env_id}: return {returns.mean():.1f} +- {returns.std():.1f} over {len(returns)} episodes")
        values.update(eval_return_mean=round(float(returns.mean()), 2),
                      eval_return_std=round(float(returns.std()), 2))
    if demos is not None:
        values.update(_imitation_report(env_id, demos, visited, longest, make, args))
    values.update({"eval_max_episode_steps": longest} if is_mjcf(env_id) else {})
    if args.stamp:
        from opolo_ros.export.onnx_policy import stamp_metadata

        also = ""
        if meta.control_period_s is None and env_id == meta.env_id:
            # a model exported before exports recorded it: its own task's period, for the actor
            from opolo_ros.sim.tasks import task_control_period

            values["control_period_s"] = task_control_period(env_id)  # (it was made: evaluated on)
            also = f" and its task's control period ({values['control_period_s']:g} s)"
        if time_feature and meta.time_feature_steps is None and env_id == meta.env_id:
            from opolo_ros.sim.tasks import time_limit

            values["time_feature_steps"] = time_limit(env_id, steps)  # the T it was evaluated (trained) with
            also += f"{' and' if not also else ','} its time feature's T ({values['time_feature_steps']})"
        stamp_metadata(args.model, values)
        print(f"wrote the evaluation{also} into the metadata of {args.model}")
    return 0


def _evaluation_demos(args: argparse.Namespace, policy, env_id: str) -> tuple[np.ndarray, int]:
    """The states of `--demos` and their episode count: the first ``--num-demos`` (default: the
    policy's ``num_demos``) episodes, read with the demonstration options (a JointState bag by the
    policy's joints, or its task model's, unless --joints, which training's order rule checks),
    checked against the policy's input and, by the task their bag records, its task."""
    from opolo_ros.data.demos import load_episodes, recorded_on_other_task, split_names
    from opolo_ros.sim.imitation import demo_states_of
    from opolo_ros.sim.tasks import check_joint_order, task_joint_names

    model_joints = policy.metadata.joint_names or task_joint_names(env_id)
    joints = args.joints
    if joints:  # training's rule: the model's joints in another order would score scrambled states
        check_joint_order(split_names(joints), model_joints, Path(env_id).name if is_mjcf(env_id) else env_id)
    elif Path(args.demos).suffix != ".npz":
        from opolo_ros.data.bags import JOINT_STATE, demonstration_type

        if demonstration_type(args.demos, args.topic or None) == JOINT_STATE:
            joints = ",".join(model_joints)
    episodes = load_episodes(args.demos, topic=args.topic, joints=joints, fields=args.fields,
                             episode_gap_s=args.episode_gap, obs_field=args.obs_field)
    count = args.num_demos if args.num_demos is not None else policy.metadata.num_demos or 0
    episodes = episodes[:count or None]  # the first ones, as training takes them
    dim = policy.metadata.obs_dim - int(policy.metadata.time_feature)
    if episodes[0].obs.shape[1] != dim:
        also = " (and the time feature)" if policy.metadata.time_feature else ""
        raise ValueError(f"demonstrations {args.demos} have {episodes[0].obs.shape[1]} values per state, "
                         f"{args.model} takes {dim}{also}")
    other = recorded_on_other_task(args.demos, episodes, env_id)  # (of the same size)
    if other:
        raise ValueError(other)
    return demo_states_of(episodes, dim), len(episodes)


def _check_control_period(model: str, period: float | None, env_id: str) -> None:
    """Warn when the policy was trained at another control step than the task's (another MJCF file's
    frame_skip or timestep): its states then follow each other at another rate than it learned."""
    from opolo_ros.sim.tasks import task_control_period

    task = task_control_period(env_id)
    if period and task and abs(task / period - 1.0) > 0.1:
        print(f"warning: {model} was trained at a control step of {period:g} s, {env_id} steps every "
              f"{task:g} s", file=sys.stderr)


def _imitation_report(env_id: str, demos: tuple[np.ndarray, int], visited: list[np.ndarray], steps: int,
                      make, args: argparse.Namespace) -> dict[str, float]:
    """Print the policy's imitation distance to `demos` (and random actions', with the same episode
    seeds); the values --stamp writes."""
    import numpy as np

    from opolo_ros.sim.imitation import imitation_distance, imitation_score, random_visited_states

    demos, count = demos
    dim = demos.shape[1]
    distance = imitation_distance(np.concatenate(visited)[:, :dim], demos)
    random_distance = imitation_distance(
        random_visited_states(make, args.episodes, args.seed, dim, signals.interrupt_event()), demos)
    score = imitation_score(distance, random_distance)
    print(f"{env_id}: imitation distance {distance:.3f} to {counted(count, 'episode')} of "
          f"{args.demos} (random actions "
          f"{random_distance:.3f}; 0 = the demonstrations' states), score {score:.3f}, over "
          f"{len(visited)} episodes of up to {steps} steps")
    return {"eval_imitation_distance": round(distance, 4), "eval_imitation_random": round(random_distance, 4),
            "eval_num_demos": count}


def cmd_compare(args: argparse.Namespace) -> int:
    """A recording's states against demonstrations': the imitation distance, both read alike."""
    from opolo_ros.data.demos import load_episodes
    from opolo_ros.sim.imitation import demo_states_of, imitation_distance

    def read(path: str) -> list:
        return load_episodes(path, topic=args.topic, joints=args.joints, fields=args.fields,
                             episode_gap_s=args.episode_gap, obs_field=args.obs_field)

    recording, demos = read(args.recording), read(args.demos)
    dims = {recording[0].obs.shape[1], demos[0].obs.shape[1]}
    if len(dims) != 1:
        raise ValueError(f"{args.recording} has {recording[0].obs.shape[1]} values per state, {args.demos} "
                         f"{demos[0].obs.shape[1]}: read both with the same --joints/--fields (or --topic)")
    dim = dims.pop()
    distance = imitation_distance(demo_states_of(recording, dim), demo_states_of(demos, dim))

    def said(path: str, episodes: list) -> str:
        return f"{path} ({counted(len(episodes), 'episode')}, {sum(len(ep.obs) for ep in episodes)} states)"

    print(f"imitation distance {distance:.3f} of {said(args.recording, recording)} to "
          f"{said(args.demos, demos)}; 0 = the demonstrations' states, in units of their spread per value")
    return 0
