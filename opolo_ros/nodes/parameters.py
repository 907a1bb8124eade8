"""The parameters of the package's nodes, without starting one: what each node declares, its
``--help``, and what a ROS 2 parameter file gives a node (read as rcl reads it,
:mod:`opolo_ros.params_file`, with every key checked against what the node declares). The node
programs check their ``--params-file`` and ``-p`` with it, the launch runner composes graphs with it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opolo_ros.algo.config import (
    ROS_NODE_PARAMETERS,
    check_parameter_names,
    flatten,
    learner_parameter_names,
    read_yaml,
)
from opolo_ros.params_file import (
    NODE_CLASSES,
    is_parameter_file,
    own_sections,
    parameter_sections,
    sections_reaching,
)

PACKAGE = "opolo_ros"


def read_params_file(path: str | Path) -> dict[str, Any]:
    """A ROS 2 parameter file as ``{node key: ros__parameters mapping}``."""
    path = Path(path)
    data = read_yaml(path, "parameter file")
    if not isinstance(data, Mapping):
        raise ValueError(f"parameter file {path}: expected a mapping of node names")
    if {"launch_file", "nodes"} <= data.keys():  # what _write_launch_record writes into a run folder
        args = " ".join(f"{k}:={v}" for k, v in (data.get("arguments") or {}).items() if v != "")
        raise ValueError(f"{path} is the record of an `opolo-ros launch` (its launch file, arguments and "
                         f"each node's parameters), not a ROS 2 parameter file: run it again with "
                         f"`opolo-ros launch {str(data['launch_file']).removesuffix('.launch.py')} "
                         f"{args}`; a node program takes a task "
                         "file (config/<task>.yaml) or the run folder's learner_params.yaml")
    for key, section in data.items() if not is_parameter_file(data) else ():
        if not isinstance(section, Mapping):
            raise ValueError(f"parameter file {path} looks like a plain run config (top-level '{key}: "
                             f"{section}'), the file `opolo-ros train --config` takes; a launch or a "
                             "node program needs a ROS 2 parameter file (<node or /**>: {ros__parameters: "
                             "{...}}, e.g. config/inverted_pendulum.yaml)")
    return parameter_sections(data, path)


@functools.cache
def declared_parameters(executable: str) -> frozenset[str]:
    """The parameters the node of `executable` declares (its ``PARAMETERS`` table; the learner's run
    config too; rclpy's own), without starting it."""
    if executable not in NODE_CLASSES:
        raise ValueError(f"no node class for executable {executable!r}; known: {', '.join(NODE_CLASSES)}")
    if executable == "learner":  # without importing the node (torch): its table is in algo.config
        return learner_parameter_names()
    module = importlib.import_module(NODE_CLASSES[executable].partition(":")[0])
    return frozenset(module.PARAMETERS) | ROS_NODE_PARAMETERS


def node_help(executable: str) -> str:
    """A node program's ``--help``: how parameters are given, and each one with its default (and
    description where the node's table has one). The learner's are its own and the run config's."""
    from opolo_ros.algo.config import LEARNER_PARAMETERS, RunConfig, to_dict

    if executable == "learner":  # without importing the node (torch)
        run_config_keys = flatten(to_dict(RunConfig()))
        table = {**{k: (v, "run config (README, Configuration)") for k, v in run_config_keys.items()},
                 **LEARNER_PARAMETERS}
    else:
        table = importlib.import_module(NODE_CLASSES[executable].partition(":")[0]).PARAMETERS
    lines = [f"usage: {executable} [--ros-args [--params-file FILE] [-p name:=value ...] [-r from:=to ...]]",
             "", f"the {executable} node of {PACKAGE}; its parameters (name, default: description):"]
    lines += [f"  {name}, {default!r}: {text}" for name, (default, text) in table.items()]
    return "\n".join(lines)


def package_parameter_names() -> frozenset[str]:
    """Every parameter some node of the package declares: what a ``/**`` section may set."""
    return frozenset().union(*(declared_parameters(e) for e in NODE_CLASSES))


def node_parameters(params_file: str | Path | None, name: str, namespace: str = "",
                    executable: str | None = None, package_wide: bool = False) -> dict[str, Any]:
    """The flat (dotted) parameters a file gives node `name` in `namespace` (see module docstring).

    rcl would ignore a key the node does not declare, so a typo would change the run silently; here
    it is an error naming the file, the section and the key (with the closest declared name): in the
    node's own sections, a key its executable (default: `name`) does not declare; in ``/**``, which
    every node reads, a key no node of the package declares. `package_wide`: the node's own
    sections are checked as ``/**`` is (a node program given a file of parameters the launch
    composed, which gives each node the shared ones too).
    """
    if not params_file:
        return {}
    sections = read_params_file(params_file)
    own = own_sections(name, namespace)
    executable = executable or name
    merged: dict[str, Any] = {}
    for key in sections_reaching(sections, name, namespace):
        flat = flatten(sections[key])
        where = f"parameter file {params_file}, section '{key}'"
        if key not in own or package_wide:  # /** or a wildcard: any node's parameters
            check_parameter_names(flat, package_parameter_names(), where, "any opolo_ros node")
        elif executable in NODE_CLASSES:
            check_parameter_names(flat, declared_parameters(executable), where, f"the {executable} node")
        merged.update(flat)
    return merged
