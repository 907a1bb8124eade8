"""`opolo-ros` commands end on SIGTERM the way they end on SIGINT: one line, status 130.

The training loop stops gracefully on its own (test_direct.py); outside it (setting up, evaluating,
recording, or a second signal while the loop saves) SIGTERM used to end the process silently with
status 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opolo_ros import cli

EXPERT = Path(__file__).resolve().parents[1] / "models" / "experts" / "InvertedPendulum-v5.onnx"


def test_sigterm_during_a_command_is_one_line_and_status_130(capsys) -> None:
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    start = time.monotonic()
    try:
        status = cli.main(["evaluate", str(EXPERT), "--episodes", "1000"])  # about a minute
    finally:
        timer.cancel()
    assert status == 130 and time.monotonic() - start < 10.0
    err = capsys.readouterr().err
    want = "opolo-ros evaluate: interrupted: stopped by SIGTERM; what was written before is kept"
    assert err.strip() == want
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def _run_in_subprocess(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_signal_before_the_launch_graph_runs_is_one_line_and_status_130() -> None:
    """`opolo-ros launch` set up its own handling only once the launch file was read (which imports
    MuJoCo: seconds): a SIGTERM before ended it silently with status 143 (a walkthrough: 18 of 18
    tries in its first 3 s). In a subprocess: without the fix the signal kills the interpreter."""
    code = ("import argparse, os, signal, time\n"
            "from opolo_ros import cli\n"
            "def command(args):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(5)\n"
            "    return 0\n"
            "raise SystemExit(cli.run(argparse.Namespace(command='launch', func=command)))\n")
    result = _run_in_subprocess(code)
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert result.stderr.strip() == ("opolo-ros launch: interrupted: stopped by SIGTERM; what was "
                                     "written before is kept")


def test_an_interrupt_that_comes_out_of_a_native_import_as_another_error_is_status_130(
        monkeypatch, capsys) -> None:
    """A KeyboardInterrupt raised while a native extension initialises comes out as `ImportError:
    initialization failed`: `opolo-ros train` took it for a missing rclpy, went on and finished with
    status 0 (4 of 4 walkthrough runs with SIGINT at 0.64-0.69 s); elsewhere it was a traceback."""
    import argparse

    from opolo_ros import signals

    def initialising(args: argparse.Namespace) -> int:
        os.kill(os.getpid(), signal.SIGINT)  # the handler raises KeyboardInterrupt here ...
        return 0

    def native_import() -> frozenset[str]:
        try:
            initialising(argparse.Namespace())
        except KeyboardInterrupt:
            raise ImportError("initialization failed") from None  # ... which the extension turns into this
        return frozenset()

    import opolo_ros.nodes.parameters as parameters

    monkeypatch.setattr(signals, "_interrupted", threading.Event())
    monkeypatch.setattr(parameters, "package_parameter_names", native_import)
    train = argparse.Namespace(command="train", func=lambda _args: (cli._node_parameter_names(), 0)[1])
    status = cli.run(train)  # 0 if the ImportError were taken for a missing rclpy
    assert status == 130
    assert capsys.readouterr().err.startswith("opolo-ros train: interrupted:")
    for error in (ImportError("initialization failed"), ValueError("half-read file")):
        def raising(_args: argparse.Namespace, error: Exception = error) -> int:
            try:
                initialising(_args)
            except KeyboardInterrupt:
                raise error from None
            return 0

        assert cli.run(argparse.Namespace(command="train", func=raising)) == 130, error
        assert "interrupted" in capsys.readouterr().err


def test_a_node_program_stopped_while_it_imports_says_so_and_exits_0(ros_domain_id, tmp_path) -> None:
    """A signal while a node program imports torch and MuJoCo: SIGTERM killed it without a word
    (status 143), SIGINT printed a traceback from inside `import torch`. The signal is sent as soon as
    the process catches SIGTERM (its handler is installed), which is before the heavy imports."""
    learner = str(Path(sys.executable).parent / "learner")
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen([learner], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            deadline = time.monotonic() + 30
            while not _catches(proc.pid, signal.SIGTERM):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
                time.sleep(0.002)
            proc.send_signal(sig)
            out = proc.communicate(timeout=30)[0]
        finally:
            if proc.poll() is None:  # a failed check: leave no learner running
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, (sig, proc.returncode, out)
        assert "Traceback" not in out, out
        assert out.strip() == f"learner: stopped by {signal.Signals(sig).name} while starting", out
        assert not (tmp_path / "runs").exists()


def test_a_signal_while_a_node_closes_aborts_with_one_line_and_status_130(ros_domain_id, tmp_path) -> None:
    """A learner waiting in close() for its stop checkpoint: the third signal (the first asks to
    stop, the second ends the wait for the node to finish) came out of close() as a traceback, the
    cleanup was skipped and the interpreter shut down under the running worker: a segfault, status
    139 (a review). A node whose close takes long stands in for the learner here."""
    code = ("import sys, threading, time\n"
            "from opolo_ros.nodes.common import FinishableNode, run_node\n"
            "class Slow(FinishableNode):\n"
            "    def __init__(self, node_name='slow', **kw):\n"
            "        super().__init__(node_name, **kw)\n"
            "        busy = lambda: [sum(range(1000)) for _ in iter(int, 1)]  # noqa: E731\n"
            "        self.worker = threading.Thread(target=busy, daemon=True)\n"
            "        self.worker.start()\n"
            "        print('ready', flush=True)\n"
            "    def close(self):\n"
            "        print('closing', flush=True)\n"
            "        self.worker.join(timeout=60.0)\n"
            "run_node(Slow)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)  # stop: the node never finishes, the wait goes on
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # ends the wait: close() starts
        assert proc.stdout.readline().strip() == "closing"
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # during the close
        out = proc.communicate(timeout=30)[0]
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out)
    assert "Traceback" not in out and "Fatal" not in out, out
    assert out.strip() == ("slow: stopped again while closing: aborted (what it had written is kept: a "
                           "learner's last checkpoint and replay journal, as after kill -9)"), out
    assert took < 2.0, took


def _catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` (SigCgt in /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (sig - 1) & 1)


def test_a_second_signal_inside_stop_on_signals_raises_keyboard_interrupt() -> None:
    """The first SIGINT/SIGTERM only asks to stop (the loop finishes its step and checkpoints); a
    second one, of either kind, breaks off at once; the handlers are restored afterwards."""
    from opolo_ros import signals

    before = signal.getsignal(signal.SIGTERM)
    stop = threading.Event()

    def wait_for(done) -> None:
        deadline = time.monotonic() + 5
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)  # Python runs the handler between these

    broke_off = False
    try:
        with signals.stop_on_signals(stop):
            os.kill(os.getpid(), signal.SIGINT)
            wait_for(stop.is_set)
            assert stop.is_set()
            os.kill(os.getpid(), signal.SIGTERM)
            wait_for(lambda: False)  # the KeyboardInterrupt ends this wait
    except KeyboardInterrupt:
        broke_off = True
    assert broke_off
    assert signal.getsignal(signal.SIGTERM) is before


def test_node_programs_are_recognised_by_their_command_line() -> None:
    """The early signal handling applies to the node programs only: not to tests, `opolo-ros launch`
    or a library caller that imports the nodes; every node executable of setup.py is one."""
    import re

    from opolo_ros.launch_runner import NODE_CLASSES
    from opolo_ros.nodes import NODE_PROGRAMS, node_program

    setup = (Path(__file__).resolve().parents[1] / "setup.py").read_text()
    scripts = set(re.findall(r"'(\w+) = opolo_ros\.nodes\.\w+:main'", setup))
    assert set(NODE_PROGRAMS) == set(NODE_CLASSES) == scripts
    py = "/venv/bin/python3"
    assert node_program([py, "/venv/bin/learner", "--ros-args", "-p", "x:=1"]) == "learner"
    assert node_program([py, "-u", "-m", "opolo_ros.nodes.sim_bridge", "--ros-args"]) == "sim_bridge"
    assert node_program([py, "-m", "opolo_ros.nodes.common"]) is None
    assert node_program([py, "-m", "pytest", "test"]) is None
    assert node_program([py, "/venv/bin/opolo-ros", "launch", "sim_train"]) is None
    assert node_program([py, "/venv/bin/pytest", "-q"]) is None
    assert node_program([py]) is None
    assert node_program([py, "-X", "dev", "-W", "error", "-m", "opolo_ros.nodes.actor"]) == "actor"
    assert node_program([py, "/src/opolo_ros/nodes/learner.py", "--ros-args"]) == "learner"
    assert node_program([py, "-c", "import opolo_ros.nodes.learner"]) is None
    assert node_program([py, "/somewhere/learner.py"]) is None  # not the package's node module


def test_an_interrupt_swallowed_by_a_native_import_still_ends_the_command_as_interrupted() -> None:
    """`import mujoco` swallowed a KeyboardInterrupt now and then (a review: 2 of 50 SIGTERMs at
    0.36-0.44 s), and `evaluate` ran its 1000 episodes and exited 0. The interrupt is remembered:
    the command's status is 130, a training loop stops at once, `evaluate` at its next step. In a
    subprocess (the handlers are process-wide)."""
    code = ("import argparse, os, signal, threading, time\n"
            "from opolo_ros import cli, signals\n"
            "def command(args):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        time.sleep(0.1)\n"
            "    except KeyboardInterrupt:\n"
            "        pass  # as a native extension's initialisation does\n"
            "    stop = threading.Event()\n"
            "    with signals.stop_on_signals(stop):  # the training loop's handling\n"
            "        print('stop at once:', stop.is_set())\n"
            "    return 0\n"
            "raise SystemExit(cli.run(argparse.Namespace(command='train', func=command)))\n")
    result = _run_in_subprocess(code)
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.strip() == "stop at once: True"
    assert result.stderr.strip() == ("opolo-ros train: interrupted: stopped by SIGTERM; what was "
                                     "written before is kept")


SWALLOW = ("import os, signal, time\n"
           "def swallow_sigterm():  # what `import mujoco` does now and then (test above)\n"
           "    try:\n"
           "        os.kill(os.getpid(), signal.SIGTERM)\n"
           "        time.sleep(0.1)\n"
           "    except KeyboardInterrupt:\n"
           "        pass\n")


def _record(patch: str, bag: Path, episodes: int, *options: str) -> subprocess.CompletedProcess:
    """`opolo-ros record` of the shipped expert into `bag`, in a subprocess that first runs `patch`
    (code that wraps a function of the package, to send a signal at a chosen moment)."""
    args = ["record", "--model", str(EXPERT), "--episodes", str(episodes), "--output", str(bag), *options]
    return _run_in_subprocess("import os, signal\nfrom opolo_ros import cli\n" + patch
                              + f"raise SystemExit(cli.main({args!r}))\n")


def test_a_swallowed_interrupt_stops_record_before_it_writes_a_bag(tmp_path) -> None:
    """`opolo-ros record` rolled out every episode and wrote the bag after an interrupt that the
    environment's first import swallowed, then said "interrupted": it stops at the next step."""
    bag = tmp_path / "bag"
    result = _record(SWALLOW + "from opolo_ros.sim import rollout\n"
                     "make_env = rollout.make_env\n"
                     "def make_env_swallowing(*args, **kwargs):\n"
                     "    env = make_env(*args, **kwargs)\n"
                     "    swallow_sigterm()\n"
                     "    return env\n"
                     "rollout.make_env = make_env_swallowing\n", bag, 20)
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    assert not bag.exists(), result.stdout
    assert "interrupted: stopped by SIGTERM" in result.stderr, result.stderr


@pytest.mark.parametrize("skip_terminated", [False, True])
def test_an_interrupted_record_keeps_the_episodes_that_had_ended(tmp_path, skip_terminated) -> None:
    """`opolo-ros record` rolled out every episode before it wrote anything, so a Ctrl-C lost them
    all, and said "what was written before is kept". A SIGINT as the third episode starts: the two
    that had ended are in the bag, whose metadata says it was cut short; status 130."""
    bag = tmp_path / "bag"
    result = _record("from opolo_ros.sim import rollout\n"
                     "make_env = rollout.make_env\n"
                     "def make_env_interrupted(*args, **kwargs):\n"
                     "    env = make_env(*args, **kwargs)\n"
                     "    reset, resets = env.reset, []\n"
                     "    def counted(**kw):\n"
                     "        resets.append(1)\n"
                     "        if len(resets) == 3:\n"
                     "            os.kill(os.getpid(), signal.SIGINT)\n"
                     "        return reset(**kw)\n"
                     "    env.reset = counted\n"
                     "    return env\n"
                     "rollout.make_env = make_env_interrupted\n", bag, 20,
                     *(["--skip-terminated"] if skip_terminated else []))
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    assert "interrupted: stopped by SIGINT; the 2 of 20 episodes that had ended are in" in result.stderr
    from opolo_ros.data.bags import read_bag_metadata
    from opolo_ros.data.demos import load_episodes

    episodes = load_episodes(bag)
    assert len(episodes) == 2 and all(len(ep.obs) == 1001 for ep in episodes)  # the expert never falls
    assert read_bag_metadata(bag)["interrupted"] == "2 of 20 episodes recorded"


def test_a_signal_while_record_writes_its_bag_does_not_lose_it(tmp_path) -> None:
    """A Ctrl-C that came as `opolo-ros record` wrote its bag broke the write off (the partial bag
    deleted): every episode lost. The write holds signals now; the command ends normally."""
    bag = tmp_path / "bag"
    result = _record("from opolo_ros.data import bags\n"
                     "write = bags.write_demonstrations\n"
                     "def interrupted_write(*args, **kwargs):\n"
                     "    os.kill(os.getpid(), signal.SIGINT)\n"
                     "    return write(*args, **kwargs)\n"
                     "bags.write_demonstrations = interrupted_write\n", bag, 2)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    from opolo_ros.data.demos import load_episodes

    assert len(load_episodes(bag)) == 2


def test_a_swallowed_interrupt_stops_the_launch_graph_at_once(tmp_path, ros_domain_id) -> None:
    """`opolo-ros launch` ran its whole graph (a training) after an interrupt that `describe` (its
    `import mujoco`) swallowed, and only then exited 130. Here the graph is a recorder that would
    wait 60 s for its topic."""
    launch = tmp_path / "swallow.launch.py"
    launch.write_text(
        SWALLOW + "from opolo_ros.launch_runner import LaunchArg, NodeSpec, launch_description\n"
        "ARGUMENTS = [LaunchArg('out', '', 'bag')]\n"
        "def describe(args):\n"
        "    swallow_sigterm()\n"
        "    return [NodeSpec('topic_recorder', 'topic_recorder', exit_ends_launch=True, parameters={\n"
        "        'topics': ['/nobody'], 'output': args['out'], 'discovery_timeout_s': 60.0})]\n"
        "def generate_launch_description():\n"
        "    return launch_description(ARGUMENTS, describe)\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "opolo_ros.cli", "launch", str(launch),
                             f"out:={tmp_path / 'bag'}"], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert elapsed < 30.0, f"the graph ran on for {elapsed:.0f} s"


def test_a_second_signal_while_the_launch_graph_closes_aborts_it(tmp_path, ros_domain_id,
                                                                 monkeypatch) -> None:
    """`opolo-ros launch`: the first SIGINT stops the graph, a second one while its nodes close
    aborts at once (KeyboardInterrupt: status 130) rather than being swallowed while a node's close
    takes its time; the other nodes are still closed and the handlers restored (a mutation test).
    A node that signals itself stands in for the user: the first signal from a timer, the second
    from its close, which would otherwise take 10 s."""
    import types

    pytest.importorskip("rclpy")
    from opolo_ros.launch_runner import NODE_CLASSES, run_launch
    from opolo_ros.nodes.common import FinishableNode

    closed = []

    class SignalledTwice(FinishableNode):
        def __init__(self, node_name: str = "twice", **kwargs) -> None:
            super().__init__(node_name, **kwargs)
            self.first = self.create_timer(0.3, self._signal) if node_name == "twice" else None

        def _signal(self) -> None:
            self.first.cancel()
            os.kill(os.getpid(), signal.SIGINT)

        def close(self) -> None:
            closed.append(self.get_name())
            if self.first is not None:
                os.kill(os.getpid(), signal.SIGINT)
                deadline = time.monotonic() + 10.0
                while time.monotonic() < deadline:
                    time.sleep(0.01)  # Python runs the handler between these

    module = types.ModuleType("opolo_test_twice")
    module.SignalledTwice = SignalledTwice
    monkeypatch.setitem(sys.modules, "opolo_test_twice", module)
    monkeypatch.setitem(NODE_CLASSES, "twice", "opolo_test_twice:SignalledTwice")
    launch = tmp_path / "twice.launch.py"
    launch.write_text("from opolo_ros.launch_runner import NodeSpec\n"
                      "ARGUMENTS = []\n"
                      "def describe(args):\n"
                      "    return [NodeSpec('twice', 'other'),\n"
                      "            NodeSpec('twice', 'twice', exit_ends_launch=True)]\n")
    before = signal.getsignal(signal.SIGINT)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_launch(str(launch), [], ros_domain_id)
    assert time.monotonic() - start < 8.0
    assert sorted(closed) == ["other", "twice"] and signal.getsignal(signal.SIGINT) is before
