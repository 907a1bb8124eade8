"""Split an ONNX policy into its graph and its weights.

Policies exported by one learner share a graph and differ only in their initializers (and
metadata): comparing `structure` tells whether a new model can be swapped into a running session
by copying `weights` (:meth:`OnnxPolicy.write_weights`) instead of building a session.
Needs the `onnx` package (protobuf parsing); onnxruntime alone cannot read initializers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from opolo_ros.export.onnx_policy import PolicyLoadError

# Raw-data element types read with a view instead of onnx's element-wise conversion.
_RAW_DTYPES = {onnx.TensorProto.FLOAT: np.dtype("<f4"), onnx.TensorProto.DOUBLE: np.dtype("<f8"),
               onnx.TensorProto.INT32: np.dtype("<i4"), onnx.TensorProto.INT64: np.dtype("<i8")}


@dataclass(frozen=True)
class GraphWeights:
    structure: bytes  # the model without initializer values and metadata, serialized
    weights: dict[str, np.ndarray]  # initializer name -> values (read-only)
    props: dict[str, str]  # metadata_props


def split_weights(model: bytes, origin: str = "<bytes>") -> GraphWeights:
    """Parse `model`; PolicyLoadError naming `origin` if it is not an ONNX model.

    Runs on the actor's loader thread while the control thread serves observations: every step
    holds the GIL, so each tensor's bytes are read once and the values are cleared in place.
    """
    try:
        proto = onnx.load_from_string(model)
        weights = {t.name: _take_values(t) for t in proto.graph.initializer}
    except Exception as exc:  # protobuf DecodeError, onnx's own errors on bad tensors
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PolicyLoadError(f"{origin}: not a valid ONNX model ({detail})") from None
    if not proto.graph.node:
        raise PolicyLoadError(f"{origin}: not a valid ONNX model (no graph)")
    props = {p.key: p.value for p in proto.metadata_props}
    del proto.metadata_props[:]
    return GraphWeights(proto.SerializeToString(deterministic=True), weights, props)


def _take_values(tensor: onnx.TensorProto) -> np.ndarray:
    """The tensor's values; the tensor keeps its name, type and shape, not its values."""
    raw = tensor.raw_data  # one copy of the bytes (every access makes one)
    if raw and tensor.data_type in _RAW_DTYPES:  # what exporters write
        values = np.frombuffer(raw, dtype=_RAW_DTYPES[tensor.data_type]).reshape(tuple(tensor.dims))
        tensor.ClearField("raw_data")
        return values
    values = numpy_helper.to_array(tensor)
    tensor.CopyFrom(onnx.TensorProto(name=tensor.name, dims=list(tensor.dims), data_type=tensor.data_type))
    return values
