"""ROS 2 parameter files read as rcl reads them, without ROS: one reader for the launch runner, the
node programs and the direct loop's task files, so that a file one of them accepts the others do not
refuse, and what rcl refuses none of them skips.

A file maps node names to ``{ros__parameters: {...}}``; nested keys name namespaces
(``robot1: {actor: {ros__parameters: ...}}`` is ``robot1/actor``); a name token is letters, digits
and ``_``, or a whole-token wildcard (``*`` one token, ``**`` any number). rcl refuses a value
outside ``ros__parameters`` (a misspelt ``ros__parameters`` above all), an empty
``ros__parameters`` and a partial wildcard (``r*``): so does this reader, with one line naming the
file and the section.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opolo_ros.errors import short_repr

# The package's node executables and their classes (imported only when a node is made).
NODE_CLASSES = {
    "sim_bridge": "opolo_ros.nodes.sim_bridge:SimBridge",
    "actor": "opolo_ros.nodes.actor:Actor",
    "learner": "opolo_ros.nodes.learner:Learner",
    "demo_recorder": "opolo_ros.nodes.demo_recorder:DemoRecorder",
    "demo_player": "opolo_ros.nodes.demo_player:DemoPlayer",
    "topic_recorder": "opolo_ros.nodes.topic_recorder:TopicRecorder",
}
PARAMETERS_KEY = "ros__parameters"


def is_parameter_file(data: Any) -> bool:
    """Whether YAML `data` has the shape of a ROS 2 parameter file (a section holding
    ``ros__parameters``), not of a plain run config."""
    return isinstance(data, Mapping) and any(isinstance(v, Mapping) and PARAMETERS_KEY in v
                                             for v in data.values())


def parameter_sections(data: Any, path: str | Path) -> dict[str, dict[str, Any]]:
    """A parameter file's YAML `data` as ``{section key: its ros__parameters mapping}`` (nested
    namespaces joined with ``/``); a ValueError for what rcl refuses (module docstring), and for a
    section whose node name is close to, but not, one of the package's nodes."""
    if not isinstance(data, Mapping):
        raise ValueError(f"parameter file {path}: expected a mapping of node names")
    out: dict[str, dict[str, Any]] = {}
    for key, section in data.items():
        if str(key) == PARAMETERS_KEY:
            raise ValueError(f"parameter file {path}: 'ros__parameters' at the top level: a node name "
                             "(or /**) must come before it, <node>: {ros__parameters: {name: value}}")
        _read_section(Path(path), str(key), section, out)
    return out


def _read_section(path: Path, key: str, section: Any, out: dict[str, Any],
                  inside: tuple[int, ...] = ()) -> None:
    """One node's (or namespace's) section into `out`; `inside`: the sections above (a YAML alias
    may make a section hold itself)."""
    if not isinstance(section, Mapping):
        raise ValueError(f"parameter file {path}: '{key}' is {short_repr(section)}, outside any "
                         "'ros__parameters' (rcl refuses the file): a node's section is "
                         "<node>: {ros__parameters: {name: value}}")
    if id(section) in inside:
        raise ValueError(f"parameter file {path}: section '{key}' holds itself (a YAML alias)")
    for name, value in section.items():
        name = str(name)
        if name == PARAMETERS_KEY:
            if not isinstance(value, Mapping):
                empty = " (give {} for none, or leave the section out)" if value is None else ""
                raise ValueError(f"parameter file {path}: '{key}' must hold a 'ros__parameters' mapping "
                                 f"(a ROS 2 parameter file), got {short_repr(value)}{empty}")
            _check_section_name(path, key)
            out[key] = dict(value)
        elif difflib.get_close_matches(name, [PARAMETERS_KEY], n=1, cutoff=0.75):
            raise ValueError(f"parameter file {path}: section '{key}' holds '{name}', not 'ros__parameters' "
                             "(two underscores; its parameters would reach no node)")
        else:
            _read_section(path, f"{key}/{name}", value, out, (*inside, id(section)))


def _check_section_name(path: Path, key: str) -> None:
    """rcl's rule for a section's node name (module docstring), and a name close to one of the
    package's nodes but not it (a misspelt ``lerner`` reached no node without a word); other
    nodes' sections are fine."""
    for token in key.strip("/").split("/"):
        if token not in ("*", "**") and not re.fullmatch(r"[A-Za-z0-9_]+", token):
            hint = (" (a wildcard is a whole name token, * or **; rcl refuses a partial one)" if "*" in token
                    else " (rcl allows letters, digits and '_' in a node or namespace name)")
            raise ValueError(f"parameter file {path}: section '{key}' has the name token '{token}'{hint}")
    node = key.rsplit("/", 1)[-1]
    close = difflib.get_close_matches(node, NODE_CLASSES, n=1, cutoff=0.8)
    if node not in ("*", "**") and node not in NODE_CLASSES and close:
        raise ValueError(f"parameter file {path}: section '{key}' names no opolo_ros node; did you "
                         f"mean '{close[0]}'? (nodes: {', '.join(NODE_CLASSES)})")
def own_sections(name: str, namespace: str = "") -> list[str]:
    """The sections of a parameter file that name node `name` in `namespace` (not ``/**`` nor
    another wildcard)."""
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    keys = [f"/**/{name}", name, f"/{name}"]
    if ns:
        keys += [f"{ns}/{name}", f"{ns.lstrip('/')}/{name}"]
    return keys


def wildcard_match(key: str, fqn: str) -> bool:
    """Whether section `key` of a parameter file names node `fqn` (``/ns/name``) as rcl's wildcards
    do: ``/*`` one name token, ``/**`` any number of them (``/robot1/**``, ``/*/actor``, ``/**``)."""
    pattern = re.escape("/" + key.strip("/")).replace(r"/\*\*", r"(/\w+)*").replace(r"/\*", r"(/\w+)")
    return re.fullmatch(pattern, fqn) is not None



def sections_reaching(sections: Mapping[str, Any], name: str, namespace: str = "") -> list[str]:
    """The keys of `sections` (:func:`parameter_sections`) whose parameters node `name` in
    `namespace` takes (``/**``, a wildcard that matches it, its own: :func:`own_sections`), in the
    order to apply them, a later one over an earlier one: the file's, as rcl does (checked with
    rclpy: ``learner:`` then ``/**:`` gives the learner ``/**``'s value). A plain ``name:`` section
    also reaches the node in a namespace, which rcl's would not (so that the task files serve
    namespaced graphs); it never overrides a section that names the node's namespace."""
    own = own_sections(name, namespace)
    fqn = "/".join(["", *namespace.strip("/").split("/"), name]) if namespace.strip("/") else f"/{name}"
    keys = [k for k in sections if k in own or ("*" in k and wildcard_match(k, fqn))]
    plain = {name, f"/{name}"} if namespace.strip("/") else set()
    named = [k for k in keys if k in own and k not in plain]
    late = [k for k in keys[keys.index(named[0]):] if k in plain] if plain and named else []
    if late:  # before the first section that names the namespace
        keys = [k for k in keys if k not in late]
        at = keys.index(named[0])
        keys[at:at] = late
    return keys
