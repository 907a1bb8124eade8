"""OPOLO training through the ROS graph: sim_bridge + actor + learner + demo_player.

    ros2 launch opolo_ros sim_train.launch.py env:=InvertedPendulum-v5 seed:=1
    opolo-ros launch sim_train env:=InvertedPendulum-v5 seed:=1      # same graph, one process

The demo player publishes the expert episodes; the learner waits for them, then trains on the
replay stream of the lock-step sim bridge, whose actions the actor chooses (warm-up random, then
the newest policy + exploration noise). The run ends when the learner has consumed
``total_steps`` transitions (``on_exit=Shutdown()``); the run folder then holds policy.onnx,
TensorBoard logs (tb/), eval.csv, learning_curve.png and the parameters used.

Parameters come from the task's file in ``config/`` (``params_file``); every argument below that
is left empty keeps the file's value. The actor's warm-up, noise and seed are taken from the
learner's run config, and ``max_ahead`` is given to both the bridge and the actor (as its
``swap_delay``), so that a run is reproducible for a seed.

Before any node starts, a key of the parameter file that its node does not declare (a typo rcl
would ignore) and demonstrations that do not fit the task (another task's) are one-line errors.
"""

from pathlib import Path

from opolo_ros.launch_runner import (
    LaunchArg,
    NodeSpec,
    arg_value,
    launch_description,
    node_parameters,
    package_path,
    resolve_path,
    run_config,
    task_params_file,
    typed_value,
    yaml_value,
)

DEFAULT_ENV = "InvertedPendulum-v5"
ARGUMENTS = [
    LaunchArg("env", "", "Gymnasium MuJoCo task id, or a path to an MJCF (.xml) file; empty = the "
                         "parameter file's env_id (InvertedPendulum-v5 without a file)"),
    LaunchArg("params_file", "", "ROS 2 parameter file; empty = the package's config/<task>.yaml for "
                                 "env (e.g. inverted_pendulum.yaml), or node defaults if there is none"),
    LaunchArg("demos", "", "expert demonstrations: rosbag2 bag, folder of bags or .npz; empty = the "
                           "parameter file's demos (learner, /** or demo_player section), else "
                           "models/demos/<env>"),
    LaunchArg("num_demos", "", "demonstration episodes to train on (the bag's first ones); 0 = all; "
                               "empty = the file's, else 4 (the paper's)"),
    LaunchArg("seed", "", "seed of the simulation, the exploration and the learner; empty = the file's"),
    LaunchArg("namespace", "", "namespace of all nodes (their relative topics: observation, action, "
                               "policy_version); /opolo/* topics stay shared"),
    LaunchArg("total_steps", "", "environment steps (transitions) of the run; empty = the file's"),
    LaunchArg("max_episode_steps", "", "an MJCF robot's time limit in steps (the learner's and the "
                                       "bridge's, the time feature's T); empty = the file's, else 1000"),
    LaunchArg("run_dir", "", "run folder (policy, logs, checkpoint); empty = the file's run_dir + "
                             "'-graph' (kept apart from the direct loop's runs); with env:= of "
                             "another task than the file's, or an MJCF file the file gives no "
                             "run_dir of its own: runs/opolo/<task or file stem>-graph"),
    LaunchArg("resume", "", "resume from the run folder's checkpoint when there is one (true/false); "
                            "empty = the file's learner value, else true"),
    LaunchArg("max_ahead", "", "transitions the bridge may run ahead of the learner (flow control); "
                               "empty = the file's sim_bridge value, else 0"),
    LaunchArg("policy_every", "", "transitions between policy exports; empty = the file's learner value, "
                                  "else the smallest multiple of schedule.train_freq >= 250"),
    LaunchArg("demos_topic", "", "the bag's topic to read the demonstrations from; empty = the file's "
                                 "demos_topic, else the bag's only observation topic"),
    LaunchArg("demos_joints", "", "JointState demonstrations: comma-separated joint names in the "
                                  "policy's order; empty = the file's, else the task model's hinge "
                                  "and slide joints in its order (where they make the observation), "
                                  "else the bag's first message's"),
    LaunchArg("demos_fields", "", "JointState demonstrations: comma-separated fields of each joint "
                                  "(position, velocity, effort); empty = the file's, else "
                                  "position,velocity"),
]
# demo_player's own names of the run config's demonstration keys (a task file may set either)
PLAYER_KEYS = {"bag_topic": "demos_topic", "bag_joints": "demos_joints", "bag_fields": "demos_fields",
               "episode_gap_s": "demos_episode_gap_s", "bag_obs_field": "demos_obs_field",
               "num_demos": "num_demos"}


def _int_or(args: dict, name: str, fallback: object, where: str) -> int:
    """Launch argument `name` as an int, or else `fallback` (from `where`)."""
    if args[name] != "":
        return arg_value(args, name, int)
    return typed_value(fallback, int, where)


def _check_episode_length(cfg, bridge_file: dict) -> None:
    """With the time feature, the bridge's episode length must be the learner's: the feature is
    1 - t/T with the learner's T (the task's limit, or an MJCF robot's `max_episode_steps`) in the
    demonstrations and the learner's evaluation."""
    steps = bridge_file.get("max_episode_steps", 0)
    if not cfg.time_feature or not isinstance(steps, int) or steps <= 0:
        return
    from opolo_ros.sim.task_ids import is_mjcf
    from opolo_ros.sim.tasks import time_limit

    task_steps = time_limit(cfg.env_id, cfg.max_episode_steps)  # None: a task not known here
    if task_steps is not None and steps != task_steps:
        fix = ("set max_episode_steps for both (a /** key of the task file)" if is_mjcf(cfg.env_id) else
               "leave it 0")
        raise ValueError(f"parameter sim_bridge.max_episode_steps ({steps}) with time_feature: the "
                         f"bridge's time feature would be 1 - t/{steps}, the learner's (demonstrations, "
                         f"evaluation) 1 - t/{task_steps}; {fix}, or turn time_feature off")


def _check_timeouts(learner_file: dict, bridge_file: dict) -> None:
    """A learner restarted within the bridge's `learner_timeout_s` is not seen as gone: the batches
    published while it was down are re-sent only when the acknowledgement has stalled that long. A
    learner that stops waiting for a missing batch sooner (`replay_gap_timeout_s`) goes on without
    it: a lost batch (found by a probe with learner_timeout_s 15 and 30)."""
    from opolo_ros.algo.config import LEARNER_PARAMETERS as LEARNER
    from opolo_ros.nodes.sim_bridge import PARAMETERS as BRIDGE

    silence = bridge_file.get("learner_timeout_s", BRIDGE["learner_timeout_s"][0])
    gap = learner_file.get("replay_gap_timeout_s", LEARNER["replay_gap_timeout_s"][0])
    numbers = isinstance(silence, (int, float)) and isinstance(gap, (int, float))
    if numbers and 0 < gap <= silence:  # (a gap timeout of 0: the learner never waits, by choice)
        raise ValueError(f"parameter sim_bridge.learner_timeout_s ({silence:g} s) must be below "
                         f"learner.replay_gap_timeout_s ({gap:g} s): the learner would give up on a batch "
                         "lost while it restarted before the bridge re-sends it")


def _check_run_folder(cfg, resume: bool) -> None:
    """What the learner refused only once the whole graph ran (seconds in, the demonstrations
    published): a run folder another training holds, and a checkpoint of another seed, task or
    OPOLO variant (its config.yaml says so) to resume. One line before any node starts."""
    import yaml

    from opolo_ros.algo.config import to_dict
    from opolo_ros.train.checkpoint import resume_changes
    from opolo_ros.train.runlock import RunFolderInUse, RunFolderLock

    run_dir = Path(cfg.run_dir)
    if (run_dir / ".lock").is_file():
        lock = RunFolderLock(run_dir)
        try:
            lock.acquire()
        except RunFolderInUse as err:
            raise ValueError(str(err)) from None
        finally:
            lock.release()
    checkpoint, saved = run_dir / "checkpoint.pt", run_dir / "config.yaml"
    if not (resume and checkpoint.is_file() and saved.is_file()):
        return
    try:
        config = yaml.safe_load(saved.read_text())
    except (OSError, yaml.YAMLError):
        return  # the learner reads the checkpoint itself
    if isinstance(config, dict) and {"env_id", "algo"} <= config.keys():
        resume_changes({"config": config}, to_dict(cfg), checkpoint,
                       "use another run_dir (or resume:=false to start over)")


def describe(args: dict) -> list:
    """The nodes of this graph for the given argument values (strings)."""
    from opolo_ros.algo.config import RunConfig, flatten, to_dict
    from opolo_ros.nodes.common import default_policy_every
    from opolo_ros.sim.task_ids import is_mjcf, same_task
    from opolo_ros.sim.tasks import task_demo_joints, with_joints_hint
    from opolo_ros.train.direct import check_demonstrations

    ns = args["namespace"]
    params_file = resolve_path(args["params_file"]) or task_params_file(args["env"] or DEFAULT_ENV)
    overrides = {"env_id": args["env"]} if args["env"] else {}
    for key in ("seed", "total_steps", "run_dir", "num_demos", "max_episode_steps"):
        if args[key] != "":
            overrides[key] = yaml_value(args[key])
    for key in ("demos_topic", "demos_joints", "demos_fields"):
        if args[key] != "":
            overrides[key] = args[key]
    # A task file's demo_player section may name the bag's topic and joints with its own keys: the
    # learner's check of the bag below must read it the same way (they were overwritten with the
    # learner's empty values, and the bag read without them).
    player_file = node_parameters(params_file, "demo_player", ns)
    learner_file = node_parameters(params_file, "learner", ns)
    for player_key, key in PLAYER_KEYS.items():
        if key not in overrides and key not in learner_file and player_file.get(player_key) not in (None, ""):
            overrides[key] = player_file[player_key]
    base = run_config(params_file, overrides, ns)  # RunConfig's own default env is DEFAULT_ENV
    env = base.env_id
    if is_mjcf(env):  # absolute: the run's record names the file, wherever it is resumed from (a
        # path that is not in the working folder is the package's: models/robots/two_link_arm.xml)
        env = overrides["env_id"] = str(Path(resolve_path(env)).resolve())
    if not args["run_dir"]:
        run_dir = base.run_dir
        # No task file names one (every robot model shared runs/default-graph), or env:= runs another
        # task than the file's, whose run folder is that task's (a walkthrough's robot went into the
        # pendulum's folder): the task's own folder.
        other_task = bool(args["env"]) and not same_task(run_config(params_file, None, ns).env_id, env)
        if other_task or (is_mjcf(env) and run_dir == RunConfig().run_dir):
            run_dir = f"runs/opolo/{Path(env).stem if is_mjcf(env) else env}"
        overrides["run_dir"] = run_dir.rstrip("/") + "-graph"
    bridge_file = node_parameters(params_file, "sim_bridge", ns)
    if args["max_episode_steps"] != "":  # the argument sets both, over what the file gives the bridge
        bridge_file["max_episode_steps"] = overrides["max_episode_steps"]
    if is_mjcf(env) and not (args["demos"] or learner_file.get("demos") or player_file.get("demos")):
        raise ValueError(f"an MJCF task ({env}) needs demonstrations: demos:=<a bag of its states> "
                         "(README, 'Your own robot model')")
    demos = (args["demos"] or learner_file.get("demos") or player_file.get("demos")
             or str(package_path("models", "demos", env)))
    overrides["demos"] = resolve_path(demos)
    cfg = run_config(params_file, overrides, ns)
    # A JointState bag without demos_joints is read by the task model's joint names (its first
    # message's order was taken, and a bag that listed the joints otherwise trained on scrambled
    # observations without a word): the demo player is told them (sim.tasks.demo_joints)
    joints = task_demo_joints(cfg)
    by_model = joints != cfg.demos_joints
    if by_model:
        overrides["demos_joints"] = joints
        cfg = run_config(params_file, overrides, ns)
    try:  # another task's demonstrations: an error now, not a learner waiting forever
        check_demonstrations(cfg)
    except ValueError as err:
        raise (with_joints_hint(err, joints, cfg.env_id) if by_model else err) from None
    resume = arg_value(args, "resume", bool) if args["resume"] != "" else learner_file.get("resume", True)
    _check_run_folder(cfg, bool(resume))
    policy_every = _int_or(args, "policy_every", learner_file.get("policy_every")
                           or default_policy_every(cfg.schedule.train_freq), "parameter learner.policy_every")
    max_ahead = _int_or(args, "max_ahead", bridge_file.get("max_ahead", 0), "parameter sim_bridge.max_ahead")
    _check_episode_length(cfg, bridge_file)
    _check_timeouts(learner_file, bridge_file)
    shared = {"env_id": cfg.env_id, "seed": cfg.seed}
    return [
        NodeSpec("demo_player", "demo_player", namespace=ns, parameters={
            **node_parameters(params_file, "demo_player", ns), "demos": cfg.demos,
            "num_demos": cfg.num_demos, "env_id": cfg.env_id, "bag_topic": cfg.demos_topic,
            "bag_joints": cfg.demos_joints,
            "bag_fields": cfg.demos_fields, "episode_gap_s": cfg.demos_episode_gap_s,
            "bag_obs_field": cfg.demos_obs_field}),
        NodeSpec("learner", "learner", namespace=ns, exit_ends_launch=True, parameters={
            **learner_file, **flatten(to_dict(cfg)), "policy_every": policy_every,
            **({"resume": arg_value(args, "resume", bool)} if args["resume"] != "" else {})}),
        NodeSpec("actor", "actor", namespace=ns, parameters={
            **node_parameters(params_file, "actor", ns), "seed": cfg.seed, "mode": "train",
            "warmup_steps": cfg.schedule.warmup_steps, "exploration_noise": cfg.schedule.exploration_noise,
            "swap_delay": max_ahead}),
        NodeSpec("sim_bridge", "sim_bridge", namespace=ns, parameters={
            "max_episode_steps": cfg.max_episode_steps,  # the learner's T (its file's own, if set, wins)
            **bridge_file, **shared, "time_feature": cfg.time_feature, "mode": "lockstep",
            "max_ahead": max_ahead, "policy_every": policy_every}),
    ]


def generate_launch_description():
    return launch_description(ARGUMENTS, describe)
