"""Partitioned queues: where a domain or job lives (``routing``), the routers
(``routers``: one partition; ``multi``: several, fanned out and merged) and the exit
pool's reads over partitions (``exit_ops``).
"""
