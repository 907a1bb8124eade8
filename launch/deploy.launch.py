"""Deploy a policy on a robot: the actor alone, remapped to the robot's state and command topics.

    ros2 launch opolo_ros deploy.launch.py model:=models/experts/InvertedPendulum-v5.onnx \
        observation_topic:=/joint_states joints:=slider,hinge \
        action_topic:=/forward_effort_controller/commands

    ros2 launch opolo_ros deploy.launch.py model:=models/experts/InvertedPendulum-v5.onnx \
        params_file:=config/deploy_inverted_pendulum.yaml observation_topic:=/joint_states \
        action_topic:=/forward_effort_controller/commands

    ros2 launch opolo_ros deploy.launch.py model:=models/experts/Hopper-v5.onnx \
        observation_topic:=/hopper/state time_feature_clock:=1000

The JointState observation is ``joints`` x ``joint_fields`` (default: the positions of the joints,
then their velocities) and must be the model's whole input, ``obs_dim`` values: InvertedPendulum's
is qpos then qvel of (slider, hinge), 4 values. The actor refuses to start otherwise. A policy
trained with ``time_feature: true`` (its last input is 1 - t/T: the shipped Hopper, HalfCheetah,
Walker2d and Ant experts, and OPOLO policies from every task file but the pendulums') gets that
input from the actor's clock with ``time_feature_clock:=T`` (the training episode length, 1000 for
the Gymnasium tasks); the observation then holds the other values. A task
whose observation is not of the JointState form (Hopper-v5: qpos[1:], 5 values, and qvel, 6) needs
Float32MultiArray observations in the policy's order.

Deterministic policy, commands clamped to the model's bounds (or ``action_low``/``action_high``)
and optionally rate limited, published at ``rate_hz`` from the newest observation in the
ros2_control convention (std_msgs/Float64MultiArray, reliable QoS as
``forward_command_controller`` requires). ``rate_hz`` defaults to the rate the policy was trained
at, 1 / the ``control_period_s`` of its metadata (InvertedPendulum-v5: 25 Hz; a policy trained on
an MJCF file: 1 / its timestep); for a model exported before models said it
(``opolo-ros evaluate --stamp`` adds it), its Gymnasium task's control rate (Hopper-v5:
125 Hz), else (an MJCF task) 50 Hz;
``rate_hz:=0`` sends one command per observation. The actor warns once when a fixed
rate is more than 10 % off the training rate. Bad observations (NaN/inf, wrong length) are dropped
and counted; a watchdog publishes ``safe_command`` when observations stop for
``observation_timeout_s``.

Arguments left empty (the safety and real-time ones, ``rate_hz``, ``command_qos``,
``watch_model``, ``rate_check``, ``task``, ``time_feature_clock`` and ``discovery_grace_s``) take the value of
``params_file`` (its ``actor`` section), else the default each description names; given, they
override the file.
List values are comma-separated (``safe_command:=0.0,0.0``).
"""

from opolo_ros.export.onnx_policy import PolicyLoadError, load_policy
from opolo_ros.launch_runner import (
    LaunchArg,
    NodeSpec,
    arg_list,
    arg_value,
    launch_description,
    node_parameters,
    resolve_path,
)
from opolo_ros.sim.task_ids import is_mjcf, joint_order_error

ARGUMENTS = [
    LaunchArg("model", "", "ONNX policy to run (required; a relative path that is not in the working "
                           "folder is the package's, e.g. models/experts/<task>.onnx)"),
    LaunchArg("namespace", "", "namespace of the actor"),
    LaunchArg("observation_topic", "", "the robot's state topic (remap target of 'observation'); empty = "
                                       "joint_states with joints (argument or params file: "
                                       "/joint_states, or the namespace's), else "
                                       "observation"),
    LaunchArg("action_topic", "action", "the robot's command topic (remap target of 'action')"),
    LaunchArg("joints", "", "comma-separated joint names: read sensor_msgs/JointState in this order "
                            "(positions, then velocities); empty = the params file's, else "
                            "Float32MultiArray observations"),
    LaunchArg("observation_type", "", "array input: float32 (std_msgs/Float32MultiArray) or float64 "
                                      "(std_msgs/Float64MultiArray); empty = the params file, else "
                                      "float32"),
    LaunchArg("joint_offset", "", "comma-separated values subtracted from the JointState observation "
                                  "(one per joint and field); empty = the params file, else none"),
    LaunchArg("joint_scale", "", "comma-separated factors applied after the offset; empty = the "
                                 "params file, else none"),
    LaunchArg("time_feature_clock", "", "T > 0: the actor appends the time feature 1 - t/T (a policy "
                                        "trained with time_feature: true); empty = the params "
                                        "file, else 0 (off)"),
    LaunchArg("rate_hz", "", "command rate; 0 = one command per observation; empty = the params "
                             "file, else the model's training rate (1 / its control_period_s; "
                             "a model without it: its Gymnasium task's), else 50"),
    LaunchArg("command_qos", "", "reliable (ros2_control) or best_effort (the sim bridge); empty = "
                                 "the params file, else reliable"),
    LaunchArg("watch_model", "", "true: reload the model file when it changes; empty = the params "
                                 "file, else false"),
    LaunchArg("rate_check", "", "with rate_hz 0: warn when observations come more than 10 % off the "
                                "policy's training rate; false for a simulation faster or slower than "
                                "real time; empty = the params file, else true"),
    LaunchArg("task", "", "accept only policies trained on this task (Gymnasium id, or MJCF file "
                          "name); any = every task; empty = the params file, else the model's own"),
    LaunchArg("params_file", "", "ROS 2 parameter file with an 'actor' section (safety limits, ...)"),
    LaunchArg("action_low", "", "comma-separated lower command limits (they only tighten the "
                                "model's bounds); empty = the params file, else the model's"),
    LaunchArg("action_high", "", "comma-separated upper command limits (they only tighten the "
                                 "model's bounds); empty = the params file, else the model's"),
    LaunchArg("max_action_rate", "", "largest change of a policy command per second (the safe "
                                     "command too with the params file's ramp_to_safe); empty = the "
                                     "params file, else 0 (unlimited)"),
    LaunchArg("observation_timeout_s", "", "observations older than this are stale and the watchdog "
                                           "takes over; empty = the params file, else 0.5"),
    LaunchArg("discovery_grace_s", "", "for this long after start-up, no publisher of the "
                                       "observation topic is DDS discovery still going on (logged at "
                                       "info), not a warning; a robot whose driver comes up slowly "
                                       "needs more; empty = the params file, else 5"),
    LaunchArg("safe_command", "", "comma-separated command published while observations are stale; "
                                  "empty = the params file, else zeros"),
    LaunchArg("watchdog_rate_hz", "", "with rate_hz 0: how often the safe command is repeated; "
                                      "empty = the params file, else 50"),
    LaunchArg("use_sim_time", "", "true: the actor's ROS clock follows /clock (message stamps; the "
                                  "watchdog and rate_hz timers stay on the steady clock); empty = the "
                                  "params file, else false"),
    LaunchArg("executor", "", "events (EventsExecutor) or single (SingleThreadedExecutor); empty = "
                              "the params file, else events"),
    LaunchArg("cpu_affinity", "", "comma-separated CPU ids to pin the actor process to; empty = the "
                                  "params file, else no pinning"),
    LaunchArg("sched_priority", "", "SCHED_FIFO priority 1-99 for the actor process (needs "
                                    "CAP_SYS_NICE); empty = the params file, else 0 (normal)"),
]

FLOAT_LISTS = ("action_low", "action_high", "safe_command", "joint_offset", "joint_scale")
FLOATS = ("rate_hz", "max_action_rate", "observation_timeout_s", "watchdog_rate_hz",
          "discovery_grace_s")
# Where neither the argument nor the params file sets them: this launch file's defaults (the
# node's are for training: rate_hz 0, best-effort commands). rate_hz 50 is for a model that does
# not say its training rate (_trained_rate).
DEPLOY_DEFAULTS = {"rate_hz": 50.0, "command_qos": "reliable", "watch_model": False}


def _trained_rate(model: str) -> dict:
    """``{"rate_hz": 1 / control_period_s}`` of the model's metadata, the rate its policy was trained
    at; for a model that does not say (exported before models did) and names a
    Gymnasium task, that task's control rate; empty for an MJCF task's such model, or a model that
    cannot be loaded (the actor then refuses it with its own error)."""
    try:
        meta = load_policy(model).metadata
    except PolicyLoadError:
        return {}
    rate = meta.control_rate_hz
    if rate is None and not is_mjcf(meta.env_id):
        rate = _gymnasium_rate(meta.env_id)
    return {} if rate is None else {"rate_hz": rate}


def _gymnasium_rate(env_id: str) -> float | None:
    """1 / the control period of a Gymnasium task (None for an id Gymnasium does not know: the
    model's own business, not the launch's)."""
    from opolo_ros.sim.tasks import task_control_period

    period = task_control_period(env_id)
    return None if period is None else round(1.0 / period, 9)


def _check_joint_order(joints: list[str], model: str) -> None:
    """`joints` that name the policy's observed joints (its metadata's ``joint_names``, else its
    task model's: a Gymnasium policy carries none), all or some, in another order than its
    observation's (joints:=hinge,slider for InvertedPendulum) fed the policy swapped values without
    a word, where training refuses such ``demos_joints``: refused before the actor starts, by the
    actor's own rule (:func:`~opolo_ros.sim.task_ids.joint_order_error`). Names the model does not
    have (a real robot's) pass."""
    try:
        meta = load_policy(model).metadata
    except PolicyLoadError:
        return  # the actor refuses it with its own error
    from opolo_ros.sim.tasks import task_joint_names

    names = meta.joint_names or task_joint_names(meta.env_id)  # (): a task not here, nothing to compare
    error = joint_order_error(joints, names, f"{meta.env_id} (the policy {model})")
    if error:
        raise ValueError(error)


def _given(args: dict) -> dict:
    """The arguments the user set (of those that default to the params file), as typed values."""
    out: dict = {}
    for name in FLOAT_LISTS:
        if args[name]:
            out[name] = arg_list(args, name, float)
    for name in FLOATS:
        if args[name]:
            out[name] = arg_value(args, name, float)
    for name in ("executor", "command_qos", "task", "observation_type"):
        if args[name]:
            out[name] = args[name]
    for name in ("watch_model", "use_sim_time", "rate_check"):
        if args[name]:
            out[name] = arg_value(args, name, bool)
    if args["cpu_affinity"]:
        out["cpu_affinity"] = arg_list(args, "cpu_affinity", int)
    for name in ("sched_priority", "time_feature_clock"):
        if args[name]:
            out[name] = arg_value(args, name, int)
    return out


def describe(args: dict) -> list:
    """The nodes of this graph for the given argument values (strings)."""
    if not args["model"]:
        raise ValueError("deploy needs model:=<policy.onnx>")
    ns = args["namespace"]
    params_file = resolve_path(args["params_file"])
    model = resolve_path(args["model"])
    from_file, given = node_parameters(params_file, "actor", ns), _given(args)
    trained = {} if "rate_hz" in from_file or "rate_hz" in given else _trained_rate(model)
    parameters = {**DEPLOY_DEFAULTS, **trained, **from_file, "mode": "deploy", "model": model,
                  "subscribe_policy": False, **given}
    joints = [j.strip() for j in args["joints"].split(",") if j.strip()]
    if joints:
        parameters["joints"] = joints
    if parameters.get("joints"):
        _check_joint_order(list(parameters["joints"]), model)
    # relative: in a namespace the robot's own (/robot1/joint_states), else /joint_states
    state = args["observation_topic"] or ("joint_states" if parameters.get("joints") else "observation")
    remappings = [("observation", state), ("action", args["action_topic"])]
    return [NodeSpec("actor", "actor", namespace=ns, parameters=parameters, remappings=remappings,
                     exit_ends_launch=True)]


def generate_launch_description():
    return launch_description(ARGUMENTS, describe)
