"""`opolo-ros` command: train | train-expert | evaluate | export | record | record-topics | compare |
info | launch | queue | bench (evaluate and compare: :mod:`opolo_ros.evaluation`).

Every command gives a one-line error and exit status 2 on bad input (missing or corrupt files,
bad YAML, unknown or wrong-typed keys, models of the wrong dimensions), never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opolo_ros import signals
from opolo_ros.algo.config import (
    SEED_MAX,
    RunConfig,
    load_run_config,
    merge_overrides,
    read_yaml,
    run_section,
)
from opolo_ros.errors import one_line
from opolo_ros.evaluation import cmd_compare, cmd_evaluate
from opolo_ros.sim.task_ids import is_mjcf

COMMAND_OF_ALGO = {"opolo": "train", "td3": "train-expert"}


def _node_parameter_names() -> frozenset[str] | None:
    """Every parameter the package's nodes declare (what a task file's `/**` section may set); None
    without rclpy, where the nodes cannot be imported: those keys are then not checked."""
    try:
        from opolo_ros.nodes.parameters import package_parameter_names

        return package_parameter_names()
    except ImportError:
        if signals.interrupted():  # a signal while rclpy or MuJoCo initialised, not a missing rclpy
            raise KeyboardInterrupt(signals.interrupt_message()) from None
        return None


def _config(args: argparse.Namespace, algo: str | None = None) -> RunConfig:
    """The run config of a command: defaults, --config, --set, the options; `algo` is the command's
    (train: opolo, train-expert: td3), and a config or --set that asks for the other one is refused."""
    overrides = merge_overrides(args.set or [])
    if algo == "td3" and getattr(args, "demos", None) is not None:
        raise ValueError("--demos is for OPOLO (`opolo-ros train`); a TD3 expert learns from the reward")
    for key in ("seed", "total_steps", "run_dir", "env_id", "demos"):
        value = getattr(args, key, None)
        if value is not None:
            overrides[key] = value
    names = _node_parameter_names() if args.config else None
    cfg = load_run_config(args.config, overrides, names)  # every key checked first
    if algo is None:
        return cfg
    if "algo" in overrides:
        given, where = overrides["algo"], f"--set algo={overrides['algo']} is given"
    else:
        section = run_section(read_yaml(args.config), args.config) if args.config else {}
        given, where = section.get("algo"), f"{args.config} has algo: {section.get('algo')}"
    if given is not None and given != algo:
        raise ValueError(f"{where}, but `opolo-ros {args.command}` trains {algo}: "
                         f"use `opolo-ros {COMMAND_OF_ALGO[cfg.algo]}`")
    return load_run_config(args.config, {**overrides, "algo": algo}, names)


def _check_demos(cfg: RunConfig) -> None:
    """Read the demonstrations before the costly set-up (torch, environment): a bad bag fails fast."""
    if cfg.algo == "opolo" and cfg.demos:
        import dataclasses

        from opolo_ros.data.demos import load_episodes
        from opolo_ros.sim.tasks import task_demo_joints, with_joints_hint

        joints = task_demo_joints(cfg)  # as the trainer reads a JointState bag: by the model's names
        read = dataclasses.replace(cfg, demos_joints=joints)
        try:
            episodes = load_episodes(cfg.demos, **read.demo_options())
        except ValueError as err:
            raise (with_joints_hint(err, joints, cfg.env_id) if joints != cfg.demos_joints else err) from None
        taken = episodes[: cfg.num_demos or None]
        left = f"; {len(episodes) - len(taken)} more in it left out (num_demos {cfg.num_demos}; 0 = all)"
        short = f" (num_demos {cfg.num_demos}: it holds no more)" if cfg.num_demos > len(episodes) else ""
        print(f"demonstrations: {len(taken)} episode{'s' * (len(taken) != 1)} of {cfg.demos}, "
              f"{sum(len(ep.obs) - 1 for ep in taken)} transitions"
              + (left if len(taken) < len(episodes) else short))


def _own_run_dir(args: argparse.Namespace, cfg: RunConfig) -> RunConfig:
    """`cfg` in a run folder of its task's own, runs/opolo/<task> (an expert's: runs/experts/<task>),
    where nothing names one for it:
    an MJCF robot without a run_dir (every robot shared runs/default), or an --env-id of another
    task than the one the config file names, whose run folder is that task's (its checkpoint would
    be refused there), as ``opolo-ros launch sim_train env:=`` does. Unchanged with --run-dir or
    --set run_dir, and for a config file that names no task (its run_dir is the user's choice)."""
    import dataclasses

    from opolo_ros.sim.task_ids import same_task

    if args.run_dir is not None or "run_dir" in merge_overrides(args.set or []):
        return cfg
    file_task = run_section(read_yaml(args.config), args.config).get("env_id") if args.config else None
    other_task = file_task is not None and not same_task(str(file_task), cfg.env_id)
    if (is_mjcf(cfg.env_id) and cfg.run_dir == RunConfig().run_dir) or other_task:
        task = Path(cfg.env_id).stem if is_mjcf(cfg.env_id) else cfg.env_id
        return dataclasses.replace(cfg, run_dir=f"runs/{'experts' if cfg.algo == 'td3' else 'opolo'}/{task}")
    return cfg


def cmd_train(args: argparse.Namespace, algo: str = "opolo") -> int:
    cfg = _own_run_dir(args, _config(args, algo=algo))
    if is_mjcf(cfg.env_id) and cfg.algo == "td3":
        raise ValueError(f"a TD3 expert learns from the reward, which an MJCF file ({cfg.env_id}) has none "
                         "of; train OPOLO on the robot's demonstrations: opolo-ros train --env-id "
                         "<file.xml> --demos <bag> (README, 'Your own robot model')")
    _check_demos(cfg)
    from opolo_ros.train.direct import train_direct

    result = train_direct(cfg, resume=not args.no_resume)
    print(f"\n{cfg.algo} on {cfg.env_id}: {result.env_steps} env steps")
    print("\n".join(result.summary_lines(cfg.eval_episodes, cfg.algo)))
    print(f"run folder: {result.run_dir}  (policy: {result.policy_path.name}, TensorBoard: tb/, "
          f"evaluations: eval.csv, parameters: config.yaml)")
    return 0


def _gym_task(env_id: str, command: str) -> str:
    """`env_id`, unless it is an MJCF file: those have no reward to evaluate, nor a rollout helper here."""
    if is_mjcf(env_id):
        what = {"record": "record a robot model's expert through the graph: opolo-ros launch "
                          "record_expert env:=<file.xml> model:=..."}.get(command, "")
        raise ValueError(f"{command} needs a Gymnasium task id, not an MJCF file ({env_id}): it has no "
                         f"reward" + (f"; {what}" if what else ""))
    return env_id


def cmd_export(args: argparse.Namespace) -> int:
    from opolo_ros.train.checkpoint import load_checkpoint
    from opolo_ros.train.direct import export_checkpoint

    checkpoint, output = Path(args.checkpoint), Path(args.output)
    if not checkpoint.is_file():
        raise FileNotFoundError(f"checkpoint not found: {checkpoint}" if not checkpoint.exists() else
                                f"checkpoint {checkpoint} is not a file (the run folder's checkpoint.pt?)")
    if output.is_dir():
        raise ValueError(f"output {args.output} is a folder; give the ONNX file to write, e.g. "
                         f"{output / 'policy.onnx'}")
    if output.exists() and (output.suffix != ".onnx" or
                            (checkpoint.exists() and output.resolve() == checkpoint.resolve())):
        raise ValueError(f"output {args.output} exists and is no ONNX file to replace (the checkpoint "
                         "or another file of the run?); give a .onnx path")
    state = load_checkpoint(checkpoint)  # a file that is no checkpoint says so before a config is sought
    if args.config is None:  # the run's own config, which its folder keeps next to the checkpoint
        saved = checkpoint.parent / "config.yaml"
        if not saved.is_file():
            raise FileNotFoundError(f"no --config given and no {saved} (the run folder's config) "
                                    "next to the checkpoint")
        args.config = str(saved)
    path = export_checkpoint(_config(args), checkpoint, output, state)
    print(f"exported {path}")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.sim.envs import check_policy_fits

    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    model = Path(args.model)
    policy = load_policy(model)
    env_id = _gym_task(args.env_id or policy.metadata.env_id, args.command)
    time_feature = policy.metadata.time_feature if args.time_feature == "auto" else args.time_feature == "on"
    check_policy_fits(model, policy.metadata.obs_dim, policy.metadata.act_dim, env_id, time_feature,
                      trained_on=policy.metadata.env_id)
    output = Path(args.output) if args.output else Path("demos") / f"{env_id}_seed{args.seed}"
    if output.exists():
        raise FileExistsError(f"{output} already exists; refusing to overwrite a bag "
                              "(choose another --output or remove it)")
    created = [p for p in (output.parent, *output.parent.parents) if not p.exists()]
    try:
        try:  # a path that cannot hold a bag fails now, not after the whole recording
            output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"--output {output}: cannot create its folder {output.parent} "
                             f"({err.strerror})") from None
        return _record_into(args, policy, model, env_id, time_feature, output)
    except BaseException:
        for folder in created:  # deepest first; only the empty folders this command made
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _record_into(args: argparse.Namespace, policy: Any, model: Path, env_id: str, time_feature: bool,
                 output: Path) -> int:
    import numpy as np

    from opolo_ros.data.bags import write_demonstrations
    from opolo_ros.sim.rollout import complete_episodes, rollout_episodes

    metadata = {"env_id": env_id, "expert": model.name, "seed": args.seed, "source": "opolo-ros record"}
    policy = _stoppable(policy)
    episodes: list[Any] = []  # filled as each episode ends: an interrupt keeps the finished ones
    skipped: list[int] = []
    try:
        if args.skip_terminated:
            complete_episodes(policy, env_id, args.episodes, seed=args.seed, time_feature=time_feature,
                              into=episodes, skipped=skipped)
        else:
            rollout_episodes(policy, env_id, args.episodes, seed=args.seed, time_feature=time_feature,
                             into=episodes)
    except KeyboardInterrupt:
        _record_interrupted(args, output, episodes, skipped, metadata)
        raise  # not reached: _record_interrupted raises
    if args.skip_terminated:
        metadata["skipped_terminated_seeds"] = skipped  # the episodes left out, for the record
        if skipped:
            print(f"{env_id}: skipped {len(skipped)} episode(s) that ended by termination (seeds {skipped})")
    returns = np.array([ep.ret for ep in episodes])
    with signals.hold_signals():  # a Ctrl-C now must not cost the recorded episodes
        path = write_demonstrations(output, episodes, storage=args.storage, metadata=metadata)
    print(f"{env_id}: {len(episodes)} expert episode{'s' * (len(episodes) != 1)}, "
          f"return {returns.mean():.1f} +- {returns.std():.1f} "
          f"(min {returns.min():.1f}, max {returns.max():.1f}), "
          f"{sum(len(ep.obs) - 1 for ep in episodes)} transitions")
    print(f"bag: {path} ({args.storage})")
    return 0


def _record_interrupted(args: argparse.Namespace, output: Path, episodes: list[Any], skipped: list[int],
                        metadata: dict[str, Any]) -> None:
    """An interrupted `record`: the episodes that had ended go into the bag (its metadata says the
    recording was cut short), then KeyboardInterrupt with what was kept."""
    from opolo_ros.data.bags import write_demonstrations

    name = signals.interrupt_signal()
    stopped = f"stopped by {name}" if name else "stopped"
    if not episodes:
        raise KeyboardInterrupt(f"{stopped} before the first episode ended: no bag written")
    if args.skip_terminated:
        metadata["skipped_terminated_seeds"] = skipped
    metadata["interrupted"] = f"{len(episodes)} of {args.episodes} episodes recorded"
    with signals.hold_signals():  # a second Ctrl-C must not leave half a bag
        path = write_demonstrations(output, episodes, storage=args.storage, metadata=metadata)
    raise KeyboardInterrupt(f"{stopped}; the {len(episodes)} of {args.episodes} episodes that had ended "
                            f"are in {path}")


def _stoppable(policy: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`policy`, raising KeyboardInterrupt at its next step once an interrupt came, also one that
    a native import swallowed (the environment's first ``import mujoco``: signals.raise_interrupt)."""
    interrupted = signals.interrupt_event()

    def act(obs: Any) -> Any:
        if interrupted.is_set():
            raise KeyboardInterrupt(signals.interrupt_message())
        return policy(obs)

    return act


def cmd_record_topics(args: argparse.Namespace) -> int:
    """The topic_recorder node in this process (its parameters from the options)."""
    import json

    from opolo_ros.nodes.common import run_node
    from opolo_ros.nodes.topic_recorder import TopicRecorder

    if args.output and Path(args.output).exists():  # said in the option's words, not the node's
        raise FileExistsError(f"--output {args.output} already exists; refusing to overwrite it (choose "
                              "another folder or remove it)")
    values = {"topics": args.topics, "output": args.output or "", "storage": args.storage,
              "duration_s": args.duration, "max_messages": args.max_messages,
              "discovery_timeout_s": args.discovery_timeout}
    ros_args = [arg for key, value in values.items() for arg in ("-p", f"{key}:={json.dumps(value)}")]
    return run_node(TopicRecorder, ["topic_recorder", "--ros-args", *ros_args])


# `opolo-ros info`'s demonstration options (attribute: default), the run config's demos_* defaults
INFO_DEFAULTS: dict[str, object] = {"topic": "", "joints": "", "fields": "position,velocity",
                                    "episode_gap": 0.5, "obs_field": ""}


def demo_option_args(parser: argparse.ArgumentParser) -> None:
    """The options that read demonstrations from a bag (info's and evaluate's)."""
    parser.add_argument("--topic", default=INFO_DEFAULTS["topic"], help="demonstrations: the bag's topic "
                        "(default: the demonstration topic, else the only observation topic)")
    parser.add_argument("--joints", default=INFO_DEFAULTS["joints"],
                        help="demonstrations: JointState joint names in policy order")
    parser.add_argument("--fields", default=INFO_DEFAULTS["fields"], help="demonstrations: JointState fields")
    parser.add_argument("--episode-gap", dest="episode_gap", type=float, default=INFO_DEFAULTS["episode_gap"],
                        help="demonstrations: seconds between messages that split a stream into episodes "
                             "(> 0; inf: gaps never split)")
    parser.add_argument("--obs-field", dest="obs_field", default=INFO_DEFAULTS["obs_field"],
                        help="demonstrations of another message type: the fields that make the observation "
                             "(pose.pose,twist.twist for nav_msgs/Odometry)")


def cmd_info(args: argparse.Namespace) -> int:
    from opolo_ros.info import NONE_READ, info_lines

    options = {"topic": args.topic, "joints": args.joints, "fields": args.fields,
               "episode_gap_s": args.episode_gap, "obs_field": args.obs_field}
    given = [f"--{name.replace('_', '-')}" for name, default in INFO_DEFAULTS.items()
             if getattr(args, name) != default]
    lines = info_lines(Path(args.path), options, given)
    print("\n".join(lines))
    return 1 if any(line.startswith(NONE_READ) for line in lines) else 0  # no usable demonstrations


def cmd_launch(args: argparse.Namespace) -> int:
    from opolo_ros.launch_runner import launch_command

    return launch_command(args.name, args.arguments, show_args=args.show_args)


def seconds_value(text: str) -> float:
    """A duration or timeout option: a finite number of seconds >= 0 (0 = off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0 (0 = off), got {text}")
    return value


def count_value(text: str, zero: str = " (0 = no limit)", most: int | None = None) -> int:
    """A count option: an integer >= 0 (0 = no limit), at most `most` if given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative{zero}, got {value}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most}, got {value}")
    return value


def seed_value(text: str) -> int:
    """A --seed: an integer >= 0 (Gymnasium refuses a negative one, deep in the first reset)."""
    return count_value(text, zero="", most=SEED_MAX)


def _drop_stdout() -> None:
    """After a closed pipe: stdout to /dev/null, so nothing is left to fail at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _print_or_raise(text: str) -> None:
    """print, flushed; on a closed pipe, stdout is dropped and the error raised for the caller."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _drop_stdout()
        raise


def cmd_queue(args: argparse.Namespace) -> int:
    from opolo_ros.train.jobqueue import JobQueue, check_owner, load_queue, run_queue

    state_dir = Path(args.state_dir or Path("runs/queue") / Path(args.file).stem)
    queue = JobQueue(load_queue(args.file), state_dir, parallel=args.parallel, nice=args.nice,
                     source=args.file, log=_print_or_raise)
    if args.status:
        check_owner(queue)
        print("\n".join(queue.status_lines()))
        return 0
    status = run_queue(queue)
    queue.say("\n".join(queue.status_lines()))  # the exit status stands even if the output is gone
    return status


def cmd_bench(args: argparse.Namespace) -> int:
    """List the bench scripts, or replace this process with one (signals and exit status are the
    script's own: a stopped run writes its checkpoint as when started directly)."""
    from opolo_ros import bench_scripts

    if args.name is None:
        print(bench_scripts.listing())
        return 0
    script = bench_scripts.resolve(args.name)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, str(script), *args.arguments])
    return 1  # not reached


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opolo-ros", description=" ".join(__doc__.split("\n\n")[0].split()))
    sub = p.add_subparsers(dest="command", required=True)

    def run_args(sp: argparse.ArgumentParser, expert: bool = False) -> None:
        sp.add_argument("--config", help="run config YAML (see config/experts/*.yaml)" if expert else
                        "run config YAML (see config/*.yaml; config/experts/ holds train-expert's)")
        sp.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a config value, e.g. --set schedule.batch_size=256 (repeatable)")
        sp.add_argument("--env-id", dest="env_id", help="the task: a Gymnasium MuJoCo id (Hopper-v5), or "
                        "an MJCF file (robot.xml: your own robot, evaluated by its imitation distance; "
                        "README, 'Your own robot model')" if not expert else
                        "the task: a Gymnasium MuJoCo id (Hopper-v5)")
        # train-expert takes --demos only to say that a TD3 expert learns from the reward instead
        sp.add_argument("--demos", help=argparse.SUPPRESS if expert else
                        "demonstrations: rosbag2 bag, folder of bags, or .npz; how a bag is read, one "
                        "--set each: --set demos_topic=/joint_states --set demos_joints=a,b --set "
                        "demos_fields=position,velocity --set demos_obs_field=... --set "
                        "demos_episode_gap_s=0.5 --set num_demos=4 (0 = all); README, 'Your own "
                        "demonstrations'")
        sp.add_argument("--seed", type=seed_value, help="run seed (env, networks, exploration)")
        sp.add_argument("--total-steps", dest="total_steps", type=int, help="env steps to train for")
        sp.add_argument("--run-dir", dest="run_dir", help="the run folder (checkpoint, policy.onnx, "
                        "eval.csv, tb/); a rerun resumes from it")

    def export_args(sp: argparse.ArgumentParser) -> None:
        """What applies to an export: the run's seed, time feature and trainer come from the checkpoint."""
        sp.add_argument("checkpoint", help="a run folder's checkpoint.pt")
        sp.add_argument("output", help="the ONNX file to write")
        sp.add_argument("--config", help="run config YAML the networks are built from (default: the "
                                         "config.yaml next to the checkpoint)")
        sp.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a value of the run config (repeatable), e.g. --set "
                             "env_id=path/to/robot.xml where an older checkpoint's MJCF file has moved")

    t = sub.add_parser("train", help="train OPOLO with the direct (no-ROS) loop")
    run_args(t)
    t.add_argument("--no-resume", action="store_true",
                   help="start over: an earlier run's files in the run folder move to its "
                        "previous-<date>-<time>/")
    t.set_defaults(func=cmd_train)

    te = sub.add_parser("train-expert", help="train a TD3 expert on the environment reward")
    run_args(te, expert=True)
    te.add_argument("--no-resume", action="store_true", help="start over (as train's)")
    te.set_defaults(func=lambda a: cmd_train(a, algo="td3"))

    ev = sub.add_parser("evaluate", help="evaluate an ONNX policy deterministically")
    ev.add_argument("model", help="an ONNX policy (its metadata names its task)")
    ev.add_argument("--env-id", dest="env_id", help="defaults to the model's metadata")
    ev.add_argument("--episodes", type=int, default=10, help="deterministic episodes (default 10)")
    ev.add_argument("--seed", type=seed_value, default=10_000,
                    help="episode k is reset with seed + k (default 10000; a run's evaluations use 10000 "
                         "+ its seed)")
    ev.add_argument("--stamp", action="store_true",
                    help="write the evaluation (mean/std/episodes/seed, the imitation distances with "
                         "--demos) into the model's metadata, and its task's control period where the "
                         "model does not record one")
    ev.add_argument("--demos", default="",
                    help="also (for an MJCF model: only) the imitation distance of the policy's states to "
                         "these demonstrations' (a bag, folder of bags or .npz), against random actions'")
    ev.add_argument("--max-episode-steps", dest="max_episode_steps", type=count_value, default=0,
                    help="an MJCF model's episode length (default: the policy's training one, its "
                         "max_episode_steps or time-feature T metadata, else 1000; a robot runs on past "
                         "it: try longer)")
    ev.add_argument("--num-demos", dest="num_demos", type=count_value, default=None,
                    help="--demos: the first this many episodes (default: as many as the policy learned "
                         "from, its num_demos metadata; 0 = all)")
    demo_option_args(ev)
    ev.set_defaults(func=cmd_evaluate)

    ex = sub.add_parser("export", help="export the policy of a checkpoint to ONNX (config: --config, "
                                       "else the config.yaml next to the checkpoint)")
    export_args(ex)
    ex.set_defaults(func=cmd_export)

    rec = sub.add_parser("record", help="roll out an ONNX expert and record its states into a rosbag2 bag")
    rec.add_argument("--model", required=True, help="expert policy (.onnx)")
    rec.add_argument("--episodes", type=int, default=4, help="episodes to record (default 4, as the paper)")
    rec.add_argument("--output", help="new bag folder (default: demos/<env_id>_seed<seed>, as "
                     "record_expert; models/demos/<env_id> holds the shipped bags)")
    rec.add_argument("--env-id", dest="env_id", help="defaults to the model's metadata")
    rec.add_argument("--seed", type=seed_value, default=0,
                     help="episode k is reset with seed + k (default 0)")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="default mcap")
    rec.add_argument("--skip-terminated", dest="skip_terminated", action="store_true",
                     help="keep only episodes that reach the time limit (skip falls; their seeds go "
                          "into the bag metadata); at most 5 tries per episode")
    rec.add_argument("--time-feature", dest="time_feature", choices=("auto", "on", "off"), default="auto",
                     help="whether the expert sees the time feature (auto: the model's metadata); "
                          "the bag stores the env's observations without it")
    rec.set_defaults(func=cmd_record)

    rt = sub.add_parser("record-topics", help="record ROS topics into a rosbag2 bag (ros2 bag record for "
                                              "a machine without rosbag2), e.g. a robot's /joint_states")
    rt.add_argument("topics", nargs="+", help="topics to record")
    rt.add_argument("-o", "--output", help="new bag folder (default: rosbag2_<date-time>)")
    rt.add_argument("--storage", choices=("sqlite3", "mcap"), default="sqlite3",
                    help="sqlite3 (default): committed to disk every second, so a crash loses at most "
                         "the last second; mcap: readable only once the recording ends")
    rt.add_argument("--duration", type=seconds_value, default=0.0,
                    help="seconds to record from the first subscription (default: until Ctrl-C)")
    rt.add_argument("--max-messages", dest="max_messages", type=count_value, default=0,
                    help="stop after this many messages, all topics together (default: no limit)")
    rt.add_argument("--discovery-timeout", dest="discovery_timeout", type=seconds_value, default=0.0,
                    help="fail (status 1) if a topic has no publisher after this many seconds "
                         "(default: wait for ever)")
    rt.set_defaults(func=cmd_record_topics)

    cmp = sub.add_parser("compare", help="the imitation distance of a recording's states (a robot's "
                                         "/joint_states bag) to demonstrations'")
    cmp.add_argument("recording", help="a bag, folder of bags or .npz: the states to judge")
    cmp.add_argument("demos", help="a bag, folder of bags or .npz: the demonstrations (read the same way)")
    demo_option_args(cmp)
    cmp.set_defaults(func=cmd_compare)

    inf = sub.add_parser("info", help="what an ONNX policy (inputs, outputs, task), an MJCF model (joints, "
                                      "actuators, control period) or a bag / .npz (topics, episodes) holds")
    inf.add_argument("path", help="a .onnx policy, a .xml MJCF model, a rosbag2 bag (folder or storage "
                                  "file), a folder of bags, or a .npz of episodes")
    demo_option_args(inf)
    inf.set_defaults(func=cmd_info)

    la = sub.add_parser("launch", help="run a launch file's node graph in one process (without ros2 launch)")
    la.add_argument("name", help="launch file: sim_train, record_expert, deploy (or a path)")
    la.add_argument("arguments", nargs="*", default=[], metavar="arg:=value", help="launch arguments")
    la.add_argument("-s", "--show-args", dest="show_args", action="store_true",
                    help="list the launch file's arguments and exit")
    la.set_defaults(func=cmd_launch)

    qu = sub.add_parser("queue", help="run a queue file of long, resumable jobs a few at a time")
    qu.add_argument("file", help="queue YAML: jobs: [{name: ..., command: ...}, ...] in priority order; "
                                 "a command runs without a shell (sh -c '...' for pipes, &&, $VARS)")
    qu.add_argument("--parallel", type=int, default=1,
                    help="jobs at a time (default 1; one per free core at most: training jobs share the CPU)")
    qu.add_argument("--nice", type=int, default=0,
                    help="run the jobs this much nicer than the queue (0..19, as `nice -n`)")
    qu.add_argument("--state-dir", dest="state_dir",
                    help="logs and job states (default: runs/queue/<file stem>)")
    qu.add_argument("--status", action="store_true",
                    help="print each job's state and last progress line, run nothing")
    qu.set_defaults(func=cmd_queue)

    be = sub.add_parser("bench", help="run a benchmark script of bench/ by name (none: list them)")
    be.add_argument("name", nargs="?", help="script, e.g. throughput, latency, suite")
    be.add_argument("arguments", nargs=argparse.REMAINDER, metavar="...",
                    help="the script's own arguments (`opolo-ros bench NAME --help`)")
    be.set_defaults(func=cmd_bench)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the chosen command; bad input becomes a one-line error and status 2. SIGINT and SIGTERM
    outside the command's own handling (setting up, the training loop's second signal while it
    saves, a launch before its graph runs) end it with one line and status 130, not a silent 143,
    and not as an error when the interrupt came out of a native import as another exception."""
    func: Callable[[argparse.Namespace], int] = args.func
    signals.clear_interrupted()
    own_handling = args.command == "queue" or threading.current_thread() is not threading.main_thread()
    previous = {} if own_handling else {sig: signal.signal(sig, signals.raise_interrupt)
                                        for sig in signals.STOP_SIGNALS}
    try:
        status = func(args)
        # An interrupt swallowed inside a native import: the command still ends as interrupted.
        return _interrupted(args, "") if signals.interrupted() else status
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        _drop_stdout()
        return 0
    except KeyboardInterrupt as exc:
        return _interrupted(args, str(exc))
    except (ValueError, FileNotFoundError, OSError) as exc:
        if signals.interrupted():
            return _interrupted(args, "")
        print(f"opolo-ros {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except Exception:
        if signals.interrupted():  # e.g. ImportError: initialization failed, from inside `import mujoco`
            return _interrupted(args, "")
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signals.clear_interrupted()  # dealt with: a later command or loop of this process starts afresh


def _interrupted(args: argparse.Namespace, why: str) -> int:
    print(f"opolo-ros {args.command}: interrupted: {why or signals.interrupt_message()}", file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    status = run(args)
    if argv is None and args.command == "launch":
        # The node graph is closed and its files flushed: skip the interpreter's finalisation
        # (seconds with torch loaded) so that a stopped launch exits promptly.
        from opolo_ros.nodes.common import exit_now

        exit_now(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
