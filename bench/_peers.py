"""The peers' tasks for bench/incident.py: one fetch per job, the broker at $BENCH_REDIS_URL.

RQ, Dramatiq and Celery run sync functions; each fetches with the standard library's
``urllib`` (as ``requests`` would: the 30 s timeout is a socket timeout, per connect and per
read, not a total deadline) and raises :class:`FetchError` for what is worth a retry (a
network error, a timeout, a 5xx, 408 or 429), so each library's own retry settings decide:
3 retries, with its exponential backoff where it has one. A 4xx is a plain failure.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import dramatiq
from celery import Celery
from dramatiq.brokers.redis import RedisBroker

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
TIMEOUT = 30.0
RETRIES = 3

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FetchError(Exception):
    """A failure worth a retry."""


def fetch(url: str) -> int:
    """Fetch ``url`` (the whole body); its status, or FetchError when worth a retry."""
    try:
        with _opener.open(url, timeout=TIMEOUT) as resp:
            resp.read()
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        status = exc.code
    except OSError as exc:  # timeouts, refused and reset connections
        raise FetchError(f"{url}: {exc}") from exc
    if status >= 500 or status in (408, 429):
        raise FetchError(f"{url}: HTTP {status}")
    return status


# --- Dramatiq: its default exponential backoff (from 15 s), 3 retries; the critical burst on
# its own queue, by an actor of higher priority ------------------------------------------------

dramatiq.set_broker(RedisBroker(url=REDIS_URL))


@dramatiq.actor(max_retries=RETRIES, priority=10)
def dramatiq_fetch(url: str) -> None:
    fetch(url)


@dramatiq.actor(max_retries=RETRIES, queue_name="critical", priority=0)  # lower runs first
def dramatiq_critical(url: str) -> None:
    fetch(url)


# --- Celery: Redis broker, autoretry with its exponential backoff (1, 2, 4 s, jittered) ------

celery_app = Celery("incident", broker=REDIS_URL)
celery_app.conf.worker_hijack_root_logger = False
# The critical queue first, always (kombu's default cycles the queues for fairness).
celery_app.conf.broker_transport_options = {"queue_order_strategy": "priority"}


@celery_app.task(autoretry_for=(FetchError,), retry_backoff=True, max_retries=RETRIES)
def celery_fetch(url: str) -> int:
    return fetch(url)
