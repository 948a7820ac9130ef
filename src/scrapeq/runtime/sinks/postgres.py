"""Results into a PostgreSQL table through psycopg 3 (``pip install 'scrapeq[postgres]'``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from scrapeq.engine.model.urls import REDACTED, redact_text, redact_url
from scrapeq.errors import ConfigError

from ._base import RecordRefused
from ._batch import BatchSink
from ._rows import (
    ADDED,
    COLUMNS,
    KEY,
    LATEST,
    check_layout,
    check_types,
    create_sql,
    table_name,
    upsert_sql,
    view_sql,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresSink"]

log = logging.getLogger("scrapeq.sinks")

#: Seconds to connect, at most (unless the URL says ``connect_timeout``).
CONNECT_TIMEOUT = 10

_TYPES = {"depth": "integer", "status": "integer", "attempts": "integer", "bytes": "bigint",
          "elapsed_ms": "double precision", "finished_at": "timestamptz", "result": "jsonb",
          "links": "jsonb", "changed": "boolean", "not_modified": "boolean",
          "meta": "jsonb"}  # fmt: skip
_CASTS = {"finished_at": "::timestamptz", "result": "::jsonb", "links": "::jsonb",
          "meta": "::jsonb"}  # fmt: skip

# What an existing table's columns may be: types that keep what the sink writes as it is
# (PostgreSQL would also take, say, an integer elapsed_ms, a date finished_at or a char(n)
# job_id, rounding, cutting or padding each value; and refuses an integer finished_at only
# at the first write, every write). Names as ``regtype`` shows them; a domain is its base.
_TEXTS = frozenset({"text", "character varying", "citext"})
_INTS = frozenset({"smallint", "integer", "bigint", "numeric"})
_WANTED: dict[str, tuple[str, frozenset[str]]] = {
    **{c: ("text", _TEXTS) for c in COLUMNS},
    **{c: ("integer", _INTS) for c in ("depth", "status", "attempts")},
    "bytes": ("bigint", _INTS - {"smallint"}),
    "elapsed_ms": ("double precision", frozenset({"double precision", "real", "numeric"})),
    "finished_at": ("timestamp with time zone", _TEXTS | {"timestamp with time zone",
                                                          "timestamp without time zone"}),
    "result": ("jsonb", _TEXTS | {"jsonb", "json"}),
    "links": ("jsonb", _TEXTS | {"jsonb", "json"}),
    "meta": ("jsonb", _TEXTS | {"jsonb", "json"}),
    "changed": ("boolean", frozenset({"boolean"})),
    "not_modified": ("boolean", frozenset({"boolean"})),
}  # fmt: skip


def split_url(url: str) -> tuple[str, str]:
    """(the connection URL without ``table``, with a ``connect_timeout``; the table name)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    tables = [v for k, v in query if k == "table"]
    rest = [(k, v) for k, v in query if k != "table"]
    if not any(k == "connect_timeout" for k, _ in rest):
        rest.append(("connect_timeout", str(CONNECT_TIMEOUT)))
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    return conninfo, table_name(tables[-1] if tables else "results")


class PostgresSink(BatchSink["psycopg.Connection[Any]"]):
    """Upsert one row per job into a PostgreSQL table (``result`` and ``links`` as JSONB).

    The table (docs/INTERFACE.md, "Results in a database") is created on first use, or
    checked: a table missing a column, without a unique key on ``job_id`` alone, or with a
    column whose type cannot hold what the sink writes there as it is (an integer
    ``finished_at``), is a ConfigError before anything is written. Each batch is one
    transaction; a connection lost is opened again by the next batch (the jobs of the failed
    one are released, and a batch that did commit before the loss is upserted again: one row
    per job still).

    Args:
        url: ``postgresql://user[:password]@host[:port]/db[?table=NAME&...]`` (other
            parameters go to libpq; ``table`` defaults to ``results``).
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        self._conninfo, self.table = split_url(url)
        self.shown = redact_url(url)  # user info and ?password= as ***
        self._secrets = _passwords(url)
        self._upsert = upsert_sql(self.table, ("%s" + _CASTS.get(c, "") for c in COLUMNS))

    def _connect(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed:
            import psycopg

            self._db = psycopg.connect(self._conninfo, autocommit=False)
        return self._db

    def _prepare(self) -> None:
        import psycopg

        try:
            db = self._connect()
            with db.transaction():
                db.execute(create_sql(self.table, _TYPES, "text", ("url", "outcome")))
                added = _migrate(db, self.table)
            _check_layout(db, self.table)
            _make_view(db, self.table, again=added)
        except psycopg.Error as exc:
            self._disconnect()
            raise ConfigError("results", f"postgresql: {self._said(exc)}") from None

    def _said(self, exc: BaseException) -> str:
        """libpq's first line about ``exc``, without a password: the URL's passwords (as
        written and decoded) and any ``password=`` or URL credentials in it are ``***``; its
        message about a bad ``%`` escape, which quotes the token (the password, often), is
        not echoed."""
        line = _first_line(exc)
        if "percent-encoded" in line:
            return "a '%' in the URL does not start a percent-encoded %XX escape (write '%' as %25)"
        for secret in sorted(self._secrets, key=len, reverse=True):
            line = line.replace(secret, REDACTED)
        return redact_text(line)

    def _write(self, db: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]) -> None:
        with db.transaction(), db.cursor() as cur:
            cur.executemany(self._upsert, rows)

    def _row_error(self, exc: Exception) -> bool:
        import psycopg

        return isinstance(exc, psycopg.DataError | psycopg.IntegrityError)

    def _refused(self, exc: Exception) -> RecordRefused:
        return RecordRefused(self._said(exc))


def _columns(db: psycopg.Connection[Any], table: str) -> set[str]:
    return {
        name
        for (name,) in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped",
            (table,),
        )
    }


def _migrate(db: psycopg.Connection[Any], table: str) -> bool:
    """Add the columns of :data:`ADDED` the table lacks (a table of an earlier scrapeq), in the
    caller's transaction; answers whether it added any."""
    missing = [c for c in ADDED if c not in _columns(db, table)]
    for column in missing:
        db.execute(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {_TYPES.get(column, 'text')}"
        )
    return bool(missing)


def _make_view(db: psycopg.Connection[Any], table: str, *, again: bool) -> None:
    """The view ``<table>_latest`` (``_rows.view_sql``), made when missing, or ``again``
    (columns were added). A relation of that name that is not a view is left alone; another
    worker making the view at the same time is fine."""
    import psycopg

    select = view_sql(table)
    if select is None:
        return
    view = table + LATEST
    with db.transaction():
        found = db.execute(
            "SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", (view,)
        ).fetchone()
    if found is not None and (found[0] != "v" or not again):
        if found[0] != "v":
            log.warning("results table %s: %s is not scrapeq's view of each URL's latest "
                        "row: left as it is", table, view)  # fmt: skip
        return
    try:
        with db.transaction():
            db.execute(f"DROP VIEW IF EXISTS {view}")
            db.execute(f"CREATE VIEW {view} AS {select}")
    except (psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation):
        pass  # another worker made it


def _check_layout(db: psycopg.Connection[Any], table: str) -> None:
    with db.transaction():
        have = {
            name: (shown, base)
            for name, shown, base in db.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
                "(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END)::regtype "
                "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                (table,),
            )
        }
        keyed = db.execute(
            "SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = i.indkey[0] WHERE i.indrelid = %s::regclass AND i.indisunique "
            "AND i.indnatts = 1 AND i.indpred IS NULL AND a.attname = %s",
            (table, KEY),
        ).fetchone()
    check_layout(table, have, lambda: keyed is not None)
    check_types(table, have, _WANTED)


def _passwords(url: str) -> set[str]:
    """The passwords ``url`` holds (its user info's, ``password`` and ``sslpassword``
    parameters'), as written and percent-decoded; none shorter than 3 characters (replacing
    those would garble a message, and they say little)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    userinfo, at, _ = parts.netloc.rpartition("@")
    found = {userinfo.partition(":")[2]} if at else set()
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if unquote(key).lower() in ("password", "sslpassword"):
            found.add(value)
    found |= {unquote(v) for v in found} | {unquote(v.replace("+", " ")) for v in found}
    return {v for v in found if len(v) >= 3}


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
