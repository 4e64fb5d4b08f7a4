"""The README and docs/ name only commands and options the CLI has, and docs/cli.md lists every command:
a renamed option or a dropped command fails here, not in a newcomer's terminal."""

from __future__ import annotations

import re
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
