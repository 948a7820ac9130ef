"""The shape of the CLI package (issue 22): the command tree in its registered order, and no
module or function of ``scrapeq.interfaces.cli`` grown past the project's bounds."""

from __future__ import annotations

import ast
from pathlib import Path

import scrapeq.interfaces.cli
from scrapeq.interfaces.cli import command

PACKAGE = Path(scrapeq.interfaces.cli.__file__).parent


def test_help_lists_the_commands_then_the_groups_in_their_order() -> None:
    assert list(command().commands) == [
        "worker", "crawl", "enqueue", "status", "audit", "breakers", "domains", "demo",
        "dashboard", "dead", "job", "queue", "breaker", "domain", "proxies", "server", "frontier",
    ]  # fmt: skip


def test_no_module_over_600_lines_nor_function_over_60() -> None:
    too_long = []
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 600:
            too_long.append(path.name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (node.end_lineno or 0) - first + 1 > 60:
                    too_long.append(f"{path.name}:{node.name}")
    assert too_long == []
