"""Names are matched whole: a trailing newline passes a ``^...$`` pattern under ``re.match``
(``$`` matches before a final newline), so every name check uses ``fullmatch`` (issue 36,
item 9, and the same slip elsewhere)."""

from __future__ import annotations

import pytest

from scrapeq.engine.model.job import id_ms
from scrapeq.engine.model.keys import queue_of_marker, validate_queue_name
from scrapeq.engine.model.lanes import Lane
from scrapeq.errors import ConfigError


def test_a_queue_name_with_a_trailing_newline_is_refused() -> None:
    assert validate_queue_name("shop") == "shop"
    with pytest.raises(ValueError):
        validate_queue_name("shop\n")


def test_a_lane_name_with_a_trailing_newline_is_refused() -> None:
    assert Lane("bulk", 60.0).name == "bulk"
    with pytest.raises(ConfigError):
        Lane("bulk\n", 60.0)


def test_a_job_id_and_a_marker_key_with_a_trailing_newline_are_not_ours() -> None:
    assert id_ms("l1ab942806271") is not None
    assert id_ms("l1ab942806271\n") is None
    assert queue_of_marker("sq:{shop}:meta") == "shop"
    assert queue_of_marker("sq:{shop}:meta\n") is None
