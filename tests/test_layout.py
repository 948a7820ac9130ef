"""The size guard over all of ``src/`` (issue 39): no module over 600 lines, no Python
function over 60, no Lua function over 60.

The CLI's own guard (tests/interfaces/test_cli_layout.py) came first; this one covers every
package and the Lua scripts and includes. Generated code (the gRPC stubs, ``*_pb2*.py``) is
not ours to shape and is left out.

Lua functions are found by a small scanner: a ``function name(`` or ``local function name(``
line opens one, and the first later line holding only ``end`` at the same indentation closes
it (the project's Lua is indented two spaces per block; a line indented less before that
``end`` means the scanner lost its way, and the test says so rather than guess).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "scrapeq"
MAX_MODULE, MAX_FUNCTION = 600, 60

_LUA_OPEN = re.compile(r"^(?P<indent> *)(?:local +)?function +(?P<name>[\w.:]+) *\(")
_ONE_LINE = re.compile(r"\bend\b[\s,)]*(--.*)?$")


def _generated(path: Path) -> bool:
    return "_pb2" in path.name


def python_functions(text: str) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function and method, decorators included."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((node.name, (node.end_lineno or 0) - first + 1))
    return out


def lua_functions(text: str) -> list[tuple[str, int]]:
    """``(name, lines)`` of every named Lua function (see the module's docstring)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        opened = _LUA_OPEN.match(line)
        if not opened:
            continue
        name, indent = opened["name"], opened["indent"]
        if _ONE_LINE.search(line[opened.end() :]):
            out.append((name, 1))
            continue
        for j in range(i + 1, len(lines)):
            body = lines[j]
            if body.rstrip() == indent + "end":
                out.append((name, j - i + 1))
                break
            stripped = body.strip()
            if stripped and not stripped.startswith("--"):
                lead = len(body) - len(body.lstrip(" "))
                if lead < len(indent) or (lead == len(indent) and not _continues(stripped)):
                    raise AssertionError(f"{name}: line {j + 1} leaves it before its 'end'")
        else:
            raise AssertionError(f"{name}: no 'end' at its indentation")
    return out


def _continues(stripped: str) -> bool:
    """A line at the function's own indentation inside it: only its closing forms."""
    return stripped.startswith(("end", "}", ")"))


def test_lua_scanner_measures_what_it_should() -> None:
    source = """local function a(x)
  if x then
    return 1
  end
  return 2
end
local T = {}
function T.b() return 3 end
  function T.c(y)
    local f = function(z)
      return z
    end
    return f(y)
  end
"""
    assert lua_functions(source) == [("a", 6), ("T.b", 1), ("T.c", 6)]
    with pytest.raises(AssertionError, match="leaves it"):
        lua_functions("local function d()\n  return 1\nlocal e = 2\n")


def test_python_functions_count_decorators() -> None:
    source = "@decorator\ndef f():\n    return 1\n"
    assert python_functions(source) == [("f", 3)]


def test_no_module_over_600_lines_nor_function_over_60() -> None:
    too_long = []
    paths = sorted(p for p in [*SRC.rglob("*.py"), *SRC.rglob("*.lua")] if not _generated(p))
    assert len(paths) > 100
    for path in paths:
        text = path.read_text()
        shown = path.relative_to(SRC)
        if len(text.splitlines()) > MAX_MODULE:
            too_long.append(f"{shown}: {len(text.splitlines())} lines")
        measure = python_functions if path.suffix == ".py" else lua_functions
        for name, lines in measure(text):
            if lines > MAX_FUNCTION:
                too_long.append(f"{shown}:{name}: {lines} lines")
    assert too_long == []
