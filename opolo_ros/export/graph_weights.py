"""Split an ONNX policy into its graph and its weights.

Policies exported by one learner share a graph and differ only in their initializers (and
metadata): comparing `structure` tells whether a new model can be swapped into a running session
by copying `weights` (:meth:`OnnxPolicy.write_weights`) instead of building a session.
Needs the `onnx` package (protobuf parsing); onnxruntime alone cannot read initializers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opolo_ros.export.onnx_policy import PolicyLoadError


@dataclass(frozen=True)
class GraphWeights:
    structure: bytes  # the model without initializer values and metadata, serialized
    weights: dict[str, np.ndarray]  # initializer name -> writable copy
    props: dict[str, str]  # metadata_props


def split_weights(model: bytes, origin: str = "<bytes>") -> GraphWeights:
    """Parse `model`; PolicyLoadError naming `origin` if it is not an ONNX model."""
    import onnx
    from onnx import numpy_helper

    try:
        proto = onnx.load_from_string(model)
        weights = {t.name: np.array(numpy_helper.to_array(t)) for t in proto.graph.initializer}
    except Exception as exc:  # protobuf DecodeError, onnx's own errors on bad tensors
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PolicyLoadError(f"{origin}: not a valid ONNX model ({detail})") from None
    if not proto.graph.node:
        raise PolicyLoadError(f"{origin}: not a valid ONNX model (no graph)")
    props = {p.key: p.value for p in proto.metadata_props}
    for tensor in proto.graph.initializer:
        shape_only = onnx.TensorProto(name=tensor.name, dims=list(tensor.dims), data_type=tensor.data_type)
        tensor.CopyFrom(shape_only)
    del proto.metadata_props[:]
    return GraphWeights(proto.SerializeToString(deterministic=True), weights, props)
