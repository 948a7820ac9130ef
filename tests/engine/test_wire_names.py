"""One table of wire names: engine/lua/wire.py and the Lua agree (settle items, adaptive state)."""

from __future__ import annotations

import re
from importlib import resources

from scrapeq.engine.lua import wire
from scrapeq.engine.lua.scripts import EnqueueSpec, Settled, Settlement

LUA = resources.files("scrapeq.engine").joinpath("lua")


def _lua(path: str) -> str:
    return LUA.joinpath(path).read_text()


def _lua_table(text: str, name: str) -> str:
    found = re.search(rf"^(?:local )?{re.escape(name)} = \{{(.*?)\}}\n", text, re.S | re.M)
    assert found is not None, name
    return found.group(1)


def test_settle_item_names_are_one_table_in_python_and_lua() -> None:
    lua = dict(
        re.findall(r"(\w+) = '(\w+)'", _lua_table(_lua("includes/wire.lua"), "WIRE.SETTLE_ITEM"))
    )
    assert lua == dict(wire.SETTLE_ITEM)


def test_settle_checks_and_reads_exactly_the_wire_names() -> None:
    settle = _lua("settle-1.lua")
    check_item = settle.split("local function check_item(it)", 1)[1].split("\nend\n", 1)[0]
    checked = re.findall(r"check_\w+\(it\.(\w+), '(\w+)'", check_item)
    assert all(field == path for field, path in checked), checked
    assert {field for field, _ in checked} == set(wire.SETTLE_ITEM.values())
    read = set(
        re.findall(
            r"\bit\.(\w+)",
            settle
            + _lua("includes/adaptive.lua")
            + _lua("includes/exits.lua")
            + _lua("includes/revisit.lua"),
        )
    )
    assert read <= set(wire.SETTLE_ITEM.values()), read - set(wire.SETTLE_ITEM.values())


def test_a_settlement_with_every_field_sends_every_wire_name() -> None:
    spec = EnqueueSpec("https://e.com/a", "e.com", "normal", 0, 0, 5, seen={"b": 1, "f": "2"})
    full = Settlement(
        "a1", 3, "done", domain_failed=False, delay_ms=5, backoff=True, retry_after_ms=6,
        kind="k", message="m", reason="r", shutdown=True, follow=(spec,), latency_ms=7,
        overload=True, final=spec, exit_result="ok", bytes_in=9, jar={"set": []}, not_modified=True,
        changed=False, signature="0123456789abcdef", etag='"e"',
        last_modified="Wed, 01 Jan 2025 00:00:00 GMT", line='{"id":"a1"}', auto_evidence="same",
    )  # fmt: skip
    assert set(full.as_arg()) == set(wire.SETTLE_ITEM.values())
    assert set(wire.SETTLE_ITEM) == {f for f in Settlement.__dataclass_fields__}


def _item_by_rule(s: Settlement) -> dict[str, object]:
    """A settle item by the rule as_arg follows (the one it had as a filtered dict): each
    field under its wire name, left out when None, and the flags and counts below also when
    false or 0; ``final`` as its seen-set argument; ``overload`` only with a latency."""
    falsy_left_out = {"delay_ms", "backoff", "retry_after_ms", "shutdown", "follow"}
    falsy_left_out |= {"overload", "not_modified"}
    item: dict[str, object] = {}
    for name in Settlement.__dataclass_fields__:
        value = getattr(s, name)
        if name == "follow":
            value = [spec.as_arg() for spec in value]
        elif name == "final":
            value = value.seen if value is not None else None
        elif name == "overload":
            value = value and s.latency_ms is not None
        if value is None or (name in falsy_left_out and not value):
            continue
        item[wire.SETTLE_ITEM[name]] = value
    return item


def test_as_arg_sends_each_field_by_one_rule() -> None:
    """as_arg is written field by field for speed: it must say what the table says."""
    spec = EnqueueSpec("https://e.com/a", "e.com", "normal", 0, 0, 5, seen={"b": 1})
    unseen = EnqueueSpec("https://e.com/b", "e.com", "normal", 0, 0, 5)
    cases = [
        Settlement("a", 0, "done"),
        Settlement("a", 1, "retry", backoff=True, domain_failed=False, kind="timeout"),
        Settlement("a", 2, "throttle", delay_ms=0, retry_after_ms=0, overload=True),
        Settlement("a", 3, "done", latency_ms=0, overload=True, final=unseen, changed=False),
        Settlement("a", 4, "done", follow=(spec,), final=spec, bytes_in=0, exit_result="ok"),
        Settlement("a", 5, "release", shutdown=True, domain_failed=True, message=""),
        Settlement("a", 6, "done", not_modified=True, etag="", last_modified="x", line="{}"),
        Settlement("a", 7, "fail", reason="r", jar={"del": []}, signature="0123456789abcdef"),
    ]
    for case in cases:
        assert case.as_arg() == _item_by_rule(case), case


def test_adaptive_state_fields_are_one_table_in_python_and_lua() -> None:
    body = _lua_table(_lua("includes/adaptive_rule.lua"), "ADAPTIVE_FIELDS")
    assert dict(re.findall(r"\{'(\w+)', '(\w+)'\}", body)) == dict(wire.ADAPTIVE_FIELDS)


def test_the_jar_cookie_layout_flags_and_bounds_are_one_table_in_python_and_lua() -> None:
    jar = _lua("includes/jar.lua")
    fields = dict(re.findall(r"(\w+) = (\d+)", _lua_table(jar, "JAR").split("FLAGS", 1)[0]))
    assert tuple(sorted(fields, key=lambda f: int(fields[f]))) == wire.JAR_COOKIE
    assert list(map(int, fields.values())) == list(range(1, len(wire.JAR_COOKIE) + 1))
    flags = re.search(r"FLAGS = \{(.*?)\}", jar)
    assert flags is not None
    assert {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", flags.group(1))} == dict(
        wire.JAR_FLAGS
    )
    bounds = dict(re.findall(r"^  (MAX_\w+) = (\d+),", _lua_table(jar, "JAR"), re.M))
    assert {k: int(v) for k, v in bounds.items()} == dict(wire.JAR_LIMITS)
    # the merge and the checks read cookies by those positions only
    reads = set(re.findall(r"\b[ck]\[(\d)\]", jar))
    assert reads <= {str(i) for i in range(1, len(wire.JAR_COOKIE) + 1)}


def test_settle_answers_carry_the_dead_reason_and_the_drawn_delay() -> None:
    # settle-1.lua answers 'dead:<reason>' and, for a backoff item, '<status>:<delay ms>'
    dead = Settled.parse("dead:max_throttles")
    assert (dead, dead.reason, dead.delay_ms) == ("dead", "max_throttles", None)
    assert Settled.parse("dead:http_404: odd").reason == "http_404: odd"  # first colon only
    retried = Settled.parse("retried:1234")
    assert (retried, retried.reason, retried.delay_ms) == ("retried", None, 1234)
    done = Settled.parse("done")
    assert (done, done.reason, done.delay_ms) == ("done", None, None)
    assert isinstance(done, str) and {done: 1}["done"] == 1  # a status as before


def test_done_answer_notes_are_one_table_in_python_and_lua() -> None:
    body = re.search(r"DONE = \{(.*?)\}", _lua("includes/wire.lua"), re.S)
    assert body is not None
    assert tuple(re.findall(r"'(\w+)'", body.group(1))) == wire.SETTLE_DONE
    # the notes the scripts set are those names
    set_by_lua = re.findall(
        r"notes(?:\.(\w+)|\[ENQ\.cut\])", _lua("settle-1.lua") + _lua("includes/revisit.lua")
    )
    assert {n for n in set_by_lua if n} <= set(wire.SETTLE_DONE)


def test_a_done_answer_carries_the_scripts_decisions() -> None:
    plain = Settled.parse("done")
    assert (plain.changed, plain.not_modified, plain.cut, plain.over_budget) == (
        None,
        False,
        {},
        False,
    )
    same = Settled.parse("done:changed=0,not_modified=1")
    assert same == "done" and same.changed is False and same.not_modified is True
    cut = Settled.parse("done:changed=1,max_pages=2,revisit_skipped=1")
    assert cut.changed is True and cut.cut == {"max_pages": 2}
    assert cut.revisit_skipped and cut.over_budget
