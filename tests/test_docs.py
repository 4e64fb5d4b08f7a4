"""The README and docs/ name only commands and options the CLI has, and docs/cli.md lists every command:
a renamed option or a dropped command fails here, not in a newcomer's terminal."""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import typer

from evalpkg.cli import app
from evalpkg.settings import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"evalpkg((?: [a-z][a-z-]*)+)([^|]*)")


def tree() -> Any:
    return typer.main.get_command(app)  # typer's own click: groups are told by their commands


def commands(group: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out |= commands(cmd, f"{prefix}{name} ")
        else:
            out[prefix + name] = cmd
    return out


def spans(page: Path) -> list[str]:
    """Every inline code span and every line of a fenced block."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    return SPAN.findall(re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)) + lines


def mentions(page: Path) -> list[tuple[str, list[str]]]:
    """(command path, its options) for each `evalpkg ...` the page shows."""
    known = commands(tree())
    groups = {name.split()[0] for name in known if " " in name}
    found = []
    for span in spans(page):
        for words, rest in COMMAND.findall(span):
            parts = words.split()
            path = " ".join(parts[:2]) if parts[0] in groups and len(parts) > 1 else parts[0]
            found.append((path, re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest)))
    return found


def options(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} | {"--help"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_and_option_a_page_shows_exists(page: Path) -> None:
    known = commands(tree())
    shown = mentions(page)
    groups = {name.split()[0] for name in known if " " in name}
    wrong = [path for path, _ in shown if path not in known and path not in groups]
    assert not wrong, f"{page.name} shows commands the CLI does not have: {wrong}"
    stale = [(path, o) for path, opts in shown if path in known for o in opts if o not in options(known[path])]
    assert not stale, f"{page.name} shows options the CLI does not have: {stale}"


def test_the_cli_page_lists_every_command() -> None:
    listed = {path for path, _ in mentions(PROJECT_ROOT / "docs" / "cli.md")}
    text = (PROJECT_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    spans_text = " ".join(SPAN.findall(text))  # `evalpkg score` / `report`, `testset build\|validate`
    missing = [
        name
        for name in commands(tree())
        if name not in listed and not re.search(rf"(?<![\w-]){re.escape(name.split()[-1])}(?![\w-])", spans_text)
    ]
    assert not missing, f"docs/cli.md does not list {missing}"


def test_the_checker_sees_a_renamed_option() -> None:
    page = Path(__file__).parent / "renamed.md.txt"
    page.write_text("Run `evalpkg run --no-such-option 3` and `evalpkg testset nope`.\n", encoding="utf-8")
    try:
        shown = mentions(page)
    finally:
        page.unlink()
    assert ("run", ["--no-such-option"]) in shown and ("testset nope", []) in shown
    assert "--no-such-option" not in options(commands(tree())["run"])


def _layout() -> str:
    return (PROJECT_ROOT / "docs" / "layout.md").read_text(encoding="utf-8")


def _project_folders() -> list[str]:
    """The top-level folders a checkout holds: not hidden, and not what .gitignore leaves out (.venv, mlruns)."""
    ignored = [line.strip().rstrip("/") for line in (PROJECT_ROOT / ".gitignore").read_text().splitlines()]
    return sorted(
        p.name
        for p in PROJECT_ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and not any(fnmatch(p.name, g) for g in ignored if g)
    )


def test_layout_names_every_folder_benchmark_and_page() -> None:
    """docs/layout.md is the map a newcomer reads first: every tracked top-level folder, every folder of
    tasks/ that is no release, every benchmark and every docs page is on it."""
    page = _layout()
    assert [f for f in _project_folders() if f"{f}/" not in page] == []
    in_tasks = {p.name for p in (PROJECT_ROOT / "tasks").iterdir() if p.is_dir() and not re.fullmatch(r"v\d+", p.name)}
    assert [f for f in sorted(in_tasks) if f"{f}/" not in page] == []
    benchmarks = [p.name for p in (PROJECT_ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh")]
    assert [b for b in sorted(benchmarks) if b != "__init__.py" and b not in page] == []
    assert [d.name for d in sorted((PROJECT_ROOT / "docs").glob("*.md")) if f"`{d.name}`" not in page] == []


def test_tests_mirror_the_package() -> None:
    packages = {p.parent.name for p in (PROJECT_ROOT / "evalpkg").glob("*/*.py")}  # testset/ is a namespace
    mirrored = {p.parent.name for p in (PROJECT_ROOT / "tests").glob("*/__init__.py")}
    assert packages - mirrored == set(), "a package without tests/<package>/"
    assert mirrored - packages == {"dags"}, "tests/<folder>/ for no package (dags/ is mirrored too)"
    empty = [d for d in sorted(mirrored) if not list((PROJECT_ROOT / "tests" / d).glob("test_*.py"))]
    assert empty == [], "a test folder without tests"


def _refresh_cycle_commands() -> list[str]:
    """The `evalpkg testset ...` lines of docs/refresh.md's fenced blocks under "## The cycle", in page order."""
    text = (PROJECT_ROOT / "docs" / "refresh.md").read_text(encoding="utf-8")
    cycle = text.split("\n## The cycle\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", cycle, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.startswith("evalpkg testset ")]


# What a refresh cycle needs, in its order: a wording is approved before the second annotator writes from it,
# the agreement is measured before the task is approved, the dry run comes before the release.
REFRESH_STEPS: tuple[tuple[str, Any], ...] = (
    ("mine the month", lambda c: c.startswith("evalpkg testset refresh --month")),
    ("show a candidate", lambda c: c.startswith("evalpkg testset review") and "--show" in c),
    ("approve its wordings", lambda c: c.startswith("evalpkg testset review") and "--wordings" in c),
    ("measure the second annotation", lambda c: c.startswith("evalpkg testset annotate --queue")),
    (
        "approve the task",
        lambda c: (
            c.startswith("evalpkg testset review") and "--reviewer" in c and not re.search(r"--wording|--reject", c)
        ),
    ),
    ("dry run the release", lambda c: c == "evalpkg testset release --dry-run"),
    ("release", lambda c: c == "evalpkg testset release"),
)


def test_the_refresh_guide_gives_the_steps_in_the_cycles_order() -> None:
    lines = _refresh_cycle_commands()
    firsts = []
    for step, is_step in REFRESH_STEPS:
        at = next((i for i, line in enumerate(lines) if is_step(line)), None)
        assert at is not None, f"docs/refresh.md's cycle has no command to {step}"
        firsts.append((at, step))
    assert [s for _, s in sorted(firsts)] == [s for s, _ in REFRESH_STEPS], f"out of order: {lines}"
