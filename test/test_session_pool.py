"""Hot swap by copying weights (nodes/session_pool.py, export/graph_weights.py): every swapped-in
model computes what a session built from it computes, sessions are reused, and graphs the copy
cannot serve fall back to building sessions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from opolo_ros.algo.networks import Actor, RunningNorm
from opolo_ros.export.graph_weights import split_weights
from opolo_ros.export.onnx_policy import (
    OnnxPolicy,
    PolicyLoadError,
    PolicyRunError,
    export_policy,
    load_policy,
)
from opolo_ros.nodes.session_pool import SessionPool

OBS_DIM, ACT_DIM = 5, 2


def _export(tmp_path: Path, seed: int, version: int, hidden: tuple[int, ...] = (16, 16),
            high: float = 2.0) -> bytes:
    torch.manual_seed(seed)
    actor = Actor(OBS_DIM, ACT_DIM, hidden)
    norm = RunningNorm(OBS_DIM)
    norm.update(torch.randn(64, OBS_DIM) * (seed + 1) + seed)  # normaliser values differ per model
    path = tmp_path / f"p{seed}_{version}.onnx"
    export_policy(actor, path, action_low=-high, action_high=high, obs_norm=norm,
                  metadata={"env_id": "Test-v0", "version": version})
    return path.read_bytes()


def _probe() -> np.ndarray:
    return np.random.default_rng(1).normal(scale=2.0, size=(9, OBS_DIM)).astype(np.float32)


def _single(loaded, obs: np.ndarray) -> np.ndarray:
    return np.stack([loaded.run(row).copy() for row in obs])


def test_split_weights_same_graph_same_structure(tmp_path: Path) -> None:
    a, b = split_weights(_export(tmp_path, 0, 1)), split_weights(_export(tmp_path, 1, 2))
    assert a.structure == b.structure  # weights and metadata left out
    assert a.props["version"] == "1" and b.props["version"] == "2"
    assert a.weights.keys() == b.weights.keys()
    assert any(not np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    for tensor in onnx.load_from_string(_export(tmp_path, 0, 1)).graph.initializer:
        np.testing.assert_array_equal(a.weights[tensor.name], onnx.numpy_helper.to_array(tensor))
    other = split_weights(_export(tmp_path, 0, 3, hidden=(16, 8)))
    assert other.structure != a.structure
    with pytest.raises(PolicyLoadError, match="<x>: not a valid ONNX model"):
        split_weights(b"\x08\x01garbage", "<x>")


def test_split_weights_reads_typed_tensors_like_raw_ones(tmp_path: Path) -> None:
    data = _export(tmp_path, 0, 1)
    typed = onnx.load_from_string(data)
    for tensor in typed.graph.initializer:  # the same values in float_data instead of raw_data
        values = onnx.numpy_helper.to_array(tensor)
        tensor.CopyFrom(onnx.helper.make_tensor(tensor.name, tensor.data_type, values.shape, values.ravel()))
        assert not tensor.raw_data
    a, b = split_weights(data), split_weights(typed.SerializeToString())
    assert a.structure == b.structure and a.weights.keys() == b.weights.keys()
    for name in a.weights:
        np.testing.assert_array_equal(a.weights[name], b.weights[name])


def test_write_weights_changes_the_running_policy(tmp_path: Path) -> None:
    first, second = _export(tmp_path, 0, 1), _export(tmp_path, 1, 2)
    owned = OnnxPolicy(first, owned_weights={k: v.copy() for k, v in split_weights(first).weights.items()})
    x = _probe()
    np.testing.assert_allclose(owned(x), load_policy(first)(x), atol=1e-6)
    owned.write_weights(split_weights(second).weights)
    np.testing.assert_allclose(owned(x), load_policy(second)(x), atol=1e-6)
    bad = dict(split_weights(second).weights)
    name = next(iter(bad))
    bad[name] = bad[name][..., :0]
    with pytest.raises(PolicyLoadError, match=f"weight '{name}'"):
        owned.write_weights(bad)
    with pytest.raises(RuntimeError, match="owned_weights"):
        load_policy(first).write_weights(split_weights(second).weights)


def test_pool_copies_into_the_idle_session(tmp_path: Path) -> None:
    pool, x = SessionPool(), _probe()
    models = [_export(tmp_path, seed, seed + 1) for seed in range(5)]
    current = None
    locks = []
    for k, data in enumerate(models):
        loaded = pool.load(data, None, OBS_DIM, ACT_DIM, current)
        assert loaded.version == k + 1 and loaded.metadata.version == k + 1
        np.testing.assert_allclose(_single(loaded, x), load_policy(data)(x), atol=1e-6)
        if current is not None:
            # The policy in use is never the one written: it still computes its own model.
            np.testing.assert_allclose(_single(current, x), load_policy(models[k - 1])(x), atol=1e-6)
        locks.append(loaded.lock)
        current = loaded
    # Two sessions built for the graph, one reference build for the first copy, then copies only.
    assert (pool.builds, pool.copies) == (3, 3)
    assert len({id(lock) for lock in locks}) == 2 and locks[0] is locks[2] is locks[4]


def test_pool_new_graph_and_bad_models(tmp_path: Path) -> None:
    pool, x = SessionPool(), _probe()
    a1, a2 = _export(tmp_path, 0, 1), _export(tmp_path, 1, 2)
    current = pool.load(a1, None, OBS_DIM, ACT_DIM, None)
    current = pool.load(a2, None, OBS_DIM, ACT_DIM, current)
    wider = _export(tmp_path, 2, 3, hidden=(32, 16))  # a new graph: built, not copied
    copies = pool.copies
    current = pool.load(wider, None, OBS_DIM, ACT_DIM, current)
    assert pool.copies == copies
    np.testing.assert_allclose(_single(current, x), load_policy(wider)(x), atol=1e-6)
    with pytest.raises(PolicyLoadError, match="obs_dim is 5, expected 6"):
        pool.load(a1, None, OBS_DIM + 1, ACT_DIM, current)
    with pytest.raises(PolicyLoadError, match="not a valid ONNX model"):
        pool.load(b"not onnx", None, OBS_DIM, ACT_DIM, current)
    with pytest.raises(PolicyLoadError, match="policy file not found"):
        pool.load(str(tmp_path / "missing.onnx"), None, OBS_DIM, ACT_DIM, current)


def _with_computed_constant(data: bytes) -> bytes:
    """The same policy with its output scaled by Sqrt(s * s), s an initializer equal to 1: constant
    folding would bake the result in, which a weight copy could then not reach."""
    model = onnx.load_from_string(data)
    graph = model.graph
    graph.initializer.append(onnx.numpy_helper.from_array(np.ones(1, np.float32), "s"))
    old = graph.output[0].name
    graph.node[-1].output[0] = "pre"
    graph.node.extend([onnx.helper.make_node("Mul", ["s", "s"], ["s2"]),
                       onnx.helper.make_node("Sqrt", ["s2"], ["root"]),
                       onnx.helper.make_node("Mul", ["pre", "root"], [old])])
    return model.SerializeToString()


def test_pool_checks_the_first_copy_of_a_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool, x = SessionPool(), _probe()
    models = [_with_computed_constant(_export(tmp_path, seed, seed + 1)) for seed in range(4)]
    current = None
    for data in models[:2]:
        current = pool.load(data, None, OBS_DIM, ACT_DIM, current)
    # The pool's sessions do not fold constants, so the copy works: the check passes.
    current = pool.load(models[2], None, OBS_DIM, ACT_DIM, current)
    assert pool.copies == 1
    np.testing.assert_allclose(_single(current, x), load_policy(models[2])(x), atol=1e-6)

    # A copy that does not reach the session (simulated) fails the check: fresh sessions from then on.
    failing = SessionPool()
    monkeypatch.setattr(OnnxPolicy, "write_weights", lambda self, weights: None)
    current = None
    for data in models:
        current = failing.load(data, None, OBS_DIM, ACT_DIM, current)
        np.testing.assert_allclose(_single(current, x), load_policy(data)(x), atol=1e-6)
    assert failing.copies == 0 and not current.policy.owns_weights


def gather_policy(index: int | None, obs_dim: int = 4, version: int = 1, env_id: str = "Test-v0",
                  high: float = 1.0) -> bytes:
    """action = tanh(obs[:, i]): `i` an initializer (int), or obs[0, 0] itself (None: a model that
    runs on small inputs and fails on an observation whose first value is obs_dim or more)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    if index is None:
        inits += [numpy_helper.from_array(np.array([0], np.int64), "first"),
                  numpy_helper.from_array(np.array([1], np.int64), "shape")]
        nodes += [helper.make_node("Gather", ["obs", "first"], ["c0"], axis=1),
                  helper.make_node("ReduceMax", ["c0"], ["top"], keepdims=0),
                  helper.make_node("Cast", ["top"], ["top_i"], to=TensorProto.INT64),
                  helper.make_node("Reshape", ["top_i", "shape"], ["idx"])]
    else:
        inits.append(numpy_helper.from_array(np.array([index], np.int64), "idx"))
    nodes += [helper.make_node("Gather", ["obs", "idx"], ["g"], axis=1),
              helper.make_node("Tanh", ["g"], ["action"])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", 1])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    props = {"env_id": env_id, "obs_dim": str(obs_dim), "act_dim": "1", "action_low": f"[{-high}]",
             "action_high": f"[{high}]", "version": str(version), "training_step": "0", "source": "test"}
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    return model.SerializeToString()


def test_pool_refuses_weights_that_make_the_graph_fail(tmp_path: Path) -> None:
    """A copied index out of range failed only at the next control step (it killed the actor)."""
    pool = SessionPool()
    current = pool.load(gather_policy(0), 1, 4, 1, None)
    current = pool.load(gather_policy(1, version=2), 2, 4, 1, current)
    current = pool.load(gather_policy(2, version=3), 3, 4, 1, current)
    assert pool.copies == 1
    with pytest.raises(PolicyLoadError, match="the model fails when run"):
        pool.load(gather_policy(7, version=4), 4, 4, 1, current)
    assert current.run(np.array([0.0, 0.0, 0.5, 0.0], np.float32)) == pytest.approx(np.tanh(0.5))
    after = pool.load(gather_policy(3, version=5), 5, 4, 1, current)  # the pool goes on
    assert after.run(np.array([0.0, 0.0, 0.0, -0.5], np.float32)) == pytest.approx(np.tanh(-0.5))


def test_a_model_that_fails_on_an_input_raises_policy_run_error() -> None:
    policy = load_policy(gather_policy(None))
    policy.warmup()  # zeros: index 0
    bound = policy.bind()
    assert bound(np.array([3.0, 0.0, 0.0, 0.0], np.float32)) == pytest.approx(np.tanh(0.0))
    for run in (bound, policy):
        with pytest.raises(PolicyRunError, match=r"<bytes>: the model fails when run \(\w+: .*out of"):
            run(np.array([9.0, 0.0, 0.0, 0.0], np.float32))


def test_weights_of_another_dtype_or_a_bad_last_one_change_nothing(tmp_path: Path) -> None:
    """write_weights checks every weight before it copies any: a float64 weight, or one bad weight
    after good ones, is refused and the running policy stays as it was (a mutation test)."""
    first, second = _export(tmp_path, 0, 1), _export(tmp_path, 1, 2)
    owned = OnnxPolicy(first, owned_weights={k: v.copy() for k, v in split_weights(first).weights.items()})
    x = _probe()
    before = owned(x).copy()
    name = list(split_weights(second).weights)[-1]
    for change, what in ((lambda w: w.astype(np.float64), "float64"),
                         (lambda w: w[..., :0], r"float32\[0\]")):
        bad = dict(split_weights(second).weights)
        bad[name] = change(bad[name])
        with pytest.raises(PolicyLoadError, match=f"weight '{name}' is {what}"):
            owned.write_weights(bad)
        np.testing.assert_array_equal(owned(x), before)
