"""``--extract title,description,canonical,text``: the common fields of a page without a
handler.

Parsed with selectolax (Lexbor, the crawl's link parser: the fastest measured,
docs/BENCHMARKS.md), decoded as browsers do (w3lib's ``html_to_unicode``). A response that is
not HTML gives every field as null.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser
from w3lib.encoding import html_to_unicode

from scrapeq.engine.job import Job
from scrapeq.errors import ConfigError
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.links import is_html

__all__ = ["FIELDS", "extract_fields", "extractor", "parse_fields"]

#: What ``--extract`` can give, in this order.
FIELDS: Final = ("title", "description", "canonical", "text")
_INVISIBLE: Final = "script, style, noscript, template"
_SPACES = re.compile(r"\s+")


def parse_fields(text: str) -> tuple[str, ...]:
    """The fields of ``--extract a,b`` (each once, in the order given); ConfigError else."""
    fields = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in fields if f not in FIELDS]
    if not fields or unknown:
        shown = unknown[0][:40] if unknown else text[:40]
        raise ConfigError("extract", f"unknown field {shown!r}: choose from {','.join(FIELDS)}")
    return fields


def extract_fields(response: Response, fields: tuple[str, ...] = FIELDS) -> dict[str, Any]:
    """``{field: value}``; a field the page does not have (or a page not HTML) is None."""
    if not is_html(response):
        return dict.fromkeys(fields)
    _, text = html_to_unicode(response.headers.get("Content-Type"), response.body)
    tree = LexborHTMLParser(text)
    return {f: _GETTERS[f](tree, response.url) for f in fields}


def extractor(fields: tuple[str, ...]) -> Callable[[Job, Response], dict[str, Any]]:
    """A handler giving :func:`extract_fields` of each page."""

    def extract(job: Job, response: Response) -> dict[str, Any]:
        return extract_fields(response, fields)

    return extract


def _clean(text: str | None) -> str | None:
    if text is None:
        return None
    return _SPACES.sub(" ", text).strip() or None


def _title(tree: LexborHTMLParser, url: str) -> str | None:
    node = tree.css_first("title")
    return _clean(node.text()) if node is not None else None


def _description(tree: LexborHTMLParser, url: str) -> str | None:
    for node in tree.css("meta[name]"):
        if (node.attributes.get("name") or "").strip().lower() == "description":
            return _clean(node.attributes.get("content"))
    return None


def _canonical(tree: LexborHTMLParser, url: str) -> str | None:
    for node in tree.css("link[rel][href]"):
        rels = (node.attributes.get("rel") or "").lower().split()
        href = (node.attributes.get("href") or "").strip()
        if "canonical" in rels and href:
            return urljoin(url, href)
    return None


def _text(tree: LexborHTMLParser, url: str) -> str | None:
    body = tree.body
    if body is None:
        return None
    for node in body.css(_INVISIBLE):
        node.decompose()
    return _clean(body.text(separator=" "))


_GETTERS: Final[dict[str, Callable[[LexborHTMLParser, str], str | None]]] = {
    "title": _title,
    "description": _description,
    "canonical": _canonical,
    "text": _text,
}
