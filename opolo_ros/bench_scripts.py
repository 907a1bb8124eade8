"""`opolo-ros bench NAME [ARGS...]`: the benchmark scripts of a source checkout, by name.

The scripts live in ``bench/`` next to the package (they are not installed: an installed package
has no ``bench/``, and the command says so). Each one is a script with ``--help``; this module only
finds them, lists them with the first paragraph of their docstring (read with ``ast``, nothing
is imported) and resolves a name, suggesting the closest one for a typo.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"
SUMMARY_WIDTH = 110


def _is_script(tree: ast.Module) -> bool:
    """A top-level ``if __name__ == "__main__":`` block."""
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left = node.test.left
            if isinstance(left, ast.Name) and left.id == "__name__":
                return True
    return False


def scripts(folder: Path = BENCH_DIR) -> dict[str, str]:
    """Script name (file stem) -> the first line of its docstring, sorted by name."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        if _is_script(tree):
            found[path.stem] = summary(ast.get_docstring(tree) or "")
    return found


def summary(doc: str, width: int = SUMMARY_WIDTH) -> str:
    """The docstring's first paragraph on one line, cut to `width` characters."""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def resolve(name: str, folder: Path = BENCH_DIR) -> Path:
    """The script called `name` (``throughput`` or ``throughput.py``); a clear error otherwise."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no bench/ folder at {folder}: the benchmark scripts come with a source "
                                "checkout of opolo_ros, not with an installed package")
    known = scripts(folder)
    stem = name.removesuffix(".py")
    if stem not in known:
        close = difflib.get_close_matches(stem, known, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ValueError(f"no bench script '{name}' in {folder}; {hint}`opolo-ros bench` lists them")
    return folder / f"{stem}.py"


def listing(folder: Path = BENCH_DIR) -> str:
    """The scripts, one per line with its summary, for `opolo-ros bench` without a name."""
    if not folder.is_dir():
        return f"no bench/ folder at {folder} (the benchmark scripts come with a source checkout)"
    known = scripts(folder)
    width = max(map(len, known), default=0)
    lines = [f"benchmark scripts in {folder} (`opolo-ros bench NAME --help` for each):"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, summary in known.items()]
    return "\n".join(lines)
