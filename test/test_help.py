"""Every command line answers --help: each `opolo-ros` command and each bench script (and its modes)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from opolo_ros.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
NODE_SCRIPTS = {"baseline_actor.py"}  # ROS nodes: parameters through --ros-args, no --help


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


@pytest.mark.parametrize("command", sorted(_subcommands(build_parser())))
def test_cli_command_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert f"opolo-ros {command}" in capsys.readouterr().out


def _help(argvs: list[list[str]]) -> list[tuple[list[str], int, str]]:
    """Run `python ARGV --help` for each argv side by side: (argv, exit status, output)."""
    procs = [(argv, subprocess.Popen([sys.executable, *argv, "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)) for argv in argvs]
    return [(argv, proc.returncode, out) for argv, proc in procs
            for out in [proc.communicate(timeout=180)[0]]]


def test_bench_scripts_help() -> None:
    scripts = sorted(f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py") if p.name not in NODE_SCRIPTS)
    assert len(scripts) >= 10
    results = _help([[s] for s in scripts])
    modes = [[argv[0], mode] for argv, _, out in results
             for found in [re.search(r"^usage: \S+ \[-h\] \{([\w,-]+)\}", out, re.MULTILINE)] if found
             for mode in found.group(1).split(",")]
    assert modes  # fault_tolerance.py and graph_vs_direct.py have modes
    failures = [f"{' '.join(argv)} --help: {out.strip().splitlines()[-1:]}"
                for argv, status, out in results + _help(modes) if status != 0]
    assert not failures, failures
