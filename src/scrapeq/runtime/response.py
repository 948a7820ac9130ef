"""What a fetch answers: :class:`Response` (the body read in full, with lazy selectors) and
:class:`Download` (a body streamed into a file as sent). Split from :mod:`.fetch`, which
re-exports both."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import parsel

__all__ = ["Download", "Response"]


@dataclass(frozen=True, slots=True)
class Response:
    """A fetched response, body read in full.

    Attributes:
        url: the final URL, after redirects.
        status: the final HTTP status.
        headers: the final response's headers (case-insensitive, read-only).
        body: the (decompressed) body.
        elapsed: seconds the whole fetch took, redirects and body included.
        redirects: how many redirects were followed.
        set_cookies: every ``Set-Cookie`` of every hop, with the URL of the hop that set it
            (``session = sticky`` keeps them: :mod:`.session_jar`); the fetcher itself keeps
            no cookies.

    :meth:`css` and :meth:`xpath` select as Scrapy's responses do (parsel, Scrapy's own
    selector library): the selector is built on first use and kept, so a handler that never
    selects pays nothing (parsel is not even imported).
    """

    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed: float
    redirects: int
    set_cookies: tuple[tuple[str, str], ...] = ()
    _selector: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def selector(self) -> parsel.Selector:
        """A :class:`parsel.Selector` of the body (as HTML, decoded as browsers do), built
        once."""
        if self._selector is None:
            import parsel
            from w3lib.encoding import html_to_unicode

            _, text = html_to_unicode(self.headers.get("Content-Type"), self.body)
            object.__setattr__(self, "_selector", parsel.Selector(text=text, base_url=self.url))
        return self._selector  # type: ignore[no-any-return]

    def css(self, query: str) -> parsel.SelectorList[parsel.Selector]:
        """``response.css("h1::text").get()``, as in Scrapy."""
        return self.selector.css(query)

    def xpath(self, query: str, **variables: Any) -> parsel.SelectorList[parsel.Selector]:
        """``response.xpath("//h1/text()").get()``, as in Scrapy (``$name`` variables)."""
        return self.selector.xpath(query, **variables)

    @property
    def charset(self) -> str | None:
        """The charset the Content-Type header names, or ``None``."""
        content_type = self.headers.get("Content-Type")
        if not content_type:
            return None
        message = Message()
        message["Content-Type"] = content_type
        charset = message.get_content_charset()
        return charset or None

    def text(self, encoding: str | None = None) -> str:
        """The body as text: ``encoding``, else the header's charset, else UTF-8.

        Undecodable bytes are replaced (U+FFFD); an unknown charset falls back to UTF-8.
        """
        chosen = encoding or self.charset or "utf-8"
        try:
            return self.body.decode(chosen, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (UTF-8, -16 or -32, detected by :func:`json.loads`)."""
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class Download:
    """What :meth:`Fetcher.download` wrote: the final URL, status and headers, the body's
    size as sent (``size`` bytes written), whether it was cut at the limit, the seconds the
    whole download took and the redirects followed."""

    url: str
    status: int
    headers: Mapping[str, str]
    size: int
    truncated: bool
    elapsed: float
    redirects: int
