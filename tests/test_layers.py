"""Packages stand on floors: each imports only from floors below it or, without a loop, beside it.

The floors are the README's ("Where things live"). Every import counts: at module level, inside a
function (the lazy imports that keep commands fast to start) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "draftlab"

FLOORS: dict[int, set[str]] = {
    0: {"__init__.py", "errors.py", "readable.py", "fsutil.py", "jsonio.py", "documents.py", "threads.py",
        "console.py", "figures.py", "distributed.py", "checkpoint"},
    1: {"engines", "acceptance"},
    2: {"models", "compat", "vocab"},
    3: {"decode", "probe"},
    4: {"bench", "serve", "train", "cost", "toy"},
    5: {"report", "assess"},
    6: {"cli", "demo.py", "__main__.py"},
}
FLOOR = {unit: floor for floor, units in FLOORS.items() for unit in units}


def unit_of(path: Path) -> str:
    """The package (folder) or top-level module a file belongs to."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else parts[0]


def imported_units(tree: ast.AST) -> set[str]:
    """Every draftlab package or top-level module a file imports, wherever the import stands."""
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] if node.module != "draftlab" else [f"draftlab.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] != "draftlab" or len(parts) < 2:
                continue
            if (SRC / parts[1]).is_dir():
                out.add(parts[1])
            elif (SRC / f"{parts[1]}.py").is_file():
                out.add(f"{parts[1]}.py")
            else:  # a name defined in draftlab/__init__.py (__version__)
                out.add("__init__.py")
    return out


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for f in SRC.rglob("*.py"):
        me = unit_of(f)
        graph.setdefault(me, set()).update(u for u in imported_units(ast.parse(f.read_text())) if u != me)
    return graph


def test_every_package_has_a_floor():
    units = {unit_of(f) for f in SRC.rglob("*.py")}
    assert units <= set(FLOOR), f"put {sorted(units - set(FLOOR))} on a floor (here and in the README)"


def test_no_package_imports_upwards():
    upward = [f"{a} (floor {FLOOR[a]}) imports {b} (floor {FLOOR[b]})"
              for a, targets in edges().items() for b in targets if FLOOR[b] > FLOOR[a]]
    assert not upward, "; ".join(sorted(upward))


def test_no_loop_beside_on_a_floor():
    graph = edges()

    def reach(a: str) -> set[str]:
        seen, todo = set(), [a]
        while todo:
            for b in graph.get(todo.pop(), set()) - seen:
                seen.add(b)
                todo.append(b)
        return seen

    loops = sorted(a for a in graph if a in reach(a))
    assert not loops, f"packages in an import loop: {loops}"
