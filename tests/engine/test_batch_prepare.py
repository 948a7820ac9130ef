"""``prepare_seen`` (engine/ops/batch_prepare.py) makes, URL by URL, the spec ``prepare`` makes:
same normalised URL, domain, fingerprint and seen-set argument, extras as
``dataclasses.replace`` sets them; a refused URL is its error in its place."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq import Queue
from scrapeq.errors import InvalidURL

URLS = [
    "http://example.com",
    "HTTP://Example.COM:80/a/../b/./c?y=2&x=1#frag",
    "https://example.com:443/%7Euser/caf\u00e9?q=a%20b&q=a+b&empty=",
    "https://b\u00fccher.example/path;params?z&a=1",
    "http://[2001:db8::1]:8080/x",
    "http://sub.shop.example.co.uk/p?utm=1&a=",
    "  https://spaces.example/trim  ",
    "https://example.com/a%2fb/%41%42?%61=1",
]


def _pairs(q: Queue, urls: list[str], extras: list[dict[str, Any] | None]) -> int:
    payloads = [None if i % 2 else {"n": [str(i)]} for i in range(len(urls))]
    fast = q.prepare_seen(urls, payloads, extras)
    same = 0
    for url, payload, extra, got in zip(urls, payloads, extras, fast, strict=True):
        try:
            want = q.prepare(url, unique="seen", payload=payload)
        except InvalidURL as exc:  # refused the same way (a private address, unless allowed)
            assert isinstance(got, InvalidURL) and str(got) == str(exc)
            continue
        if extra:
            want = dataclasses.replace(want, **extra)
        assert got == want, url
        same += 1
    return same


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"canonical_keep_blank_values": False},
        {"canonical_keep_fragments": True},
        {"seen_filter": "bloom", "seen_capacity": 10_000},
        {"politeness": "domain"},
        {"allow_private": True},
    ],
    ids=["default", "no-blank", "fragments", "bloom", "politeness-domain", "private"],
)
def test_batch_specs_equal_prepares(
    make_queue: Callable[..., Queue], settings: dict[str, Any]
) -> None:
    q = make_queue(**settings)
    extras: list[dict[str, Any] | None] = [None, {"capped": True}, {"at_ms": 5_000}]
    extras += [{"domain": "k1", "at_ms": 0, "succeeds": "l1ab"}] + [None] * (len(URLS) - 4)
    assert _pairs(q, URLS, extras) >= len(URLS) - 1  # all but the private one unless allowed


def test_a_refused_url_is_its_error_in_its_place(make_queue: Callable[..., Queue]) -> None:
    q = make_queue()
    got = q.prepare_seen(["http://ok.example/", "ftp://no.example/", "http://127.0.0.1/"])
    assert not isinstance(got[0], Exception)
    assert isinstance(got[1], InvalidURL) and isinstance(got[2], InvalidURL)
