"""URL validation and normalisation at enqueue (scrapeq.urls)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapeq.errors import InvalidURL
from scrapeq.urls import (
    MAX_URL_BYTES,
    TargetURL,
    domain_of,
    fingerprint,
    is_private_address,
    is_private_host,
    parse_target,
)

PRIVATE_REASON = "private address not allowed (set allow_private)"


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
        ("example.com/path", "unsupported scheme"),
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
