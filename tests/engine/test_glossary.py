"""docs/GLOSSARY.md lists every short name scrapeq stores: each hash field a Lua script writes
under a short literal name (HSET, HMSET, HSETNX, HINCRBY, the tallies and stat counters), each
field of a job's compact form, each adaptive field, each key of a queue (issue 39)."""

from __future__ import annotations

import re
from pathlib import Path

from scrapeq.engine.lua.wire import ADAPTIVE_FIELDS

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
LUA = ROOT / "src/scrapeq/engine/lua"
GLOSSARY = ROOT / "docs/GLOSSARY.md"

#: A write of a hash field: the field is every other argument after the key.
HASH_WRITE = re.compile(r"redis\.call\(\s*'(?:HSET|HMSET|HSETNX|HINCRBY|HINCRBYFLOAT)'\s*,")
#: Counters written at the end of a call (tally.lua) or by stat (events.lua: K.STATS).
COUNTER = re.compile(r"\b(?:TALLY\.addf?\(\s*[^,()]+(?:\([^()]*\))?\s*,|stat\()\s*'([^']*)'")
#: A short stored name: a word of at most six letters, or such a prefix (``u:`` .. id).
SHORT = re.compile(r"[a-z_0-9]{1,6}:?")


def _arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose '(' is just before ``start`` (strings and
    comments skipped over whole)."""
    depth, i, args, current = 1, start, [], []
    while True:
        c = text[i]
        if c in "'\"":
            end = text.index(c, i + 1)
            while text[end - 1] == "\\":
                end = text.index(c, end + 1)
            current.append(text[i : end + 1])
            i = end + 1
            continue
        if text.startswith("--", i):
            i = text.index("\n", i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                args.append("".join(current))
                return args
        if c == "," and depth == 1:
            args.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1


def _leading_literal(arg: str) -> str | None:
    """The literal an argument starts with (``'u:' .. id`` -> ``u:``); None when it starts
    with a name (``p .. 'cur'``: a suffix of a name made elsewhere) or is no literal."""
    match = re.match(r"\s*'([^']*)'", arg)
    return match.group(1) if match else None


def written_fields() -> dict[str, set[str]]:
    """Short hash fields written by the Lua scripts -> the files that write them."""
    found: dict[str, set[str]] = {}
    for path in sorted(LUA.rglob("*.lua")):
        text = path.read_text(encoding="utf-8")
        names = []
        for match in HASH_WRITE.finditer(text):
            for arg in _arguments(text, match.end())[1::2]:  # field, value, field, value ...
                if "unpack(" in arg:
                    break
                names.append(_leading_literal(arg))
        names += [m.group(1) for m in COUNTER.finditer(text)]
        for name in names:
            if name and SHORT.fullmatch(name):
                found.setdefault(name, set()).add(str(path.relative_to(LUA)))
    return found


def listed(name: str, text: str) -> bool:
    """``name`` appears as a code span of the glossary (a prefix as ``u:<id>`` too)."""
    return f"`{name}`" in text or (name.endswith(":") and f"`{name}<" in text)


def test_every_short_field_a_script_writes_is_in_the_glossary() -> None:
    fields = written_fields()
    # the scan finds the fields it must: it cannot pass by finding nothing
    assert {"alim", "win", "probe", "u:", "r:", "y:", "uq", "schema", "lat"} <= set(fields)
    assert len(fields) > 40
    text = GLOSSARY.read_text(encoding="utf-8")
    missing = {name: sorted(where) for name, where in fields.items() if not listed(name, text)}
    assert not missing, f"docs/GLOSSARY.md lacks these stored fields: {missing}"


def test_the_glossary_lists_every_field_of_a_job_and_every_adaptive_field() -> None:
    codec = (LUA / "includes/codec.lua").read_text(encoding="utf-8")
    table = codec.split("local SHORT = {", 1)[1].split("}", 1)[0]
    short = dict(re.findall(r"(\w+) = '(\w+)'", table))
    assert len(short) > 30 and short["url"] == "u"
    text = GLOSSARY.read_text(encoding="utf-8")
    for long_name, name in short.items():
        assert re.search(rf"\| `{name}` \| {long_name}\b", text), (name, long_name)
    for name in ADAPTIVE_FIELDS.values():
        assert f"`{name}`" in text, name


def test_the_glossary_lists_every_key_of_a_queue() -> None:
    keys = (LUA / "includes/keys.lua").read_text(encoding="utf-8")
    names = re.findall(r"P \.\. '([^']+)'", keys)
    assert len(names) > 25
    text = GLOSSARY.read_text(encoding="utf-8")
    missing = [n for n in names if f"`{n}`" not in text and f"`{n}<" not in text]
    assert not missing, f"docs/GLOSSARY.md lacks these keys: {missing}"
