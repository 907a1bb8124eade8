"""What every node shares: parameter declaration and ``main()``.

Parameters
    Every parameter is declared with a default and a description (``ros2 param describe`` shows
    it). Numeric parameters accept an integer where a float is expected (``noise: 1`` in YAML), as
    a user would assume; the value is converted to the default's type, and a value that cannot be
    is refused with an error naming the parameter.

Composition
    Every node class takes ``context``, ``node_name``, ``namespace``, ``parameter_overrides`` and
    ``cli_args`` keywords, so ``opolo-ros launch`` and the tests can start several nodes in one
    process, in one context, on one executor (manual composition), and ``main()`` starts one node
    as its own process (``ros2 run opolo_ros <node>``).

Signals (``main()``)
    SIGINT and SIGTERM ask the node to stop (:meth:`FinishableNode.request_stop`): the executor keeps
    spinning, with the context alive, until the node has finished what it must (the learner writes
    a checkpoint), at most :data:`STOP_TIMEOUT_S`; then the node is closed and destroyed and the
    process exits with status 0. A second signal ends that wait (the node is then closed: a
    learner's close waits for its stop checkpoint); a signal during the close aborts it, one line
    and status 130 (a learner's last checkpoint and replay journal are kept, as after kill -9).
    rclpy's own handlers (which
    shut the context down at once, under a learner that is still publishing) are not installed.
    Bad parameters end the process with a one-line error and status 2.

    Once the node is closed (files flushed and closed, the checkpoint fsynced) the process ends
    with ``os._exit``: the interpreter's own finalisation, which takes 0.5-3 s with torch loaded
    on this 2-core machine, would otherwise decide whether a stopping learner meets its 2 s.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import yaml
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

from opolo_ros.algo.config import NAME_LISTS, names_text
from opolo_ros.errors import one_line
from opolo_ros.ros.runtime import log_lines_over_progress_bars, resolve_domain_id
from opolo_ros.signals import hold_signals, stop_on_signals

ParamValue = bool | int | float | str | list


class ParameterError(ValueError):
    """A parameter value has the wrong type or is out of range."""


# String parameters that list names: a YAML list of them is taken too (the learner's run config
# keys, demo_player's own)
NAME_LIST_PARAMETERS = NAME_LISTS | {"bag_joints", "bag_fields", "bag_obs_field"}


def coerce(name: str, value: Any, default: ParamValue) -> ParamValue:
    """`value` converted to the type of `default` (bool, int, float, str or a list of those)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
        if name in NAME_LIST_PARAMETERS and isinstance(names_text(value), str):  # a file's [slider, hinge]
            return names_text(value)
    elif isinstance(default, list):
        if default and isinstance(default[0], float) and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            return [float(value)]  # one number for a list of numbers: one value (as action_low takes)
        if default and isinstance(default[0], str) and isinstance(value, str):
            return [v.strip() for v in value.split(",")]  # -p joints:=slider,hinge (as demos_joints)
        if isinstance(value, (list, tuple)):
            items = list(value)
            if default and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
                kind = type(default[0])
                if kind is int and all(float(v).is_integer() for v in items):
                    return [int(v) for v in items]
                if kind is float:
                    return [float(v) for v in items]
            return items
    raise ParameterError(f"parameter '{name}': expected {type(default).__name__}, got {value!r}")


def declare(node: Node, name: str, default: ParamValue, description: str,
            read_only: bool = True) -> Any:
    """Declare `name` with `default` and `description`; return its (override) value, type-checked.

    An empty list default declares a dynamically typed parameter (ROS cannot type an empty array).
    """
    descriptor = ParameterDescriptor(description=description, read_only=read_only,
                                     dynamic_typing=True)
    value = node.declare_parameter(name, default, descriptor).value
    if _program_argv is not None:  # a node program: its -p reached the node, or an error now
        text = _given_overrides(node, _program_argv).get(name)
        if text is not None:
            _check_override(node, name, text)
    if isinstance(default, list) and not default:
        return list(value) if isinstance(value, (list, tuple)) else value
    return coerce(name, value, default)


class FinishableNode(Node):
    """A node whose work can end (learner done, recorder has its episodes): ``finished`` is set.

    ``close()`` releases what the node holds beyond ROS entities (threads, files); it is called
    once, before ``destroy_node``, by ``main()`` and by ``opolo-ros launch``.
    """

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.finished = threading.Event()

    def request_stop(self) -> None:
        """Ask the node to end its work; ``finished`` is set once it has (at once by default)."""
        self.finished.set()

    def close(self) -> None:
        """Stop threads and flush files; safe to call twice."""


EXECUTORS = ("events", "single")


def make_executor(context: Any, kind: str = "events") -> Any:
    """One executor for all nodes of the process.

    ``events``: rclpy's EventsExecutor (``rclpy.experimental``, C++ event queue), about 2.5x less
    overhead per callback than the SingleThreadedExecutor on the lock-step path (measured: 1,600
    vs 650 sim-actor round trips per second on this machine); ``single`` is the fallback.
    """
    if kind not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")
    if kind == "events":
        try:
            from rclpy.experimental import EventsExecutor

            return EventsExecutor(context=context)
        except ImportError:
            pass
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context)


NodeFactory = Callable[..., FinishableNode]
STOP_TIMEOUT_S = 60.0  # the most a stopping node may take to finish its work
def spin_until_stopped(executor: Any, node: FinishableNode, stop: threading.Event) -> None:
    """Spin until the node is finished or `stop` is set; then let the node stop cleanly (spinning on,
    so that it can still publish) for at most :data:`STOP_TIMEOUT_S`."""
    context = node.context
    timeout = getattr(node, "spin_timeout_s", 0.1)  # 0: busy polling (the actor's `spin: poll`)
    while context.ok() and not node.finished.is_set() and not stop.is_set():
        executor.spin_once(timeout_sec=timeout)
    if node.finished.is_set() or not context.ok():
        return
    node.request_stop()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not node.finished.is_set() and context.ok() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)


def exit_now(status: int) -> None:
    """End the process at once with `status`, after flushing what Python still buffers."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def default_node_name(factory: NodeFactory) -> str:
    """The node's default name (``node_name=`` of its class), which is also its executable's name."""
    try:
        default = inspect.signature(factory).parameters["node_name"].default
    except (KeyError, TypeError, ValueError):
        default = None
    return default if isinstance(default, str) else getattr(factory, "__name__", "node")


def ros_arguments(argv: list[str]) -> list[str]:
    """The ROS arguments of a command line: those after each ``--ros-args`` up to a ``--`` (what
    rcl parses; anything else is the program's own)."""
    out: list[str] = []
    inside = False
    for arg in argv:
        if arg == "--ros-args":
            inside = True
        elif arg == "--" and inside:
            inside = False
        elif inside:
            out.append(arg)
    return out


def check_params_files(args: list[str], executable: str) -> None:
    """Read each ``--params-file`` of the ROS arguments: a one-line error for a missing or malformed
    file, instead of rcl's multi-line parser report, and for a key no node of the package declares
    in the sections the node reads (rcl ignores it: a typo would change the run silently). Not
    per node as `opolo-ros launch` checks: the files a launch composes (``launch_params.yaml``)
    give every node the shared parameters too. The node name and namespace are those of
    ``-r __node:=`` and ``-r __ns:=`` when given. Then the ``-p`` arguments
    (:func:`check_param_arguments`)."""
    from opolo_ros.nodes.parameters import node_parameters

    args = ros_arguments(args)
    name, namespace = executable, ""
    for flag, value in zip(args, args[1:]):
        if flag in ("-r", "--remap"):
            key, _, target = value.partition(":=")
            node, _, key = key.rpartition(":")  # `<node>:__node:=` applies to that node only
            if node and node != executable:
                continue
            if key in ("__node", "__name"):
                name = target
            elif key == "__ns":
                namespace = target
    for flag, value in zip(args, args[1:]):
        if flag == "--params-file":
            node_parameters(value, name, namespace, executable, package_wide=True)
    check_param_arguments(args, executable, name, namespace)


# the command line of the node program being built (run_node): declare() checks each parameter's
# `-p` against it at once, before the node acts on its values (publishes, starts training)
_program_argv: list[str] | None = None


@contextlib.contextmanager
def _checking_overrides(argv: list[str]) -> Iterator[None]:
    """While a node program builds its node, :func:`declare` checks each ``-p`` of `argv`."""
    global _program_argv
    _program_argv = argv
    try:
        yield
    finally:
        _program_argv = None


def _given_overrides(node: Node, argv: list[str]) -> dict[str, str]:
    """The last ``-p key:=text`` of each key for this node (plain, or ``-p <its name>:key:=``)."""
    args = ros_arguments(argv)
    given: dict[str, str] = {}
    for flag, value in zip(args, args[1:]):
        key, sep, text = value.partition(":=")
        prefix, _, key = key.rpartition(":")
        if flag in ("-p", "--param") and sep and prefix in ("", node.get_name()):
            given[key] = text
    return given


def _check_override(node: Node, key: str, text: str) -> None:
    try:
        wanted = yaml.safe_load(text)
    except yaml.YAMLError:
        return  # rcl refused it already, or read it otherwise: not this check's business
    got = node.get_parameter(key).value
    if not _same_value(got, wanted):
        raise ValueError(f"-p {key}:={text} did not reach the node ({key} is {got!r}): a --params-file "
                         f"section for it won over the -p (rcl's order: node names as they first "
                         f"appear, a plain -p counts as /**); give it after the file as -p "
                         f"{node.get_name()}:{key}:={text}, or change the file")


def check_param_overrides(node: Node, argv: list[str]) -> None:
    """Each ``-p key:=value`` for this node (plain, or ``-p <its name>:key:=``) the node did not get:
    rcl applies the entries of a parameter file and of ``-p`` by an order of its own (node names in
    the order they first appear, a plain ``-p`` filed under ``/**``), so a task file's ``learner:``
    section after its ``/**`` section won over a plain ``-p`` given after the file, whose value was
    ignored (a walkthrough's ``-p run_dir:=`` trained in the task file's run folder). The last ``-p``
    of a key is what the command line says; a node that got another value is an error. A node
    program checks each parameter as it is declared (:func:`declare`), before the node uses it."""
    for key, text in _given_overrides(node, argv).items():
        if node.has_parameter(key):
            _check_override(node, key, text)


def _same_value(got: object, wanted: object) -> bool:
    """Whether the node's value `got` is the ``-p`` text's `wanted` (as PyYAML reads it), as rcl
    reads the text: an empty list leaves the parameter unset (None), and a number PyYAML's YAML 1.1
    keeps as text (``5e-1``, no dot) is a number to rcl."""
    if isinstance(wanted, (list, tuple)) and not wanted and got is None:
        return True
    if isinstance(got, (list, tuple)) and isinstance(wanted, (list, tuple)):
        return len(got) == len(wanted) and all(_same_value(a, b) for a, b in zip(got, wanted))
    numbers = (int, float)
    if isinstance(got, numbers) and not isinstance(got, bool) and isinstance(wanted, str):
        try:
            wanted = float(wanted)
        except ValueError:
            return False
    if isinstance(got, numbers) and isinstance(wanted, numbers) and not isinstance(got, bool) \
            and not isinstance(wanted, bool):
        return float(got) == float(wanted) or (got != got and wanted != wanted)  # NaN is NaN here
    return got == wanted or str(got) == str(wanted)


def check_param_arguments(args: list[str], executable: str, name: str, namespace: str) -> None:
    """``-p key:=value`` of the ROS arguments `args`: a key the node does not declare is an error
    (rcl ignores it: ``-p max_ahed:=5`` ran with the default, a walkthrough). ``-p <node>:key:=``
    is checked when it names this node outside a namespace; rcl matches it otherwise by rules of
    its own (it is left to rcl)."""
    from opolo_ros.algo.config import check_parameter_names
    from opolo_ros.nodes.parameters import NODE_CLASSES, declared_parameters

    if executable not in NODE_CLASSES:
        return
    for flag, value in zip(args, args[1:]):
        if flag not in ("-p", "--param"):
            continue
        key = value.partition(":=")[0]
        node, _, key = key.rpartition(":")  # `<node>:key:=` sets that node's parameter only
        if node and (node != name or namespace.strip("/")):
            continue
        check_parameter_names([key], declared_parameters(executable), f"{flag} {value}",
                              f"the {executable} node")


def run_node(factory: NodeFactory, args: list[str] | None = None) -> int:
    """``main()`` of a node executable: init, spin until a signal or the node's work is done, clean up.

    Exit status: 0 when the node finished or was stopped by a signal, 1 when its work failed (the
    node's ``error``: a learner that could not train, a recorder that gave up), 2 for bad
    parameters or arguments (a one-line error on stderr). Called with ``args=None`` (the
    executable: ``ros2 run``, ``python -m``) it ends the process itself (:func:`exit_now`); with
    explicit `args` it returns.
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.impl.implementation_singleton import rclpy_implementation
    from rclpy.signals import SignalHandlerOptions

    argv = sys.argv if args is None else args
    if {"-h", "--help"} & (set(argv[1:]) - set(ros_arguments(argv))):  # the program's own, not rcl's
        from opolo_ros.nodes.parameters import node_help

        print(node_help(default_node_name(factory)))  # it started the node with its defaults
        return 0
    stop = threading.Event()
    node: FinishableNode | None = None
    executor = None
    status = 0
    with stop_on_signals(stop):
        try:
            check_params_files(argv, default_node_name(factory))
            # ROS_DOMAIN_ID as `opolo-ros launch` checks it: above 232 Fast DDS printed a colored
            # port error and the program exited 1; -1 (rcl: "the default") ran on domain 0
            resolve_domain_id()
            log_lines_over_progress_bars()
            rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
            with _checking_overrides(argv):
                node = factory()
            check_param_overrides(node, argv)
            # A node may choose its executor (the actor's `executor` parameter); else the events one.
            executor = make_executor(rclpy.get_default_context(), getattr(node, "executor_kind", "events"))
            executor.add_node(node)
            spin_until_stopped(executor, node, stop)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        except (ValueError, FileNotFoundError, rclpy_implementation.RCLError,
                rclpy_implementation.UnknownROSArgsError) as err:
            print(f"{default_node_name(factory)}: error: {one_line(err)}", file=sys.stderr)
            status = 2
        finally:
            if node is not None:
                if not _closed(node, default_node_name(factory), exit_process=args is None):
                    status = 130  # (a program has ended at once, in _closed)
                failed = getattr(node, "error", None)  # the work ended without its result (learner,
                if failed is not None and status == 0:  # recorder), also in its close (a bag's index)
                    print(f"{default_node_name(factory)}: failed: {one_line(failed)}", file=sys.stderr)
                    status = 1
            with hold_signals():  # milliseconds: a second signal here would only leave a traceback
                if executor is not None:
                    executor.shutdown(timeout_sec=1.0)
                if node is not None:
                    node.destroy_node()
                rclpy.try_shutdown()
    if args is None:
        exit_now(status)
    return status


def _closed(node: FinishableNode, name: str, exit_process: bool) -> bool:
    """``node.close()``; False when a signal broke it off (a learner waiting for its stop
    checkpoint): one line, and a program (`exit_process`) ends with 130 at once. (The interrupt
    escaped the cleanup, and the interpreter then shut down under the learner's running worker
    thread: a segfault and a trace.) A node whose close must not be broken off holds signals."""
    try:
        node.close()
    except KeyboardInterrupt:
        print(f"{name}: stopped again while closing: aborted (what it had written is kept: a "
              "learner's last checkpoint and replay journal, as after kill -9)", file=sys.stderr)
        if exit_process:
            exit_now(130)
        return False
    return True


POLICY_EVERY_TARGET = 250


def default_policy_every(train_freq: int) -> int:
    """The learner's default policy export period (transitions): a multiple of `train_freq`.

    With the paper's burst schedule (1,000 critic steps every 1,000 env steps) it is `train_freq`,
    so the actor gets the policy right after each burst, exactly when the direct loop's changes;
    with per-step training it is about :data:`POLICY_EVERY_TARGET` (an export takes ~50 ms).
    """
    train_freq = max(int(train_freq), 1)
    return -(-POLICY_EVERY_TARGET // train_freq) * train_freq
