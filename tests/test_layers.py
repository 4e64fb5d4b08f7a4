"""ARCHITECTURE.md's layer table holds for every import in evalpkg: none goes up a row, none closes
a circle. The table is read from the file, so the map and the code cannot drift apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "evalpkg"


def layer_table() -> list[list[str]]:
    """The first cell of each row of the Layers table: the modules of that row, top row first."""
    section = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    return [re.findall(r"`([^`]+)`", line.split("|")[1]) for line in section.splitlines() if line.startswith("| `")]


def row_of(module: str, rows: list[list[str]]) -> int:
    """The row of a module (a path under evalpkg/, like 'testset/models.py'); the most specific name wins."""
    best: tuple[int, int] | None = None
    for index, names in enumerate(rows):
        for name in names:
            if name.endswith("/"):
                fits = module.startswith(name)
            elif name.endswith(".py"):
                fits = module == name
            else:
                fits = module in (f"{name}.py", f"{name}/__init__.py")
            if fits and (best is None or len(name) > best[0]):
                best = (len(name), index)
    assert best is not None, f"evalpkg/{module} is in no row of ARCHITECTURE.md's layer table"
    return best[1]


def _module_file(dotted: str) -> str | None:
    """'evalpkg.testset.models' -> 'testset/models.py' (a package -> its __init__.py); None if not ours."""
    parts = dotted.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return "/".join(parts) + ".py"
    if (base / "__init__.py").is_file():
        return "/".join([*parts, "__init__.py"])
    return None


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(source: str) -> list[tuple[int, str]]:
    """(line, module file) of every evalpkg module a source imports, deferred imports included and
    imports under `if TYPE_CHECKING:` left out (they never run)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            for child in getattr(node, "orelse", []):
                visit(child)
            return
        if isinstance(node, ast.Import):
            ours = [a.name for a in node.names if a.name.split(".")[0] == "evalpkg"]
            found.extend((node.lineno, f) for name in ours if (f := _module_file(name)))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "evalpkg":
            for alias in node.names:  # `from evalpkg.sync import publish` imports the module sync/publish.py
                target = _module_file(f"{node.module}.{alias.name}") or _module_file(node.module)
                if target:
                    found.append((node.lineno, target))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def upward_imports(module: str, source: str, rows: list[list[str]]) -> list[str]:
    mine = row_of(module, rows)
    return [
        f"evalpkg/{module}:{line} imports evalpkg/{target}, a row below it in ARCHITECTURE.md"
        for line, target in imports_of(source)
        if row_of(target, rows) > mine
    ]


def sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_import_goes_up_a_row() -> None:
    rows = layer_table()
    assert len(rows) >= 10, rows
    assert [v for module, source in sources().items() for v in upward_imports(module, source, rows)] == []


def test_an_upward_import_is_caught() -> None:
    """What the test above would say of an agent module importing the pipeline (the run that uses it)."""
    rows = layer_table()
    source = "from evalpkg.testset.models import Task\n\ndef f():\n    from evalpkg.pipeline.run import run_all\n"
    assert upward_imports("agent/example.py", source, rows) == [
        "evalpkg/agent/example.py:4 imports evalpkg/pipeline/run.py, a row below it in ARCHITECTURE.md"
    ]
    typed_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from evalpkg.pipeline.run import Scored\n"
    assert upward_imports("agent/example.py", typed_only, rows) == []


def test_no_circle_of_imports() -> None:
    graph = {module: {t for _, t in imports_of(source) if t != module} for module, source in sources().items()}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                walk(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    assert circles == []


def test_every_module_has_a_row() -> None:
    rows = layer_table()
    for module in sources():
        row_of(module, rows)
