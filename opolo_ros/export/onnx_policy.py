"""ONNX policy contract: export a learned actor to a self-contained model, and load one for inference.

The exported graph maps `obs` float32 [batch, obs_dim] to `action` float32 [batch, act_dim] in the
environment's own units: observation normalisation, the actor and the rescaling from [-1, 1] to the
action bounds are all inside it, so a robot needs only onnxruntime and numpy to run it. The model
carries its metadata (dims, bounds, env id, training step, version, source; optionally the control
period it was trained at) as ONNX `metadata_props`.

Loading uses onnxruntime alone (torch and onnx are imported lazily by the exporter), so the actor node
on a robot does not pay for importing torch; its hot swap by weight copy (graph_weights.py) parses
models with onnx.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from opolo_ros import __version__

if TYPE_CHECKING:
    import torch

INPUT_NAME = "obs"
OUTPUT_NAME = "action"
OPSET = 17
# Keys written by the exporter and required by the loader.
REQUIRED_KEYS = ("env_id", "obs_dim", "act_dim", "action_low", "action_high", "training_step", "version",
                 "source")
# Optional: seconds of simulated time per training env step (the env's dt). Models exported before it
# existed, the shipped experts among them, lack it.
CONTROL_PERIOD_KEY = "control_period_s"
JOINT_NAMES_KEY = "joint_names"  # an MJCF robot's observed joints, comma-separated, in the policy's order
TIME_FEATURE_STEPS_KEY = "time_feature_steps"  # T of a time-feature policy's 1 - t/T (the episode limit)
EPISODE_STEPS_KEY = "max_episode_steps"  # an MJCF robot's training episode limit (evaluate's default)
NUM_DEMOS_KEY = "num_demos"  # demonstration episodes an OPOLO policy learned from (0: all of its set)
# ORT and PyTorch use different kernels (GEMM blocking, tanh approximation). The exported graph is
# checked against the exact (float64) evaluation of the PyTorch policy: on each verification input
# it may be off by VERIFY_TOL plus ROUNDING_FACTOR times PyTorch's own float32 error on that input.
# On typical inputs PyTorch's error is ~1e-7, so this is the 1e-5 contract; on huge inputs, and for a
# trained policy with large activations, float32 itself cannot reach 1e-5, and the allowance grows
# with it. Over 240 random [400, 300] policies (weights x1 to x10, obs_dim 11 to 105) ORT's error was
# at most 16x PyTorch's (bench/export_rounding.py --seeds 60); an export defect (a wrong bound, a
# missing layer, float16 weights, a 1e-4 shift) is refused on the typical inputs.
VERIFY_TOL = 1e-5
MAX_MODEL_BYTES = 1 << 30  # protobuf itself stops at 2 GiB; a policy is a few MB
ROUNDING_FACTOR = 20.0
FLOAT32_MAX = float(np.finfo(np.float32).max)  # action bounds must fit the float32 graph


class PolicyLoadError(ValueError):
    """A policy model cannot be used: missing, not ONNX, no metadata, or not matching the expected dims."""


class PolicyRunError(ValueError):
    """A loaded policy failed on an input (onnxruntime raised): e.g. a graph whose shapes or indices
    depend on the input, which passed the load-time checks."""


def _failure(origin: str, err: Exception) -> str:
    detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    return f"{origin}: the model fails when run ({type(err).__name__}: {detail})"


class PolicyExportError(RuntimeError):
    """The exported graph does not reproduce the PyTorch policy."""


@dataclass(frozen=True)
class PolicyMetadata:
    """What a policy model says about itself; stored as string `metadata_props` in the ONNX file."""

    env_id: str
    obs_dim: int
    act_dim: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    training_step: int = 0
    version: int = 0
    source: str = "opolo_ros"
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def time_feature(self) -> bool:
        """Whether the policy expects the time feature 1 - t/T as its last input."""
        return str(self.extra.get("time_feature", "0")).strip().lower() in ("1", "true", "yes")

    @property
    def joint_names(self) -> tuple[str, ...]:
        """An MJCF robot's observed joints in the policy's order (positions, then velocities); ()
        when the model does not say (a Gymnasium task, or exported before the key existed)."""
        value = str(self.extra.get(JOINT_NAMES_KEY, "")).strip()
        if value.startswith("["):  # given as a list (stored as JSON)
            try:
                return tuple(str(name) for name in json.loads(value))
            except (ValueError, TypeError):
                pass
        return tuple(name.strip() for name in value.split(",")) if value else ()

    @property
    def time_feature_steps(self) -> int | None:
        """T of the time feature 1 - t/T the policy was trained with (its training episode limit,
        the deploy actor's ``time_feature_clock``); None when the model does not say (no time
        feature, or exported before the key existed) or says something that is no count."""
        return self._count(TIME_FEATURE_STEPS_KEY)

    @property
    def max_episode_steps(self) -> int | None:
        """An MJCF robot's training episode limit (evaluated over it by default); None when the
        model does not say (a Gymnasium task's keeps the task's own)."""
        return self._count(EPISODE_STEPS_KEY)

    @property
    def num_demos(self) -> int | None:
        """How many demonstration episodes (the first ones of its set; 0: all) the policy learned
        from; None when the model does not say."""
        value = str(self.extra.get(NUM_DEMOS_KEY, "")).strip()
        return int(value) if value.isdigit() else None

    def _count(self, key: str) -> int | None:
        value = str(self.extra.get(key, "")).strip()
        return int(value) if value.isdigit() and int(value) > 0 else None

    @property
    def control_period_s(self) -> float | None:
        """Seconds per control step the policy was trained at (the env's dt); None when the model
        does not say (exported before the key existed). :meth:`from_props` checked the value."""
        value = self.extra.get(CONTROL_PERIOD_KEY)
        return None if value is None else float(value)

    @property
    def control_rate_hz(self) -> float | None:
        """The training control rate, 1 / :attr:`control_period_s`; None when the model does not say."""
        period = self.control_period_s
        return None if period is None else 1.0 / period

    def to_props(self) -> dict[str, str]:
        props = {
            "env_id": self.env_id,
            "obs_dim": str(self.obs_dim),
            "act_dim": str(self.act_dim),
            "action_low": json.dumps(list(self.action_low)),
            "action_high": json.dumps(list(self.action_high)),
            "training_step": str(self.training_step),
            "version": str(self.version),
            "source": self.source,
        }
        props.update(self.extra)
        return props

    @classmethod
    def from_props(cls, props: Mapping[str, str], origin: str = "model") -> PolicyMetadata:
        """Parse and check `metadata_props`; raise PolicyLoadError naming `origin` on any problem."""
        missing = [k for k in REQUIRED_KEYS if k not in props]
        if missing:
            raise PolicyLoadError(f"{origin}: missing policy metadata {', '.join(missing)} "
                                  "(not exported by opolo_ros.export?)")
        try:
            low = tuple(float(v) for v in json.loads(props["action_low"]))
            high = tuple(float(v) for v in json.loads(props["action_high"]))
            meta = cls(
                env_id=props["env_id"],
                obs_dim=int(props["obs_dim"]),
                act_dim=int(props["act_dim"]),
                action_low=low,
                action_high=high,
                training_step=int(props["training_step"]),
                version=int(props["version"]),
                source=props["source"],
                extra={k: v for k, v in props.items() if k not in REQUIRED_KEYS},
            )
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:  # nested too deep, 1e400
            raise PolicyLoadError(f"{origin}: malformed policy metadata ({str(exc)[:200]})") from None
        if meta.obs_dim <= 0 or meta.act_dim <= 0:
            raise PolicyLoadError(f"{origin}: metadata dims must be positive, got obs_dim={meta.obs_dim} "
                                  f"act_dim={meta.act_dim}")
        if len(low) != meta.act_dim or len(high) != meta.act_dim:
            raise PolicyLoadError(f"{origin}: metadata action bounds have {len(low)}/{len(high)} entries, "
                                  f"act_dim is {meta.act_dim}")
        bounds = np.array([low, high], np.float64)
        if not (np.isfinite(bounds).all() and (np.abs(bounds) <= FLOAT32_MAX).all()
                and (bounds[0] <= bounds[1]).all()):
            raise PolicyLoadError(f"{origin}: metadata action bounds must be finite float32 values with "
                                  f"low <= high, got low={list(low)} high={list(high)}")
        _check_control_period(props.get(CONTROL_PERIOD_KEY), origin)
        return meta


def _check_control_period(value: str | None, origin: str) -> None:
    """PolicyLoadError unless the optional control period is absent or a finite number of seconds > 0."""
    if value is None:
        return
    try:
        period = float(value)
    except (TypeError, ValueError):
        period = math.nan
    if not 0 < period < math.inf:
        raise PolicyLoadError(f"{origin}: metadata {CONTROL_PERIOD_KEY} must be a finite number of "
                              f"seconds > 0, got {str(value)[:50]!r}")


class OnnxPolicy:
    """An onnxruntime session for one policy model, built once and checked against its metadata.

    Single-threaded and sequential by default: a control loop wants low, steady latency, not throughput,
    and must not compete with the learner for cores. Spinning threads are off unless asked for.

    With `owned_weights` (initializer name -> writable array, e.g. copies of what
    :func:`~opolo_ros.export.graph_weights.split_weights` returns) the session
    runs on those arrays instead of copies of the model's initializers, and neither folds
    constants nor pre-packs weights: :meth:`write_weights` then changes the policy in place
    (hot swap without a session build, :mod:`opolo_ros.nodes.session_pool`).
    """

    def __init__(self, model: bytes, *, origin: str = "<bytes>", expected_obs_dim: int | None = None,
                 expected_act_dim: int | None = None, allow_spinning: bool = False,
                 owned_weights: Mapping[str, np.ndarray] | None = None) -> None:
        self._bytes = bytes(model)
        self.origin = origin
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        # Errors reach the caller as PolicyLoadError / PolicyRunError with onnxruntime's message;
        # its own logger would print each one again, unthrottled, from inside a 1 kHz loop.
        opts.log_severity_level = 4  # fatal only
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        spin = "1" if allow_spinning else "0"
        opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
        opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
        self._owned: dict[str, tuple[np.ndarray, ort.OrtValue]] = {}
        extra: dict[str, Any] = {}
        if owned_weights is not None:
            opts.add_session_config_entry("session.disable_prepacking", "1")
            extra["disabled_optimizers"] = ["ConstantFolding"]
            for name, array in owned_weights.items():
                value = ort.OrtValue.ortvalue_from_numpy(array)  # shares the array's memory
                opts.add_initializer(name, value)
                self._owned[name] = (array, value)
        try:
            session = ort.InferenceSession(self._bytes, sess_options=opts, providers=["CPUExecutionProvider"],
                                           **extra)
        except Exception as exc:  # onnxruntime raises its own exception types for every kind of bad input
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PolicyLoadError(f"{origin}: not a valid ONNX model ({detail})") from None
        self.metadata = PolicyMetadata.from_props(session.get_modelmeta().custom_metadata_map, origin)
        self._check_signature(session, expected_obs_dim, expected_act_dim)
        self._session = session
        self._run = session.run
        self._outputs = [OUTPUT_NAME]
        self._obs_dim = self.metadata.obs_dim

    def _check_signature(self, session: ort.InferenceSession, expected_obs_dim: int | None,
                         expected_act_dim: int | None) -> None:
        meta, origin = self.metadata, self.origin
        check_dims(meta, origin, expected_obs_dim, expected_act_dim)
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if [i.name for i in inputs] != [INPUT_NAME] or OUTPUT_NAME not in [o.name for o in outputs]:
            raise PolicyLoadError(f"{origin}: graph must have one input {INPUT_NAME!r} and an output "
                                  f"{OUTPUT_NAME!r}, has inputs {[i.name for i in inputs]} and outputs "
                                  f"{[o.name for o in outputs]}")
        out = next(o for o in outputs if o.name == OUTPUT_NAME)
        for arg, dim, what in ((inputs[0], meta.obs_dim, "obs_dim"), (out, meta.act_dim, "act_dim")):
            if arg.type != "tensor(float)":
                raise PolicyLoadError(f"{origin}: {arg.name!r} must be float32, is {arg.type}")
            shape = list(arg.shape)
            if len(shape) != 2 or isinstance(shape[0], int) or shape[1] != dim:
                raise PolicyLoadError(f"{origin}: {arg.name!r} has shape {shape}, expected "
                                      f"[batch, {dim}] with a dynamic batch ({what} from metadata)")

    @property
    def owns_weights(self) -> bool:
        return bool(self._owned)

    def write_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Copy new values into the owned weights (same names, shapes and dtypes); the next run uses
        them. Not while another thread runs this policy: the caller serialises the two."""
        if not self._owned:
            raise RuntimeError("write_weights needs a policy built with owned_weights")
        if weights.keys() != self._owned.keys():
            raise PolicyLoadError(f"{self.origin}: weights {sorted(weights)} do not match the graph's "
                                  f"{sorted(self._owned)}")
        for name, (array, _) in self._owned.items():
            new = weights[name]
            if new.shape != array.shape or new.dtype != array.dtype:
                raise PolicyLoadError(f"{self.origin}: weight {name!r} is {new.dtype}{list(new.shape)}, "
                                      f"the graph's is {array.dtype}{list(array.shape)}")
        for name, (array, _) in self._owned.items():
            np.copyto(array, weights[name])

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Actions for `obs` of shape [obs_dim] (returns [act_dim]) or [B, obs_dim] (returns [B, act_dim])."""
        x = obs
        if type(x) is not np.ndarray or x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim == 1:
            if x.shape[0] != self._obs_dim:
                raise ValueError(f"observation has {x.shape[0]} values, policy expects {self._obs_dim}")
            return self._infer(x[None])[0]
        if x.ndim != 2 or x.shape[1] != self._obs_dim:
            raise ValueError(f"observation batch has shape {x.shape}, policy expects [B, {self._obs_dim}]")
        return self._infer(x)

    def _infer(self, x: np.ndarray) -> np.ndarray:
        try:
            return self._run(self._outputs, {INPUT_NAME: x})[0]
        except Exception as err:  # onnxruntime's own exception types
            raise PolicyRunError(_failure(self.origin, err)) from None

    @property
    def session(self) -> ort.InferenceSession:
        return self._session

    def bind(self) -> BoundPolicy:
        """A single-observation runner with preallocated, I/O-bound buffers (see :class:`BoundPolicy`)."""
        return BoundPolicy(self)

    def warmup(self, n: int = 10) -> None:
        """Run `n` inferences so allocations and lazy initialisation happen before the control loop."""
        zeros = np.zeros((1, self._obs_dim), np.float32)
        try:
            for _ in range(n):
                self._run(self._outputs, {INPUT_NAME: zeros})
        except Exception as err:  # onnxruntime's Fail, InvalidArgument...: a graph that builds but cannot run
            raise PolicyLoadError(_failure(self.origin, err)) from None

    def to_bytes(self) -> bytes:
        """The serialized model, e.g. to publish it on the policy topic."""
        return self._bytes


class BoundPolicy:
    """One observation in, one action out, through onnxruntime I/O binding: no allocation per call.

    The input and output tensors are numpy arrays allocated once and bound to the session as
    OrtValues that share their memory, so a call is: copy the observation into the input buffer,
    run, return a view of the output buffer (overwritten by the next call; copy it to keep it).
    Measured on the shipped InvertedPendulum expert: p50 13 us against 19 us for
    ``session.run(["action"], {"obs": x})``, which converts the feed and allocates the output.
    The private ``_sess``/``_iobinding`` handles skip about 2.5 us of per-call checks in
    onnxruntime's Python wrapper (graph-capture bookkeeping for WebGPU); the public wrapper is used
    where they are absent.
    """

    def __init__(self, policy: OnnxPolicy) -> None:
        meta = policy.metadata
        self._obs = np.zeros((1, meta.obs_dim), np.float32)
        self._action = np.zeros((1, meta.act_dim), np.float32)
        self._values = (ort.OrtValue.ortvalue_from_numpy(self._obs),
                        ort.OrtValue.ortvalue_from_numpy(self._action))  # keep them alive
        session = policy.session
        binding = session.io_binding()
        binding.bind_ortvalue_input(INPUT_NAME, self._values[0])
        binding.bind_ortvalue_output(OUTPUT_NAME, self._values[1])
        self._binding = binding
        raw_session, raw_binding = getattr(session, "_sess", None), getattr(binding, "_iobinding", None)
        if raw_session is not None and raw_binding is not None:
            self._run, self._arg = raw_session.run_with_iobinding, raw_binding
        else:
            self._run, self._arg = session.run_with_iobinding, binding
        self._obs_row, self._action_row = self._obs[0], self._action[0]
        self._origin = policy.origin

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """The action (float32 [act_dim], a view into the output buffer) for `obs` [obs_dim];
        PolicyRunError if onnxruntime fails on it (a try block costs nothing until it raises)."""
        self._obs_row[:] = obs
        try:
            self._run(self._arg, None)
        except Exception as err:  # onnxruntime's own exception types
            raise PolicyRunError(_failure(self._origin, err)) from None
        return self._action_row


def check_dims(meta: PolicyMetadata, origin: str, expected_obs_dim: int | None,
               expected_act_dim: int | None) -> None:
    """PolicyLoadError unless the metadata's dims are the expected ones (None: any)."""
    if expected_obs_dim is not None and meta.obs_dim != expected_obs_dim:
        raise PolicyLoadError(f"{origin}: policy obs_dim is {meta.obs_dim}, expected {expected_obs_dim} "
                              f"(env {meta.env_id!r})")
    if expected_act_dim is not None and meta.act_dim != expected_act_dim:
        raise PolicyLoadError(f"{origin}: policy act_dim is {meta.act_dim}, expected {expected_act_dim} "
                              f"(env {meta.env_id!r})")


def read_model(source: str | os.PathLike[str] | bytes | bytearray | memoryview,
               origin: str = "<bytes>") -> tuple[bytes, str]:
    """(model bytes, origin for messages) from a file path or any buffer (`origin` names where a
    buffer came from, e.g. its topic); PolicyLoadError if none."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):  # a FIFO would block, /dev/zero never end
                raise PolicyLoadError(f"{path}: not a regular file")
            if info.st_size > MAX_MODEL_BYTES:
                raise PolicyLoadError(f"{path}: {info.st_size} bytes, more than a policy model "
                                      f"({MAX_MODEL_BYTES} at most)")
            data = path.read_bytes()
        except FileNotFoundError:
            raise PolicyLoadError(f"{path}: policy file not found") from None
        except OSError as exc:
            raise PolicyLoadError(f"{path}: cannot read policy file ({exc.strerror})") from None
        origin = str(path)
    else:
        data = bytes(memoryview(source))
    if not data:
        raise PolicyLoadError(f"{origin}: empty policy model")
    return data, origin


def load_policy(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *,
                expected_obs_dim: int | None = None, expected_act_dim: int | None = None,
                allow_spinning: bool = False, origin: str = "<bytes>") -> OnnxPolicy:
    """Load a policy from a file path or from model bytes (any buffer, e.g. a ROS uint8[] array,
    named `origin` in messages)."""
    data, origin = read_model(source, origin)
    return OnnxPolicy(data, origin=origin, expected_obs_dim=expected_obs_dim,
                      expected_act_dim=expected_act_dim, allow_spinning=allow_spinning)


def _bounds(value: float | Sequence[float] | np.ndarray, act_dim: int, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(act_dim, float(arr))
    if arr.shape != (act_dim,):
        raise ValueError(f"{name} has shape {arr.shape}, expected a scalar or ({act_dim},)")
    if not np.all(np.isfinite(arr)) or np.abs(arr).max() > FLOAT32_MAX:
        raise ValueError(f"{name} must be finite numbers within float32's range (+-{FLOAT32_MAX:.4g}), "
                         f"got {arr.tolist()}")
    return arr.astype(np.float32)


def _policy_graph(actor: torch.nn.Module, obs_norm: torch.nn.Module | None, low: np.ndarray,
                  high: np.ndarray) -> torch.nn.Module:
    """normaliser -> actor -> rescale as one CPU module in eval mode; copies, so training is untouched."""
    import copy

    import torch
    from torch import nn

    class ExportedPolicy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.obs_norm = copy.deepcopy(obs_norm).cpu() if obs_norm is not None else None
            self.actor = copy.deepcopy(actor).cpu()
            self.register_buffer("low", torch.as_tensor(low))
            self.register_buffer("high", torch.as_tensor(high))

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            if self.obs_norm is not None:
                obs = self.obs_norm(obs)
            a = self.actor(obs)
            # low + (a + 1) / 2 * (high - low), written as a blend so that a saturated tanh (a = +-1)
            # gives exactly high or low in float32; halved before the products, which cannot then
            # overflow float32 for bounds near its largest value.
            return (0.5 * (1.0 - a)) * self.low + (0.5 * (1.0 + a)) * self.high

    return ExportedPolicy().float().eval()


def verification_inputs(obs_dim: int, rng: np.random.Generator) -> np.ndarray:
    """Typical, large and huge observations: the last rows saturate tanh to hit the action bounds."""
    return np.concatenate([
        rng.standard_normal((16, obs_dim)),
        10.0 * rng.standard_normal((8, obs_dim)),
        1e4 * np.sign(rng.standard_normal((4, obs_dim))),
        np.zeros((1, obs_dim)),
    ]).astype(np.float32)


def export_policy_or_warn(actor: torch.nn.Module, path: str | os.PathLike[str],
                          warn: Callable[[str], None], **kwargs: Any) -> Path:
    """`export_policy` for training loops: a policy that fails the check is still exported, with a
    warning, instead of ending a long run (an actor waiting for the next version must not wait
    forever). Before the check allowed for float32 rounding this happened to trained policies;
    now it points to a wrong graph, or to float32 rounding beyond what the allowance covers.
    A policy whose weights are not finite (training diverged) is said so."""
    import torch

    tensors = [*actor.named_parameters()]
    norm = kwargs.get("obs_norm")
    if isinstance(norm, torch.nn.Module):  # its mean and variance are in the graph as well
        tensors += [(f"obs_norm.{name}", b) for name, b in norm.named_buffers()]
    broken = [name for name, p in tensors if p.is_floating_point() and not torch.isfinite(p).all()]
    if broken:  # its actions are NaN: deploy actors send their safe command instead
        warn(f"the policy's weights are not finite ({', '.join(broken)}): training diverged "
             "(replay of absurd values, a learning rate too high?); exported as it is")
        return export_policy(actor, path, verify=False, **kwargs)
    try:
        return export_policy(actor, path, **kwargs)
    except PolicyExportError as err:
        warn(f"{err}; exported unchecked")
        return export_policy(actor, path, verify=False, **kwargs)


STALE_TMP_S = 600.0  # a temporary model file older than this is a killed write's


def _write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: readers see the old or the new model only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a write killed midway (kill -9); another
        try:  # writer's may be in use: only those older than STALE_TMP_S
            if time.time() - stale.stat().st_mtime > STALE_TMP_S:
                stale.unlink()
        except OSError:
            pass
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def export_policy(actor: torch.nn.Module, path: str | os.PathLike[str], *,
                  action_low: float | Sequence[float] | np.ndarray,
                  action_high: float | Sequence[float] | np.ndarray,
                  obs_norm: torch.nn.Module | None = None, metadata: Mapping[str, Any],
                  verify: bool = True) -> Path:
    """Export `actor` (obs -> [-1, 1] actions, with `obs_dim`/`act_dim` attributes) to an ONNX file.

    `metadata` must name `env_id` and may give `training_step`, `version`, `source` and any extra keys
    (stored as strings; non-strings as JSON). The dims and bounds are taken from the actor and the
    arguments. With `verify`, onnxruntime's output is checked against PyTorch's before the file is
    written, so a failed export never replaces a good model.
    """
    import onnx
    import torch

    obs_dim, act_dim = int(actor.obs_dim), int(actor.act_dim)
    low = _bounds(action_low, act_dim, "action_low")
    high = _bounds(action_high, act_dim, "action_high")
    if not np.all(low < high):
        raise ValueError(f"action_low must be below action_high, got {low.tolist()} and {high.tolist()}")
    meta = _metadata(metadata, obs_dim, act_dim, low, high)

    graph = _policy_graph(actor, obs_norm, low, high)
    example = torch.zeros(2, obs_dim)
    with torch.no_grad():
        out_shape = tuple(graph(example).shape)
    if out_shape != (2, act_dim):
        raise ValueError(f"policy maps [2, {obs_dim}] to {list(out_shape)}, expected [2, {act_dim}]")

    buf = io.BytesIO()
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated in favour of the dynamo one, which needs onnxscript;
        # for a plain MLP both give the same graph, and this one has no extra dependency.
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        warnings.filterwarnings("ignore", message=".*feature will be removed.*", category=DeprecationWarning)
        torch.onnx.export(
            graph, (example,), buf, dynamo=False, opset_version=OPSET, input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME], dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            do_constant_folding=True,
        )
    model = onnx.load_from_string(buf.getvalue())
    model.producer_name, model.producer_version = "opolo_ros", __version__
    model.doc_string = (f"opolo_ros policy for {meta.env_id}: "
                        f"obs [batch, {obs_dim}] -> action [batch, {act_dim}]")
    onnx.helper.set_model_props(model, meta.to_props())
    onnx.checker.check_model(model)
    data = model.SerializeToString()

    if verify:
        policy = OnnxPolicy(data, origin=str(path), expected_obs_dim=obs_dim, expected_act_dim=act_dim)
        _check_export(policy, graph, obs_dim, low, high, path)

    out = Path(path)
    _write_atomic(out, data)
    return out


def export_errors(got: np.ndarray, pytorch: Sequence[np.ndarray], exact: np.ndarray,
                  half_range: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per verification row: the largest error of the ONNX output `got`, and of PyTorch's float32
    outputs (the largest over the evaluations in `pytorch`), against the exact (float64) policy.

    In units of the half action range, i.e. on the policy's own [-1, 1] scale, so the tolerance
    means the same for an action range of [-0.4, 0.4] and one of [-30, 30]. Per row, so that the
    rounding of huge (saturating) inputs does not widen the allowance of typical ones."""
    half = np.maximum(np.asarray(half_range, np.float64), 1e-12)
    exact = np.asarray(exact, np.float64)

    def rows(out: np.ndarray) -> np.ndarray:
        return np.max(np.abs(np.asarray(out, np.float64) - exact) / half, axis=1)

    return rows(got), np.max([rows(out) for out in pytorch], axis=0)


def export_allowance(pytorch_err: np.ndarray | float) -> np.ndarray | float:
    """How far the ONNX output may be from the exact policy, given PyTorch's own float32 error."""
    return VERIFY_TOL + ROUNDING_FACTOR * pytorch_err


def pytorch_evaluations(graph: torch.nn.Module, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """`graph` on the float32 inputs `x` in float32, batched and row by row (different GEMM paths:
    PyTorch's rounding sampled twice, as one evaluation can land close to the exact value by chance),
    and in float64 (on a copy: `graph` is left as it is)."""
    import copy

    import torch

    xt = torch.from_numpy(x)
    with torch.no_grad():
        batched = graph(xt).numpy()
        single = torch.cat([graph(xt[i:i + 1]) for i in range(len(x))]).numpy()
        exact = copy.deepcopy(graph).double()(xt.double()).numpy()
    return [batched, single], exact


def _check_export(policy: OnnxPolicy, graph: torch.nn.Module, obs_dim: int, low: np.ndarray,
                  high: np.ndarray, path: str | os.PathLike[str]) -> None:
    """Raise PolicyExportError unless `policy` reproduces `graph` on the verification inputs."""
    x = verification_inputs(obs_dim, np.random.default_rng(0))
    runs, exact = pytorch_evaluations(graph, x)
    got = policy(x)
    both_nan = np.isnan(got) & np.isnan(exact)  # NaN weights or normaliser: no comparison below sees it
    if both_nan.any():
        raise PolicyExportError(f"ONNX policy for {path} returns NaN on verification input "
                                f"{int(np.argmax(both_nan.any(axis=1)))}: its weights or observation "
                                "normaliser are not finite")
    overflow = ~np.isfinite(got) & np.isfinite(exact)
    if overflow.any():
        raise PolicyExportError(f"ONNX policy for {path} returns {got[overflow][0]} where the exact policy "
                                f"is finite (verification input {int(np.argmax(overflow.any(axis=1)))}): "
                                "float32 overflow")
    onnx_err, pytorch_err = export_errors(got, runs, exact, 0.5 * (np.float64(high) - low))
    allowed = export_allowance(pytorch_err)
    worst = int(np.argmax(onnx_err - allowed))
    if onnx_err[worst] > allowed[worst]:
        raise PolicyExportError(
            f"ONNX policy for {path} differs from the PyTorch policy (float64) by {onnx_err[worst]:.3g} "
            f"half action ranges on verification input {worst}, PyTorch float32 by "
            f"{pytorch_err[worst]:.3g} (allowed: {VERIFY_TOL} + {ROUNDING_FACTOR:g} x "
            f"{pytorch_err[worst]:.3g} = {allowed[worst]:.3g})")


def _metadata(metadata: Mapping[str, Any], obs_dim: int, act_dim: int, low: np.ndarray,
              high: np.ndarray) -> PolicyMetadata:
    """Contract metadata from the caller's keys; dims and bounds come from the policy itself."""
    if "env_id" not in metadata:
        raise ValueError("metadata must contain 'env_id'")
    derived = {"obs_dim": obs_dim, "act_dim": act_dim, "action_low": low, "action_high": high}
    for key, value in derived.items():
        if key in metadata and not np.array_equal(np.asarray(metadata[key], dtype=np.float32), value):
            raise ValueError(f"metadata {key}={metadata[key]!r} contradicts the exported policy ({value!r})")
    for key in metadata:
        if not isinstance(key, str):
            raise TypeError(f"metadata keys must be strings, got {key!r}")
    return PolicyMetadata(
        env_id=str(metadata["env_id"]),
        obs_dim=obs_dim,
        act_dim=act_dim,
        action_low=tuple(float(v) for v in low),
        action_high=tuple(float(v) for v in high),
        training_step=int(metadata.get("training_step", 0)),
        version=int(metadata.get("version", 0)),
        source=str(metadata.get("source", "opolo_ros")),
        extra={k: v if isinstance(v, str) else _json(v) for k, v in metadata.items()
               if k not in REQUIRED_KEYS},
    )


def _json(value: Any) -> str:
    """A metadata value as JSON; numpy scalars and arrays as the numbers they hold."""
    return json.dumps(value, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def stamp_metadata(path: str | os.PathLike[str], values: Mapping[str, Any]) -> PolicyMetadata:
    """Add or replace metadata properties of an exported model in place (atomically), e.g. the
    evaluation return of a shipped expert. Required keys cannot be changed this way."""
    import onnx

    path = Path(path)
    model = onnx.load(str(path))
    clash = set(values) & set(REQUIRED_KEYS)
    if clash:
        raise ValueError(f"cannot restamp required metadata keys: {sorted(clash)}")
    props = {p.key: p.value for p in model.metadata_props}
    props.update({k: v if isinstance(v, str) else _json(v) for k, v in values.items()})
    PolicyMetadata.from_props(props, str(path))  # a value the loader refuses: the model is left as it was
    del model.metadata_props[:]
    for k, v in props.items():
        model.metadata_props.add(key=k, value=v)
    _write_atomic(path, model.SerializeToString())
    return load_policy(path).metadata
