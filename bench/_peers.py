"""Dramatiq's and Celery's tasks for bench/incident.py, the broker at $BENCH_REDIS_URL.

Each runs ``_fetch.fetch`` (RQ runs it directly, so an RQ worker needs neither library), and
each library's own retry settings decide: 3 retries, with its exponential backoff.
"""

from __future__ import annotations

import os

import dramatiq
from celery import Celery
from dramatiq.brokers.redis import RedisBroker

from _fetch import RETRIES, TIMEOUT, FetchError, fetch

__all__ = [
    "RETRIES",
    "TIMEOUT",
    "FetchError",
    "celery_fetch",
    "dramatiq_critical",
    "dramatiq_fetch",
    "fetch",
]

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


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
