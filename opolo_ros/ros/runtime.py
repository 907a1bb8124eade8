"""rclpy start-up and shut-down shared by the nodes and the tests.

Contexts
    Every node graph here runs in its own ``rclpy.Context`` (:func:`init_context`), never the
    global default one, so several nodes in one process (``opolo-ros launch`` composes a whole
    graph in one process; tests start publisher and subscriber side by side) can be started,
    shut down and restarted independently. ``Context.init`` is used rather than ``rclpy.init`` so no
    process-wide signal handler is installed for a context a library created; a node's ``main()``
    still gets Ctrl-C as ``KeyboardInterrupt`` and shuts down in its ``finally``.

Domain id
    rclpy (Kilted) takes the domain id per context: ``rclpy.init(domain_id=...)`` or
    ``Context.init(domain_id=...)``; without it, rcl reads ``ROS_DOMAIN_ID`` *when the context is
    initialised* (not at import), defaulting to 0. :func:`init_context` resolves the id itself
    (argument, else ``ROS_DOMAIN_ID``, else 0) so a bad value fails with a clear message. Tests run
    on an isolated id (:func:`isolated_domain_id`) and must set ``ROS_DOMAIN_ID`` in
    ``os.environ`` *before* any context is initialised, so that subprocesses and code that calls
    plain ``rclpy.init()`` land on the same domain.

DDS environment that works on this machine (Fast DDS 3.2 from the ``ros-rmw-fastrtps-cpp`` wheel)
    - ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``: discovery stays on this host. The default,
      SUBNET, multicasts discovery on every interface, so two test runs on the same network and
      domain id would see each other. ``ROS_LOCALHOST_ONLY`` was removed from rcl in Kilted: it is
      silently ignored, not merely deprecated.
    - ``ROS_STATIC_PEERS`` (``;``-separated hosts) adds remote peers, for a learner on another host.
    - Shared memory (Fast DDS's default SHM + UDPv4 transports) works here: ``/dev/shm`` is a large
      tmpfs and both processes share it. In containers where ``/dev/shm`` is tiny (Docker's 64 MB
      default) or not shared between the communicating processes, set
      ``FASTDDS_BUILTIN_TRANSPORTS=UDPv4``; large messages then travel as UDP fragments over
      loopback, which also works (measured: similar latency for a 2 MB policy).
    - ``RMW_IMPLEMENTATION`` must be unset or ``rmw_fastrtps_cpp``: the wheels ship no other RMW.
    :data:`LOCAL_DDS_ENV` holds the combination; :func:`apply_local_dds_env` sets it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TextIO

from rclpy.context import Context
from rclpy.executors import Executor
from rclpy.node import Node
from rclpy.publisher import Publisher

DOMAIN_ID_ENV = "ROS_DOMAIN_ID"
TEST_DOMAIN_ID_ENV = "OPOLO_TEST_ROS_DOMAIN_ID"
MAX_DOMAIN_ID = 232  # Fast DDS maps domain ids to UDP ports; 232 is the highest valid one
TEST_DOMAIN_IDS = range(1, 102)  # 0 left to users; above 101 can collide with ephemeral ports

LOCAL_DDS_ENV: Mapping[str, str] = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}


def _check_domain_id(value: int | str, source: str) -> int:
    try:
        domain_id = int(value)
    except ValueError:
        raise ValueError(f"{source} must be an integer domain id, got {value!r}") from None
    if not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise ValueError(f"{source} must be in [0, {MAX_DOMAIN_ID}], got {domain_id}")
    return domain_id


def resolve_domain_id(domain_id: int | None = None,
                      environ: Mapping[str, str] = os.environ) -> int:
    """The domain id to use: the argument, else ``ROS_DOMAIN_ID``, else 0 (ROS's default)."""
    if domain_id is not None:
        return _check_domain_id(domain_id, "domain_id")
    value = environ.get(DOMAIN_ID_ENV, "").strip()
    return _check_domain_id(value, DOMAIN_ID_ENV) if value else 0


def isolated_domain_id(pid: int | None = None, environ: Mapping[str, str] = os.environ) -> int:
    """A domain id for one test run: ``OPOLO_TEST_ROS_DOMAIN_ID`` if set, else 1 + pid % 101.

    Derived from the process id so parallel test runs on one host (CI jobs, xdist workers) are
    unlikely to share a domain; set the override when two runs must not collide at all.
    """
    value = environ.get(TEST_DOMAIN_ID_ENV, "").strip()
    if value:
        return _check_domain_id(value, TEST_DOMAIN_ID_ENV)
    pid = os.getpid() if pid is None else pid
    return TEST_DOMAIN_IDS[pid % len(TEST_DOMAIN_IDS)]


def apply_local_dds_env(environ: MutableMapping[str, str] = os.environ,
                        overwrite: bool = False) -> None:
    """Set :data:`LOCAL_DDS_ENV` (keeping values the user set unless `overwrite`).

    Must run before the context is initialised: rcl reads these at ``init``.
    """
    for key, value in LOCAL_DDS_ENV.items():
        if overwrite or key not in environ:
            environ[key] = value


CONSOLE_FORMAT_ENV = "RCUTILS_CONSOLE_OUTPUT_FORMAT"
DEFAULT_CONSOLE_FORMAT = "[{severity}] [{time}] [{name}]: {message}"  # rcutils' own


def log_lines_over_progress_bars(environ: MutableMapping[str, str] = os.environ,
                                 stream: TextIO = sys.stderr) -> None:
    """On a terminal, ROS log lines begin by clearing the line (carriage return, erase to its end):
    a line logged while the learner's progress bar was drawn was glued onto the bar (a walkthrough
    missed the warnings). Not where the user set a format of their own, nor into files. Before
    the first context is initialised (rcutils reads it then)."""
    if CONSOLE_FORMAT_ENV not in environ and stream.isatty():
        environ[CONSOLE_FORMAT_ENV] = "\r\x1b[K" + DEFAULT_CONSOLE_FORMAT


def init_context(domain_id: int | None = None, args: list[str] | None = None) -> Context:
    """A new, initialised, isolated rclpy context on `domain_id` (see :func:`resolve_domain_id`).

    `args` are the command-line arguments rcl parses for ``--ros-args`` (remappings, parameters);
    None means ``sys.argv``, as for ``rclpy.init``. Pass ``[]`` in tests.
    """
    log_lines_over_progress_bars()
    context = Context()
    context.init(args, domain_id=resolve_domain_id(domain_id))
    return context


def shutdown(context: Context | None, nodes: Iterable[Node] = (),
             executors: Iterable[Executor] = ()) -> None:
    """Stop executors, destroy nodes, shut the context down; each step runs even if one fails.

    Safe to call twice and with already-destroyed nodes. The first error is re-raised at the end.
    """
    errors: list[BaseException] = []
    steps: list[Callable[[], object]] = [lambda e=e: e.shutdown(timeout_sec=1.0) for e in executors]
    steps += [n.destroy_node for n in nodes]
    if context is not None:
        steps.append(context.try_shutdown)
    for step in steps:
        try:
            step()
        except Exception as err:
            errors.append(err)
    if errors:
        raise errors[0]


@contextmanager
def ros_context(domain_id: int | None = None, args: list[str] | None = None) -> Iterator[Context]:
    """``with ros_context() as ctx:`` an :func:`init_context` that is shut down on exit."""
    context = init_context(domain_id, args)
    try:
        yield context
    finally:
        shutdown(context)


def linked(publisher: Publisher, node: Node) -> bool:
    """Both ends of `publisher`'s link to `node` have matched.

    Discovery is asymmetric: a writer can match a reader before the reader matches the writer, and
    a reader drops what a writer it has not matched yet sends, even over reliable QoS with volatile
    durability. So a start-up wait on ``publisher.get_subscription_count()`` alone can still lose
    the first messages; this also waits until every subscription of `node` on the topic sees a
    publisher.
    """
    subs = [sub for sub in node.subscriptions if sub.topic_name == publisher.topic_name]
    return (publisher.get_subscription_count() >= 1 and bool(subs)
            and all(sub.get_publisher_count() >= 1 for sub in subs))


def spin_until(executors: Executor | Iterable[Executor], done: Callable[[], bool],
               timeout_sec: float, step_sec: float = 0.01) -> bool:
    """Spin one or several executors (round robin) until `done()` or the timeout; returns done().

    For start-up waits (discovery, a first message) and tests, where a node must make progress on
    several contexts from one thread.
    """
    group = [executors] if isinstance(executors, Executor) else list(executors)
    deadline = time.monotonic() + timeout_sec
    while not done():
        if time.monotonic() >= deadline:
            return False
        for executor in group:
            executor.spin_once(timeout_sec=step_sec / len(group))
    return True
