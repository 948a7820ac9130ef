"""Credentials hidden for display: a URL's user and password, libpq's ``password=`` values
(issue 36). Split from :mod:`scrapeq.engine.model.urls`, which re-exports :func:`redact_url` and
:func:`redact_text`; every listing, log and stored error text goes through them."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["REDACTED", "redact_text", "redact_url"]

REDACTED: Final = "***"
"""What a credential (a URL's user and password, a ``password`` parameter) is shown as."""

# A URL-like token in a text: a scheme, "://", then anything up to whitespace, a double quote
# or an angle bracket (a single quote may be part of a password: sub-delims).
_URL_TOKEN = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s\"<>]*)")
# libpq's password in a URI query (``?password=...``) or a keyword/value string
# (``password=...``, ``password = 'a b'``), and ``sslpassword``: the value up to whitespace,
# "&" or a quote; a quoted value whole (libpq's backslash escapes included).
_PASSWORD_PARAM = re.compile(
    r"(?i)(?<![A-Za-z0-9_])((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&\"'<>]*)"
)


def redact_url(url: str) -> str:
    """``url`` with its credentials replaced by ``***``, for display.

    The user and the password of the user info are both credentials (a vendor's API key is
    often the user: ``http://KEY:@proxy``, ``https://TOKEN@host``): ``https://user:secret@host/p``
    gives ``https://***:***@host/p``, ``http://TOKEN@host`` gives ``http://***@host``. The value
    of a ``password`` (or ``sslpassword``) parameter is ``***`` too (libpq's
    ``postgresql://u@h/db?password=...``). A user info that hides a ``#``, ``?`` or ``/`` (not
    one host to a URL parser: ``http://carol:12#pw@host``) is redacted up to its ``@``. Used
    by every listing (CLI, dashboard, results lines, error lines); a URL without credentials
    is returned unchanged.
    """
    return redact_text(url)


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it, and every libpq ``password=``
    value, replaced by ``***`` (:func:`redact_url`)."""
    if "@" in text:
        text = _URL_TOKEN.sub(_redact_token, text)
    if "assword" in text or "ASSWORD" in text:
        text = _PASSWORD_PARAM.sub(rf"\1{REDACTED}", text)
    return text


def _redact_token(match: re.Match[str]) -> str:
    """One URL-like token with its user info (if any) masked."""
    scheme, rest = match.group(1), match.group(2)
    at = _userinfo_end(rest)
    if at <= 0:
        return match.group(0)
    return scheme + _mask_userinfo(rest[:at]) + rest[at:]


def _userinfo_end(rest: str) -> int:
    """Where the user info of ``rest`` (a URL after ``scheme://``) ends: the index of its
    ``@``, or -1 for none.

    The authority ends at the first ``/``, ``?`` or ``#``; its last ``@`` ends the user info.
    With no ``@`` there, an ``@`` soon after may still end a user info that hides one of those
    characters (``carol:12#pw@host``, ``carol:pw/x@host``): taken as one when no other ``/``
    comes before it and, for a ``/``, when the authority cannot be ``host:port``.
    """
    end = len(rest)
    for char in "/?#":
        found = rest.find(char)
        if found != -1 and found < end:
            end = found
    authority = rest[:end]
    at = authority.rfind("@")
    if at != -1 or end == len(rest):
        return at
    at = rest.find("@", end + 1)
    if at == -1 or "/" in rest[end + 1 : at]:
        return -1
    if rest[end] == "/":
        port = authority.rpartition(":")[2] if ":" in authority else ""
        if authority.startswith("[") or port.isdigit() or ":" not in authority:
            return -1
    return at


def _mask_userinfo(userinfo: str) -> str:
    """``user:password`` -> ``***:***``; ``user`` -> ``***``; ``:password`` -> ``:***``."""
    user, colon, _ = userinfo.partition(":")
    return (REDACTED if user else "") + (f":{REDACTED}" if colon else "")
