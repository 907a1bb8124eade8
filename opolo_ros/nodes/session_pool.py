"""Hot swaps that copy weights instead of building onnxruntime sessions.

A learner's policies share one graph and differ only in their weights. Building a session for each
one holds the GIL for a millisecond or more, which a 1 kHz control loop in the same process feels
(BENCHMARKS.md, "Hot-swapping a policy"). The pool keeps up to two sessions per graph that run on
weight arrays it owns (:class:`OnnxPolicy` with `owned_weights`): a new model of a known graph is
parsed, and its weights are copied into the session that is not in use, under that session's lock.

The first copy into a graph's session is checked against a session built from the model itself,
on the exporter's verification observations; a graph that fails the check (a value the copy
cannot reach, e.g. a constant computed from weights inside the graph) gets a fresh session for
every model from then on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opolo_ros.export.graph_weights import GraphWeights, split_weights
from opolo_ros.export.onnx_policy import (
    VERIFY_TOL,
    OnnxPolicy,
    PolicyLoadError,
    PolicyMetadata,
    check_dims,
    read_model,
    verification_inputs,
)
from opolo_ros.nodes.actor_runtime import LoadedPolicy

SLOTS_PER_GRAPH = 2  # the session in use and the one being written


@dataclass
class _Slot:
    structure: bytes
    loaded: LoadedPolicy  # the policy the slot was built for: its session, runner and lock are the slot's


class SessionPool:
    """Loads policies for an actor that swaps each new one in at once (no staged policies)."""

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._checked: dict[bytes, bool] = {}  # graph -> in-place copies reproduce a fresh session
        self.copies = 0  # models swapped in by copying weights
        self.builds = 0  # sessions built

    def load(self, source: bytes | str, version: int | None, obs_dim: int | None, act_dim: int | None,
             in_use: LoadedPolicy | None, safe_point: Callable[[], None] = lambda: None,
             origin: str = "<bytes>") -> LoadedPolicy:
        """The model at `source` ready to run (`origin`: where model bytes came from); `in_use` is the
        policy the control loop runs now."""
        data, origin = read_model(source, origin)
        safe_point()
        graph = split_weights(data, origin)
        meta = PolicyMetadata.from_props(graph.props, origin)
        check_dims(meta, origin, obs_dim, act_dim)
        slot = self._idle_slot(graph.structure, meta, in_use)
        if slot is None or self._checked.get(graph.structure) is False:
            return self._build(data, origin, graph, version, obs_dim, act_dim, in_use, safe_point)
        # A control step that read this slot's policy just before the last swap may still run
        # it: the lock makes it finish first (or run the new weights whole, never half written).
        with slot.loaded.lock:
            slot.loaded.policy.write_weights(graph.weights)
            try:  # new weights can make a graph fail (an index out of range): refuse them here
                slot.loaded.policy.warmup(1)
            except PolicyLoadError:
                self._slots.remove(slot)
                raise
        if graph.structure not in self._checked:
            safe_point()
            reference = OnnxPolicy(data, origin=origin, expected_obs_dim=obs_dim, expected_act_dim=act_dim)
            self.builds += 1
            ok = self._agree(reference, slot.loaded.policy, meta.obs_dim)
            self._checked[graph.structure] = ok
            if not ok:
                self._slots = [s for s in self._slots if s.structure != graph.structure]
                reference.warmup()
                return LoadedPolicy.of(reference, reference.bind(), meta, version, origin)
        self.copies += 1
        built = slot.loaded
        return LoadedPolicy.of(built.policy, built.runner, meta, version, origin, built.lock)

    def _idle_slot(self, structure: bytes, meta: PolicyMetadata, in_use: LoadedPolicy | None) -> _Slot | None:
        for slot in self._slots:
            busy = in_use is not None and in_use.lock is slot.loaded.lock
            built = slot.loaded.policy.metadata
            same_dims = (built.obs_dim, built.act_dim) == (meta.obs_dim, meta.act_dim)
            if slot.structure == structure and same_dims and not busy:
                return slot
        return None

    def _build(self, data: bytes, origin: str, graph: GraphWeights, version: int | None,
               obs_dim: int | None, act_dim: int | None, in_use: LoadedPolicy | None,
               safe_point: Callable[[], None]) -> LoadedPolicy:
        safe_point()
        owned = self._checked.get(graph.structure) is not False
        policy = OnnxPolicy(data, origin=origin, expected_obs_dim=obs_dim, expected_act_dim=act_dim,
                            owned_weights={k: v.copy() for k, v in graph.weights.items()} if owned else None)
        self.builds += 1
        safe_point()
        policy.warmup()
        loaded = LoadedPolicy.of(policy, policy.bind(), policy.metadata, version, origin)
        if owned:
            # Keep the slot in use and this one; a different graph replaces the old graph's slots.
            keep = [s for s in self._slots if s.structure == graph.structure
                    and in_use is not None and in_use.lock is s.loaded.lock]
            self._slots = [*keep, _Slot(graph.structure, loaded)][-SLOTS_PER_GRAPH:]
        return loaded

    @staticmethod
    def _agree(reference: OnnxPolicy, candidate: OnnxPolicy, obs_dim: int) -> bool:
        # The exporter's inputs; both sides are onnxruntime running the same graph and weights, so
        # they must agree to the contract's 1e-5 in the model's own units.
        probes = verification_inputs(obs_dim, np.random.default_rng(0))
        return bool(np.allclose(candidate(probes), reference(probes), rtol=0.0, atol=VERIFY_TOL))
