"""Deploy a policy on a robot: the actor alone, remapped to the robot's state and command topics.

    ros2 launch opolo_ros deploy.launch.py model:=runs/opolo/Hopper-v5/policy.onnx \
        observation_topic:=/joint_states joints:=rootz,rooty,thigh_joint,leg_joint,foot_joint \
        action_topic:=/forward_effort_controller/commands

Deterministic policy, commands clamped to the model's bounds (or ``action_low``/``action_high`` in
the parameter file) and optionally rate limited, published at ``rate_hz`` from the newest
observation in the ros2_control convention (std_msgs/Float64MultiArray, reliable QoS as
``forward_command_controller`` requires).
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
]


def describe(args: dict) -> list:
    """The nodes of this graph for the given argument values (strings)."""
    if not args["model"]:
        raise ValueError("deploy needs model:=<policy.onnx>")
    ns = args["namespace"]
    params_file = resolve_path(args["params_file"])
    parameters = {**node_parameters(params_file, "actor", ns), "mode": "deploy",
                  "model": resolve_path(args["model"]), "subscribe_policy": False,
                  "rate_hz": float(args["rate_hz"]), "command_qos": args["command_qos"],
                  "watch_model": args["watch_model"].lower() in ("true", "1", "yes")}
    joints = [j.strip() for j in args["joints"].split(",") if j.strip()]
    if joints:
        parameters["joints"] = joints
    remappings = [("observation", args["observation_topic"]), ("action", args["action_topic"])]
    return [NodeSpec("actor", "actor", namespace=ns, parameters=parameters, remappings=remappings,
                     exit_ends_launch=True)]


def generate_launch_description():
    return launch_description(ARGUMENTS, describe)
