"""One node-graph description, two ways to start it: ``ros2 launch`` and ``opolo-ros launch``.

Each file in ``launch/`` holds its graph as plain Python, importable without the ``launch``
packages:

- ``ARGUMENTS``: the :class:`LaunchArg` list (name, default, description) -- every knob;
- ``describe(args) -> list[NodeSpec]``: the nodes, each with its fully resolved parameters and
  its remappings, for a dict of argument values (strings, as launch substitutions give them);
- ``generate_launch_description()``: ``launch_description(ARGUMENTS, describe)``, which turns the
  above into ``DeclareLaunchArgument`` actions and launch_ros ``Node`` actions (in an
  ``OpaqueFunction``, so the argument values are known), importing ``launch``/``launch_ros``
  only there. ``ros2 launch opolo_ros sim_train.launch.py env:=Hopper-v5`` uses this.

:func:`run_launch` (``opolo-ros launch sim_train env:=Hopper-v5``) starts the *same* node list with
the *same* parameters in one process: one rclpy context, one executor (manual composition), for
machines without ``ros2 launch``. The run ends when a node marked ``exit_ends_launch`` (the
``on_exit=Shutdown()`` of ``ros2 launch``) is finished; SIGINT/SIGTERM stop it cleanly (the
learner writes a checkpoint).

Parameters are resolved here, per node, from the parameter file and the arguments, rather than
handed to rcl as ``[params_file, {...}]``: a plain ``learner:`` key does not match a node in a
namespace, and an argument must win over every section of the file. :func:`node_parameters`
applies the sections that reach the node in the file's order, a later one over an earlier one, as
rcl does (``params_file.sections_reaching``; a plain ``<name>:`` section never overrides one that
names the node's namespace); the arguments go on top. A file's sections are read as rcl
reads them: nested keys name namespaces (``robot1: {actor: {ros__parameters: ...}}`` is
``robot1/actor``), and what rcl refuses (a value outside ``ros__parameters``, a misspelt
``ros__parameters``) is an error, never a section skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from opolo_ros import signals
from opolo_ros.errors import one_line
from opolo_ros.nodes.parameters import (  # noqa: F401 (the launch files' and tests' names)
    PACKAGE,
    declared_parameters,
    node_help,
    node_parameters,
    package_parameter_names,
    read_params_file,
)
from opolo_ros.params_file import NODE_CLASSES  # noqa: F401
from opolo_ros.sim.task_ids import is_mjcf

SOURCE_ROOT = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_S = 120.0  # a learner mid-burst finishes its transition, then checkpoints


@dataclass(frozen=True)
class LaunchArg:
    """A launch argument: ``DeclareLaunchArgument(name, default_value=default, description=...)``."""

    name: str
    default: str
    description: str


@dataclass
class NodeSpec:
    """One node of a graph: ``launch_ros.actions.Node(package, executable, name, namespace, ...)``."""

    executable: str
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    remappings: list[tuple[str, str]] = field(default_factory=list)
    namespace: str = ""
    exit_ends_launch: bool = False  # on_exit=Shutdown()
    package: str = PACKAGE


# --------------------------------------------------------------------------------- package files

def share_dir() -> Path:
    """The package's share folder (``ros2 launch`` installs), else the source tree."""
    try:
        from ament_index_python.packages import get_package_share_directory

        path = Path(get_package_share_directory(PACKAGE))
        if (path / "launch").is_dir():
            return path
    except (ImportError, LookupError, OSError, ValueError):
        pass  # not installed through ament (no AMENT_PREFIX_PATH, or not built): the source tree
    return SOURCE_ROOT


def package_path(*parts: str) -> Path:
    """A file of the package (``config/x.yaml``), from the share folder or the source tree."""
    for root in (share_dir(), SOURCE_ROOT):
        path = root.joinpath(*parts)
        if path.exists():
            return path
    return share_dir().joinpath(*parts)


def resolve_path(value: str) -> str:
    """A user path as given when it exists (relative to the working folder), else the package's."""
    if not value or Path(value).expanduser().exists() or Path(value).is_absolute():
        return str(Path(value).expanduser()) if value else value
    candidate = package_path(value)
    return str(candidate) if candidate.exists() else value


def task_name(env_id: str) -> str:
    """``InvertedPendulum-v5`` -> ``inverted_pendulum``; an MJCF path -> its file stem."""
    if is_mjcf(env_id):
        return Path(env_id).stem
    base = re.sub(r"-v\d+$", "", env_id)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


def task_params_file(env_id: str) -> str:
    """The package's parameter file for a task (``config/<task>.yaml``), or '' if there is none.

    None for an MJCF file: one named like a shipped task (``hopper.xml``) is still the user's own
    model, and the task's demonstrations and run folder are not its own."""
    if is_mjcf(env_id):
        return ""
    path = package_path("config", f"{task_name(env_id)}.yaml")
    return str(path) if path.is_file() else ""


# ------------------------------------------------------------------------------------ parameters

def run_config(params_file: str | Path | None, overrides: Mapping[str, Any] | None = None,
               namespace: str = ""):
    """The learner's run config from a parameter file plus overrides (as the learner will see it):
    the run-config keys of every section that reaches the learner in `namespace`
    (:func:`node_parameters`)."""
    import dataclasses

    from opolo_ros.algo.config import RunConfig, check_run_config, unflatten, update_dataclass

    known = {f.name for f in dataclasses.fields(RunConfig)}
    flat = node_parameters(params_file, "learner", namespace)  # {} without a file
    section = unflatten({k: v for k, v in flat.items() if k.split(".")[0] in known})
    cfg = update_dataclass(RunConfig(), section)
    if overrides:
        cfg = update_dataclass(cfg, overrides)
    check_run_config(cfg)
    return cfg


def parse_arguments(items: Sequence[str]) -> dict[str, str]:
    """``["env:=Hopper-v5", "seed:=1"]`` -> ``{"env": "Hopper-v5", "seed": "1"}``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep or not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"launch argument {item!r} must look like name:=value")
        if value and not value.strip():
            raise ValueError(f"launch argument {name!r} is blank ({value!r}): give a value, or "
                             f"{name}:= (empty) for its default")
        out[name] = value
    return out


def resolve_arguments(arguments: Sequence[LaunchArg], given: Mapping[str, str]) -> dict[str, str]:
    """Defaults overridden by `given`; an unknown name is an error that lists the known ones."""
    known = {a.name: a.default for a in arguments}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"unknown launch argument(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return {**known, **given}


def yaml_value(text: str) -> Any:
    """A launch argument string as a parameter value (YAML scalar rules, as launch_ros applies)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number"}


def typed_value(text: Any, kind: type, what: str) -> Any:
    """`text` (a launch argument string, or a value from a parameter file) as a bool, int or float;
    ValueError naming `what` otherwise."""
    value = yaml_value(text) if isinstance(text, str) else text
    if kind is float and isinstance(value, str):
        try:
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        except ValueError:
            pass
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ValueError(f"{what}: expected {_KIND_NAMES[kind]}, got {text!r}")
    return value


def arg_value(args: Mapping[str, str], name: str, kind: type) -> Any:
    """Launch argument `name` as a bool, int or float, with a one-line error naming it."""
    return typed_value(args[name].strip(), kind, f"launch argument '{name}'")


def arg_list(args: Mapping[str, str], name: str, kind: type) -> list:
    """Launch argument `name` as comma-separated ints or floats, with a one-line error naming it."""
    return [typed_value(v.strip(), kind, f"launch argument '{name}' (comma-separated)")
            for v in args[name].split(",") if v.strip()]


# ---------------------------------------------------------------------------------- launch files

def find_launch_file(name: str) -> Path:
    """``sim_train``, ``sim_train.launch.py`` or a path -> the launch file."""
    path = Path(name)
    if path.suffix == ".py" and path.is_file():
        return path
    if path.is_file() and path.suffix != ".py":
        raise ValueError(f"{name} is not a launch file (a Python file named *.launch.py, or the name of "
                         "one of the package's: sim_train, record_expert, deploy)")
    filename = name if name.endswith(".launch.py") else f"{name}.launch.py"
    candidate = package_path("launch", filename)
    if candidate.is_file():
        return candidate
    available = sorted(p.name.removesuffix(".launch.py") for p in package_path("launch").glob("*.launch.py"))
    raise FileNotFoundError(f"no launch file {filename!r}; available: {', '.join(available) or 'none'}")


def load_launch_module(path: str | Path) -> ModuleType:
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"opolo_launch_{path.name.split('.')[0]}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import launch file {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a syntax error, or anything its top level raises
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise ValueError(f"cannot load launch file {path}{where}: {type(exc).__name__}: "
                         f"{one_line(exc)}") from None
    for attr in ("ARGUMENTS", "describe"):
        if not hasattr(module, attr):
            raise ValueError(f"launch file {path} has no {attr} (see opolo_ros.launch_runner)")
    return module


def launch_description(arguments: Sequence[LaunchArg], describe: Callable[[dict[str, str]], list[NodeSpec]]):
    """A ``launch.LaunchDescription`` for ``ros2 launch`` (imports launch/launch_ros here only)."""
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    from launch import LaunchDescription

    def nodes(context: Any) -> list:
        values = {a.name: LaunchConfiguration(a.name).perform(context) for a in arguments}
        actions = []
        for spec in describe(values):
            extra = {"on_exit": Shutdown(reason=f"{spec.name} finished")} if spec.exit_ends_launch else {}
            actions.append(Node(package=spec.package, executable=spec.executable, name=spec.name,
                                namespace=spec.namespace, parameters=[spec.parameters],
                                remappings=spec.remappings, output="screen", emulate_tty=True, **extra))
        return actions

    declared = [DeclareLaunchArgument(a.name, default_value=a.default, description=a.description)
                for a in arguments]
    return LaunchDescription([*declared, OpaqueFunction(function=nodes)])


def describe_launch(name: str, argv: Sequence[str] = ()) -> tuple[Path, dict[str, str], list[NodeSpec]]:
    """The launch file, resolved arguments and node list for ``name arg:=value ...``."""
    path = find_launch_file(name)
    module = load_launch_module(path)
    args = resolve_arguments(module.ARGUMENTS, parse_arguments(argv))
    return path, args, module.describe(args)


# ------------------------------------------------------------------------------ in-process runner

def node_class(executable: str) -> type:
    if executable not in NODE_CLASSES:
        raise ValueError(f"no node class for executable {executable!r}; known: {', '.join(NODE_CLASSES)}")
    module, _, cls = NODE_CLASSES[executable].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_node(spec: NodeSpec, context: Any) -> Any:
    """Construct `spec`'s node in `context` with its parameters and remappings (no global args)."""
    from rclpy.parameter import Parameter

    if spec.package != PACKAGE:
        raise ValueError(f"opolo-ros launch can only compose {PACKAGE} nodes, not {spec.package}")
    overrides = [Parameter(k, value=list(v) if isinstance(v, tuple) else v)
                 for k, v in spec.parameters.items()]
    cli_args = None
    if spec.remappings:
        cli_args = ["--ros-args"]
        for src, dst in spec.remappings:
            cli_args += ["-r", f"{src}:={dst}"]
    return node_class(spec.executable)(context=context, node_name=spec.name,
                                       namespace=spec.namespace or None, parameter_overrides=overrides,
                                       cli_args=cli_args, use_global_arguments=False)


def _make_checked(spec: NodeSpec, context: Any) -> Any:
    """make_node, with a namespace or remapped topic name rcl refuses as one line (ValueError)."""
    from rclpy.exceptions import NameValidationException
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
    from rclpy.validate_namespace import validate_namespace

    try:
        if spec.namespace:  # before the node: rclpy warns while it cleans up a half-made one
            validate_namespace(spec.namespace if spec.namespace.startswith("/") else f"/{spec.namespace}")
        return make_node(spec, context)
    except (NameValidationException, _rclpy.RCLInvalidROSArgsError) as err:
        detail = str(err).strip().splitlines()[0].rstrip(":") if str(err).strip() else type(err).__name__
        names = f"namespace {spec.namespace!r}, remappings {[f'{a}:={b}' for a, b in spec.remappings]}"
        raise ValueError(f"node {spec.name!r}: invalid name ({names}): {detail}") from None


@dataclass
class LaunchResult:
    nodes: dict[str, Any]
    interrupted: bool
    elapsed_s: float

    @property
    def learner(self) -> Any:
        return next((n for n in self.nodes.values() if type(n).__name__ == "Learner"), None)


class GraphRunner:
    """Nodes of a description composed in one process, on one executor (see module docstring).

    Usable from tests: ``with GraphRunner(specs, domain_id) as g: g.spin_until(...)``.
    """

    def __init__(self, specs: Sequence[NodeSpec], domain_id: int | None = None,
                 executor: str = "events") -> None:
        from opolo_ros.ros import runtime

        names = [f"{s.namespace.strip('/')}/{s.name}" for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node names in the description: {names}")
        self.specs = list(specs)
        self.context = runtime.init_context(domain_id, args=[])
        from opolo_ros.nodes.common import make_executor

        self.executor = make_executor(self.context, executor)
        self.nodes: dict[str, Any] = {}  # by name; by namespace/name where two namespaces share a name
        # (`keys`, in the order of `specs`)
        shared = {s.name for s in specs if [t.name for t in specs].count(s.name) > 1}
        self.keys = [f"{s.namespace.strip('/')}/{s.name}" if s.name in shared else s.name for s in specs]
        try:
            for key, spec in zip(self.keys, self.specs):
                node = _make_checked(spec, self.context)
                self.nodes[key] = node  # (one key per node: each is closed and destroyed at the end)
                self.executor.add_node(node)
        except BaseException:
            self.close()
            raise
        self.exit_nodes = [self.nodes[k] for k, s in zip(self.keys, self.specs) if s.exit_ends_launch]

    def __enter__(self) -> GraphRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def done(self) -> bool:
        return any(n.finished.is_set() for n in self.exit_nodes)

    def spin_until(self, condition: Callable[[], bool], timeout_s: float = math.inf,
                   stop: threading.Event | None = None) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return True

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Ask nodes with work in progress to stop (the learner checkpoints), and wait for them."""
        for node in self.nodes.values():
            if hasattr(node, "request_stop"):
                node.request_stop()
        workers = [n for n in self.nodes.values() if hasattr(n, "request_stop")]
        self.spin_until(lambda: all(n.finished.is_set() for n in workers), timeout_s)

    def close(self) -> None:
        from opolo_ros.ros import runtime

        aborted: KeyboardInterrupt | None = None
        for node in reversed(list(self.nodes.values())):
            try:
                node.close()
            except Exception as err:  # keep closing the others
                print(f"opolo-ros launch: closing {node.get_name()}: {err}", file=sys.stderr)
            except KeyboardInterrupt as interrupt:  # a signal again: it cuts this node's close short,
                aborted = interrupt  # not the others' (a recorder later in the list writes its bag)
        runtime.shutdown(self.context, list(self.nodes.values()), [self.executor])
        self.nodes = {}
        if aborted is not None:
            raise aborted


def run_launch(name: str, argv: Sequence[str] = (), domain_id: int | None = None) -> LaunchResult:
    """``opolo-ros launch <name> [arg:=value ...]``: run the graph until its exit node is done."""
    path, args, specs = describe_launch(name, argv)
    stop = threading.Event()
    previous = {}

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        print(f"\nopolo-ros launch: {signal.Signals(signum).name}, stopping (again to abort)",
              file=sys.stderr)
        stop.set()

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    if signals.interrupted():  # an interrupt a native import swallowed (describe imports MuJoCo)
        stop.set()
    start = time.monotonic()
    print(f"opolo-ros launch: {path.name} with "
          + " ".join(f"{k}:={v}" for k, v in args.items() if v != "")
          + f"; nodes: {', '.join(s.name for s in specs)}", file=sys.stderr)
    try:
        with GraphRunner(specs, domain_id) as graph:
            learner = next((n for n in graph.nodes.values() if hasattr(n, "run_folder_taken")), None)
            if learner is not None:  # the record goes in once the learner holds (and resumed) the folder:
                # a refused start (folder in use, config changed) leaves it as it was
                taken = learner.run_folder_taken
                if graph.spin_until(lambda: graph.done() or taken.is_set(), stop=stop) and taken.is_set():
                    _write_launch_record(graph, path, args)
                    taken = None
            graph.spin_until(graph.done, stop=stop)
            interrupted = stop.is_set()
            if interrupted:
                graph.stop()
            if learner is not None and taken is not None and taken.is_set():
                _write_launch_record(graph, path, args)  # taken while the stop came: the run is its
            result = LaunchResult(dict(graph.nodes), interrupted, time.monotonic() - start)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return result


def _write_launch_record(graph: GraphRunner, path: Path, args: Mapping[str, str]) -> None:
    """``<run_dir>/launch_params.yaml``: the arguments and every node's parameters (the run's record)."""
    learner = next((s for s in graph.specs if s.executable == "learner"), None)
    if learner is None or "run_dir" not in learner.parameters:
        return
    run_dir = Path(str(learner.parameters["run_dir"]))
    record = {"launch_file": path.name, "arguments": dict(args),
              "nodes": {key: {"executable": s.executable, "namespace": s.namespace,
                              "remappings": [list(r) for r in s.remappings],
                              "parameters": {k: list(v) if isinstance(v, tuple) else v
                                             for k, v in s.parameters.items()}}
                        for key, s in zip(graph.keys, graph.specs)}}
    from opolo_ros.train.runfolder import write_text_atomic

    write_text_atomic(run_dir / "launch_params.yaml", yaml.safe_dump(record, sort_keys=False))


def print_arguments(name: str) -> None:
    path = find_launch_file(name)
    module = load_launch_module(path)
    print(f"Arguments of {path.name} (arg:=value):")
    for a in module.ARGUMENTS:
        print(f"    '{a.name}':\n        {a.description}\n        (default: '{a.default}')")


def launch_command(name: str, argv: Sequence[str], show_args: bool = False) -> int:
    """The ``opolo-ros launch`` command: run, then report what a user needs (exit status)."""
    if show_args:
        print_arguments(name)
        return 0
    result = run_launch(name, argv)
    learner = result.learner
    for node_name, node in result.nodes.items():
        if getattr(node, "error", None) is not None:
            print(f"opolo-ros launch: the {node_name} failed: {node.error}", file=sys.stderr)
            return 1
    if result.interrupted:
        where = ""
        if learner is not None:  # stopped before training began (e.g. waiting for demonstrations): none
            saved = learner.trainer.checkpoint_path.is_file()
            where = f" (checkpoint in {learner.trainer.run_dir})" if saved else " (no checkpoint written)"
        print(f"opolo-ros launch: stopped after {result.elapsed_s:.0f} s{where}", file=sys.stderr)
        return 130
    if learner is not None and learner.result is not None:
        r, cfg = learner.result, learner.cfg
        print(f"\n{cfg.algo} on {cfg.env_id} through the ROS graph: {r.env_steps} env steps, "
              f"{learner.trainer.learner.critic_steps} gradient steps (the run's, resumed runs "
              f"included); this launch ran {result.elapsed_s:.0f} s")
        print("\n".join(r.summary_lines(cfg.eval_episodes, cfg.algo)))
        plot = f", learning curve: {learner.trainer.plot_path.name}" if learner.trainer.plot_path else ""
        evaluated = not math.isnan(r.eval_mean) or r.imitation is not None
        evaluations = f"evaluations: eval.csv{plot}, " if evaluated else ""
        print(f"run folder: {r.run_dir}  (policy: {r.policy_path.name}, TensorBoard: tb/, "
              f"{evaluations}parameters: config.yaml, launch_params.yaml)")
        return 0
    for node in result.nodes.values():
        bag, episodes = getattr(node, "bag", None), getattr(node, "episodes", None)
        if bag is not None and isinstance(episodes, list):  # a demo_recorder (a topic_recorder's
            print(f"demonstrations: {len(episodes)} episodes in {bag}")  # bag logs its own counts)
    print(f"opolo-ros launch: {name} finished after {result.elapsed_s:.0f} s", file=sys.stderr)
    return 0
