"""Target URLs: validation and normalisation at enqueue, the domain key, the fingerprint.

Everything here is pure (no DNS, no I/O). :func:`parse_target` is the one gate a URL passes
before it becomes a job; it returns the normalised URL and the *domain* (``host[:port]``,
INTERFACE.md) every per-domain structure is keyed by.

A job keeps its URL as :func:`parse_target` normalised it, to fetch exactly what was asked.
De-duplication goes further: :func:`canonical_url` is the form two spellings of one page
share (dot segments resolved, percent-encoding and query order normalised ...), and
:func:`fingerprint` and :func:`fingerprint64` hash it. A crawl's scope is decided by
:func:`in_scope` (same domain key, same registrable domain by the Public Suffix List, or any)
and :class:`UrlFilter` (allow and deny regular expressions).

Private-address refusal covers what can be decided from the text alone: ``localhost`` names
and literal IP addresses in every spelling a resolver accepts (``127.1``, ``2130706433``,
``0x7f000001``, ``0177.0.0.1``, ``[::ffff:127.0.0.1]`` ...). A hostname that merely resolves
to a private address is the fetch layer's to refuse, with :func:`is_private_address` on the
resolved addresses.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final
from urllib.parse import SplitResult, urlsplit

from scrapeq.errors import ConfigError, InvalidURL

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

__all__ = [
    "MAX_URL_BYTES",
    "POLITENESS",
    "SCOPES",
    "TargetURL",
    "UrlFilter",
    "canonical_url",
    "domain_of",
    "fingerprint",
    "fingerprint64",
    "in_scope",
    "is_private_address",
    "is_private_host",
    "is_public_suffix",
    "parse_target",
    "politeness_key",
    "redact_text",
    "redact_url",
    "registrable_domain",
]

MAX_URL_BYTES = 8192
"""Longest URL accepted, in bytes of its UTF-8 encoding."""

_DEFAULT_PORTS = {"http": "80", "https": "443"}
_MAX_HOST_CHARS = 253

# C0 controls, space, DEL, C1 controls and any other Unicode whitespace.
_BAD_CHARS = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+))*")
# RFC 3986 userinfo: unreserved, pct-encoded, sub-delims and ":". Anything else ("@", "\",
# brackets ...) is where URL parsers disagree about the host, so it is refused.
_USERINFO = re.compile(r"[A-Za-z0-9\-._~%!$&'()*+,;=:]*")
_SHARED_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPAT = ipaddress.IPv6Network("::/96")

_PRIVATE = "private address not allowed (set allow_private, or pass --allow-private)"
_INVALID_HOST = "invalid host"

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SCOPES: Final = ("host", "domain", "any")
"""The scopes :func:`in_scope` knows, narrowest first."""

# RFC 3986 unreserved characters: their percent-encoded form means the same (section 6.2.2.2).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")


@dataclass(frozen=True, slots=True)
class TargetURL:
    """A URL accepted for fetching.

    Attributes:
        url: the normalised URL (lower-case scheme and host, punycode, no default port,
            no fragment, ``/`` for an empty path).
        domain: ``host`` or ``host:port`` when the URL names a non-default port; never
            contains userinfo. IPv6 hosts keep their brackets (``[::1]:8080``).
    """

    url: str
    domain: str


def parse_target(url: str, *, allow_private: bool = False) -> TargetURL:
    """Validate and normalise a URL to fetch.

    Args:
        url: the URL as given by the user; surrounding whitespace is ignored.
        allow_private: accept ``localhost`` names and loopback, private, link-local,
            multicast, reserved and unspecified IP literals.

    Returns:
        The normalised URL and its domain.

    Raises:
        InvalidURL: the URL is refused; ``reason`` says why.
    """
    text = url.strip()
    _check_text(url, text)
    parts = _split(url, text)
    userinfo, raw_host, raw_port = _split_authority(url, parts.netloc)
    host = _normalise_host(url, raw_host)
    port = _normalise_port(url, raw_port, parts.scheme)
    if not allow_private and is_private_host(host):
        raise InvalidURL(url, _PRIVATE)
    domain = f"{host}:{port}" if port else host
    authority = f"{userinfo}@{domain}" if userinfo else domain
    normalised = f"{parts.scheme}://{authority}{parts.path or '/'}"
    if parts.query:
        normalised += f"?{parts.query}"
    return TargetURL(url=normalised, domain=domain)


# redaction lives in .redact; these names stay importable from here
from scrapeq.engine.model.redact import REDACTED as REDACTED  # noqa: E402
from scrapeq.engine.model.redact import redact_text as redact_text  # noqa: E402
from scrapeq.engine.model.redact import redact_url as redact_url  # noqa: E402


def domain_of(url: str) -> str:
    """Return the domain (``host[:port]``) of a URL, private hosts included.

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    return parse_target(url, allow_private=True).domain


def canonical_url(url: str, *, keep_fragments: bool = False, keep_blank_values: bool = True) -> str:
    """Return the canonical form of a URL: the one all its equivalent spellings share.

    :func:`parse_target` (allowing private hosts) normalises the scheme, the host (lower
    case, punycode, no trailing dot, IPv4 in dotted decimal, IPv6 compressed) and the port
    (a default one dropped); then w3lib's ``canonicalize_url`` (what Scrapy uses) resolves
    dot segments (``/a/../b/./c`` -> ``/b/c``), decodes percent-encoded unreserved
    characters (``%7Euser`` -> ``~user``), upper-cases the other escapes, percent-encodes
    non-ASCII characters as UTF-8, sorts the query by name then value, writes a space in
    the query as ``+`` (``a%20b`` and ``a+b`` are one) and ``?a`` as ``?a=``. A kept
    fragment has its unreserved escapes decoded too.

    The canonical form is for comparing and hashing only: a job fetches its URL as given
    (normalised by :func:`parse_target`), since a server may tell ``?a=1&b=2`` from
    ``?b=2&a=1``.

    Args:
        url: an http(s) URL, absolute.
        keep_fragments: keep the ``#fragment`` (default: drop it; it never reaches the
            server, but client-side routes like ``#/item/1`` may name distinct pages).
        keep_blank_values: keep query parameters with an empty value (``?a=&b=1``); when
            false, ``?a=&b=1`` and ``?b=1`` are one URL.

    Returns:
        An ASCII URL.

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    text = parse_target(url, allow_private=True).url
    if keep_fragments:
        fragment = urlsplit(url.strip()).fragment
        if fragment:
            text += "#" + _PERCENT.sub(_normalise_escape, fragment)
    from w3lib.url import canonicalize_url  # on first use: w3lib takes ~15 ms to import

    return canonicalize_url(
        text, keep_blank_values=keep_blank_values, keep_fragments=keep_fragments
    )


def fingerprint(url: str, *, keep_fragments: bool = False, keep_blank_values: bool = True) -> str:
    """Return 16 hex characters identifying a URL up to canonicalisation, for de-duplication.

    The first 8 bytes of the SHA-1 of :func:`canonical_url`, in hex: equivalent spellings
    (``HTTP://Example.com:80/a/../b?y=2&x=1#f`` and ``http://example.com/b?x=1&y=2``) share a
    fingerprint. The keyword arguments are :func:`canonical_url`'s.

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    canonical = canonical_url(
        url, keep_fragments=keep_fragments, keep_blank_values=keep_blank_values
    )
    return _digest8(canonical).hex()


def fingerprint64(url: str, *, keep_fragments: bool = False, keep_blank_values: bool = True) -> int:
    """Return :func:`fingerprint` as a signed 64-bit integer, for a compact seen-set.

    ``int.from_bytes(sha1(canonical_url(url))[:8], "big", signed=True)``: in
    ``[-2**63, 2**63)``, stable across processes, machines and Python versions (no
    ``hash()``), and ``fingerprint64(u) == int.from_bytes(bytes.fromhex(fingerprint(u)),
    "big", signed=True)``. Two distinct URLs share one with probability about
    ``n**2 / 2**65`` among ``n`` URLs (one in 37 million for a million URLs).

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    canonical = canonical_url(
        url, keep_fragments=keep_fragments, keep_blank_values=keep_blank_values
    )
    return int.from_bytes(_digest8(canonical), "big", signed=True)


def registrable_domain(host: str) -> str:
    """Return the registrable domain of a host by the Public Suffix List ("eTLD+1").

    ``a.example.co.uk`` -> ``example.co.uk``; ``foo.github.io`` -> ``foo.github.io`` (the
    list's private section counts: ``github.io`` is a suffix under which each name is a
    separate owner). The list is the snapshot bundled with the ``publicsuffixlist`` package
    (no network; upgrade the package for a newer list), loaded on first use (about 50 ms).

    Args:
        host: a host name (any case, IDN or punycode, a trailing dot allowed) or an IP
            literal (IPv6 with or without brackets); a scrapeq domain key ``host:port`` is
            accepted too, its port ignored.

    Returns:
        The registrable domain in punycode; the host itself (normalised as
        :func:`parse_target` writes hosts) when it is an IP address, ``localhost``, a
        single label or itself a public suffix (``co.uk``).

    Raises:
        InvalidURL: the host is not a valid host name or address.
    """
    return _site(_normalise_host(host, _strip_port(host.strip())))


def is_public_suffix(name: str) -> bool:
    """Whether a host name (lower case, punycode) is itself a public suffix by the Public
    Suffix List (``co.uk``, ``github.io``; a single label such as ``test`` too): a name under
    which each name is a separate owner, so no cookie may be set for it
    (:mod:`scrapeq.runtime.session_jar`). The list is :func:`registrable_domain`'s."""
    return bool(_suffix_list().is_public(name.rstrip(".")))


#: What the per-domain limits, delays and breakers apply to (setting ``politeness``).
POLITENESS = ("host", "domain", "ip")


def politeness_key(domain: str, politeness: str) -> str:
    """The key a job's politeness and breaker apply to, from its domain (``host[:port]``).

    ``host``: the domain itself. ``domain``: its registrable domain (:func:`registrable_domain`)
    with the port kept, so ``www.shop.co.uk`` and ``img.shop.co.uk`` share ``shop.co.uk``
    while ``a.blogspot.com`` and ``b.blogspot.com`` (a public suffix's separate owners) do not,
    and two servers on two ports of one host stay two.

    Raises:
        ConfigError: an unknown ``politeness``.
    """
    if politeness in ("host", "ip"):  # ip: the host until a fetch learns its address
        return domain
    if politeness != "domain":
        raise ConfigError("politeness", f"expected {', '.join(POLITENESS)}, got {politeness!r}")
    host = _strip_port(domain)
    port = domain[len(host) :] if domain.startswith(host) else ""
    return registrable_domain(host) + port


def in_scope(url: str, seed_or_parent_url: str, scope: str) -> bool:
    """Tell whether a link is within a crawl's scope, judged from its seed or parent page.

    Scopes:
        * ``host``: the same scrapeq domain key, ``host[:port]`` (:func:`domain_of`):
          ``www.example.com`` is not ``example.com``, and ``127.0.0.1:8001`` is not
          ``127.0.0.1:8002``. The scheme does not count.
        * ``domain``: the same :func:`registrable_domain`, ports ignored:
          ``a.example.co.uk`` and ``b.example.co.uk`` are in one scope, ``example.co.uk``
          and ``other.co.uk`` are not; an IP address is its own domain.
        * ``any``: every valid http(s) URL.

    Args:
        url: the candidate link.
        seed_or_parent_url: the URL it is judged against.
        scope: one of :data:`SCOPES`.

    Returns:
        False for an invalid ``url`` (never raises on it).

    Raises:
        ConfigError: ``scope`` is not one of :data:`SCOPES` (named ``scope``).
        InvalidURL: ``seed_or_parent_url`` is not a valid http(s) URL.
    """
    if scope not in SCOPES:
        raise ConfigError("scope", f"expected one of {', '.join(SCOPES)}, got {scope!r}")
    reference = _reference_domain(seed_or_parent_url)
    try:
        candidate = domain_of(url)
    except InvalidURL:
        return False
    if scope == "host":
        return candidate == reference
    if scope == "domain":
        return _site(candidate) == _site(reference)
    return True


class UrlFilter:
    """Allow and deny URLs by regular expressions; deny wins.

    A URL is allowed when no ``deny`` pattern matches it and, if any ``allow`` pattern is
    given, at least one matches it. Patterns are Python regular expressions searched
    anywhere in the URL (``re.search``: anchor with ``^`` and ``$``), case-sensitively
    unless they say ``(?i)``. They are matched against the URL as given: pass the form the
    crawl enqueues (or :func:`canonical_url`'s, to match one spelling).

    Args:
        allow: patterns of which one must match; empty: every URL not denied.
        deny: patterns of which none may match.

    Raises:
        ConfigError: a pattern does not compile, or a bare string was given instead of a
            list of patterns (named ``allow`` or ``deny``).
    """

    __slots__ = ("_allow", "_deny")

    def __init__(self, allow: Sequence[str] = (), deny: Sequence[str] = ()) -> None:
        self._allow = _compile_patterns("allow", allow)
        self._deny = _compile_patterns("deny", deny)

    def allows(self, url: str) -> bool:
        """Tell whether ``url`` passes the filter."""
        if any(pattern.search(url) for pattern in self._deny):
            return False
        return not self._allow or any(pattern.search(url) for pattern in self._allow)

    def __repr__(self) -> str:
        allow = [p.pattern for p in self._allow]
        deny = [p.pattern for p in self._deny]
        return f"UrlFilter(allow={allow!r}, deny={deny!r})"


def is_private_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Tell whether an address must not be fetched unless ``allow_private`` is set.

    True for loopback, private, link-local, site-local, multicast, reserved and unspecified
    addresses and the shared address space 100.64.0.0/10, and for IPv6 addresses wrapping
    such an IPv4 address (IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64).

    Args:
        ip: a literal or resolved address.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _is_private_ip(ip.ipv4_mapped)
        embedded = _embedded_ipv4(ip)
        if embedded is not None and _is_private_ip(embedded):
            return True
    return _is_private_ip(ip)


def is_private_host(host: str) -> bool:
    """Tell whether a host names a private address without asking DNS.

    Args:
        host: a host without port: a name (``localhost``, ``a.localhost``), an IPv4
            literal in any spelling ``inet_aton`` accepts (``127.1``, ``0x7f000001``), or
            an IPv6 literal with or without brackets.

    Returns:
        True for ``localhost`` and ``*.localhost`` and for literal addresses
        :func:`is_private_address` refuses; False for any other name.
    """
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    ip = _literal_ip(name)
    if ip is not None:
        return is_private_address(ip)
    return name == "localhost" or name.endswith(".localhost")


def _digest8(text: str) -> bytes:
    """The first 8 bytes of the SHA-1 of ``text`` (UTF-8)."""
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).digest()[:8]


def _normalise_escape(match: re.Match[str]) -> str:
    """``%7e`` -> ``~`` for an unreserved character, ``%2f`` -> ``%2F`` otherwise."""
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else match.group(0).upper()


@functools.cache
def _suffix_list() -> PublicSuffixList:
    from publicsuffixlist import PublicSuffixList  # on first use, as its list

    return PublicSuffixList()  # the bundled snapshot, ICANN and private sections


@functools.lru_cache(maxsize=4096)
def _registrable(name: str) -> str:
    """eTLD+1 of a normalised host name, or the name itself when it has none."""
    found = _suffix_list().privatesuffix(name)
    return found if isinstance(found, str) else name


@functools.lru_cache(maxsize=1024)
def _reference_domain(url: str) -> str:
    """:func:`domain_of`, cached: a crawl judges every link of a page against one URL."""
    return domain_of(url)


@functools.lru_cache(maxsize=4096)
def _site(domain: str) -> str:
    """The registrable domain of a domain key (``host[:port]``, already normalised)."""
    if domain.startswith("["):
        return domain[: domain.index("]") + 1]
    host = domain.partition(":")[0]
    return host if _NUMERIC_HOST.fullmatch(host) else _registrable(host)


def _strip_port(host: str) -> str:
    """``host`` without a ``:port`` suffix; an unbracketed IPv6 literal gets brackets."""
    if host.startswith("["):
        if "]" not in host:
            raise InvalidURL(host, _INVALID_HOST)
        return host.partition("]")[0] + "]"
    if host.count(":") > 1:
        return f"[{host}]"
    return host.partition(":")[0]


def _compile_patterns(name: str, patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    if isinstance(patterns, str):
        raise ConfigError(name, f"expected a list of patterns, got the string {patterns!r}")
    compiled: list[re.Pattern[str]] = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except (re.error, TypeError) as exc:
            raise ConfigError(name, f"invalid pattern {pattern!r}: {exc}") from None
    return tuple(compiled)


def _check_text(url: str, text: str) -> None:
    """Refuse empty, over-long and whitespace- or control-character-bearing URLs."""
    if not text:
        raise InvalidURL(url, "empty URL")
    if _BAD_CHARS.search(text):
        raise InvalidURL(url, "contains whitespace or control characters")
    if _SURROGATE.search(text):
        raise InvalidURL(url, "contains invalid Unicode (lone surrogate)")
    if len(text.encode("utf-8")) > MAX_URL_BYTES:
        raise InvalidURL(url, "longer than 8 KiB")


#: ``host:port`` with no scheme, which urlsplit reads as the scheme ``host``.
_HOST_PORT = re.compile(r"^[^:/?#]+:[0-9]+(?:[/?#]|$)")


def _split(url: str, text: str) -> SplitResult:
    """Split ``text``; require an http(s) scheme and a non-empty authority."""
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # bad brackets, NFKC tricks in the netloc
        raise InvalidURL(url, _INVALID_HOST) from exc
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        if not scheme or _HOST_PORT.match(text):  # example.com/p, 127.0.0.1:8001/, host:80
            raise InvalidURL(url, "no scheme: add http:// or https://")
        raise InvalidURL(url, f"unsupported scheme {scheme!r} (http and https only)")
    if not parts.netloc:
        raise InvalidURL(url, "no host")
    return parts._replace(scheme=scheme)


def _split_authority(url: str, netloc: str) -> tuple[str, str, str]:
    """Split a netloc into (userinfo, host, port); missing parts are empty strings."""
    userinfo, _, hostport = netloc.rpartition("@")
    if not _USERINFO.fullmatch(userinfo):
        raise InvalidURL(url, "invalid userinfo")
    if hostport.startswith("["):
        host, bracket, rest = hostport.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise InvalidURL(url, _INVALID_HOST)
        return userinfo, host + bracket, rest[1:]
    host, colon, port = hostport.rpartition(":")
    if not colon:
        return userinfo, hostport, ""
    return userinfo, host, port


def _normalise_host(url: str, host: str) -> str:
    """Return the canonical host: bracketed compressed IPv6, dotted IPv4, or a name."""
    if not host:
        raise InvalidURL(url, "no host")
    if host.startswith("["):
        return _normalise_ipv6(url, host[1:-1])
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]
    if len(name) > _MAX_HOST_CHARS:
        raise InvalidURL(url, _INVALID_HOST)
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii").lower()
        except UnicodeError as exc:
            raise InvalidURL(url, _INVALID_HOST) from exc
    if _NUMERIC_HOST.fullmatch(name):
        ipv4 = _legacy_ipv4(name)
        if ipv4 is None:
            raise InvalidURL(url, _INVALID_HOST)
        return str(ipv4)
    if len(name) > _MAX_HOST_CHARS or not all(map(_LABEL.fullmatch, name.split("."))):
        raise InvalidURL(url, _INVALID_HOST)
    return name


def _normalise_ipv6(url: str, literal: str) -> str:
    """Return ``[compressed]`` for an IPv6 literal; zone ids are refused."""
    if "%" in literal:
        raise InvalidURL(url, _INVALID_HOST)
    try:
        ip = ipaddress.IPv6Address(literal)
    except ValueError as exc:
        raise InvalidURL(url, _INVALID_HOST) from exc
    return f"[{ip.compressed}]"


def _normalise_port(url: str, port: str, scheme: str) -> str:
    """Return the port as decimal text, or ``""`` when absent or the scheme's default."""
    if not port:
        return ""
    if not (port.isascii() and port.isdigit() and len(port) <= 5):
        raise InvalidURL(url, "invalid port")
    number = int(port)
    if not 0 < number <= 65535:
        raise InvalidURL(url, "invalid port")
    text = str(number)
    return "" if text == _DEFAULT_PORTS[scheme] else text


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Parse the IPv4 spellings resolvers accept (``127.1``, ``0x7f000001``, ``0177.0.0.1``)."""
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _literal_ip(name: str) -> _IPAddress | None:
    """Return the address a lower-case host literally spells, or None for a name."""
    if _NUMERIC_HOST.fullmatch(name):
        return _legacy_ipv4(name)
    if ":" not in name:
        return None
    try:
        return ipaddress.IPv6Address(name)
    except ValueError:
        return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address an IPv6 address wraps (compat, 6to4, Teredo, NAT64), if any."""
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (ip in _COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _is_private_ip(ip: _IPAddress) -> bool:
    """Apply the special-range checks to one address, without looking inside it."""
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_SPACE:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return True
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )
