"""Target URLs: validation and normalisation at enqueue, the domain key, the fingerprint.

Everything here is pure (no DNS, no I/O). :func:`parse_target` is the one gate a URL passes
before it becomes a job; it returns the normalised URL and the *domain* (``host[:port]``,
INTERFACE.md) every per-domain structure is keyed by.

Private-address refusal covers what can be decided from the text alone: ``localhost`` names
and literal IP addresses in every spelling a resolver accepts (``127.1``, ``2130706433``,
``0x7f000001``, ``0177.0.0.1``, ``[::ffff:127.0.0.1]`` ...). A hostname that merely resolves
to a private address is the fetch layer's to refuse, with :func:`is_private_address` on the
resolved addresses.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from scrapeq.errors import InvalidURL

__all__ = [
    "MAX_URL_BYTES",
    "TargetURL",
    "domain_of",
    "fingerprint",
    "fingerprint64",
    "is_private_address",
    "is_private_host",
    "parse_target",
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

_PRIVATE = "private address not allowed (set allow_private)"
_INVALID_HOST = "invalid host"

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


def domain_of(url: str) -> str:
    """Return the domain (``host[:port]``) of a URL, private hosts included.

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    return parse_target(url, allow_private=True).domain


def fingerprint(url: str) -> str:
    """Return 16 hex characters identifying a URL up to normalisation, for de-duplication.

    Equivalent spellings (``HTTP://Example.com:80/#x`` and ``http://example.com/``) share a
    fingerprint.

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    normalised = parse_target(url, allow_private=True).url
    return hashlib.sha1(normalised.encode("utf-8"), usedforsecurity=False).hexdigest()[:16]


def fingerprint64(url: str) -> int:
    """Return :func:`fingerprint` as a signed 64-bit integer, for the compact seen-set.

    ``fingerprint64(u) == int.from_bytes(bytes.fromhex(fingerprint(u)), "big", signed=True)``:
    in ``[-2**63, 2**63)``, stable across processes and machines (no ``hash()``). Two distinct
    URLs share one with probability about ``n**2 / 2**65`` among ``n`` URLs (about 3 in a
    million for 10 million URLs).

    Raises:
        InvalidURL: the URL is not a valid http(s) URL.
    """
    return int.from_bytes(bytes.fromhex(fingerprint(url)), "big", signed=True)


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


def _split(url: str, text: str) -> SplitResult:
    """Split ``text``; require an http(s) scheme and a non-empty authority."""
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # bad brackets, NFKC tricks in the netloc
        raise InvalidURL(url, _INVALID_HOST) from exc
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(url, f"unsupported scheme {scheme!r}")
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
