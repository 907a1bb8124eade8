"""Per-call cost of each step of the actor's hot path, in one process, without DDS.

Each variant is timed with ``perf_counter_ns`` for ``--calls`` calls, the variants taking turns over
``--rounds`` rounds (so background load spreads over all); the table shows the median over rounds of
each round's p50 and p99, in microseconds. Steps, the baseline's way against the actor's:

- decode: ``numpy.array(list(msg.data))`` / ``messages.msg_to_observation`` (``numpy.frombuffer``,
  with the layout, length and finiteness checks the baseline skips);
- inference: ``InferenceSession`` with default options ``run(None, {...})`` / tuned options
  (1 thread, sequential, no spinning) ``run`` / tuned + I/O binding into preallocated buffers
  (``BoundPolicy``);
- output: a new ``Float64MultiArray`` from ``.tolist()`` / the preallocated message refilled;
- clamp: ``np.clip`` to a new array / in place into the message;
- read (session 15): serialized bytes to decoded values, rclpy's deserializer (a typed
  subscription) / the bounded reader of ``opolo_ros/ros/cdr.py`` (the nodes' raw subscriptions),
  for an observation, an action and a replay batch of 100 HalfCheetah transitions;
- the whole observation callback of ``bench/baseline_actor.py`` and of the actor (deploy mode,
  publishing into the void; each call also builds the tagged observation message, about 11 us,
  the same for both); and the actor's from the serialized bytes, as a subscription hands them
  over, read by rclpy's deserializer (a typed subscription, before session 15) or by the bounded
  reader (a raw one, now);
- garbage collection: a full ``gc.collect()`` in a process holding an actor, before and after
  ``gc.freeze()`` (what a collection that happens to run in the control path costs).

    .venv/bin/python bench/actor_micro.py --rounds 5 --calls 5000 --out bench/results/actor_micro.json
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from opolo_ros.errors import exit_status  # noqa: E402
from opolo_ros.ros import latency, runtime  # noqa: E402
from opolo_ros.ros import messages as m  # noqa: E402

MODEL = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"


def inference_variants(obs: np.ndarray) -> dict[str, Callable[[], object]]:
    import onnxruntime as ort

    from opolo_ros.export.onnx_policy import load_policy

    data = MODEL.read_bytes()
    default = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    tuned = load_policy(MODEL)
    bound = tuned.bind()
    batch = obs[None]
    return {
        "inference: default session, run()": lambda: default.run(None, {"obs": batch}),
        "inference: tuned session, run()": lambda: tuned.session.run(["action"], {"obs": batch}),
        "inference: tuned + I/O binding": lambda: bound(obs),
    }


def step_variants(obs: np.ndarray) -> dict[str, Callable[[], object]]:
    msg = m.observation_to_msg(obs)
    action = np.array([0.5], np.float32)
    low, high = np.array([-3.0], np.float32), np.array([3.0], np.float32)
    command = m.action_to_msg(np.zeros(1))
    values = np.frombuffer(command.data, np.float64)

    def new_message() -> object:
        out = m.Float64MultiArray()
        out.data = np.clip(action, low, high).astype(float).tolist()
        return out

    def refill() -> None:
        np.clip(action, low, high, out=values)

    return {
        "decode: list(msg.data)": lambda: np.array(list(msg.data), dtype=np.float32),
        "decode: msg_to_observation": lambda: m.msg_to_observation(msg, obs.size),
        "clamp + output: new message, tolist": new_message,
        "clamp + output: in place, preallocated": refill,
    }


def read_variants(obs: np.ndarray) -> dict[str, Callable[[], object]]:
    """Serialized bytes -> decoded values: rclpy's deserializer (what a typed subscription runs)
    against the bounded pure-Python reader the nodes use (a raw subscription), for the observation
    (actor), the action (sim bridge) and a replay batch of 100 HalfCheetah transitions (learner)."""
    from rclpy.serialization import deserialize_message, serialize_message
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    rng = np.random.default_rng(0)
    n, o, a = 100, 17, 6
    replay = m.replay_to_msg(rng.normal(size=(n, o)), rng.uniform(-1, 1, (n, a)), rng.normal(size=(n, o)),
                             rng.normal(size=n), np.zeros(n), np.zeros(n), seq=1, source=2)
    cases = {"observation": (m.observation_to_msg(obs), Float32MultiArray,
                             lambda x: m.msg_to_observation(x, obs.size)),
             "action": (m.action_to_msg([0.5]), Float64MultiArray, lambda x: m.msg_to_action(x, 1)),
             "replay batch": (replay, Float32MultiArray, m.msg_to_replay)}
    out: dict[str, Callable[[], object]] = {}
    for what, (msg, cls, decode) in cases.items():
        raw = serialize_message(msg)
        out[f"read {what}: rclpy deserializer + decode"] = \
            lambda raw=raw, cls=cls, decode=decode: decode(deserialize_message(raw, cls))
        out[f"read {what}: bounded reader + decode"] = \
            lambda raw=raw, cls=cls, decode=decode, what=what: decode(m.deserialize(raw, cls, what))
    return out


def callback_variants(obs: np.ndarray, context: object) -> tuple[dict[str, Callable[[], object]], list]:
    import rclpy
    from baseline_actor import BaselineActor
    from rclpy.parameter import Parameter

    from opolo_ros.nodes.actor import Actor

    actor = Actor(context=context, parameter_overrides=[
        Parameter("mode", value="deploy"), Parameter("model", value=str(MODEL)),
        Parameter("echo_sequence", value=True), Parameter("gc_freeze", value=False),
        Parameter("watchdog_rate_hz", value=0.0)])
    rclpy.init(args=["baseline", "--ros-args", "-p", f"model:={MODEL}"])
    baseline = BaselineActor()

    def tagged() -> object:
        msg = m.observation_to_msg(obs)
        latency.tag_sequence(msg, 7)
        return msg

    from rclpy.serialization import deserialize_message, serialize_message

    from opolo_ros.ros.subscribe import read_then

    raw = serialize_message(tagged())  # what a subscription gets from DDS
    from_bytes = read_then(m.Float32MultiArray, "observation", actor._on_observation, actor._reject)
    return ({"callback: baseline": lambda: baseline.on_observation(tagged()),
             "callback: actor": lambda: actor._on_observation(tagged()),
             "callback from bytes: actor, rclpy deserializer":
                 lambda: actor._on_observation(deserialize_message(raw, m.Float32MultiArray)),
             "callback from bytes: actor, bounded reader": lambda: from_bytes(raw)},
            [actor, baseline])


def full_collection_us(repeats: int = 5) -> float:
    """Median time of a full garbage collection in this process."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        gc.collect()
        times.append((time.perf_counter_ns() - start) / 1e3)
    return float(np.median(times))


def time_calls(fn: Callable[[], object], calls: int) -> np.ndarray:
    out = np.empty(calls, np.int64)
    clock = time.perf_counter_ns
    for i in range(calls):
        start = clock()
        fn()
        out[i] = clock() - start
    return out / 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "actor_micro.json")
    args = parser.parse_args(argv)
    obs = np.array([0.01, -0.02, 0.03, 0.1], np.float32)
    context = runtime.init_context(runtime.isolated_domain_id(), args=[])
    variants = {**step_variants(obs), **read_variants(obs), **inference_variants(obs)}
    callbacks, nodes = callback_variants(obs, context)
    variants.update(callbacks)
    gc.disable()  # the same for every variant; GC pauses are measured in the node (bench/latency.py)
    per_round: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time_calls(fn, args.calls)
            per_round[name].append((float(np.percentile(t, 50)), float(np.percentile(t, 99))))
    gc.enable()
    collection = {"without_freeze_us": full_collection_us()}
    gc.freeze()
    collection["after_freeze_us"] = full_collection_us()
    table = {name: {"p50_us": float(np.median([r[0] for r in rows])),
                    "p99_us": float(np.median([r[1] for r in rows]))} for name, rows in per_round.items()}
    print(f"{'step':52s} {'p50 us':>8s} {'p99 us':>8s}")
    for name, row in table.items():
        print(f"{name:52s} {row['p50_us']:8.1f} {row['p99_us']:8.1f}")
    print(f"full gc.collect(): {collection['without_freeze_us']:.0f} us, "
          f"after gc.freeze(): {collection['after_freeze_us']:.0f} us")
    latency.write_json(args.out, {"command": " ".join(["bench/actor_micro.py", *(argv or sys.argv[1:])]),
                                  "rounds": args.rounds, "calls": args.calls, "steps": table,
                                  "gc_full_collection": collection})
    for node in nodes:
        if hasattr(node, "close"):
            node.close()
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
