"""The script table, the includes and the calling convention agree with the Lua files."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest
import redis

from scrapeq.engine.lua import scripts
from scrapeq.engine.model.job import Job
from scrapeq.errors import NotFound, ScriptError

pytestmark = pytest.mark.backends

LUA = resources.files("scrapeq.engine").joinpath("lua")


def _lua_files() -> set[str]:
    return {p.name for p in LUA.iterdir() if p.name.endswith(".lua")}


def test_every_lua_file_is_in_the_table_and_back() -> None:
    assert set(scripts.SCRIPTS.values()) == _lua_files()


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_file_name_declares_one_key_and_header_documents_it(name: str) -> None:
    filename = scripts.SCRIPTS[name]
    assert re.fullmatch(rf"{name}-(\d+)\.lua", filename)
    num_keys = int(filename.rsplit("-", 1)[1].removesuffix(".lua"))
    text = LUA.joinpath(filename).read_text()
    assert num_keys == 1, "every script takes only the queue prefix as KEYS[1]"
    assert text.startswith("--[["), "every script opens with a header comment"
    assert "KEYS[1]" in text.split("]]", 1)[0]
    assert "Output" in text.split("]]", 1)[0]
    assert "KEYS[2]" not in text


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_includes_expand_once_and_exist(name: str) -> None:
    source = scripts.load_source(name)
    assert "--@include" not in source
    assert source.count("local P = KEYS[1]") == 1


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_every_script_compiles_on_the_server(name: str, redis_client: redis.Redis) -> None:
    sha = redis_client.script_load(scripts.load_source(name))
    assert redis_client.script_exists(sha) == [True]


def test_error_codes_map_to_exceptions() -> None:
    assert isinstance(scripts.map_error("SQ_UNKNOWN_DOMAIN a.example"), NotFound)
    assert isinstance(scripts.map_error("ERR SQ_BAD_OUTCOME nope"), ScriptError)
    assert isinstance(scripts.map_error("something else"), ScriptError)


def test_script_config_is_in_milliseconds() -> None:
    from scrapeq.engine.config.settings import Settings

    cfg = scripts.ScriptConfig.from_settings(Settings(lease=1.5, breaker_cooldown=2))
    assert cfg.lease_ms == 1500
    assert cfg.cool_ms == 2000


def test_script_config_carries_the_release_budget() -> None:
    from scrapeq.engine.config.settings import Settings

    assert scripts.ScriptConfig.from_settings(Settings(max_releases=4)).max_releases == 4
    assert '"max_releases": 20' in scripts.ScriptConfig.from_settings(Settings()).to_json()


def test_script_config_keeps_no_default_of_a_setting() -> None:
    """Issue 39: the settings' defaults live in Settings only; ScriptConfig's fields have none
    (a field from_settings forgot is a TypeError), but for the engine's two constants."""
    import dataclasses

    with_default = [
        f.name
        for f in dataclasses.fields(scripts.ScriptConfig)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]
    assert with_default == ["batch", "claim_bytes"]
    with pytest.raises(TypeError):
        scripts.ScriptConfig()  # type: ignore[call-arg]


def test_transient_refusals_map_to_redis_unavailable() -> None:
    from scrapeq.errors import RedisUnavailable

    reply = (
        "Error running script (call to f_1): @user_script:430: @user_script: 430: "
        "-NOREPLICAS Not enough good replicas to write."
    )
    assert isinstance(scripts.map_error(reply), RedisUnavailable)
    assert isinstance(
        scripts.map_error("READONLY You can't write against a replica."), RedisUnavailable
    )
    assert isinstance(scripts.map_error("Error running script: bad json"), ScriptError)


def test_an_error_whose_code_redis_py_took_off_is_mapped_by_its_code() -> None:
    import redis

    from scrapeq.errors import RedisUnavailable

    full = "command not allowed when used memory > 'maxmemory'."  # as redis-py leaves it
    oom = redis.exceptions.OutOfMemoryError(full, status_code="OOM")
    assert isinstance(scripts.map_error(oom), RedisUnavailable)
    replica = redis.exceptions.ReadOnlyError("You can't write against a replica.",
                                             status_code="READONLY")  # fmt: skip
    assert isinstance(scripts.map_error(replica), RedisUnavailable)
    refused = redis.ResponseError("SQ_BAD_ARG n: expected", status_code="SQ_BAD_ARG")
    assert isinstance(scripts.map_error(refused), ScriptError)


def test_call_arguments_are_compact_json_and_what_orjson_refuses_still_encodes() -> None:
    call = scripts.settle([scripts.Settlement("j1", 7, "done", domain_failed=False)])
    args = json.loads(call.args)
    assert args["items"] == [{"id": "j1", "token": 7, "outcome": "done", "domain_failed": False}]
    assert " " not in call.args  # compact: it is sent with every call
    # a lone surrogate (orjson refuses it) becomes "?" instead of failing the whole batch
    bad = b"\xff".decode("utf-8", "surrogateescape")
    odd = scripts.settle([scripts.Settlement("j2", 1, "retry", kind="x", message=f"a{bad}b")])
    assert json.loads(odd.args)["items"][0]["message"] == "a?b"
    # an integer over 64 bits (orjson refuses it) is written by json, exactly
    big = scripts._call("status", str, n=2**70)
    assert json.loads(big.args) == {"n": 2**70}


def test_job_from_json_reads_what_orjson_refuses_too() -> None:
    text = json.dumps(
        {
            "id": "a",
            "url": "http://e.com/",
            "domain": "e.com",
            "lane": "default",
            "attempts": 1,
            "max_attempts": 3,
            "token": 2**70,
        }
    )
    job = Job.from_json(text)
    assert (job.id, job.attempts, job.token) == ("a", 1, 2**70)
    with pytest.raises(ValueError):
        Job.from_json("{not json")
