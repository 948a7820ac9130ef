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


# --- Dramatiq: its default exponential backoff (from 15 s), 3 retries -----------------------

dramatiq.set_broker(RedisBroker(url=REDIS_URL))


@dramatiq.actor(max_retries=RETRIES)
def dramatiq_fetch(url: str) -> None:
    fetch(url)


# --- Celery: Redis broker, autoretry with its exponential backoff (1, 2, 4 s, jittered) ------

celery_app = Celery("incident", broker=REDIS_URL)
celery_app.conf.worker_hijack_root_logger = False


@celery_app.task(autoretry_for=(FetchError,), retry_backoff=True, max_retries=RETRIES)
def celery_fetch(url: str) -> int:
    return fetch(url)
