"""Shared pytest fixtures for tests that talk over real DDS (marked ``ros``).

Nothing here imports rclpy at module level, so test modules that need no ROS still run where ROS
is not installed; the ROS fixtures skip instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ros: talks over real DDS (rclpy, isolated ROS_DOMAIN_ID)")
    # rclpy's message introspection imports rosidl_parser -> lark, which imports sre_parse.
    config.addinivalue_line("filterwarnings", "ignore:module 'sre_:DeprecationWarning:lark")
    # The tests' networks are tiny: one intra-op thread is fastest, and on a busy machine (training
    # jobs beside the suite) spinning OpenMP workers made a 400-step training test 60x slower
    # (112 s against 1.9 s). Subprocesses the tests start inherit the variable.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    _keep_crash_tracebacks(config)


def _keep_crash_tracebacks(config: pytest.Config) -> None:
    """Keep a native crash's Python traceback on the terminal.

    rclpy's EventsExecutor calls ``faulthandler.enable()`` whenever one is made, which points the
    handler at ``sys.stderr``: inside a test that is pytest's capture file, lost when the process
    dies (a segfault in CI printed no traceback at all). Calls without a file go to the copy of
    the terminal's stderr that pytest's own faulthandler plugin writes to.
    """
    import faulthandler

    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key
    except ImportError:  # another pytest: leave faulthandler as it is
        return
    enable = faulthandler.enable

    def enable_on_terminal(file=None, all_threads: bool = True) -> None:
        if file is None:
            file = config.stash.get(fault_handler_stderr_fd_key, None)
        enable(file=sys.stderr if file is None else file, all_threads=all_threads)

    faulthandler.enable = enable_on_terminal


@pytest.fixture(scope="session")
def ros_domain_id() -> Iterator[int]:
    """An isolated domain id, exported (with localhost-only discovery) before any rclpy init.

    Exported through ``os.environ`` so subprocess publishers and code that calls plain
    ``rclpy.init()`` join the same domain; restored afterwards.
    """
    pytest.importorskip("rclpy")
    from opolo_ros.ros import runtime

    domain_id = runtime.isolated_domain_id()
    keys = [runtime.DOMAIN_ID_ENV, *runtime.LOCAL_DDS_ENV]
    saved = {key: os.environ.get(key) for key in keys}
    os.environ[runtime.DOMAIN_ID_ENV] = str(domain_id)
    runtime.apply_local_dds_env(os.environ, overwrite=True)
    try:
        yield domain_id
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def ros_node(ros_domain_id: int) -> Iterator[Callable[[str], tuple]]:
    """Factory ``ros_node(name) -> (node, executor)``, each node in its own isolated context.

    Separate contexts mean separate DDS participants, as for nodes in separate processes.
    Every node, executor and context is shut down when the test ends, also on failure.
    """
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from opolo_ros.ros import runtime

    made: list[tuple] = []

    def make(name: str) -> tuple:
        context = runtime.init_context(ros_domain_id, args=[])
        try:
            node = Node(name, context=context)
            executor = SingleThreadedExecutor(context=context)
            executor.add_node(node)
        except BaseException:
            runtime.shutdown(context)
            raise
        made.append((context, node, executor))
        return node, executor

    try:
        yield make
    finally:
        errors = []
        for context, node, executor in reversed(made):
            try:
                runtime.shutdown(context, [node], [executor])
            except Exception as err:
                errors.append(err)
        if errors:
            raise errors[0]


@pytest.fixture
def fsync_spy(monkeypatch: pytest.MonkeyPatch) -> Callable[[object], list[str]]:
    """``fsync_spy(module) -> synced``: the paths `module`'s ``os.fsync`` is called on from then on
    (files and folders, in order), each still synced."""
    def spy(module: object) -> list[str]:
        synced: list[str] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(module.os, "fsync", fsync)  # type: ignore[attr-defined]
        return synced

    return spy
