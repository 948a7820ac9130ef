"""The facades' typed keyword options (engine/facades/options.py) name exactly what the methods they
feed take: a new option of ``prepare`` or of a settlement builder must be added there too."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq.engine.facades.options import (
    FailOptions,
    JobOptions,
    ReleaseOptions,
    RetryOptions,
    ThrottleOptions,
)
from scrapeq.engine.ops.core import _QueueCore


def _keyword_only(method: Callable[..., Any]) -> set[str]:
    params = inspect.signature(method).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize(
    ("options", "method"),
    [
        (JobOptions, _QueueCore.prepare),
        (RetryOptions, _QueueCore.retrying),
        (ThrottleOptions, _QueueCore.throttling),
        (FailOptions, _QueueCore.failing),
        (ReleaseOptions, _QueueCore.releasing),
    ],
)
def test_options_name_the_keywords_of_the_method_they_feed(
    options: type, method: Callable[..., Any]
) -> None:
    assert set(options.__annotations__) == _keyword_only(method)
