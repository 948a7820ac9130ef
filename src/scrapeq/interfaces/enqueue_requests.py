"""``scrapeq enqueue``'s requests: the flags that make every URL a request (``--method``,
``--header``, ``--data``, ``--json-body``, ``--form``, ``--cookie``, ``--meta``) and
``--requests FILE.jsonl``, one request object a line.

``--json-body`` and not ``--json``: ``--json`` already asks every listing command, and
``enqueue`` itself, for JSON output; one flag with two meanings would change what an
existing script gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from scrapeq.engine.model.request import Request
from scrapeq.errors import InvalidRequest
from scrapeq.interfaces.enqueue_file import Item

__all__ = ["RequestFlags", "read_requests"]


@dataclass(frozen=True, slots=True)
class RequestFlags:
    """The request flags of one ``enqueue``, as typed."""

    method: str | None = None
    headers: tuple[str, ...] = ()
    data: str | None = None
    json_body: str | None = None
    form: tuple[str, ...] = ()
    cookies: tuple[str, ...] = ()
    meta: str | None = None

    @property
    def given(self) -> bool:
        """Whether any flag was given (without one, URLs are plain GETs as before)."""
        return any(
            (self.method, self.headers, self.data is not None, self.json_body is not None,
             self.form, self.cookies, self.meta is not None)
        )  # fmt: skip

    def template(self) -> Callable[[str], Request]:
        """Build every URL's request. A body without ``--method`` makes a POST (as curl).

        Raises:
            InvalidRequest: a flag is bad (checked here, once, before any input is read).
        """
        options: dict[str, Any] = {
            "headers": [_pair("--header", h, ":") for h in self.headers],
            "form": [_pair("--form", f, "=") for f in self.form] or None,
            "cookies": [_cookie(c) for c in self.cookies],
            "meta": None if self.meta is None else _json("--meta", self.meta),
        }
        if self.data is not None:
            options["body"] = _data(self.data)
        if self.json_body is not None:
            options["json"] = _json("--json-body", self.json_body)
        has_body = self.data is not None or self.json_body is not None or self.form
        options["method"] = self.method or ("POST" if has_body else "GET")
        Request("https://example.com/", **options)  # bad flags fail here, once

        def make(url: str) -> Request:
            return Request(url, **options)

        return make


def _pair(flag: str, text: str, sep: str) -> tuple[str, str]:
    name, found, value = text.partition(sep)
    if not found or not name.strip():
        example = "'Name: value'" if sep == ":" else "name=value"
        raise InvalidRequest(flag, f"expected {example}, got {text!r:.60}")
    return name.strip(), value.strip() if sep == ":" else value


def _cookie(text: str) -> tuple[str, str]:
    """One ``--cookie name=value``; several in one flag (a Cookie header's form) are refused
    with the way to give them."""
    name, value = _pair("--cookie", text, "=")
    if ";" in value:
        pairs = [p.strip() for p in text.split(";") if p.strip()]
        flags = " ".join(f"--cookie {p!r}" for p in pairs[:3])
        raise InvalidRequest("--cookie", f"one cookie a flag: give {flags}")
    return name, value


def _json(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(flag, f"not JSON: {exc}") from None


def _data(text: str) -> bytes | str:
    """``--data``: ``@PATH`` reads the file's bytes; anything else is the body's text."""
    if not text.startswith("@"):
        return text
    try:
        with open(text[1:], "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidRequest("--data", f"cannot read {text[1:]}: {exc.strerror}") from None


def read_requests(stream: IO[Any], *, first_line: int = 1) -> Iterator[Item]:
    """``--requests``' lines from ``first_line`` on: each a JSON object
    (:meth:`Request.from_fields`); blank lines and ``#`` comments skipped. A line that is not
    one comes as an error item, reported and skipped like an invalid URL of ``--file``."""
    for n, raw in enumerate(stream, 1):
        if n < first_line:
            continue
        if isinstance(raw, str):  # a test's StringIO for stdin
            raw = raw.encode()
        if n == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        where = f"line {n}"
        text = raw.strip()
        if not text or text.startswith(b"#"):
            continue
        try:
            data = json.loads(text)
        except ValueError as exc:  # UnicodeDecodeError included
            yield Item(where, n, InvalidRequest("line", f"not a JSON object: {exc}"))
            continue
        if not isinstance(data, dict):
            yield Item(where, n, InvalidRequest("line", "not a JSON object"))
            continue
        try:
            yield Item(where, n, Request.from_fields(data))
        except InvalidRequest as exc:
            yield Item(where, n, exc)
