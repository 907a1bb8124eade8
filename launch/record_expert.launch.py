"""Record expert demonstrations: sim_bridge + actor (expert ONNX, deterministic) + demo_recorder.

    ros2 launch opolo_ros record_expert.launch.py env:=Hopper-v5 model:=models/experts/Hopper-v5.onnx
    opolo-ros launch record_expert env:=Hopper-v5 output:=demos/hopper episodes:=4

The bridge runs lock-step without flow control (there is no learner); it starts once the recorder
listens on ``/opolo/replay``. The recorder keeps the states of ``episodes`` complete episodes,
publishes each on ``/opolo/demonstrations`` and writes the bag (MCAP by default); its end ends the
launch (``on_exit=Shutdown()``).
"""

from pathlib import Path

from opolo_ros.data.bags import STORAGES
from opolo_ros.launch_runner import (
    LaunchArg,
    NodeSpec,
    arg_value,
    launch_description,
    node_parameters,
    package_path,
    resolve_path,
    task_params_file,
    typed_value,
)

ARGUMENTS = [
    LaunchArg("env", "InvertedPendulum-v5", "Gymnasium MuJoCo task id, or a path to an MJCF (.xml) file"),
    LaunchArg("model", "", "expert ONNX policy; empty = models/experts/<env>.onnx of the package"),
    LaunchArg("output", "", "bag folder to create; empty = demos/<env>_seed<seed> in the working folder"),
    LaunchArg("episodes", "4", "number of expert episodes to record"),
    LaunchArg("storage", "mcap", "rosbag2 storage plugin: mcap or sqlite3"),
    LaunchArg("seed", "0", "seed of the simulation (episode start states)"),
    LaunchArg("skip_terminated", "", "drop episodes that end by termination (a fall) and record until "
                                     "'episodes' reached the time limit (true/false); empty = the "
                                     "file's demo_recorder value, else false"),
    LaunchArg("namespace", "", "namespace of the nodes (observation and action topics)"),
    LaunchArg("params_file", "", "ROS 2 parameter file; empty = the package's config/<task>.yaml, if any"),
    LaunchArg("time_feature", "auto", "whether the expert sees the time feature 1 - t/T: auto = "
                                      "as the model's metadata says; the bag stores the "
                                      "environment's observations without it either way"),
]


def expert_time_feature(value: str, model_time_feature: bool) -> bool:
    """The `time_feature` argument: true/false, or auto = the model's `time_feature` metadata."""
    if value.strip().lower() == "auto":
        return model_time_feature
    return typed_value(value.strip(), bool, "launch argument 'time_feature' (or auto)")


def describe(args: dict) -> list:
    """The nodes of this graph for the given argument values (strings)."""
    env, ns, seed = args["env"], args["namespace"], arg_value(args, "seed", int)
    if seed < 0:
        raise ValueError(f"launch argument 'seed': must not be negative, got {seed}")
    episodes = arg_value(args, "episodes", int)
    if episodes < 1:  # checked here, before the simulation and the expert start
        raise ValueError(f"launch argument 'episodes': must be at least 1, got {episodes}")
    if args["storage"] not in STORAGES:
        raise ValueError(f"launch argument 'storage': one of {', '.join(STORAGES)}, got {args['storage']!r}")
    params_file = resolve_path(args["params_file"]) or task_params_file(env)
    output = args["output"] or f"demos/{env}_seed{seed}"
    if Path(output).exists():  # here, before the nodes start (the recorder refused it only once they ran)
        raise FileExistsError(f"{output} already exists; refusing to overwrite a bag (choose another "
                              "output:= or remove it)")
    model = resolve_path(args["model"])
    if not model:
        shipped = package_path("models", "experts", f"{env}.onnx")
        if not shipped.is_file():  # a typo in env:= named the missing file, not the task
            experts = sorted(f.stem for f in shipped.parent.glob("*.onnx"))
            raise FileNotFoundError(f"no shipped expert for env {env!r} (models/experts has: "
                                    f"{', '.join(experts)}); give the expert's file with model:=")
        model = str(shipped)
    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.sim.envs import check_policy_fits

    meta = load_policy(model).metadata
    time_feature = expert_time_feature(args["time_feature"], meta.time_feature)
    # a policy that does not fit (a wrong time_feature, another model, Gymnasium id or MJCF) would
    # record the actor's watchdog commands as an expert's
    check_policy_fits(model, meta.obs_dim, meta.act_dim, env, time_feature, trained_on=meta.env_id)
    return [
        NodeSpec("sim_bridge", "sim_bridge", namespace=ns, parameters={
            **node_parameters(params_file, "sim_bridge", ns), "env_id": env, "seed": seed,
            "time_feature": time_feature, "mode": "lockstep",
            "flow_control": False, "wait_for_subscribers": 1,
            "learner_wait_s": 0.0}),  # the replay subscriber is the recorder: no learner to hear first
        NodeSpec("actor", "actor", namespace=ns, parameters={
            **node_parameters(params_file, "actor", ns), "mode": "deploy", "model": model,
            "subscribe_policy": False, "rate_check": False}),  # lock-step: as fast as it answers
        NodeSpec("demo_recorder", "demo_recorder", namespace=ns, exit_ends_launch=True, parameters={
            **node_parameters(params_file, "demo_recorder", ns), "output": output,
            "episodes": episodes, "storage": args["storage"], "env_id": env,
            "expert": model.rsplit("/", 1)[-1], "seed": seed, "drop_time_feature": time_feature,
            **({"skip_terminated": arg_value(args, "skip_terminated", bool)}
               if args["skip_terminated"] else {})}),
    ]


def generate_launch_description():
    return launch_description(ARGUMENTS, describe)
