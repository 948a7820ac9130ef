"""Crawlee's own request-queue behaviour, checked against scrapeq's client.

Each test re-states, against :class:`~scrapeq.contrib.crawlee.ScrapeqStorageClient` and a real
redis-server, a scenario of crawlee-python's ``tests/unit/storages/test_request_queue.py``
(named in its docstring). What scrapeq deliberately does otherwise is skipped, the reason
beside it. The queue here allows 64 requests of one domain at a time: crawlee's tests fetch
several requests of one host without handling them, which scrapeq's per-domain concurrency
(``auto``: 2 to start) would hold back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

pytest.importorskip("crawlee")

from crawlee import Request
from crawlee.storages import RequestQueue

from scrapeq.contrib.crawlee import ScrapeqStorageClient
from scrapeq.engine.config.settings import Settings

FIFO = "scrapeq orders one lane's jobs by eligibility, not crawlee's exact FIFO/LIFO positions"


def storage(redis_url: str) -> ScrapeqStorageClient:
    return ScrapeqStorageClient(
        redis_url, settings=Settings(queue="conformance", domain_concurrency=64)
    )


@pytest.fixture
async def rq(redis_url: str) -> AsyncIterator[RequestQueue]:
    queue = await RequestQueue.open(storage_client=storage(redis_url))
    yield queue
    await queue.drop()


async def drain(rq: RequestQueue) -> list[str]:
    """Fetch and handle everything there is; the URLs in the order fetched."""
    urls = []
    while (request := await rq.fetch_next_request()) is not None:
        urls.append(request.url)
        await rq.mark_request_as_handled(request)
    return urls


async def test_open_creates_new_rq(redis_url: str) -> None:
    """test_open_creates_new_rq: a named queue opens empty, with its name."""
    rq = await RequestQueue.open(name="new-request-queue", storage_client=storage(redis_url))
    assert rq.name == "new-request-queue" and rq.id
    metadata = await rq.get_metadata()
    assert (metadata.pending_request_count, metadata.handled_request_count) == (0, 0)
    assert metadata.total_request_count == 0
    await rq.drop()


async def test_open_existing_rq_shares_its_requests(redis_url: str) -> None:
    """test_open_existing_rq, and what scrapeq adds: another client (another process) that
    opens the same name sees the same requests."""
    one = await RequestQueue.open(name="shared", storage_client=storage(redis_url))
    await one.add_request("https://example.com/a")
    other = await RequestQueue.open(name="shared", storage_client=storage(redis_url))
    assert other.id == one.id
    fetched = await other.fetch_next_request()
    assert fetched is not None and fetched.url == "https://example.com/a"
    assert not await one.is_finished()  # in progress elsewhere
    await other.mark_request_as_handled(fetched)
    assert await one.is_finished()
    await one.drop()


@pytest.mark.parametrize("as_object", [False, True])
async def test_add_request(rq: RequestQueue, as_object: bool) -> None:
    """test_add_request_string_url, test_add_request_object."""
    added = await rq.add_request(
        Request.from_url("https://example.com", user_data={"key": "value"})
        if as_object
        else "https://example.com"
    )
    assert added is not None and added.unique_key
    assert not added.was_already_present and not added.was_already_handled
    metadata = await rq.get_metadata()
    assert (metadata.total_request_count, metadata.pending_request_count) == (1, 1)


async def test_add_duplicate_request(rq: RequestQueue) -> None:
    """test_add_duplicate_request: the second add is known, counted once."""
    first = await rq.add_request("https://example.com")
    second = await rq.add_request("https://example.com")
    assert first is not None and second is not None
    assert second.was_already_present and second.unique_key == first.unique_key
    metadata = await rq.get_metadata()
    assert (metadata.total_request_count, metadata.pending_request_count) == (1, 1)


async def test_add_requests_batch(rq: RequestQueue) -> None:
    """test_add_requests_batch."""
    await rq.add_requests([f"https://example.com/page{n}" for n in (1, 2, 3)])
    metadata = await rq.get_metadata()
    assert (metadata.total_request_count, metadata.pending_request_count) == (3, 3)


async def test_add_requests_batch_with_forefront(rq: RequestQueue) -> None:
    """test_add_requests_batch_with_forefront: forefront requests first, then the others in
    the order added, then nothing."""
    await rq.add_request("https://example.com/page1")
    await rq.add_request("https://example.com/page2")
    await rq.add_requests([f"https://example.com/priority{n}" for n in (1, 2, 3)], forefront=True)
    fetched = []
    for _ in range(5):
        request = await rq.fetch_next_request()
        assert request is not None
        fetched.append(request.url)
    assert all(url.startswith("https://example.com/priority") for url in fetched[:3])
    assert fetched[3:] == ["https://example.com/page1", "https://example.com/page2"]
    assert await rq.fetch_next_request() is None


async def test_add_requests_with_forefront(rq: RequestQueue) -> None:
    """test_add_requests_with_forefront."""
    await rq.add_request("https://example.com/page1")
    await rq.add_request("https://example.com/page2")
    await rq.add_request("https://example.com/priority", forefront=True)
    request = await rq.fetch_next_request()
    assert request is not None and request.url == "https://example.com/priority"


@pytest.mark.skip(reason=f"{FIFO}: the newest forefront request is not put before older ones")
async def test_add_requests_mixed_forefront() -> None:
    """test_add_requests_mixed_forefront asserts the last forefront request comes first
    (LIFO among forefront requests); scrapeq's urgent lane is FIFO like every lane."""


async def test_add_requests_mixed_forefront_as_lanes(rq: RequestQueue) -> None:
    """test_add_requests_mixed_forefront, as scrapeq orders it: every forefront request
    (urgent lane) before every other, each lane in the order added."""
    await rq.add_request("https://example.com/normal1")
    await rq.add_request("https://example.com/normal2")
    await rq.add_requests(["https://example.com/priority1", "https://example.com/priority2"],
                          forefront=True)  # fmt: skip
    await rq.add_request("https://example.com/normal3")
    await rq.add_request("https://example.com/priority3", forefront=True)
    fetched = await drain(rq)
    assert fetched == [f"https://example.com/priority{n}" for n in (1, 2, 3)] + [
        f"https://example.com/normal{n}" for n in (1, 2, 3)
    ]


async def test_fetch_next_request_and_mark_handled(rq: RequestQueue) -> None:
    """test_fetch_next_request_and_mark_handled."""
    await rq.add_request("https://example.com/page1")
    await rq.add_request("https://example.com/page2")
    first = await rq.fetch_next_request()
    assert first is not None and first.url == "https://example.com/page1"
    handled = await rq.mark_request_as_handled(first)
    assert handled is not None and handled.was_already_handled
    second = await rq.fetch_next_request()
    assert second is not None and second.url == "https://example.com/page2"
    await rq.mark_request_as_handled(second)
    metadata = await rq.get_metadata()
    assert metadata.total_request_count == 2
    assert (metadata.handled_request_count, metadata.pending_request_count) == (2, 0)
    assert await rq.fetch_next_request() is None


async def test_get_request_while_in_progress(rq: RequestQueue) -> None:
    """test_get_request_by_id, for a request this client holds."""
    added = await rq.add_request("https://example.com")
    assert added is not None
    await rq.fetch_next_request()
    got = await rq.get_request(added.unique_key)
    assert got is not None and got.unique_key == added.unique_key
    assert got.url == "https://example.com"


@pytest.mark.skip(
    reason="the queue keeps no index by crawlee's unique_key: get_request answers only for a "
    "request this client holds (fetched, not handled); a pending or handled one is None"
)
async def test_get_request_by_id_pending_or_handled() -> None:
    """test_get_request_by_id (pending), test_handled_request_records_persistence (handled)."""


async def test_get_non_existent_request(rq: RequestQueue) -> None:
    """test_get_non_existent_request."""
    assert await rq.get_request("non-existent-id") is None


async def test_reclaim_request(rq: RequestQueue) -> None:
    """test_reclaim_request."""
    await rq.add_request("https://example.com")
    request = await rq.fetch_next_request()
    assert request is not None
    reclaimed = await rq.reclaim_request(request)
    assert reclaimed is not None and not reclaimed.was_already_handled
    again = await rq.fetch_next_request()
    assert again is not None
    assert (again.unique_key, again.url) == (request.unique_key, "https://example.com")


async def test_reclaim_request_with_forefront(rq: RequestQueue) -> None:
    """test_reclaim_request_with_forefront."""
    await rq.add_request("https://example.com/first")
    await rq.add_request("https://example.com/second")
    first = await rq.fetch_next_request()
    assert first is not None and first.url == "https://example.com/first"
    await rq.reclaim_request(first, forefront=True)
    again = await rq.fetch_next_request()
    assert again is not None and again.url == "https://example.com/first"


async def test_reclaim_request_with_change_state(rq: RequestQueue) -> None:
    """test_reclaim_request_with_change_state: what the reclaim changed is kept."""
    await rq.add_request(
        Request.from_url("https://example.com/original", user_data={"state": "original"})
    )
    request = await rq.fetch_next_request()
    assert request is not None and request.user_data["state"] == "original"
    request.user_data["state"] = "modified"
    reclaimed = await rq.reclaim_request(request)
    assert reclaimed is not None and not reclaimed.was_already_handled
    again = await rq.fetch_next_request()
    assert again is not None and again.user_data["state"] == "modified"


async def test_is_empty_and_is_finished(rq: RequestQueue) -> None:
    """test_is_empty_and_is_finished."""
    assert await rq.is_empty() and await rq.is_finished()
    await rq.add_request("https://example.com")
    assert not await rq.is_empty() and not await rq.is_finished()
    request = await rq.fetch_next_request()
    assert request is not None
    assert await rq.is_empty()  # nothing to fetch
    assert not await rq.is_finished()  # one in progress
    await rq.mark_request_as_handled(request)
    assert await rq.is_empty() and await rq.is_finished()


@pytest.mark.parametrize("wait_for_all", [True, False])
async def test_add_requests_wait_for_all(rq: RequestQueue, wait_for_all: bool) -> None:
    """test_add_requests_wait_for_all: 15 requests in batches of 5, waited for or not."""
    await rq.add_requests(
        [f"https://example.com/{n}" for n in range(15)],
        batch_size=5,
        wait_for_all_requests_to_be_added=wait_for_all,
        wait_time_between_batches=timedelta(milliseconds=50),
    )
    for _ in range(100):
        if await rq.get_total_count() >= 15:
            break
        await asyncio.sleep(0.05)
    assert await rq.get_total_count() == 15


async def test_is_finished_waits_for_background_adds(rq: RequestQueue) -> None:
    """test_is_finished: not finished while requests are added in the background."""
    assert await rq.is_finished()
    await rq.add_request("https://example.com")
    assert not await rq.is_finished()
    await rq.add_requests(
        ["https://example.com/1", "https://example.com/2"],
        wait_for_all_requests_to_be_added=False,
    )
    assert not await rq.is_finished()
    for _ in range(100):
        if not rq._add_requests_tasks:
            break
        await asyncio.sleep(0.01)
    assert len(await drain(rq)) == 3
    assert await rq.is_finished()


async def test_mark_or_reclaim_a_request_not_in_progress(rq: RequestQueue) -> None:
    """test_mark_non_existent_request_as_handled, test_reclaim_non_existent_request."""
    request = Request.from_url(url="https://example.com", id="non-existent-id")
    assert await rq.mark_request_as_handled(request) is None
    assert await rq.reclaim_request(request) is None


async def test_drop(redis_url: str) -> None:
    """test_drop: a dropped queue opened again by its name is empty."""
    rq = await RequestQueue.open(name="drop-test", storage_client=storage(redis_url))
    await rq.add_request("https://example.com")
    await rq.drop()
    again = await RequestQueue.open(name="drop-test", storage_client=storage(redis_url))
    assert await again.is_empty()
    metadata = await again.get_metadata()
    assert (metadata.total_request_count, metadata.pending_request_count) == (0, 0)
    await again.drop()


async def test_purge(rq: RequestQueue) -> None:
    """test_purge: a purged queue is empty, and a request purged can be added again."""
    await rq.add_requests(["https://example.com/1", "https://example.com/2"])
    await rq.purge()
    assert await rq.is_empty() and await rq.is_finished()
    added = await rq.add_request("https://example.com/1")
    assert added is not None and not added.was_already_present


@pytest.mark.skip(
    reason="every scrapeq queue is named (shared by every process on the Redis): crawlee's "
    "purge_on_start, which purges unnamed storages only, never clears it; purge() does"
)
async def test_purge_on_start_enabled() -> None:
    """test_purge_on_start_enabled."""


async def test_handled_request_is_not_added_again(rq: RequestQueue) -> None:
    """test_add_request after handling (the memory client's was_already_handled): a request
    handled is known for good and never fetched again. scrapeq answers was_already_present;
    whether it was handled or is pending is not told apart (was_already_handled False)."""
    await rq.add_request("https://example.com")
    request = await rq.fetch_next_request()
    assert request is not None
    await rq.mark_request_as_handled(request)
    again = await rq.add_request("https://example.com")
    assert again is not None and again.was_already_present
    assert await rq.fetch_next_request() is None


async def test_request_with_noascii_chars(rq: RequestQueue) -> None:
    """test_request_with_noascii_chars."""
    data = {"record_1": "Supermaxi El Jardín", "record_2": "záznam dva", "record_3": "記録三"}
    sent = Request.from_url("https://crawlee.dev", user_data=data)
    await rq.add_request(sent)
    request = await rq.fetch_next_request()
    assert request is not None and request.url == "https://crawlee.dev"
    assert request.user_data == sent.user_data


async def test_alias_queues_are_apart(redis_url: str) -> None:
    """test_alias_vs_named_isolation, test_multiple_alias_isolation: queues of two aliases
    hold their own requests."""
    client = storage(redis_url)
    one = await RequestQueue.open(alias="one", storage_client=client)
    two = await RequestQueue.open(alias="two", storage_client=client)
    await one.add_request("https://example.com/one")
    assert await two.is_empty()
    request = await one.fetch_next_request()
    assert request is not None and request.url == "https://example.com/one"
    await one.drop()
    await two.drop()
