"""Append results to a JSON Lines file, whole lines or nothing (sinks/_lines.py: each line
is one ``os.write`` under ``flock`` on an ``O_APPEND`` descriptor; a write that fails
part-way is cut back to the size the file had before it)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from ._lines import LineFile, append_whole

__all__ = ["JsonlSink", "append_whole"]

#: ``json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)`` with its
#: encoder made once, not once per line (the same text).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
#: Most dicts, lists and tuples :func:`_orjson_writes_the_same` looks into (a cycle, a deep
#: record: json's to write).
_LOOK_INTO_MOST = 1000
_INF = math.inf


def _orjson_writes_the_same(record: dict[str, Any]) -> bool:
    """Whether ``orjson.dumps(record)`` is :data:`_ENCODE`'s text, by the types in it: str,
    int, bool and None, a float that is 0 or at least 1e-4 from it and finite (smaller ones
    orjson writes without an exponent, NaN and infinities as null), dicts of str keys, lists
    and tuples; anything else (a subclass, a datetime, an enum ...) is ``default=str``'s or
    written otherwise by orjson. orjson escapes a str as ``ensure_ascii=False`` does
    (tests/runtime/test_sink_jsonl.py); an int over 64 bits or a lone surrogate makes it
    raise (then json writes the line). Looks into :data:`_LOOK_INTO_MOST` containers."""
    todo: list[Any] = []
    item: Any = record
    budget = _LOOK_INTO_MOST
    while True:
        if type(item) is dict:
            for key in item:
                if type(key) is not str:
                    return False
            item = item.values()
        for value in item:
            kind = type(value)
            if kind is str or kind is int or value is None or kind is bool:
                continue
            if kind is float:
                if value == 0.0 or 1e-4 <= value < _INF or -_INF < value <= -1e-4:
                    continue
                return False
            budget -= 1
            if budget < 0 or (kind is not dict and kind is not list and kind is not tuple):
                return False
            todo.append(value)
        if not todo:
            return True
        item = todo.pop()


def encode_line(record: dict[str, Any]) -> bytes:
    """A record's line, UTF-8: :data:`_ENCODE`'s text, written by orjson when it writes the
    same (:func:`_orjson_writes_the_same`: 2.0 against 4.7 µs for a plain job's line)."""
    if _orjson_writes_the_same(record):
        try:
            return orjson.dumps(record) + b"\n"
        except TypeError:  # an int over 64 bits, a lone surrogate: json's to write (or refuse)
            pass
    return (_ENCODE(record) + "\n").encode("utf-8")


class JsonlSink(LineFile):
    """Append one JSON line per record to ``path`` (created with its folders if missing).

    ``write`` returns once the whole line is in the file (handed to the operating system, so
    a crash of the worker after the ack cannot lose it), or raises ``OSError`` having left
    nothing of it behind (see the module docstring). ``close`` syncs the file to disk; it
    never raises: a failed sync is logged as an error.
    Lines of concurrent writes are joined into one ``os.write`` (sinks/_lines.py): each
    ``write`` still returns once its line is in the file.
    """

    _JOIN = True

    async def write(self, record: dict[str, Any]) -> None:
        line = encode_line(record)
        if self._JOIN and self._regular:  # self.append(line) without its frame: joined
            await self._join(line)
        else:
            await self.append(line)
