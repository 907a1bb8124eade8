"""The ROS 2 nodes. Imported before any node module, so before their heavy imports (torch, MuJoCo).

In a node program (``learner``, ``python -m opolo_ros.nodes.learner``, ...) a SIGINT or SIGTERM
that comes meanwhile ends it at once with one line and status 0, as a signal does later (nothing
is written before the node starts); ``run_node`` then installs the node's own handling. Anywhere
else (a launch in one process, tests) nothing changes, except that a SIGINT that comes to a program
started with SIGINT ignored is kept (:func:`opolo_ros.signals.catch_ignored_sigint`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from opolo_ros.signals import catch_ignored_sigint, exit_on_signals_while_starting

NODE_PROGRAMS = ("sim_bridge", "actor", "learner", "demo_recorder", "demo_player", "topic_recorder")


def node_program(argv: list[str]) -> str | None:
    """The node program that `argv` (``sys.orig_argv``: the interpreter's own command line) runs:
    its console script or ``-m opolo_ros.nodes.<name>``; None for anything else."""
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-X", "-W"):  # the interpreter's options that take a value
            next(args, None)
        elif arg == "-m":
            module = next(args, "")
            name = module.rpartition(".")[2]
            return name if module == f"opolo_ros.nodes.{name}" and name in NODE_PROGRAMS else None
        elif arg == "-c" or arg == "-":
            return None
        elif not arg.startswith("-"):  # a script: a console script or a node module's file
            path = Path(arg)
            name = path.stem if path.suffix == ".py" and path.parent.name == "nodes" else path.name
            return name if name in NODE_PROGRAMS else None
    return None


_program = node_program(list(getattr(sys, "orig_argv", [])))
if _program is not None:
    exit_on_signals_while_starting(_program)
else:
    catch_ignored_sigint()
