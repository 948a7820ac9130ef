"""``--extract``: a page's fields without a handler.

Two kinds, mixed freely, in the order given (``--extract`` is repeatable):

* the common fields ``title,description,canonical,text``, parsed with selectolax (Lexbor,
  the crawl's link parser: the fastest measured, docs/BENCHMARKS.md);
* named selectors as a Scrapy user writes them: ``price=.price::text`` (CSS with parsel's
  ``::text`` and ``::attr(name)``), ``sku=//@data-sku`` (XPath: it starts with ``/``, ``./``
  or ``(``); ``name=`` gives the first match (null when none), ``name[]=`` every match (a
  list). Run by parsel (Scrapy's selectors) on the response's own selector.

Bodies are decoded as browsers do (w3lib's ``html_to_unicode``). A response that is not HTML
gives every field as null (a list field as ``[]``).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser
from w3lib.encoding import html_to_unicode

from scrapeq.engine.model.job import Job
from scrapeq.errors import ConfigError
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.links import is_html

__all__ = [
    "FIELDS", "extract_fields", "extractor", "field_names", "is_extractor", "missing",
    "parse_fields",
]  # fmt: skip

#: The common fields ``--extract`` gives by name, in this order.
FIELDS: Final = ("title", "description", "canonical", "text")
_INVISIBLE: Final = "script, style, noscript, template"
_SPACES = re.compile(r"\s+")
#: ``name=SELECTOR`` or ``name[]=SELECTOR``: a result key, then the selector.
_NAMED = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]{0,63})(\[\])?\s*=(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Named:
    """One named selector: its key, the selector, XPath or CSS, all matches or the first."""

    name: str
    query: str
    xpath: bool
    many: bool

    def select(self, response: Response) -> Any:
        found = response.xpath(self.query) if self.xpath else response.css(self.query)
        if self.many:
            return [_strip(v) for v in found.getall()]
        return _strip(found.get())


def _strip(value: str | None) -> str | None:
    return value.strip() if isinstance(value, str) else value


def parse_fields(spec: str | Sequence[str]) -> tuple[str, ...]:
    """The fields of ``--extract`` (one value, or each of a repeated flag), checked, each
    once, in the order given: common field names, and ``name=SELECTOR`` / ``name[]=SELECTOR``
    with the selector compiled now. ConfigError (one line) else."""
    texts = [spec] if isinstance(spec, str) else list(spec)
    fields: list[str] = []
    names: set[str] = set()
    for text in texts:
        named = _named(text)
        keys = [named.name] if named is not None else _common(text)
        for key in keys:
            if key in names:
                raise ConfigError("extract", f"field {key!r} given twice")
            names.add(key)
        if named is not None:
            fields.append(text.strip())
        else:
            fields.extend(keys)
    if not fields:
        raise ConfigError("extract", f"no field: choose from {','.join(FIELDS)} or name=SELECTOR")
    return tuple(fields)


def field_names(fields: Sequence[str]) -> tuple[str, ...]:
    """The result's keys for ``fields`` (as :func:`parse_fields` gives them), in their order:
    a common field's name, a named selector's name (``price`` of ``price=.price::text``)."""
    names = []
    for field in fields:
        match = _NAMED.match(field) if field not in FIELDS else None
        names.append(match.group(1) if match is not None else field)
    return tuple(names)


def _common(text: str) -> list[str]:
    fields = list(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise ConfigError(
            "extract",
            f"unknown field {unknown[0][:40]!r}: choose from {','.join(FIELDS)}, "
            "or name a selector: price=.price::text, sku=//@data-sku, tags[]=.tag::text",
        )
    return fields


def _named(text: str) -> _Named | None:
    """``text`` as a named selector, compiled (None: not of that form)."""
    match = _NAMED.match(text)
    if match is None:
        return None
    name, many, query = match.group(1), bool(match.group(2)), match.group(3).strip()
    if not query:
        raise ConfigError("extract", f"{name}=: no selector")
    xpath = query.startswith(("/", "./", "("))
    import parsel  # only a crawl with named selectors pays for it

    try:
        probe = parsel.Selector(text="<html></html>")
        probe.xpath(query) if xpath else probe.css(query)
    except Exception as exc:  # cssselect's and lxml's syntax errors, as parsel raises them
        kind = "an XPath" if xpath else "a CSS"
        raise ConfigError("extract", f"{name}: not {kind} selector: {exc}"[:200]) from None
    return _Named(name, query, xpath, many)


def extract_fields(response: Response, fields: Sequence[str] = FIELDS) -> dict[str, Any]:
    """``{field: value}`` in the order of ``fields`` (as :func:`parse_fields` gives them); a
    field the page does not have is None, a list field ``[]``; a page not HTML gives those."""
    named = {f: _named(f) for f in fields if f not in FIELDS}
    return _extract(response, fields, named)


def _extract(
    response: Response, fields: Sequence[str], named: dict[str, _Named | None]
) -> dict[str, Any]:
    html = is_html(response)
    out: dict[str, Any] = {}
    tree: LexborHTMLParser | None = None
    for f in fields:
        selector = named.get(f)
        if selector is not None:
            empty: Any = [] if selector.many else None
            out[selector.name] = selector.select(response) if html else empty
            continue
        if not html:
            out[f] = None
            continue
        if tree is None:
            _, text = html_to_unicode(response.headers.get("Content-Type"), response.body)
            tree = LexborHTMLParser(text)
        out[f] = _GETTERS[f](tree, response.url)
    return out


def extractor(fields: Sequence[str]) -> Callable[[Job, Response], dict[str, Any]]:
    """A handler giving :func:`extract_fields` of each page (selectors compiled once)."""
    named = {f: _named(f) for f in fields if f not in FIELDS}

    def extract(job: Job, response: Response) -> dict[str, Any]:
        return _extract(response, fields, named)

    _EXTRACTORS.add(extract)
    return extract


#: The handlers :func:`extractor` made: fetcher ``auto`` compares their fields raw and
#: rendered (runtime/auto_fetch.py).
_EXTRACTORS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def is_extractor(handler: object) -> bool:
    """Whether ``handler`` is an ``--extract`` handler (made by :func:`extractor`)."""
    try:
        return handler in _EXTRACTORS
    except TypeError:  # not weak-referenceable: not one of ours
        return False


def missing(result: object) -> int:
    """How many fields of an extractor's result found nothing (None, ``[]``, ``""``)."""
    if not isinstance(result, dict):
        return 0
    return sum(1 for value in result.values() if value is None or value == [] or value == "")


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
