"""Every command line answers --help: each `opolo-ros` command and each bench script (and its modes)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from opolo_ros.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


@pytest.mark.parametrize("command", sorted(_subcommands(build_parser())))
def test_cli_command_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert f"opolo-ros {command}" in capsys.readouterr().out


# Runs each `python ARGV --help` in one interpreter (runpy, as `python SCRIPT` would run it), so the
# heavy imports are paid once; prints one JSON line per argv: [argv, exit status, output].
_DRIVER = """
import contextlib, io, json, runpy, sys
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    sys.argv = [*argv, "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            runpy.run_path(argv[0], run_name="__main__")
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}")
            status = 1
    print(json.dumps([argv, status, out.getvalue()]))
"""


def _help(argvs: list[list[str]]) -> list[tuple[list[str], int, str]]:
    """`python ARGV --help` for each argv: (argv, exit status, output)."""
    run = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(argvs)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return [tuple(json.loads(line)) for line in run.stdout.splitlines()]


def test_bench_scripts_help() -> None:
    scripts = sorted(f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py"))
    assert len(scripts) >= 10
    results = _help([[s] for s in scripts])
    modes = [[argv[0], mode] for argv, _, out in results
             for found in [re.search(r"^usage: \S+ \[-h\] \{([\w,-]+)\}", out, re.MULTILINE)] if found
             for mode in found.group(1).split(",")]
    assert modes  # fault_tolerance.py and graph_vs_direct.py have modes
    failures = [f"{' '.join(argv)} --help: {out.strip().splitlines()[-1:]}"
                for argv, status, out in results + _help(modes) if status != 0 or "usage:" not in out]
    assert not failures, failures  # "usage:" missing: the script ignored --help and ran


def test_opolo_ros_bench_lists_resolves_and_runs_the_scripts(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from opolo_ros import bench_scripts, cli

    assert cli.main(["bench"]) == 0
    listed = capsys.readouterr().out
    for name in ("throughput", "latency", "suite", "ship_expert"):
        assert re.search(rf"^  {name} +\S", listed, re.MULTILINE), name
    assert cli.main(["bench", "thruput"]) == 2
    assert "did you mean 'throughput'" in capsys.readouterr().err
    (tmp_path / "helper.py").write_text('"""A module, not a script."""\nX = 1\n')
    (tmp_path / "run_me.py").write_text('"""Runs.\n\nMore."""\nif __name__ == "__main__":\n    pass\n')
    assert bench_scripts.scripts(tmp_path) == {"run_me": "Runs."}
    assert bench_scripts.summary("A long\n  first paragraph.\n\nNext.", width=15) == "A long first..."
    assert bench_scripts.resolve("run_me.py", tmp_path) == tmp_path / "run_me.py"
    with pytest.raises(FileNotFoundError, match="source checkout"):
        bench_scripts.resolve("run_me", tmp_path / "absent")
    # The process becomes the script: its own --help, its exit status.
    run = subprocess.run([sys.executable, "-m", "opolo_ros.cli", "bench", "experts_table", "--help"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("usage: experts_table.py"), run.stderr


@pytest.mark.parametrize("option,value,expect", [
    ("--duration", "inf", "argument --duration: must be a finite number of seconds >= 0 (0 = off), got inf"),
    ("--duration", "-1", "argument --duration: must be a finite number of seconds >= 0"),
    ("--discovery-timeout", "nan", "argument --discovery-timeout: must be a finite number of seconds"),
    ("--max-messages", "-3", "argument --max-messages: must not be negative (0 = no limit), got -3"),
])
def test_record_topics_options_are_checked_in_their_own_names(option: str, value: str, expect: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """They went to the node as parameters: `--duration inf` became the string 'Infinity' ("parameter
    'duration_s': expected float"), a negative one an error naming 'duration_s' (a walkthrough)."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["record-topics", "/x", option, value])
    assert exit_info.value.code == 2
    assert expect in capsys.readouterr().err


def test_the_defaults_are_the_ones_the_help_states_and_info_reads_bags_as_training_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each default an option's help names, and `opolo-ros info`'s bag options the run config's
    (`demos_fields`, `demos_episode_gap_s`): info must split a bag into the episodes training
    takes from it (a mutation test: no default was pinned)."""
    from opolo_ros.algo.config import RunConfig

    parse = build_parser().parse_args
    ev = parse(["evaluate", "m.onnx"])
    assert (ev.episodes, ev.seed, ev.stamp) == (10, 10_000, False)
    rec = parse(["record", "--model", "m.onnx"])
    assert (rec.episodes, rec.seed, rec.storage, rec.time_feature) == (4, 0, "mcap", "auto")
    rt = parse(["record-topics", "/x"])
    assert (rt.storage, rt.duration, rt.max_messages, rt.discovery_timeout) == ("sqlite3", 0.0, 0, 0.0)
    qu = parse(["queue", "q.yaml"])
    assert (qu.parallel, qu.nice, qu.state_dir) == (1, 0, None)
    info, run = parse(["info", "bag"]), RunConfig()
    assert (info.topic, info.joints) == (run.demos_topic, run.demos_joints)
    assert (info.fields, info.episode_gap, info.obs_field) == (run.demos_fields, run.demos_episode_gap_s,
                                                               run.demos_obs_field)
    # counts and seeds: 0 is one, the largest seed numpy takes too, one more is refused
    assert parse(["record-topics", "/x", "--max-messages", "0"]).max_messages == 0
    assert parse(["evaluate", "m.onnx", "--seed", "0"]).seed == 0
    assert parse(["train", "--seed", "4294967295"]).seed == 2**32 - 1
    with pytest.raises(SystemExit):
        parse(["train", "--seed", "4294967296"])
    assert "argument --seed: must be at most 4294967295, got 4294967296" in capsys.readouterr().err


def test_a_listing_into_a_closed_pipe_is_no_error() -> None:
    """`opolo-ros bench | head -0`: the reader gone before the listing is written is not an error
    (status 0, nothing on stderr; a mutation test). Unbuffered, so the write happens in the command,
    as a listing longer than the output buffer's does."""
    proc = subprocess.Popen([sys.executable, "-m", "opolo_ros.cli", "bench"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.stdout.close()  # before the command has written anything (it takes a second to start)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and err == "", err


@pytest.mark.parametrize("node", ["learner", "sim_bridge", "actor", "demo_player", "demo_recorder",
                                  "topic_recorder"])
def test_node_programs_answer_help_with_their_parameters(node: str) -> None:
    """`learner --help` started the node with its defaults (the learner waited for demonstrations:
    a walkthrough). It lists the parameters, with their defaults, and exits."""
    from opolo_ros.launch_runner import declared_parameters

    argv = ["--help"] if node != "actor" else ["--ros-args", "-p", "mode:=deploy", "--", "--help"]
    result = subprocess.run([str(Path(sys.executable).parent / node), *argv], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {node} [--ros-args"), result.stdout[:200]
    listed = {line.split(",")[0].strip() for line in result.stdout.splitlines() if line.startswith("  ")}
    assert listed == set(declared_parameters(node)) - {"use_sim_time", "start_type_description_service"}
