"""Crawlee for Python on scrapeq: crawlee's crawlers, scrapeq's frontier.

One argument puts a crawler on scrapeq::

    from crawlee.crawlers import BeautifulSoupCrawler
    from scrapeq.contrib.crawlee import ScrapeqStorageClient

    crawler = BeautifulSoupCrawler(storage_client=ScrapeqStorageClient("redis://..."))

Every process whose crawler opens the same queue shares one frontier: per-domain politeness,
concurrency and breakers, crash-safe leases (a killed process's requests come back when their
leases run out), de-duplication by crawlee's ``unique_key`` in the queue's seen-set,
``forefront`` as the most urgent lane, and an ``is_finished`` that waits for every process's
requests. Datasets and key-value stores stay crawlee's (memory by default; ``others=`` takes
another client, such as crawlee's ``FileSystemStorageClient``).

See :mod:`._request_queue` for how each request-queue method maps onto the queue.
"""

from scrapeq.contrib.crawlee._request_queue import ScrapeqRequestQueueClient, unique_key_fingerprint
from scrapeq.contrib.crawlee._storage_client import ScrapeqStorageClient

__all__ = ["ScrapeqRequestQueueClient", "ScrapeqStorageClient", "unique_key_fingerprint"]
