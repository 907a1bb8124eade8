"""Deploy a policy on a robot: the actor alone, remapped to the robot's state and command topics.

    ros2 launch opolo_ros deploy.launch.py model:=runs/opolo/Hopper-v5/policy.onnx \
        observation_topic:=/joint_states joints:=rootz,rooty,thigh_joint,leg_joint,foot_joint \
        action_topic:=/forward_effort_controller/commands

    ros2 launch opolo_ros deploy.launch.py model:=models/experts/InvertedPendulum-v5.onnx \
        params_file:=config/deploy_inverted_pendulum.yaml

Deterministic policy, commands clamped to the model's bounds (or ``action_low``/``action_high``)
and optionally rate limited, published at ``rate_hz`` from the newest observation in the
ros2_control convention (std_msgs/Float64MultiArray, reliable QoS as
``forward_command_controller`` requires). Bad observations (NaN/inf, wrong length) are dropped and
counted; a watchdog publishes ``safe_command`` when observations stop for
``observation_timeout_s``.

Safety and real-time arguments left empty take the value of ``params_file`` (its ``actor``
section), else the node's default, which each description names; given, they override the file.
List values are comma-separated (``safe_command:=0.0,0.0``).
"""

from opolo_ros.launch_runner import LaunchArg, NodeSpec, launch_description, node_parameters, resolve_path

ARGUMENTS = [
    LaunchArg("model", "", "ONNX policy to run (required)"),
    LaunchArg("namespace", "", "namespace of the actor"),
    LaunchArg("observation_topic", "observation", "the robot's state topic (remap target of 'observation')"),
    LaunchArg("action_topic", "action", "the robot's command topic (remap target of 'action')"),
    LaunchArg("joints", "", "comma-separated joint names: read sensor_msgs/JointState in this order "
                            "(positions, then velocities); empty = Float32MultiArray observations"),
    LaunchArg("rate_hz", "50.0", "command rate; 0 = one command per observation"),
    LaunchArg("command_qos", "reliable", "reliable (ros2_control) or best_effort (the sim bridge)"),
    LaunchArg("watch_model", "false", "reload the model file when it changes"),
    LaunchArg("params_file", "", "ROS 2 parameter file with an 'actor' section (safety limits, ...)"),
    LaunchArg("action_low", "", "comma-separated lower command limits; empty = the params file, "
                                "else the model's bounds"),
    LaunchArg("action_high", "", "comma-separated upper command limits; empty = the params file, "
                                 "else the model's bounds"),
    LaunchArg("max_action_rate", "", "largest change of any command per second; empty = the params "
                                     "file, else 0 (unlimited)"),
    LaunchArg("observation_timeout_s", "", "observations older than this are stale and the watchdog "
                                           "takes over; empty = the params file, else 0.5"),
    LaunchArg("safe_command", "", "comma-separated command published while observations are stale; "
                                  "empty = the params file, else zeros"),
    LaunchArg("watchdog_rate_hz", "", "with rate_hz 0: how often the safe command is repeated; "
                                      "empty = the params file, else 50"),
    LaunchArg("executor", "", "events (EventsExecutor) or single (SingleThreadedExecutor); empty = "
                              "the params file, else events"),
    LaunchArg("cpu_affinity", "", "comma-separated CPU ids to pin the actor process to; empty = the "
                                  "params file, else no pinning"),
    LaunchArg("sched_priority", "", "SCHED_FIFO priority 1-99 for the actor process (needs "
                                    "CAP_SYS_NICE); empty = the params file, else 0 (normal)"),
]

FLOAT_LISTS = ("action_low", "action_high", "safe_command")
FLOATS = ("max_action_rate", "observation_timeout_s", "watchdog_rate_hz")


def _numbers(text: str, kind: type) -> list:
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None


def _given(args: dict) -> dict:
    """The safety and real-time arguments the user set, as typed parameter values."""
    out: dict = {}
    for name in FLOAT_LISTS:
        if args[name]:
            out[name] = _numbers(args[name], float)
    for name in FLOATS:
        if args[name]:
            out[name] = float(args[name])
    if args["executor"]:
        out["executor"] = args["executor"]
    if args["cpu_affinity"]:
        out["cpu_affinity"] = _numbers(args["cpu_affinity"], int)
    if args["sched_priority"]:
        out["sched_priority"] = int(args["sched_priority"])
    return out


def describe(args: dict) -> list:
    """The nodes of this graph for the given argument values (strings)."""
    if not args["model"]:
        raise ValueError("deploy needs model:=<policy.onnx>")
    ns = args["namespace"]
    params_file = resolve_path(args["params_file"])
    parameters = {**node_parameters(params_file, "actor", ns), "mode": "deploy",
                  "model": resolve_path(args["model"]), "subscribe_policy": False,
                  "rate_hz": float(args["rate_hz"]), "command_qos": args["command_qos"],
                  "watch_model": args["watch_model"].lower() in ("true", "1", "yes"), **_given(args)}
    joints = [j.strip() for j in args["joints"].split(",") if j.strip()]
    if joints:
        parameters["joints"] = joints
    remappings = [("observation", args["observation_topic"]), ("action", args["action_topic"])]
    return [NodeSpec("actor", "actor", namespace=ns, parameters=parameters, remappings=remappings,
                     exit_ends_launch=True)]


def generate_launch_description():
    return launch_description(ARGUMENTS, describe)
