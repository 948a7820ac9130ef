"""Where results go: a JSONL file, a Redis stream, or any callable.

A sink receives one record (a dict in the INTERFACE.md results format) per attempt that
ended its job. ``write`` must not return before the record is durable enough for the job to
be acked: the worker acks only after it returns, and a sink error makes the job retry.
"""

from __future__ import annotations

from ._base import CallableSink, Sink
from .jsonl import JsonlSink
from .stream import RedisStreamSink

__all__ = ["CallableSink", "JsonlSink", "RedisStreamSink", "Sink"]
