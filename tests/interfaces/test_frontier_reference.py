"""The URLFrontier conformance suite, black box over gRPC: the reference implementation's five
tests (tests/.../URLFrontierServiceTest.java in crawler-commons/url-frontier), each also run
with a restart of the service in its middle (all state is in Redis), then scrapeq's own:
reservation by lease, updates carrying the lease back, an expired lease refused."""

from __future__ import annotations

import time
from typing import Any

import pytest

from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from support.frontier import Client, discovered, known

OK, SKIPPED, FAIL = pb.AckMessage.OK, pb.AckMessage.SKIPPED, pb.AckMessage.FAIL


@pytest.fixture(params=["steady", "restarted"])
def bounce(request: pytest.FixtureRequest, frontier: Any) -> Any:
    """Restart the service at the marked point of a test (or not)."""

    def maybe() -> None:
        if request.param == "restarted":
            frontier.restart()

    return maybe


@pytest.fixture(autouse=True)
def clean(fclient: Client) -> None:
    fclient.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="BESPOKE"))
    fclient.stub.DeleteCrawl(pb.DeleteCrawlMessage())


def test_never_refetched(fclient: Client, bounce: Any) -> None:
    acks = fclient.put([known("http://key1.com/", key="key1.com")])
    assert [a.status for a in acks] == [OK]
    bounce()
    assert fclient.get(key="key1.com", max_urls_per_queue=1, delay_requestable=2) == []
    # known for good: discovering it again does not queue it
    assert [a.status for a in fclient.put([discovered("http://key1.com/", key="key1.com")])] == [OK]
    assert fclient.get(key="key1.com", max_urls_per_queue=1, delay_requestable=2) == []


def test_right_order(fclient: Client, bounce: Any) -> None:
    now = int(time.time())
    acks = fclient.put(
        [
            known("http://key1.com/later", now, key="key1.com"),
            known("http://key1.com/sooner", now - 10000, key="key1.com"),
        ]
    )
    assert len(acks) == 2 and {a.status for a in acks} == {OK}
    bounce()
    got = fclient.get(key="key1.com", max_urls_per_queue=2, delay_requestable=2)
    assert got[0].url == "http://key1.com/sooner"


def test_updates(fclient: Client, bounce: Any) -> None:
    item = discovered("http://key1.com/", key="key1.com")
    assert len(fclient.put([item, item])) == 2
    assert list(fclient.stub.ListQueues(pb.Pagination()).values) == ["key1.com"]
    got = fclient.get(key="key1.com", max_urls_per_queue=1, delay_requestable=2)
    assert [u.url for u in got] == ["http://key1.com/"]
    stats = fclient.stats("key1.com")
    assert (stats.numberOfQueues, stats.inProcess) == (1, 1)
    bounce()
    # in process: not served again until its lease ends
    assert fclient.get(key="key1.com", max_urls_per_queue=1, delay_requestable=2) == []
    time.sleep(2.1)
    stats = fclient.stats("key1.com")
    assert (stats.numberOfQueues, stats.inProcess) == (1, 0)
    deleted = fclient.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="key1.com"))
    assert deleted.value == 1
    assert fclient.stats("key1.com").numberOfQueues == 0


def test_queue_names(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered("http://gac.icann.org?language_id=9")])
    bounce()
    assert fclient.stats("gac.icann.org").size == 1
    deleted = fclient.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="gac.icann.org"))
    assert deleted.value == 1


def test_crawl_ids(fclient: Client, bounce: Any) -> None:
    assert list(fclient.stub.ListCrawls(pb.Local()).values) == []
    fclient.put([discovered("http://urlfrontier.net/", crawl="BESPOKE")])
    fclient.put([discovered("http://urlfrontier.net/")])
    fclient.put([discovered("http://urlfrontier.net/", crawl="DEFAULT")])
    bounce()
    assert sorted(fclient.stub.ListCrawls(pb.Local()).values) == ["BESPOKE", "DEFAULT"]
    stats = fclient.stats()
    assert (stats.size, stats.crawlID, stats.numberOfQueues) == (1, "DEFAULT", 1)
    stats = fclient.stats(crawl="BESPOKE")
    assert (stats.size, stats.crawlID, stats.numberOfQueues) == (1, "BESPOKE", 1)
    fclient.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="BESPOKE"))
    stats = fclient.stats(crawl="BESPOKE")
    assert (stats.crawlID, stats.size) == ("BESPOKE", 0)
    fclient.stub.DeleteCrawl(pb.DeleteCrawlMessage())
    assert fclient.stats(crawl="").size == 0


# --- beyond the reference ----------------------------------------------------------------------


def test_a_served_url_is_reserved_until_its_lease_ends(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered(f"http://r.example/{i}") for i in range(2)])
    first = fclient.get(key="r.example", max_urls_per_queue=10, delay_requestable=2)
    served = {u.url for u in first}
    assert served == {"http://r.example/0", "http://r.example/1"}
    bounce()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert fclient.get(key="r.example", delay_requestable=2) == []
        time.sleep(0.1)
    time.sleep(0.7)
    later: set[str] = set()
    for _ in range(30):
        later |= {u.url for u in fclient.get(key="r.example", delay_requestable=30)}
        if served <= later:
            break
        time.sleep(0.1)
    assert later == served  # the lease ended: served again


def test_an_update_with_its_lease_completes_or_reschedules(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered("http://u.example/a", key="u.example", source=["seed"])])
    (info,) = fclient.get(key="u.example", delay_requestable=30)
    assert info.metadata["source"].values == ["seed"]
    assert info.metadata["scrapeq.lease"].values
    bounce()
    soon = int(time.time()) + 1
    acks = fclient.put([known(info.url, soon, key="u.example", meta=info)])
    assert [a.status for a in acks] == [OK]
    stats = fclient.stats("u.example")
    assert (stats.inProcess, stats.size) == (0, 1)
    got: list[pb.URLInfo] = []
    for _ in range(40):
        got = fclient.get(key="u.example", delay_requestable=30)
        if got:
            break
        time.sleep(0.1)
    assert [u.url for u in got] == [info.url]  # due again at its refetch date
    assert [a.status for a in fclient.put([known(info.url, 0, meta=got[0])])] == [OK]
    assert fclient.stats("u.example").size == 0
    assert fclient.get(key="u.example", delay_requestable=1) == []


def test_an_update_whose_lease_expired_is_refused(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered("http://x.example/a")])
    (old,) = fclient.get(key="x.example", delay_requestable=1)
    time.sleep(1.2)
    bounce()
    new: list[pb.URLInfo] = []
    for _ in range(30):
        new = fclient.get(key="x.example", delay_requestable=30)
        if new:
            break
        time.sleep(0.1)
    assert len(new) == 1  # served to another crawler
    acks = fclient.put([known(old.url, 0, meta=old)])
    assert [a.status for a in acks] == [FAIL]  # the old holder's update is not applied
    assert fclient.stats("x.example").inProcess == 1
    assert [a.status for a in fclient.put([known(new[0].url, 0, meta=new[0])])] == [OK]
    assert fclient.stats("x.example").inProcess == 0


def test_bad_items_are_skipped_and_the_stream_goes_on(fclient: Client) -> None:
    lease = pb.URLInfo(url="http://b.example/", crawlID="DEFAULT")
    lease.metadata["scrapeq.lease"].values.append("not a lease")
    items = [
        discovered("ftp://b.example/x"),
        discovered("http://b.example/1", crawl="no spaces allowed"),
        pb.URLItem(ID="empty"),
        pb.URLItem(known=pb.KnownURLItem(info=lease)),
        discovered("http://b.example/2", key="two words"),
        discovered("http://b.example/big", big=["x" * 1_100_000]),  # over max_payload
        discovered("http://b.example/ok"),
    ]
    acks = fclient.put(items)
    assert [a.status for a in acks] == [SKIPPED] * 6 + [OK]  # one bad item fails no other
    assert acks[2].ID == "empty" and acks[6].ID == "http://b.example/ok"


def test_a_rescheduled_url_is_held_against_an_import(fclient: Client) -> None:
    fclient.put([discovered("http://h.example/a")])
    (info,) = fclient.get(key="h.example", delay_requestable=30)
    later = int(time.time()) + 3600
    assert [a.status for a in fclient.put([known(info.url, later, meta=info)])] == [OK]
    # its next visit holds the URL: an import without the lease does not add a second one
    assert [a.status for a in fclient.put([known(info.url, later)])] == [FAIL]
    assert fclient.stats("h.example").size == 1
