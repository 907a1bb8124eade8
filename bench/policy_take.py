"""What a policy message costs the actor's executor thread: decoded by rclpy, or taken serialized.

One process, real DDS (loopback): a publisher sends the shipped InvertedPendulum model (270 kB) as a
``/opolo/policy`` message; a subscriber node on the actor's executor (EventsExecutor) takes it. Once
the message has had time to arrive (``--settle`` seconds), the time of the ``spin_once`` that takes
it and runs the callback is what the executor thread spends on it, the time a control callback
would wait; the same with a 1-byte model gives ``spin_once``'s own cost. Variants, taking turns
message by message:

- ``typed``: rclpy deserializes into a ``UInt8MultiArray`` and the callback runs
  ``messages.msg_to_policy`` (``decode_policy_in_loader: false`` before session 15; since then
  that setting reads the serialized bytes in the callback, with the pure-Python reader);
- ``serialized``: the subscription is ``raw=True``, the callback queues the bytes for the loader
  thread (``decode_policy_in_loader: true``); ``messages.serialized_to_policy`` later, off this
  thread, is timed too, and beside it (first by turns) rclpy's ``deserialize_message`` +
  ``msg_to_policy``, what ``serialized_to_policy`` ran before its pure-Python reader.

    .venv/bin/python bench/policy_take.py --messages 200 --out bench/results/policy_take.json
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opolo_ros.errors import exit_status  # noqa: E402
from opolo_ros.ros import runtime  # noqa: E402

DEFAULT_MODEL = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"


def percentiles(ns: list[int]) -> dict[str, float]:
    us = np.asarray(ns) / 1e3
    return {"p50_us": float(np.percentile(us, 50)), "p99_us": float(np.percentile(us, 99)),
            "max_us": float(us.max()), "count": int(us.size)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200, help="messages per variant")
    p.add_argument("--settle", type=float, default=0.02, help="seconds between publishing and taking")
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if not args.model.is_file():
        raise SystemExit(f"no model at {args.model}")

    from rclpy.experimental import EventsExecutor
    from rclpy.node import Node
    from rclpy.serialization import deserialize_message
    from std_msgs.msg import UInt8MultiArray

    from opolo_ros.ros import messages as m
    from opolo_ros.ros.qos import qos_for

    model = args.model.read_bytes()
    decoders = [("serialized_to_policy (loader thread)", m.serialized_to_policy),
                ("rclpy deserialize_message + msg_to_policy", lambda raw: m.msg_to_policy(
                    deserialize_message(raw, UInt8MultiArray)))]  # the loader's decoder until session 14
    os.environ[runtime.DOMAIN_ID_ENV] = str(runtime.isolated_domain_id())
    runtime.apply_local_dds_env(os.environ, overwrite=True)
    payloads = {"1 byte": model[:1], f"{len(model)} bytes": model}  # 1 byte: spin_once's own cost
    times: dict[str, list[int]] = {}
    with runtime.ros_context(args=[]) as ctx:
        sender = Node("policy_sender", context=ctx)
        receiver = Node("policy_receiver", context=ctx)
        executor = EventsExecutor(context=ctx)
        executor.add_node(receiver)
        got: queue.Queue = queue.Queue()
        pubs = {}
        for variant, raw in (("typed", False), ("serialized", True)):
            topic = f"/bench/policy_{variant}"
            pubs[variant] = sender.create_publisher(UInt8MultiArray, topic, qos_for("policy"))
            callback = got.put if raw else lambda msg: got.put(m.msg_to_policy(msg))
            receiver.create_subscription(UInt8MultiArray, topic, callback, qos_for("policy"), raw=raw)
        matched = lambda: all(runtime.linked(pub, receiver) for pub in pubs.values())  # noqa: E731
        if not runtime.spin_until([executor], matched, timeout_sec=10.0):
            raise SystemExit("the publishers and the subscriptions did not match within 10 s")
        try:
            for k in range(args.messages):
                for size, payload in payloads.items():
                    for variant, pub in pubs.items():
                        pub.publish(m.policy_to_msg(payload, k + 1))
                        time.sleep(args.settle)
                        t0 = time.perf_counter_ns()
                        executor.spin_once(timeout_sec=1.0)
                        times.setdefault(f"{variant}, {size}", []).append(time.perf_counter_ns() - t0)
                        item = got.get(timeout=1.0)
                        if variant == "serialized":  # both decoders, first by turns
                            raw_bytes = item
                            for name, decode in decoders[:: 1 if k % 2 == 0 else -1]:
                                t0 = time.perf_counter_ns()
                                item = decode(raw_bytes)
                                times.setdefault(f"{name}, {size}", []).append(time.perf_counter_ns() - t0)
                                assert item.model == payload and item.version == k + 1
                        assert item.model == payload and item.version == k + 1
        finally:
            runtime.shutdown(None, [sender, receiver], [executor])  # the context: on leaving the with
    results = {name: percentiles(ns) for name, ns in times.items()}
    print(f"{'policy message (model size)':56s} {'p50 us':>8s} {'p99 us':>8s} {'max us':>8s}")
    for name, r in results.items():
        print(f"{name:56s} {r['p50_us']:8.1f} {r['p99_us']:8.1f} {r['max_us']:8.1f}")
    print("(typed, serialized: the spin_once that takes the message and runs the callback, on the "
          "executor thread; a 1-byte model shows spin_once's own cost; serialized_to_policy runs in "
          "the actor's loader thread instead)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join([".venv/bin/python", "bench/policy_take.py", *(argv or sys.argv[1:])])
        args.out.write_text(json.dumps({"command": command, "model_bytes": len(model),
                                        "loadavg": os.getloadavg(), "results": results}, indent=1))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main, Path(__file__).name))
