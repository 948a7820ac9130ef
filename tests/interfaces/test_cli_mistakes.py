"""A new user's mistakes (issue 38, items 14 and 17): each refused whole, in lines that say
how to write it, with nothing half done."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq.engine.config.settings import load_settings
from support.cli_helpers import run

pytestmark = pytest.mark.usefixtures("clean_env")


def _keys(redis_url: str) -> list[bytes]:
    return redis.Redis.from_url(redis_url).keys("sq:*")


def test_a_json_body_given_to_json_enqueues_nothing(capsys: Any, redis_url: str) -> None:
    """``--json`` is the output flag: the body after it is a second URL argument, refused,
    and the URL before it is not enqueued as a plain GET."""
    code, out, err = run(
        capsys, "--redis", redis_url, "enqueue", "https://api.example.com/search",
        "--json", '{"q": "shoes"}',
    )  # fmt: skip
    assert code == 2, (out, err)
    assert out == ""
    assert "argument 2" in err and "--json-body" in err
    assert "nothing was enqueued" in err and "Traceback" not in err
    assert _keys(redis_url) == []


def test_one_refused_argument_among_good_ones_enqueues_nothing(capsys: Any, redis_url: str) -> None:
    code, _, err = run(
        capsys, "--redis", redis_url, "enqueue", "https://a.example.com/1", "ftp://x",
        "https://a.example.com/2",
    )  # fmt: skip
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("argument 2: ftp://x") and "http and https only" in lines[0]
    assert lines[-1] == "scrapeq: error: 1 of 3 URL arguments refused: nothing was enqueued"
    assert _keys(redis_url) == []
    # the same arguments fixed go in whole
    code, out, _ = run(
        capsys, "--redis", redis_url, "enqueue", "https://a.example.com/1",
        "https://a.example.com/2", "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["added"] == 2


@pytest.mark.parametrize("url", ["127.0.0.1:8001/", "localhost:8001", "shop.example.com/p/1"])
def test_a_url_without_a_scheme_says_add_http(capsys: Any, redis_url: str, url: str) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", url)
    assert code == 2
    assert f"argument 1: {url}: no scheme: add http:// or https://" in err
    assert "unsupported scheme ''" not in err
    assert _keys(redis_url) == []


def test_two_cookies_in_one_flag_say_give_two_flags(capsys: Any, redis_url: str) -> None:
    code, _, err = run(
        capsys, "--redis", redis_url, "enqueue", "https://a.example.com/", "--cookie", "a=1; b=2"
    )
    assert code == 2
    assert "--cookie 'a=1' --cookie 'b=2'" in err
    assert len(err.strip().splitlines()) == 1
    assert _keys(redis_url) == []


def test_a_handler_named_by_its_file_says_name_the_module(
    capsys: Any, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a module name of its own: importing "x.py" imports "x" first, and leaves it in
    # sys.modules for the tests after this one (another test's handler is shop:parse)
    (tmp_path / "mistaken_shop.py").write_text("def parse(job, response):\n    return {}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mistaken_shop", raising=False)
    try:
        code, _, err = run(
            capsys, "--redis", redis_url, "worker", "--burst", "--handler",
            "mistaken_shop.py:parse",
        )  # fmt: skip
    finally:
        sys.modules.pop("mistaken_shop", None)
    assert code == 2
    assert "--handler mistaken_shop:parse" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("word", "shown"), [("yes", "on"), ("no", "off"), ("true", "on")])
def test_revisit_takes_the_boolean_words(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, word: str, shown: str
) -> None:
    monkeypatch.setenv("SCRAPEQ_REVISIT", word)
    assert load_settings().revisit == shown
    code, _, err = run(capsys, "--redis", redis_url, "status", "--json")
    assert code == 0, err


def test_revisit_refuses_other_words_naming_the_boolean_ones(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEQ_REVISIT", "maybe")
    code, _, err = run(capsys, "--redis", redis_url, "status")
    assert code == 2
    assert "expected off or on (or true/false, 1/0, yes/no), got 'maybe'" in err
