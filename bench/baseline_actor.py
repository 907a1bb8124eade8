"""The baseline of bench/latency.py: an actor written the way a first rclpy node usually is.

SingleThreadedExecutor, the default QoS (a history depth of 10, reliable), ``list(msg.data)`` /
``.tolist()`` conversions, a new output message per command, and an onnxruntime
``InferenceSession`` with the default session options. It clamps to the model's action bounds, as
any actor must. The only additions are what the harness needs from every actor under test, with
the same code as the real actor: the sequence echo, and timing the inference with
``perf_counter_ns`` (written as JSON to ``stats_file`` on exit).

    .venv/bin/python bench/baseline_actor.py --ros-args -p model:=models/experts/InvertedPendulum-v5.onnx
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort
import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Float32MultiArray, Float64MultiArray, MultiArrayDimension

from opolo_ros.ros import latency


class BaselineActor(Node):
    def __init__(self) -> None:
        super().__init__("baseline_actor")
        model = self.declare_parameter("model", "").value
        self.stats_file = self.declare_parameter("stats_file", "").value
        if not model:
            raise SystemExit("baseline_actor: no model; run it with --ros-args -p model:=PATH.onnx")
        self.session = ort.InferenceSession(model)
        meta = self.session.get_modelmeta().custom_metadata_map
        self.low = np.array(json.loads(meta["action_low"]))
        self.high = np.array(json.loads(meta["action_high"]))
        self.obs_dim = int(meta["obs_dim"])
        self.inference_ns = latency.DurationLog()
        self.callback_ns = latency.DurationLog()
        self.gc_monitor = latency.GcMonitor()
        self.actions = 0
        self.publisher = self.create_publisher(Float64MultiArray, "action", 10)
        self.create_subscription(Float32MultiArray, "observation", self.on_observation, 10)

    def on_observation(self, msg: Float32MultiArray) -> None:
        start = time.perf_counter_ns()
        seq = latency.pop_sequence(msg)
        obs = list(msg.data)
        if len(obs) != self.obs_dim:
            return
        t0 = time.perf_counter_ns()
        action = self.session.run(None, {"obs": np.array([obs], dtype=np.float32)})[0][0]
        self.inference_ns.add(time.perf_counter_ns() - t0)
        action = np.clip(action, self.low, self.high)
        out = Float64MultiArray()
        out.data = action.astype(float).tolist()
        out.layout.dim = [MultiArrayDimension(label="action", size=len(out.data), stride=len(out.data))]
        if seq is not None:
            latency.tag_sequence(out, seq)
        self.publisher.publish(out)
        self.actions += 1
        self.callback_ns.add(time.perf_counter_ns() - start)

    def write_stats(self) -> None:
        if self.stats_file:
            latency.write_json(self.stats_file, {
                "node": self.get_fully_qualified_name(), "pid": os.getpid(),
                "inference": self.inference_ns.summary(), "callback": self.callback_ns.summary(),
                "counters": {"actions": self.actions}, "gc": self.gc_monitor.summary()})


def main(args: list[str] | None = None) -> int:
    argv = sys.argv if args is None else args
    if {"-h", "--help"} & set(argv[1:]):  # (`opolo-ros bench` promises NAME --help for each script)
        print("usage: baseline_actor.py --ros-args -p model:=POLICY.onnx [-p stats_file:=STATS.json]\n")
        print(__doc__)
        return 0
    rclpy.init(args=argv)
    node = BaselineActor()
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.write_stats()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
