"""URL validation at enqueue, canonical URLs, fingerprints and scope (scrapeq.urls)."""

from __future__ import annotations

import hashlib
import ipaddress

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.urls import (
    MAX_URL_BYTES,
    SCOPES,
    TargetURL,
    UrlFilter,
    canonical_url,
    domain_of,
    fingerprint,
    fingerprint64,
    in_scope,
    is_private_address,
    is_private_host,
    parse_target,
    redact_text,
    redact_url,
    registrable_domain,
)
from scrapeq.engine.queue import Queue
from scrapeq.errors import ConfigError, InvalidURL

PRIVATE_REASON = "private address not allowed (set allow_private, or pass --allow-private)"


@pytest.mark.parametrize(
    ("raw", "url", "domain"),
    [
        ("https://example.com/a?b=1", "https://example.com/a?b=1", "example.com"),
        ("http://shop-43.example.com/p/1", "http://shop-43.example.com/p/1", "shop-43.example.com"),
        ("http://127.0.0.1:8043/x", "http://127.0.0.1:8043/x", "127.0.0.1:8043"),
        ("https://example.com:8443/", "https://example.com:8443/", "example.com:8443"),
        ("http://example.com:80/x", "http://example.com/x", "example.com"),
        ("https://example.com:443/x", "https://example.com/x", "example.com"),
        ("https://example.com:80/x", "https://example.com:80/x", "example.com:80"),
        ("http://example.com:443/x", "http://example.com:443/x", "example.com:443"),
        ("http://example.com:0080/", "http://example.com/", "example.com"),
        ("http://example.com:/", "http://example.com/", "example.com"),
        ("https://bücher.example/x", "https://xn--bcher-kva.example/x", "xn--bcher-kva.example"),
        ("https://BÜCHER.example/x", "https://xn--bcher-kva.example/x", "xn--bcher-kva.example"),
        ("HTTPS://WWW.Example.COM/Path", "https://www.example.com/Path", "www.example.com"),
        ("http://example.com./", "http://example.com/", "example.com"),
        ("http://example.com/page#section", "http://example.com/page", "example.com"),
        ("http://example.com/?q=1#frag", "http://example.com/?q=1", "example.com"),
        ("http://example.com", "http://example.com/", "example.com"),
        ("http://example.com?q=a%20b", "http://example.com/?q=a%20b", "example.com"),
        ("  http://example.com/  ", "http://example.com/", "example.com"),
        ("http://user:pass@example.com/", "http://user:pass@example.com/", "example.com"),
        ("http://user@example.com:8080/", "http://user@example.com:8080/", "example.com:8080"),
        ("http://[::1]:8080/", "http://[::1]:8080/", "[::1]:8080"),
        ("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/", "[::1]"),
        ("https://[2606:4700::1111]/", "https://[2606:4700::1111]/", "[2606:4700::1111]"),
        ("http://my_host.example/", "http://my_host.example/", "my_host.example"),
        ("http://example.com/ü/%41?x=ü", "http://example.com/ü/%41?x=ü", "example.com"),
    ],
)
def test_good_urls_are_normalised(raw: str, url: str, domain: str) -> None:
    assert parse_target(raw, allow_private=True) == TargetURL(url=url, domain=domain)
    assert domain_of(raw) == domain


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty URL"),
        ("   ", "empty URL"),
        ("ftp://example.com/", "unsupported scheme 'ftp'"),
        ("javascript:alert(1)", "unsupported scheme 'javascript'"),
        ("example.com/path", "no scheme: add http:// or https://"),
        ("127.0.0.1:8001/", "no scheme: add http:// or https://"),
        ("localhost:8001", "no scheme: add http:// or https://"),
        ("shop.test:443/p?q=1", "no scheme: add http:// or https://"),
        ("mailto:a@example.com", "unsupported scheme 'mailto'"),
        ("http://", "no host"),
        ("https://", "no host"),
        ("http:///path", "no host"),
        ("http:example.com", "no host"),
        ("http://user@/", "no host"),
        ("http://:8080/", "no host"),
        ("http://exa mple.com/", "contains whitespace or control characters"),
        ("http://example.com/a b", "contains whitespace or control characters"),
        ("http://example.com/\ta", "contains whitespace or control characters"),
        ("http://exam\nple.com/", "contains whitespace or control characters"),
        ("http://example.com/\x00", "contains whitespace or control characters"),
        ("http://example.com/\x7f", "contains whitespace or control characters"),
        ("http://example.com/\u00a0a", "contains whitespace or control characters"),
        ("http://example.com/\ud800", "lone surrogate"),
        ("http://example.com:abc/", "invalid port"),
        ("http://example.com:0/", "invalid port"),
        ("http://example.com:65536/", "invalid port"),
        ("http://example.com:99999999999/", "invalid port"),
        ("http://example.com:-1/", "invalid port"),
        ("http://example.com:٨٠/", "invalid port"),
        ("http://exa$mple.com/", "invalid host"),
        ("http://a..b/", "invalid host"),
        ("http://./", "invalid host"),
        ("http://example.com../", "invalid host"),
        ("http://" + "a" * 64 + ".com/", "invalid host"),
        ("http://" + "a." * 127 + "com/", "invalid host"),
        ("http://%65xample.com/", "invalid host"),
        ("http://[::1/", "invalid host"),
        ("http://[::g]/", "invalid host"),
        ("http://[fe80::1%25eth0]/", "invalid host"),
        ("http://[::1]x/", "invalid host"),
        ("http://::1/", "invalid host"),
        ("http://1.2.3.4.5/", "invalid host"),
        ("http://4294967296/", "invalid host"),
        ("http://example.com\\@127.0.0.1/", "invalid userinfo"),
        ("http://a@127.0.0.1@example.com/", "invalid userinfo"),
    ],
)
def test_bad_urls_are_refused_with_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as info:
        parse_target(raw, allow_private=True)
    assert reason in info.value.reason
    assert info.value.url == raw


def test_length_limit_is_8_kib_of_utf8() -> None:
    base = "http://example.com/"
    exact = base + "a" * (MAX_URL_BYTES - len(base))
    assert parse_target(exact).url == exact
    with pytest.raises(InvalidURL, match="longer than 8 KiB"):
        parse_target(exact + "a")
    # Multi-byte characters count by their UTF-8 length.
    with pytest.raises(InvalidURL, match="longer than 8 KiB"):
        parse_target(base + "é" * ((MAX_URL_BYTES - len(base)) // 2 + 1))


PRIVATE_HOSTS = [
    ("http://localhost/", "localhost"),
    ("http://LOCALHOST:8080/", "localhost:8080"),
    ("http://localhost./", "localhost"),
    ("http://a.localhost/", "a.localhost"),
    ("http://127.0.0.1/", "127.0.0.1"),
    ("http://127.9.9.9/", "127.9.9.9"),
    ("http://10.1.2.3/", "10.1.2.3"),
    ("http://172.16.0.1/", "172.16.0.1"),
    ("http://192.168.1.1/", "192.168.1.1"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
    ("http://100.64.0.1/", "100.64.0.1"),
    ("http://0.0.0.0/", "0.0.0.0"),
    ("http://0/", "0.0.0.0"),
    ("http://224.0.0.1/", "224.0.0.1"),
    ("http://240.0.0.1/", "240.0.0.1"),
    ("http://255.255.255.255/", "255.255.255.255"),
    ("http://[::1]/", "[::1]"),
    ("http://[::]/", "[::]"),
    ("http://[fe80::1]/", "[fe80::1]"),
    ("http://[fc00::1]/", "[fc00::1]"),
    ("http://[fec0::1]/", "[fec0::1]"),
    ("http://[ff02::1]/", "[ff02::1]"),
    ("http://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]"),
    ("http://[::ffff:10.0.0.1]:81/", "[::ffff:a00:1]:81"),
    ("http://[::127.0.0.1]/", "[::7f00:1]"),
    ("http://[2002:7f00:1::]/", "[2002:7f00:1::]"),
    ("http://[64:ff9b::a9fe:a9fe]/", "[64:ff9b::a9fe:a9fe]"),
    ("http://2130706433/", "127.0.0.1"),
    ("http://0x7f000001/", "127.0.0.1"),
    ("http://0X7F000001/", "127.0.0.1"),
    ("http://0177.0.0.1/", "127.0.0.1"),
    ("http://127.1/", "127.0.0.1"),
    ("http://127.0.0.1./", "127.0.0.1"),
    ("http://0xa9.0xfe.0xa9.0xfe/", "169.254.169.254"),
    ("http://user:pw@127.0.0.1:8043/", "127.0.0.1:8043"),
]


@pytest.mark.parametrize(("raw", "domain"), PRIVATE_HOSTS)
def test_private_hosts_are_refused_by_default(raw: str, domain: str) -> None:
    with pytest.raises(InvalidURL) as info:
        parse_target(raw)
    assert info.value.reason == PRIVATE_REASON


@pytest.mark.parametrize(("raw", "domain"), PRIVATE_HOSTS)
def test_private_hosts_are_accepted_with_allow_private(raw: str, domain: str) -> None:
    assert parse_target(raw, allow_private=True).domain == domain


@pytest.mark.parametrize(
    ("raw", "domain"),
    [
        ("http://93.184.216.34/", "93.184.216.34"),
        ("https://[2606:4700::1111]/", "[2606:4700::1111]"),
        ("https://example.com/", "example.com"),
        ("http://[::ffff:8.8.8.8]/", "[::ffff:808:808]"),
        ("http://[2002:808:808::]/", "[2002:808:808::]"),
        ("http://localhost.example.com/", "localhost.example.com"),
        ("http://mylocalhost/", "mylocalhost"),
        ("http://0x7f.example/", "0x7f.example"),
        ("http://134744072/", "8.8.8.8"),
        ("http://100.128.0.1/", "100.128.0.1"),
    ],
)
def test_public_hosts_are_accepted(raw: str, domain: str) -> None:
    assert parse_target(raw).domain == domain


def test_is_private_host_on_bare_hosts() -> None:
    assert is_private_host("localhost")
    assert is_private_host("x.y.localhost.")
    assert is_private_host("::1")
    assert is_private_host("[::1]")
    assert is_private_host("127.1")
    assert not is_private_host("example.com")
    assert not is_private_host("8.8.8.8")
    assert not is_private_host("[2606:4700::1111]")


@pytest.mark.parametrize(
    ("address", "private"),
    [
        ("127.0.0.1", True),
        ("10.0.0.1", True),
        ("100.64.0.1", True),
        ("169.254.169.254", True),
        ("224.0.0.251", True),
        ("8.8.8.8", False),
        ("::1", True),
        ("fe80::1", True),
        ("::ffff:169.254.169.254", True),
        ("::ffff:8.8.8.8", False),
        ("2002:a00:1::", True),
        ("2606:4700::1111", False),
    ],
)
def test_is_private_address(address: str, private: bool) -> None:
    assert is_private_address(ipaddress.ip_address(address)) is private


def test_fingerprint_is_stable_across_equivalent_spellings() -> None:
    fp = fingerprint("http://example.com/")
    assert len(fp) == 16
    assert int(fp, 16) >= 0
    assert fingerprint("HTTP://Example.com:80/#x") == fp
    assert fingerprint("http://EXAMPLE.com") == fp
    assert fingerprint("  http://example.com./  ") == fp
    assert fingerprint("https://bücher.example/") == fingerprint("https://xn--bcher-kva.example/")


def test_fingerprint_differs_for_different_urls() -> None:
    assert fingerprint("http://example.com/a") != fingerprint("http://example.com/b")
    assert fingerprint("http://example.com/a") != fingerprint("https://example.com/a")
    assert fingerprint("http://example.com/a") != fingerprint("http://example.com:8080/a")
    assert fingerprint("http://example.com/a?x=1") != fingerprint("http://example.com/a?x=2")


def test_fingerprint_and_domain_of_accept_private_but_refuse_invalid() -> None:
    assert domain_of("http://127.0.0.1:8043/") == "127.0.0.1:8043"
    assert len(fingerprint("http://localhost/")) == 16
    with pytest.raises(InvalidURL):
        fingerprint("ftp://example.com/")
    with pytest.raises(InvalidURL):
        domain_of("not a url")


def _check_never_crashes(text: str) -> None:
    for allow in (False, True):
        try:
            target = parse_target(text, allow_private=allow)
        except InvalidURL:
            continue
        # Whatever is accepted is a fixed point of normalisation.
        assert parse_target(target.url, allow_private=True) == target


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.text())
def test_parse_target_only_raises_invalid_url_on_arbitrary_text(text: str) -> None:
    _check_never_crashes(text)


_FRAGMENTS = [
    *("http://", "https://", "HTTP://", "@", ":", "[", "]", ".", "/", "?", "#", "%"),
    *("0x", "1", "127", "::", "ff", "ü", "\\", "-", "_", "xn--", "a", "80", "99999"),
]
_URLISH = st.builds(
    "".join,
    st.lists(
        st.sampled_from(_FRAGMENTS) | st.text(max_size=3),
        max_size=12,
    ),
)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(_URLISH)
def test_parse_target_only_raises_invalid_url_on_url_like_text(text: str) -> None:
    _check_never_crashes(text)


# --- canonical URLs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        # scheme and host case
        ("HTTP://WWW.Example.COM/Path", "http://www.example.com/Path"),
        # default ports dropped, others kept
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("http://example.com:0080/", "http://example.com/"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        # dot segments
        ("http://example.com/a/../b/./c", "http://example.com/b/c"),
        ("http://example.com/a/b/../../../c", "http://example.com/c"),
        ("http://example.com/a/b/..", "http://example.com/a/"),
        ("http://example.com/%2E%2e/a", "http://example.com/a"),
        # percent-encoding: unreserved decoded, others upper-cased, non-ASCII as UTF-8
        ("http://example.com/%7Euser", "http://example.com/~user"),
        ("http://example.com/%7euser", "http://example.com/~user"),
        ("http://example.com/%41%62c", "http://example.com/Abc"),
        ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
        ("http://example.com/ü?x=ü", "http://example.com/%C3%BC?x=%C3%BC"),
        ("http://example.com/%c3%bc", "http://example.com/%C3%BC"),
        # query: sorted by name then value, space as "+", an empty query dropped
        ("http://example.com/?b=1&a=2", "http://example.com/?a=2&b=1"),
        ("http://example.com/?a=2&a=1", "http://example.com/?a=1&a=2"),
        ("http://example.com/?q=a%20b", "http://example.com/?q=a+b"),
        ("http://example.com/?q=%7E", "http://example.com/?q=~"),
        ("http://example.com/?q=%2B", "http://example.com/?q=%2B"),
        ("http://example.com/?", "http://example.com/"),
        # fragment dropped
        ("http://example.com/p#frag", "http://example.com/p"),
        # blank values kept by default, "?a" written "?a="
        ("http://example.com/?a=&b=1", "http://example.com/?a=&b=1"),
        ("http://example.com/?b=1&a", "http://example.com/?a=&b=1"),
        # IDN hosts, trailing dot, numeric IPv4 spellings, IPv6 compressed
        ("https://BÜCHER.example/x", "https://xn--bcher-kva.example/x"),
        ("http://example.com./", "http://example.com/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://[0:0:0:0:0:0:0:1]:80/", "http://[::1]/"),
        # no path, userinfo kept (a different request)
        ("http://example.com", "http://example.com/"),
        ("http://u:p@Example.com/", "http://u:p@example.com/"),
    ],
)
def test_canonical_url(raw: str, canonical: str) -> None:
    assert canonical_url(raw) == canonical
    assert canonical_url(canonical) == canonical  # a fixed point


def test_canonical_url_keeps_fragments_when_asked() -> None:
    assert canonical_url("http://example.com/p#frag", keep_fragments=True) == (
        "http://example.com/p#frag"
    )
    assert canonical_url("http://example.com/p#%7Ea%2f", keep_fragments=True) == (
        "http://example.com/p#~a%2F"
    )
    assert canonical_url("http://example.com/p#", keep_fragments=True) == "http://example.com/p"
    assert canonical_url("http://example.com/p", keep_fragments=True) == "http://example.com/p"
    assert canonical_url("HTTP://Example.com:80/a/../p?b=2&a=1#/route/1", keep_fragments=True) == (
        "http://example.com/p?a=1&b=2#/route/1"
    )


def test_canonical_url_drops_blank_values_when_asked() -> None:
    drop = {"keep_blank_values": False}
    assert canonical_url("http://example.com/?a=&b=1", **drop) == "http://example.com/?b=1"
    assert canonical_url("http://example.com/?a&b=1", **drop) == "http://example.com/?b=1"
    assert canonical_url("http://example.com/?a=", **drop) == "http://example.com/"
    assert canonical_url("http://example.com/?a=0", **drop) == "http://example.com/?a=0"


def test_canonical_url_refuses_invalid_urls() -> None:
    for bad in ("ftp://example.com/", "not a url", "http://exa mple.com/", "http://a..b/"):
        with pytest.raises(InvalidURL):
            canonical_url(bad)


def test_canonical_url_allows_private_hosts() -> None:
    assert canonical_url("http://LOCALHOST:8080/a/./b") == "http://localhost:8080/a/b"


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(_URLISH, st.booleans(), st.booleans())
def test_canonical_url_is_idempotent_or_refuses(text: str, fragments: bool, blanks: bool) -> None:
    options = {"keep_fragments": fragments, "keep_blank_values": blanks}
    try:
        once = canonical_url(text, **options)
    except InvalidURL:
        return
    assert once.isascii()
    assert canonical_url(once, **options) == once
    assert parse_target(once, allow_private=True)


_SPELLINGS = [
    "http://example.com/a/b?x=1&y=",
    "HTTP://EXAMPLE.COM:80/a/b?y=&x=1",
    "http://example.com./a/./c/../b?x=1&y=#top",
    "http://example.com/%61/%62?x=%31&y",
    "  http://Example.com/a/b/?x=1&y=".replace("/?", "?"),
]


def test_fingerprints_are_equal_across_spellings() -> None:
    assert len({fingerprint(url) for url in _SPELLINGS}) == 1
    assert len({fingerprint64(url) for url in _SPELLINGS}) == 1
    assert fingerprint("http://example.com/%7Euser") == fingerprint("http://example.com/~user")
    assert fingerprint("http://example.com/?b=1&a=2") == fingerprint("http://example.com/?a=2&b=1")


def test_fingerprint_options_follow_canonical_url() -> None:
    a, b = "http://example.com/#/item/1", "http://example.com/#/item/2"
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a, keep_fragments=True) != fingerprint(b, keep_fragments=True)
    assert fingerprint64(a, keep_fragments=True) != fingerprint64(b, keep_fragments=True)
    blank, none = "http://example.com/?a=&b=1", "http://example.com/?b=1"
    assert fingerprint(blank) != fingerprint(none)
    assert fingerprint(blank, keep_blank_values=False) == fingerprint(none)
    assert fingerprint64(blank, keep_blank_values=False) == fingerprint64(none)


def test_fingerprint_is_the_sha1_of_the_canonical_url() -> None:
    url = "HTTP://Example.com/b?y=2&x=1"
    digest = hashlib.sha1(b"http://example.com/b?x=1&y=2").digest()
    assert fingerprint(url) == digest[:8].hex()
    assert fingerprint64(url) == int.from_bytes(digest[:8], "big", signed=True)


def test_fingerprint64_is_a_stable_signed_64_bit_integer() -> None:
    values = [fingerprint64(f"http://example.com/item/{i}") for i in range(2000)]
    assert all(-(2**63) <= v < 2**63 for v in values)
    assert any(v < 0 for v in values) and any(v > 0 for v in values)
    assert len(set(values)) == len(values)
    # Fixed values: the same on every machine, process and Python version (no hash()).
    assert fingerprint64("http://example.com/") == -7199038879661321696
    assert fingerprint64("https://example.com/a") == -4256715142368812815
    for url in ("http://example.com/", "https://bücher.example/x?b=1&a=2"):
        assert fingerprint64(url) == int.from_bytes(
            bytes.fromhex(fingerprint(url)), "big", signed=True
        )


def test_fingerprint64_refuses_invalid_urls() -> None:
    with pytest.raises(InvalidURL):
        fingerprint64("mailto:a@example.com")


def test_prepare_fingerprints_the_canonical_form_and_follows_the_settings() -> None:
    client = redis.Redis()  # never connected: prepare touches no server
    try:
        q = Queue(client)
        spec = q.prepare("http://Example.com/a/../b?y=2&x=1#f", unique=True)
        assert spec.url == "http://example.com/a/../b?y=2&x=1"  # fetched as given
        assert spec.fingerprint == fingerprint("http://example.com/b?x=1&y=2")
        assert q.prepare("http://example.com/", unique=False).fingerprint is None
        kept = Queue(client, settings=Settings(canonical_keep_fragments=True))
        spec = kept.prepare("http://example.com/#/route", unique=True)
        assert spec.url == "http://example.com/"
        assert spec.fingerprint == fingerprint("http://example.com/#/route", keep_fragments=True)
        assert spec.fingerprint != fingerprint("http://example.com/")
        dropped = Queue(client, settings=Settings(canonical_keep_blank_values=False))
        spec = dropped.prepare("http://example.com/?a=&b=1", unique=True)
        assert spec.fingerprint == fingerprint("http://example.com/?b=1")
    finally:
        client.close()


# --- scope -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "registrable"),
    [
        ("example.com", "example.com"),
        ("www.example.com", "example.com"),
        ("a.b.c.example.com", "example.com"),
        ("a.example.co.uk", "example.co.uk"),
        ("WWW.Example.CO.UK.", "example.co.uk"),
        ("co.uk", "co.uk"),  # a public suffix is its own
        ("com", "com"),
        ("foo.github.io", "foo.github.io"),  # the list's private section counts
        ("github.io", "github.io"),
        ("bücher.example.de", "example.de"),
        ("www.xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("shop.bücher.de", "xn--bcher-kva.de"),
        ("localhost", "localhost"),
        ("intranet", "intranet"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("93.184.216.34", "93.184.216.34"),
        ("[::1]", "[::1]"),
        ("::1", "[::1]"),
        ("[2606:4700:0::1111]", "[2606:4700::1111]"),
        ("example.com:8080", "example.com"),
        ("[::1]:8080", "[::1]"),
        ("127.0.0.1:8043", "127.0.0.1"),
        ("a.example.co.uk:443", "example.co.uk"),
    ],
)
def test_registrable_domain(host: str, registrable: str) -> None:
    assert registrable_domain(host) == registrable


@pytest.mark.parametrize("host", ["", "exa$mple.com", "a..b", "[::1", "[::g]", "-" * 64 + ".com"])
def test_registrable_domain_refuses_invalid_hosts(host: str) -> None:
    with pytest.raises(InvalidURL):
        registrable_domain(host)


@pytest.mark.parametrize(
    ("url", "reference", "host", "domain"),
    [
        ("http://example.com/a", "https://example.com/b", True, True),
        ("http://WWW.example.com/", "http://www.example.com./x", True, True),
        ("http://www.example.com/", "http://example.com/", False, True),
        ("http://a.example.co.uk/", "http://b.example.co.uk/", False, True),
        ("http://example.co.uk/", "http://other.co.uk/", False, False),
        ("http://foo.github.io/", "http://bar.github.io/", False, False),
        ("http://example.com:8080/", "http://example.com/", False, True),
        ("http://example.com:80/", "http://example.com/", True, True),
        ("http://127.0.0.1:8001/", "http://127.0.0.1:8002/", False, True),
        ("http://127.0.0.1:8001/x", "http://127.0.0.1:8001/", True, True),
        ("http://127.0.0.2/", "http://127.0.0.1/", False, False),
        ("http://[::1]:8001/", "http://[0::1]:8001/", True, True),
        ("http://localhost/", "http://127.0.0.1/", False, False),
        ("http://a.localhost/", "http://localhost/", False, False),
        ("https://bücher.example.de/", "http://www.example.de/", False, True),
        ("http://example.org/", "http://example.com/", False, False),
    ],
)
def test_in_scope(url: str, reference: str, host: bool, domain: bool) -> None:
    assert in_scope(url, reference, "host") is host
    assert in_scope(url, reference, "domain") is domain
    assert in_scope(url, reference, "any") is True


@pytest.mark.parametrize("bad", ["mailto:a@example.com", "javascript:x", "http://exa mple/", ""])
def test_in_scope_is_false_for_an_invalid_link(bad: str) -> None:
    for scope in SCOPES:
        assert in_scope(bad, "http://example.com/", scope) is False


def test_in_scope_refuses_a_bad_scope_or_reference() -> None:
    with pytest.raises(ConfigError) as info:
        in_scope("http://example.com/", "http://example.com/", "site")
    assert info.value.name == "scope"
    with pytest.raises(InvalidURL):
        in_scope("http://example.com/", "not a url", "host")


def test_url_filter_deny_wins() -> None:
    f = UrlFilter(allow=[r"/products/", r"^https://blog\."], deny=[r"\.pdf$", r"[?&]sort="])
    assert f.allows("https://shop.example.com/products/1")
    assert f.allows("https://blog.example.com/post")
    assert not f.allows("https://shop.example.com/about")
    assert not f.allows("https://shop.example.com/products/manual.pdf")
    assert not f.allows("https://shop.example.com/products/?sort=price")


def test_url_filter_defaults_allow_everything_not_denied() -> None:
    assert UrlFilter([], []).allows("http://example.com/anything")
    assert UrlFilter().allows("http://example.com/anything")
    assert not UrlFilter(deny=["example"]).allows("http://example.com/")
    assert UrlFilter(allow=["(?i)EXAMPLE"]).allows("http://example.com/")
    assert not UrlFilter(allow=["EXAMPLE"]).allows("http://example.com/")
    assert repr(UrlFilter(["a"], ["b"])) == "UrlFilter(allow=['a'], deny=['b'])"


@pytest.mark.parametrize(
    ("allow", "deny", "name"),
    [(["("], [], "allow"), ([], ["[a-"], "deny"), ("just-a-string", [], "allow")],
)
def test_url_filter_refuses_bad_patterns(allow: list[str], deny: list[str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        UrlFilter(allow, deny)
    assert info.value.name == name


# --- redaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:s3cret@shop.example.com/p", "https://***:***@shop.example.com/p"),
        ("https://user:s3cret@shop.example.com:8443/", "https://***:***@shop.example.com:8443/"),
        ("https://u:p%40ss:w@h.example.com/x@y", "https://***:***@h.example.com/x@y"),
        ("https://:only-password@h.example.com/", "https://:***@h.example.com/"),
        # issue 36: a user alone is a credential too (https://TOKEN@host, http://KEY:@proxy)
        ("https://user@h.example.com/", "https://***@h.example.com/"),
        ("http://APIKEY:@proxy.example:8011", "http://***:***@proxy.example:8011"),
        ("https://h.example.com:8080/a@b", "https://h.example.com:8080/a@b"),
        ("https://h.example.com/?to=a:b@c", "https://h.example.com/?to=a:b@c"),
        ("https://u:p@h.example.com?q=x@y", "https://***:***@h.example.com?q=x@y"),
        ("http://u:p@ss@h.example.com/", "http://***:***@h.example.com/"),
        # a user info hiding a '#', '?' or '/' (urlsplit reads host 'carol', port 12)
        ("http://carol:12#SECRET@h.example.com:8011", "http://***:***@h.example.com:8011"),
        ("http://carol:ab?SECRET@h.example.com:8011", "http://***:***@h.example.com:8011"),
        ("http://carol:ab/SECRET@h.example.com:8011", "http://***:***@h.example.com:8011"),
        ("url='http://KEY:@127.0.0.1:8011'", "url='http://***:***@127.0.0.1:8011'"),
        ("postgresql://u@h/db?password=SECRET&x=1", "postgresql://***@h/db?password=***&x=1"),
        ("not a url", "not a url"),
        ("", ""),
    ],
)
def test_redact_url_hides_the_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_hides_every_url_credential_in_a_message() -> None:
    message = "redirect from http://a:pw1@x.example.com/ to ftp://b:pw2@y.example.com/f failed"
    assert redact_text(message) == (
        "redirect from http://***:***@x.example.com/ to ftp://***:***@y.example.com/f failed"
    )


@given(
    st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9%!$&'()*+,;=:._~-]{1,20}", fullmatch=True),
)
def test_a_parsed_url_never_shows_its_password(user: str, password: str) -> None:
    target = parse_target(f"https://{user}:{password}@shop.example.com/p")
    shown = redact_url(target.url)
    assert shown == "https://***:***@shop.example.com/p"
