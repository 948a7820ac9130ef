"""What the tests of every layer share: real loopback sites, real processes and servers (each
started by scrapeq's own launcher where it is a redis-server), and the CLI run in-process.

Test modules import from here, never from one another (tests/README.md).
"""
