"""A script as a Redis 7 function library, built from the very source EVAL runs (ADR 0061).

An ``EVALSHA`` runs a script's whole chunk on every call: every include's functions are made
anew (about 1 M redis-server instructions a call, BENCHMARKS section 38). A function library
runs its chunk once, at ``FUNCTION LOAD``; a call (``FCALL``) runs only the per-call part.
:func:`library_source` splits the expanded script (:func:`scrapeq.engine.lua.source.load_source`)
into top-level statements and sorts them:

* **once**: ``local function f``, ``function T.f`` (T a top-level table), and a top-level
  ``do ... end`` that only defines functions: made at load time, as the chunk made them;
* **per call**: every other statement, run in the script's order on every call. A top-level
  ``local x = e`` is declared once where it stood and assigned per call (``x = e``; a bare
  ``local x`` is set to nil), so the functions made once see each call's values, exactly as
  each call's chunk saw them. A table that has ``function T.f`` members is kept (its functions
  with it) and refilled per call: its other fields cleared, then its constructor's set. At its
  first refill its functions move to the table's metatable (``__index``), so each refill walks
  its data fields only, not its functions (EX has dozens).

The per-call statements are grouped into functions that each name at most ``_NAME_LIMIT`` of
the chunk's locals (Lua 5.1 allows 60 upvalues a function); the registered function runs the
groups in order until one returns (a ``return`` at the chunk's top level). Nothing here reads
the Lua: a statement is found by the sources' layout (one starts at column 0; a closing
``end``, ``}`` or ``)`` at column 0 continues it), which ``tests/engine/test_lua_library.py``
checks by loading every script's library into a real Redis 7 and running the script suites
through both paths.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache

from redis.exceptions import NoPermissionError

from scrapeq.engine.lua.source import load_source

#: Ends the first line of a top-level statement made once, at load time, in a library: its
#: value is the same for every call (a constant, a closure over its own state only), or it is
#: a cache a call may keep for the next (which a script by EVAL starts empty each call).
ONCE_MARK = "--@once"

#: Distinct chunk locals one group of per-call statements may name (Lua 5.1: 60 upvalues).
_NAME_LIMIT = 40

_CONTINUES = ("end", "}", ")", "else", "elseif", "until")
_LOCAL_FUNCTION = re.compile(r"^local function (\w+)\s*\(")
_MEMBER_FUNCTION = re.compile(r"^function (\w+)[.:]\w+\s*\(")
_LOCAL = re.compile(r"^local ((?:\w+)(?:\s*,\s*\w+)*)\s*(=.*)?$")
_WORD = re.compile(r"[A-Za-z_]\w*")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_BLOCK_FUNCTION = re.compile(r"^  (?:function (\w+)\s*\(|(\w+) = function\b)")
_ONCE_BLOCK_LINE = re.compile(
    r"^  (local function |function |\w+ = function\b|end\b|--)|^\s*$|^   "
)


class LibraryError(Exception):
    """A script whose layout this builder cannot split safely (a test loads every script)."""


@dataclass
class _Statement:
    lines: list[str]
    kind: str = "call"  # "once", "call", "table" (a table with member functions), "blank"
    names: list[str] = field(default_factory=list)  # the chunk locals it declares


def _split(source: str) -> list[_Statement]:
    """The chunk's top-level statements; a comment or a blank line goes with the statement
    before it (with none, it is kept as a "blank" one). No line is left out."""
    out: list[_Statement] = []
    in_comment = False
    for line in source.split("\n"):
        starts = bool(line) and not line[0].isspace() and not line.startswith("--")
        if starts and not in_comment and not any(_is_word(line, w) for w in _CONTINUES):
            out.append(_Statement([line]))
        elif out:
            out[-1].lines.append(line)
        else:
            out.append(_Statement([line], "blank"))
        if in_comment or line.startswith("--[["):
            in_comment = "]]" not in line
    return out


def _is_word(line: str, word: str) -> bool:
    return line.startswith(word) and (len(line) == len(word) or not _is_name_char(line[len(word)]))


def _is_name_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _classify(statements: list[_Statement]) -> set[str]:
    """Sort each statement (see the module's docstring); the chunk's top-level locals."""
    tables = {m.group(1) for s in statements if (m := _MEMBER_FUNCTION.match(s.lines[0]))}
    made_once = {  # names a once block defines (``local f`` before ``do function f() end``)
        m.group(1) or m.group(2)
        for s in statements
        if s.kind == "call" and _defines_only(s)
        for m in map(_BLOCK_FUNCTION.match, s.lines)
        if m
    }
    declared: set[str] = set()
    for s in statements:
        if s.kind != "blank":
            _sort(s, tables, made_once)
        for name in s.names:
            if name in declared:
                raise LibraryError(f"the chunk declares {name!r} twice")
            declared.add(name)
    return declared


def _sort(s: _Statement, tables: set[str], made_once: set[str]) -> None:
    """Set the kind and the declared names of statement ``s``."""
    first = s.lines[0]
    function = _LOCAL_FUNCTION.match(first)
    if function:
        s.kind, s.names = "once", [function.group(1)]
        return
    local = _LOCAL.match(first.split("--")[0].rstrip())
    s.names = [n.strip() for n in local.group(1).split(",")] if local else []
    if first.rstrip().endswith(ONCE_MARK) or _MEMBER_FUNCTION.match(first) or _defines_only(s):
        s.kind = "once"
    elif local and local.group(2) and len(s.names) == 1 and s.names[0] in tables:
        s.kind = "table"
    elif local and not local.group(2) and made_once.issuperset(s.names):
        s.kind = "once"


def _defines_only(s: _Statement) -> bool:
    """A top-level ``do ... end`` whose statements only define functions."""
    lines = [x for x in s.lines if x.strip() and not x.startswith("--")]
    return (
        lines[0].rstrip() == "do"
        and lines[-1].startswith("end")
        and all(_ONCE_BLOCK_LINE.match(x) for x in lines[1:-1])
    )


def _words(lines: list[str]) -> set[str]:
    text = "\n".join(x.split("--")[0] for x in lines)
    return set(_WORD.findall(_STRING.sub("", text)))


def _per_call(s: _Statement) -> list[str]:
    """A per-call statement's text: a declaration becomes an assignment."""
    if s.kind == "table":
        first = s.lines[0].replace(f"local {s.names[0]} =", "__T =", 1)
        return [first, *s.lines[1:], f"__refill({s.names[0]}, __T)"]
    if s.names:
        first = s.lines[0].removeprefix("local ")
        if "=" not in first.split("--")[0]:
            first = f"{', '.join(s.names)} = nil"
        return [first, *s.lines[1:]]
    return s.lines


_HEAD = """\
local KEYS, ARGV, __T
local __G, __GO = {}, {}
local function __refill(t, fresh)
  if not getmetatable(t) then
    local funcs = {}
    for k, v in pairs(t) do
      if type(v) == 'function' then funcs[k] = v end
    end
    setmetatable(t, {__index = funcs})
  end
  for k in pairs(t) do t[k] = nil end
  for k, v in pairs(fresh) do t[k] = v end
end"""

_TAIL = """\
redis.register_function('%s', function(keys, args)
  KEYS, ARGV = keys, args
  for i = 1, #__G do
    local r = __G[i]()
    if r ~= __GO then return r end
  end
end)"""


@dataclass(frozen=True, slots=True)
class Library:
    """A script's library: its name (also its function's), and the code FUNCTION LOAD takes."""

    name: str
    code: str


@cache
def library_source(script: str) -> Library:
    """Script ``script`` (a name of ``SCRIPTS``) as a Redis 7 function library."""
    return build_library(script, load_source(script))


def build_library(script: str, source: str) -> Library:
    """An expanded script's ``source`` as the library of ``script`` (a probe's, a test's)."""
    if "metatable" in _STRING.sub("", source):
        # __refill keeps a table's functions in its metatable: the scripts set none
        raise LibraryError(
            "the chunk uses metatables, which refilled tables keep their functions in"
        )
    statements = _split(source)
    declared = _classify(statements) | {"KEYS", "ARGV", "__T"}
    body: list[str] = []
    group: list[str] = []
    group_names: set[str] = set()
    last_returns = False

    def close_group() -> None:
        nonlocal group, group_names
        if not group:
            return
        body.append("__G[#__G + 1] = function()")
        body.extend(group)
        if not last_returns:
            body.append("return __GO")
        body.append("end")
        group, group_names = [], set()

    for s in statements:
        if s.kind in ("blank", "once"):
            body.extend(s.lines)
            continue
        if s.names:
            body.append("local " + ", ".join(s.names) + (" = {}" if s.kind == "table" else ""))
        text = _per_call(s)
        names = _words(text) & declared
        if group and len(group_names | names) > _NAME_LIMIT:
            close_group()
        group.extend(text)
        group_names |= names
        last_returns = s.lines[0].startswith("return")
    close_group()
    digest = hashlib.sha1("\n".join(body).encode()).hexdigest()[:16]
    name = f"scrapeq_{script}_{digest}"
    code = "\n".join([f"#!lua name={name}", _HEAD, *body, _TAIL % name, ""])
    return Library(name, code)


def function_miss(error: Exception) -> str | None:
    """What an FCALL's error reply says of the functions, beside the script's own errors:
    ``"load"`` the server has no such library yet (a new server, a flush, a failover to a
    node that never had it): load it and call again; ``"eval"`` the server has no functions
    (Redis 6; a cluster client knows it from COMMAND) or this user may not call or load them
    (an ACL): run the script by EVALSHA;
    None: the script's own error, raised as before."""
    text = str(error)
    if text.startswith("Function not found"):
        return "load"
    if isinstance(error, NoPermissionError) or "unknown command" in text:
        return "eval"
    if "FCALL command doesn't exist" in text:  # redis-py's cluster client, from COMMAND
        return "eval"
    return None
