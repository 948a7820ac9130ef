"""Outcome classification: statuses, Retry-After, slow calls and exceptions."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey, RequestInfo
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from scrapeq import Queue
from scrapeq.errors import InvalidURL, Permanent, Retry, ScrapeqError
from scrapeq.runtime import classify
from scrapeq.runtime.classify import (
    BlockedAddress,
    BodyTooLarge,
    Classification,
    OurNetworkDown,
    Outcome,
    RobotsDisallowed,
    classify_exception,
    classify_response,
    classify_status,
    is_slow,
    parse_retry_after,
)
from scrapeq.runtime.outcomes import download_sample

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)

OK, RETRY, THROTTLED, FAIL, OURS = (
    Outcome.OK,
    Outcome.RETRY,
    Outcome.THROTTLED,
    Outcome.FAIL,
    Outcome.OURS,
)


# --- model ---------------------------------------------------------------------------------


def test_outcome_values() -> None:
    assert [o.value for o in Outcome] == ["ok", "retry", "throttled", "fail", "ours"]
    assert Outcome("throttled") is Outcome.THROTTLED
    assert str(Outcome.OK) == f"{Outcome.OK}" == "ok"  # a StrEnum: renders as its value
    assert isinstance(Outcome.FAIL, str)


def test_classification_is_frozen_with_defaults() -> None:
    verdict = Classification(Outcome.OK, "ok", False)
    assert verdict.retry_after is None
    assert verdict.message == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.reason = "x"  # type: ignore[misc]


# --- Retry-After -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 42 ", 42.0),
        ("1.5", 1.5),
        ("007", 7.0),
        # IMF-fixdate, RFC 850 and asctime, 90 s after NOW
        ("Fri, 01 Mar 2024 12:01:30 GMT", 90.0),
        ("Friday, 01-Mar-24 12:01:30 GMT", 90.0),
        ("Fri Mar  1 12:01:30 2024", 90.0),
        ("Fri, 01 Mar 2024 13:01:30 +0100", 90.0),
        # a date in the past: no wait
        ("Fri, 01 Mar 2024 11:59:00 GMT", 0.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
    ],
)
def test_parse_retry_after_valid(value: str, expected: float) -> None:
    assert parse_retry_after(value, now=NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "soon",
        "-5",
        "-1.5",
        "+5",
        "1e3",
        "1.",
        ".5",
        "0x10",
        "inf",
        "nan",
        "12 s",
        "Fri, 31 Feb 2024 12:00:00 GMT",
        "Fri, 01 Mar 2024",
    ],
)
def test_parse_retry_after_garbage(value: str | None) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_parse_retry_after_is_capped() -> None:
    assert parse_retry_after("100000", now=NOW) == 86400.0
    assert parse_retry_after("9" * 400, now=NOW) == 86400.0
    assert parse_retry_after("120", cap=60.0) == 60.0
    assert parse_retry_after("Fri, 01 Mar 2030 12:00:00 GMT", now=NOW) == 86400.0
    assert parse_retry_after("Fri, 01 Mar 2024 13:00:00 GMT", now=NOW, cap=600.0) == 600.0


def test_parse_retry_after_naive_now_is_utc() -> None:
    naive = NOW.replace(tzinfo=None)
    assert parse_retry_after("Fri, 01 Mar 2024 12:01:30 GMT", now=naive) == pytest.approx(90.0)


def test_parse_retry_after_defaults_to_the_current_time() -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    value = soon.strftime("%a, %d %b %Y %H:%M:%S GMT")
    seconds = parse_retry_after(value)
    assert seconds is not None
    assert 3590 <= seconds <= 3600


# --- statuses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "outcome", "reason", "counts"),
    [
        (200, OK, "ok", False),
        (201, OK, "ok", False),
        (204, OK, "ok", False),
        (299, OK, "ok", False),
        (301, OK, "ok", False),
        (304, OK, "ok", False),
        (399, OK, "ok", False),
        (400, FAIL, "http_400", False),
        (401, FAIL, "http_401", False),
        (403, RETRY, "http_403", True),
        (404, FAIL, "http_404", False),
        (405, FAIL, "http_405", False),
        (407, OURS, "http_407", False),
        (408, RETRY, "http_408", True),
        (410, FAIL, "http_410", False),
        (418, FAIL, "http_418", False),
        (425, RETRY, "http_425", True),
        (429, THROTTLED, "http_429", True),
        (451, FAIL, "http_451", False),
        (499, FAIL, "http_499", False),
        (500, RETRY, "http_500", True),
        (502, RETRY, "http_502", True),
        (503, RETRY, "http_503", True),
        (504, RETRY, "http_504", True),
        (599, RETRY, "http_599", True),
        (100, FAIL, "invalid_status", False),
        (101, FAIL, "invalid_status", False),
        (199, FAIL, "invalid_status", False),
        (0, FAIL, "invalid_status", False),
        (-200, FAIL, "invalid_status", False),
        (600, FAIL, "invalid_status", False),
        (999, FAIL, "invalid_status", False),
    ],
)
def test_classify_status_table(status: int, outcome: Outcome, reason: str, counts: bool) -> None:
    verdict = classify_status(status)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        outcome,
        reason,
        counts,
    )
    assert verdict.retry_after is None


def test_429_parses_retry_after() -> None:
    verdict = classify_status(429, {"Retry-After": "30"})
    assert (verdict.outcome, verdict.retry_after, verdict.counts_against_domain) == (
        THROTTLED,
        30.0,
        True,
    )


def test_429_with_unparseable_retry_after_is_still_throttled() -> None:
    verdict = classify_status(429, {"Retry-After": "later"})
    assert verdict.outcome is THROTTLED
    assert verdict.retry_after is None


@pytest.mark.parametrize(
    ("headers", "outcome", "retry_after"),
    [
        ({"Retry-After": "120"}, THROTTLED, 120.0),
        ({"Retry-After": "Fri, 01 Mar 2024 12:05:00 GMT"}, THROTTLED, 300.0),
        ({"Retry-After": "0"}, THROTTLED, 0.0),
        ({"Retry-After": "whenever"}, RETRY, None),
        ({"Content-Type": "text/html"}, RETRY, None),
        ({}, RETRY, None),
        (None, RETRY, None),
    ],
)
def test_503_is_throttled_only_with_a_parseable_retry_after(
    headers: dict[str, str] | None, outcome: Outcome, retry_after: float | None
) -> None:
    verdict = classify_status(503, headers, now=NOW)
    assert verdict.outcome is outcome
    assert verdict.retry_after == retry_after
    assert verdict.reason == "http_503"
    assert verdict.counts_against_domain


@pytest.mark.parametrize("name", ["Retry-After", "retry-after", "RETRY-AFTER", "rEtRy-AfTeR"])
def test_retry_after_header_lookup_is_case_insensitive(name: str) -> None:
    assert classify_status(429, {name: "15"}).retry_after == 15.0
    assert classify_status(503, {name: "15"}).outcome is THROTTLED


def test_retry_after_from_a_cimultidict() -> None:
    headers = CIMultiDictProxy(CIMultiDict([("retry-after", "7"), ("Retry-After", "8")]))
    assert classify_status(429, headers).retry_after == 7.0


def test_retry_after_is_ignored_for_other_statuses() -> None:
    assert classify_status(500, {"Retry-After": "10"}).retry_after is None
    assert classify_status(200, {"Retry-After": "10"}).retry_after is None


# --- slow calls ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "slow_call", "slow"),
    [(10.0, 10.0, True), (10.5, 10.0, True), (9.99, 10.0, False), (0.0, 10.0, False)],
)
def test_is_slow(elapsed: float, slow_call: float, slow: bool) -> None:
    assert is_slow(elapsed, slow_call) is slow


def test_fast_ok_response() -> None:
    verdict = classify_response(200, {}, 0.2, slow_call=10.0)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (OK, "ok", False)


@pytest.mark.parametrize("status", [200, 204, 304])
@pytest.mark.parametrize("elapsed", [10.0, 25.0])
def test_slow_ok_is_done_but_charges_the_domain(status: int, elapsed: float) -> None:
    verdict = classify_response(status, None, elapsed, slow_call=10.0, conditional=True)
    assert verdict.outcome is OK
    assert verdict.reason == "slow_call"
    assert verdict.counts_against_domain
    assert "slow" in verdict.message


def test_a_304_is_a_page_only_when_the_request_was_conditional() -> None:
    """Issue 38, item 13: a 304 answers a conditional request (If-None-Match,
    If-Modified-Since); to any other it is no page: a failure of the site's, ``http_304``,
    permanent like the other statuses a page cannot answer, not charged to the domain
    (unless slow, like a slow 404)."""
    asked = classify_response(304, {}, 0.1, slow_call=10.0, conditional=True)
    assert (asked.outcome, asked.reason) == (OK, "ok")
    for verdict in (
        classify_response(304, {}, 0.1, slow_call=10.0),
        classify_response(304, {}, 0.1, slow_call=10.0, conditional=False),
    ):
        assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
            FAIL, "http_304", False,
        )  # fmt: skip
        assert "not conditional" in verdict.message
    slow = classify_response(304, {}, 12.0, slow_call=10.0)
    assert (slow.outcome, slow.reason, slow.counts_against_domain) == (FAIL, "http_304", True)
    # only a 304: other statuses are classified whatever the request was
    for code in (200, 301, 404, 503):
        assert classify_response(code, {}, 0.1, slow_call=10.0) == classify_response(
            code, {}, 0.1, slow_call=10.0, conditional=True
        )


def test_slow_permanent_failure_keeps_its_outcome_but_charges_the_domain() -> None:
    verdict = classify_response(404, {}, 12.0, slow_call=10.0)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        FAIL,
        "http_404",
        True,
    )
    fast = classify_response(404, {}, 1.0, slow_call=10.0)
    assert not fast.counts_against_domain


@pytest.mark.parametrize(
    ("status", "outcome", "reason", "counts"),
    [
        (503, RETRY, "http_503", True),
        (429, THROTTLED, "http_429", True),
        (407, OURS, "http_407", False),  # a slow proxy is ours, not the site's
        (999, FAIL, "invalid_status", False),
    ],
)
def test_slow_call_leaves_other_outcomes_alone(
    status: int, outcome: Outcome, reason: str, counts: bool
) -> None:
    verdict = classify_response(status, {}, 30.0, slow_call=10.0)
    assert verdict == classify_status(status, {})
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        outcome,
        reason,
        counts,
    )


def test_classify_response_passes_retry_after_through() -> None:
    verdict = classify_response(503, {"retry-after": "60"}, 0.1, slow_call=10.0, now=NOW)
    assert (verdict.outcome, verdict.retry_after) == (THROTTLED, 60.0)


# --- exceptions ------------------------------------------------------------------------------


def _key() -> ConnectionKey:
    return ConnectionKey("shop.example.com", 443, True, True, None, None, None)


def _request_info() -> RequestInfo:
    url = URL("https://shop.example.com/p/1")
    return RequestInfo(url, "GET", CIMultiDictProxy(CIMultiDict()), url)


def _refused() -> OSError:
    return ConnectionRefusedError(111, "Connection refused")


EXCEPTION_TABLE: list[tuple[str, BaseException, Outcome, str, bool]] = [
    # the library's signals and the fetch layer's errors
    ("permanent", Permanent("gone for good"), FAIL, "gone for good", False),
    ("permanent-default", Permanent(), FAIL, "permanent", False),
    ("retry", Retry(delay=30), RETRY, "retry_requested", False),
    ("retry-no-delay", Retry(), RETRY, "retry_requested", False),
    ("body-too-large", BodyTooLarge("12 MB > max_body"), FAIL, "body_too_large", False),
    ("blocked-address", BlockedAddress("127.0.0.1"), FAIL, "blocked_address", False),
    ("robots", RobotsDisallowed("/private"), FAIL, "robots_disallowed", False),
    ("network-down", OurNetworkDown("no route"), OURS, "network_down", False),
    ("scrapeq-invalid-url", InvalidURL("ftp://x", "scheme"), FAIL, "invalid_url", False),
    # timeouts
    ("timeout", TimeoutError(), RETRY, "timeout", True),
    ("server-timeout", aiohttp.ServerTimeoutError("read"), RETRY, "timeout", True),
    ("connection-timeout", aiohttp.ConnectionTimeoutError(), RETRY, "timeout", True),
    ("socket-timeout", aiohttp.SocketTimeoutError(), RETRY, "timeout", True),
    # our proxy
    (
        "proxy-connection",
        aiohttp.ClientProxyConnectionError(_key(), _refused()),
        OURS,
        "proxy_error",
        False,
    ),
    (
        "http-proxy-407",
        aiohttp.ClientHttpProxyError(_request_info(), (), status=407, message="auth"),
        OURS,
        "proxy_error",
        False,
    ),
    (  # tinyproxy 1.11 answers wrong credentials with 401, for CONNECT too
        "http-proxy-401",
        aiohttp.ClientHttpProxyError(_request_info(), (), status=401, message="auth"),
        OURS,
        "proxy_error",
        False,
    ),
    # the proxy answered CONNECT for one target with a refusal: the target's failure
    (
        "http-proxy-502",
        aiohttp.ClientHttpProxyError(_request_info(), (), status=502),
        RETRY,
        "proxy_http_502",
        True,
    ),
    (
        "http-proxy-503",
        aiohttp.ClientHttpProxyError(_request_info(), (), status=503),
        RETRY,
        "proxy_http_503",
        True,
    ),
    (
        "http-proxy-403",
        aiohttp.ClientHttpProxyError(_request_info(), (), status=403, message="Forbidden"),
        RETRY,
        "proxy_http_403",
        True,
    ),
    # the site's network side
    (
        "dns",
        aiohttp.ClientConnectorDNSError(_key(), OSError(-2, "Name or service not known")),
        RETRY,
        "dns_error",
        True,
    ),
    (
        "connector",
        aiohttp.ClientConnectorError(_key(), _refused()),
        RETRY,
        "connection_error",
        True,
    ),
    (
        "certificate",
        aiohttp.ClientConnectorCertificateError(_key(), ssl.CertificateError("bad cert")),
        RETRY,
        "ssl_error",
        True,
    ),
    (
        "connector-ssl",
        aiohttp.ClientConnectorSSLError(_key(), ssl.SSLError(1, "handshake")),
        RETRY,
        "ssl_error",
        True,
    ),
    ("disconnected", aiohttp.ServerDisconnectedError(), RETRY, "server_disconnected", True),
    ("client-os", aiohttp.ClientOSError(104, "reset"), RETRY, "connection_error", True),
    ("payload", aiohttp.ClientPayloadError("truncated"), RETRY, "payload_error", True),
    ("client-conn", aiohttp.ClientConnectionError("x"), RETRY, "connection_error", True),
    ("refused", _refused(), RETRY, "connection_error", True),
    ("reset", ConnectionResetError(), RETRY, "connection_error", True),
    ("os-error", OSError(113, "No route to host"), RETRY, "connection_error", True),
    ("gaierror", socket.gaierror(-2, "Name or service not known"), RETRY, "dns_error", True),
    ("ssl", ssl.SSLError(1, "bad record"), RETRY, "ssl_error", True),
    # permanent per-page errors
    (
        "redirects",
        aiohttp.TooManyRedirects(_request_info(), ()),
        FAIL,
        "redirect_loop",
        False,
    ),
    ("aiohttp-invalid-url", aiohttp.InvalidURL("http://"), FAIL, "invalid_url", False),
    ("invalid-url-client", aiohttp.InvalidUrlClientError("::"), FAIL, "invalid_url", False),
    ("non-http", aiohttp.NonHttpUrlClientError("ftp://x"), FAIL, "invalid_url", False),
    # raise_for_status() in a handler: classified by its status
    (
        "raise-for-status-404",
        aiohttp.ClientResponseError(_request_info(), (), status=404),
        FAIL,
        "http_404",
        False,
    ),
    (
        "raise-for-status-503",
        aiohttp.ClientResponseError(_request_info(), (), status=503),
        RETRY,
        "http_503",
        True,
    ),
    (
        "content-type-on-200",
        aiohttp.ContentTypeError(_request_info(), (), status=200),
        RETRY,
        "handler_error",
        False,
    ),
    # shutdown and interrupts
    ("cancelled", asyncio.CancelledError(), OURS, "cancelled", False),
    ("keyboard", KeyboardInterrupt(), OURS, "interrupted", False),
    # handler bugs say nothing about the site
    ("value-error", ValueError("bad int"), RETRY, "handler_error", False),
    ("key-error", KeyError("title"), RETRY, "handler_error", False),
    ("file-not-found", FileNotFoundError(2, "nope"), RETRY, "handler_error", False),
    ("runtime", RuntimeError("boom"), RETRY, "handler_error", False),
    ("other-scrapeq", ScrapeqError("x"), RETRY, "handler_error", False),
]


@pytest.mark.parametrize(
    ("exc", "outcome", "reason", "counts"),
    [row[1:] for row in EXCEPTION_TABLE],
    ids=[row[0] for row in EXCEPTION_TABLE],
)
def test_classify_exception_table(
    exc: BaseException, outcome: Outcome, reason: str, counts: bool
) -> None:
    verdict = classify_exception(exc)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        outcome,
        reason,
        counts,
    )
    assert verdict.message.startswith(f"{type(exc).__name__}: ")


def test_proxy_errors_subclass_the_errors_they_must_precede() -> None:
    # Why the order of the table matters: a proxy failure is also a connector/response error.
    assert issubclass(aiohttp.ClientProxyConnectionError, aiohttp.ClientConnectorError)
    assert issubclass(aiohttp.ClientHttpProxyError, aiohttp.ClientResponseError)
    assert issubclass(aiohttp.ServerTimeoutError, TimeoutError)


def test_raise_for_status_429_keeps_retry_after() -> None:
    headers = CIMultiDictProxy(CIMultiDict({"Retry-After": "45"}))
    exc = aiohttp.ClientResponseError(_request_info(), (), status=429, headers=headers)
    verdict = classify_exception(exc)
    assert (verdict.outcome, verdict.retry_after) == (THROTTLED, 45.0)


def test_exception_message_is_type_and_text_truncated() -> None:
    assert classify_exception(ValueError("bad int")).message == "ValueError: bad int"
    long = classify_exception(ValueError("x" * 2_000)).message
    assert len(long) == 500
    assert long.startswith("ValueError: xxx")
    assert long.endswith("...")


def test_exception_with_a_broken_str_is_still_classified() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    verdict = classify_exception(Broken())
    assert (verdict.reason, verdict.message) == ("handler_error", "Broken: <unprintable>")


def test_fetch_layer_errors_are_scrapeq_errors() -> None:
    for cls in (BodyTooLarge, BlockedAddress, RobotsDisallowed, OurNetworkDown):
        assert issubclass(cls, ScrapeqError)


@pytest.fixture
def no_aiohttp(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make ``import aiohttp`` fail inside classify, and reset its caches around the test."""
    classify._aiohttp_types.cache_clear()
    classify._exception_rules.cache_clear()
    monkeypatch.setitem(sys.modules, "aiohttp", None)
    yield
    monkeypatch.undo()
    classify._aiohttp_types.cache_clear()
    classify._exception_rules.cache_clear()


@pytest.mark.usefixtures("no_aiohttp")
@pytest.mark.parametrize(
    ("exc", "outcome", "reason"),
    [
        (TimeoutError(), RETRY, "timeout"),
        (ConnectionRefusedError(), RETRY, "connection_error"),
        (Permanent("x"), FAIL, "x"),
        (BodyTooLarge(), FAIL, "body_too_large"),
        (ValueError(), RETRY, "handler_error"),
    ],
)
def test_classify_exception_without_aiohttp(
    exc: BaseException, outcome: Outcome, reason: str
) -> None:
    with pytest.raises(ImportError):
        import aiohttp as _  # noqa: F401
    verdict = classify_exception(exc)
    assert (verdict.outcome, verdict.reason) == (outcome, reason)


def test_aiohttp_rules_are_back_after_the_no_aiohttp_tests() -> None:
    verdict = classify_exception(aiohttp.ClientProxyConnectionError(_key(), _refused()))
    assert verdict.outcome is OURS


@pytest.mark.backends("single")
def test_only_a_download_that_charges_its_site_nothing_may_give_its_slot_back(
    make_queue: Callable[..., Queue],
) -> None:
    """A download's sample (``outcomes.download_sample``) sent with ``Queue.downloaded``: a
    fast 2xx or a 404 tells the breaker and the adaptive limit nothing (its domain slot comes
    back before the settle); a slow 2xx, a 503, a 429 or a timeout charges the domain (the
    slot waits for the settle). Issue 39: the script decides (``lua/downloaded-1.lua``), where
    ``classify.charges_nothing`` guessed before."""
    cases = [
        (classify_response(200, None, 0.1, slow_call=5), 0.1, True),
        (classify_response(404, None, 0.1, slow_call=5), 0.1, True),
        (classify_response(200, None, 6.0, slow_call=5), 6.0, False),
        (classify_response(503, None, 0.1, slow_call=5), 0.1, False),
        (classify_response(429, {"Retry-After": "2"}, 0.1, slow_call=5), 0.1, False),
        (classify_exception(TimeoutError()), 10.0, False),
    ]
    q = make_queue(queue="charges", domain_concurrency=len(cases), slow_call=5)
    q.enqueue_many([f"https://charges.example/{i}" for i in range(len(cases))])
    jobs = sorted(q.claim(len(cases)).jobs, key=lambda j: j.url)
    assert len(jobs) == len(cases)
    samples = [download_sample(verdict, seconds) for verdict, seconds, _ in cases]
    assert q.downloaded(jobs, samples) == [given for *_, given in cases]
