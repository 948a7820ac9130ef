"""Requests as JSON: what the scheduler stores in a job's payload, and back.

Scrapy's own ``Request.to_dict`` (callbacks and errbacks by name, looked up on the spider) is
the starting point; its bytes (headers, body) become text here, so the payload is plain JSON,
never a pickle. Whatever else the dict holds (``meta``, ``cb_kwargs``, cookies) must be JSON as
it is: a request that cannot be stored raises :class:`UnstorableRequest` when it is scheduled,
naming the request and the field, instead of failing later in another process.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

from scrapeq.errors import ScrapeqError

__all__ = ["META_PREFIX", "UnstorableRequest", "decode_request", "encode_request"]

#: ``meta`` keys the integration keeps on a live request only (never stored): the claimed
#: job, the attempt's start time, whether it was settled.
META_PREFIX = "_scrapeq"
#: The version of the stored form, kept in the payload.
FORMAT = 1


class UnstorableRequest(ScrapeqError):
    """A request the scheduler cannot store as JSON (a callback that is not a spider method,
    a ``meta`` or ``cb_kwargs`` value that is not JSON)."""


def _json_field(request: Request, name: str, value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnstorableRequest(
            f"cannot store {request!r} as JSON: its {name} is not JSON ({exc})"
        ) from None
    return value


def encode_request(request: Request, spider: Spider) -> dict[str, Any]:
    """The JSON form of ``request`` (a dict of JSON values).

    Raises:
        UnstorableRequest: a callback or errback is not a method of ``spider`` (a lambda, a
            function), or a field is not JSON.
    """
    try:
        data = _as_dict(request, spider)
    except ValueError as exc:
        raise UnstorableRequest(
            f"cannot store {request!r}: its callback or errback is not a method of the spider"
            f" (a lambda, a function): {exc}"
        ) from None
    headers = data.pop("headers", {}) or {}
    data["headers"] = {
        _latin1(key): [_latin1(v) for v in values] for key, values in headers.items()
    }
    data["body"] = base64.b64encode(data.get("body") or b"").decode("ascii")
    data["meta"] = {
        k: v for k, v in (data.get("meta") or {}).items() if not k.startswith(META_PREFIX)
    }
    try:
        json.dumps(data, allow_nan=False)  # one check; a failure is then named by its field
    except (TypeError, ValueError, RecursionError) as exc:
        for name in ("meta", "cb_kwargs", "cookies", "flags", "callback", "errback", "encoding"):
            if name in data:
                _json_field(request, name, data[name])
        raise UnstorableRequest(f"cannot store {request!r} as JSON: {exc}") from None
    return {"v": FORMAT, "request": data}


def _as_dict(request: Request, spider: Spider) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, without its walk of the spider's members for the
    name of a callback that is a method of the spider by its own name (nearly all are).
    A request class with its own ``to_dict`` is left to it."""
    if type(request).to_dict is not Request.to_dict:
        return request.to_dict(spider=spider)
    names: list[Any] = []
    for func in (request.callback, request.errback):
        name = getattr(func, "__name__", None)
        if not callable(func):
            names.append(func)
        elif (
            name is not None
            and getattr(func, "__self__", None) is spider
            and getattr(spider, name, None) == func
        ):
            names.append(name)
        else:
            return request.to_dict(spider=spider)  # found, or refused, by Scrapy's search
    data: dict[str, Any] = {
        "url": request.url,
        "callback": names[0],
        "errback": names[1],
        "headers": dict(request.headers),
    }
    for attr in request.attributes:
        data.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return data


def decode_request(payload: Any, spider: Spider) -> Request:
    """The request a job's payload holds, its callbacks found on ``spider`` again.

    Raises:
        ValueError: the payload is not a stored request, or names a method the spider has not.
    """
    if not isinstance(payload, dict) or payload.get("v") != FORMAT:
        raise ValueError(f"job payload is not a stored Scrapy request: {payload!r:.200}")
    data = dict(payload["request"])
    data["body"] = base64.b64decode(data.get("body") or "")
    return request_from_dict(data, spider=spider)


def _latin1(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
