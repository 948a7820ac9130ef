"""Issue 24: a crawl started again. ``scrapeq crawl --new`` (``--fresh``) forgets what the
queue has seen (its seen-set, the domains' page counts that ``--max-pages`` caps) after a
confirmation (``--yes`` off a terminal), and never another queue's; without it, a crawl with
nothing to do says why and how to start again.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from scrapeq.engine.model.keys import Keys
from support.cli_helpers import run, scrub_env
from support.sites import threaded_site, tree


def _seen_keys(client: redis.Redis, queue: str) -> int:
    return sum(1 for _ in client.scan_iter(match=f"{Keys(queue).prefix}seen:*", count=1000))


def test_crawl_new_starts_again_and_touches_no_other_queue(
    capsys: Any, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    monkeypatch.setenv("SCRAPEQ_RESPECT_ROBOTS", "false")  # the pages alone are counted
    with threaded_site(tree) as site:
        crawl = [
            "--redis",
            redis_url,
            "crawl",
            site.url("/"),
            "--allow-private",
            "--max-pages",
            "3",
        ]
        code, _, err = run(capsys, *crawl)
        assert code == 0, err
        code, _, err = run(capsys, "--redis", redis_url, "--queue", "other", *crawl[2:])
        assert code == 0, err
        assert site.total == 6  # 3 pages a queue (--max-pages 3)
        other_seen = _seen_keys(redis_client, "other")

        code, _, err = run(capsys, *crawl)  # again, without --new: nothing to do, and why
        assert code == 0, err
        assert "crawl: all 1 seeds were seen before; --new starts a new crawl" in err
        assert site.total == 6

        code, _, err = run(capsys, *crawl, "--new")  # no terminal: refused, nothing changed
        assert code == 2 and "refusing to start a new crawl of queue 'default' without --yes" in err
        assert site.total == 6

        code, _, err = run(capsys, *crawl, "--fresh", "--yes")
        assert code == 0, err
        assert "crawl: new crawl of queue 'default': seen-set forgotten" in err
        assert "1 seeds enqueued (0 seen before)" in err
        assert site.total == 9, "the same 3 pages again: seen-set and page counts forgotten"

    assert _seen_keys(redis_client, "other") == other_seen > 0, "another queue is untouched"
    code, _, err = run(capsys, "--redis", redis_url, "--queue", "other", *crawl[2:])
    assert code == 0 and "all 1 seeds were seen before" in err
