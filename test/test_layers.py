"""The layers under the nodes import no ROS: algo/, data/, sim/, export/ and train/ (the learner
node's training included, :mod:`opolo_ros.train.stream`) run where rclpy is not installed."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import opolo_ros

ROS_FREE = ("algo", "data", "sim", "export", "train")
ROS_MODULES = ("rclpy", "std_msgs", "sensor_msgs", "builtin_interfaces", "opolo_ros.nodes", "opolo_ros.ros",
               "opolo_ros.launch_runner")


def modules(package: str) -> list[str]:
    path = Path(opolo_ros.__file__).parent / package
    return [f"opolo_ros.{package}.{info.name}" for info in pkgutil.iter_modules([str(path)])]


@pytest.mark.parametrize("package", ROS_FREE)
def test_layer_imports_no_ros(package):
    names = modules(package)
    assert names, package
    code = (f"import sys\nfor name in {names!r}:\n    __import__(name)\n"
            f"print(','.join(sorted(m for m in sys.modules if m.startswith({ROS_MODULES!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"{package} imports ROS modules: {out.stdout.strip()}"


def imported_modules(path: Path) -> set[str]:
    """Every module a source file imports, at its top or inside a function (the lazy imports that an
    import-time check cannot see)."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package,forbidden", [
    *((p, ("rclpy", "std_msgs", "sensor_msgs", "opolo_ros.nodes", "opolo_ros.ros", "opolo_ros.launch_runner",
           "opolo_ros.cli")) for p in ROS_FREE),
    ("nodes", ("opolo_ros.launch_runner", "opolo_ros.cli")),  # dependencies point down only (design.md)
    ("ros", ("opolo_ros.nodes", "opolo_ros.launch_runner", "opolo_ros.cli")),
])
def test_no_module_imports_a_layer_above_it_even_lazily(package, forbidden):
    root = Path(opolo_ros.__file__).parent / package
    wrong = {f"{path.relative_to(root.parent)}: {name}" for path in sorted(root.glob("*.py"))
             for name in imported_modules(path) if name.startswith(forbidden)}
    assert not wrong, sorted(wrong)
