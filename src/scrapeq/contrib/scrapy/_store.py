"""Requests as JSON: what the scheduler stores in a job's payload, and back.

Scrapy's own ``Request.to_dict`` (callbacks and errbacks by name, looked up on the spider) is
the starting point; its bytes (headers, body) become text here, so the payload is plain JSON,
never a pickle. Whatever else the dict holds (``meta``, ``cb_kwargs``, cookies) must be JSON as
it is: a request that cannot be stored raises :class:`UnstorableRequest` when it is scheduled,
naming the request and the field, instead of failing later in another process.

One value that is not JSON is stored all the same: scrapy-playwright's ``PageMethod`` in
``meta["playwright_page_methods"]`` (a list or a dict of them), as its method's name, its
arguments and keyword arguments (JSON themselves), made a ``PageMethod`` again when the job is
claimed. A ``PageMethod`` that calls a function (not a Page method by name) is refused.
"""

from __future__ import annotations

import base64
import importlib
import json
import sys
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
#: scrapy-playwright's meta key of the ``PageMethod``s to call on the page, and the key of a
#: stored one (module docstring).
PAGE_METHODS = "playwright_page_methods"
PAGE_METHOD = "_scrapeq_page_method"


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
    data["meta"] = _stored_page_methods(
        request,
        {k: v for k, v in (data.get("meta") or {}).items() if not k.startswith(META_PREFIX)},
    )
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


def _stored_page_methods(request: Request, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with its scrapy-playwright ``PageMethod``s in their stored form (module
    docstring; none without scrapy-playwright imported: a spider that makes one imports it).

    Raises:
        UnstorableRequest: a ``PageMethod`` calls a function.
    """
    methods = meta.get(PAGE_METHODS)
    module = sys.modules.get("scrapy_playwright.page")
    page_method = getattr(module, "PageMethod", None)
    if methods is None or page_method is None:
        return meta

    def stored(value: Any) -> Any:
        if not isinstance(value, page_method):
            return value
        if not isinstance(value.method, str):
            raise UnstorableRequest(
                f"cannot store {request!r}: a PageMethod of its meta calls {value.method!r}; "
                f"only a Page method given by its name can be stored"
            )
        return {PAGE_METHOD: {"method": value.method, "args": list(value.args),
                              "kwargs": dict(value.kwargs)}}  # fmt: skip

    if isinstance(methods, dict):
        return {**meta, PAGE_METHODS: {k: stored(v) for k, v in methods.items()}}
    if isinstance(methods, list | tuple):
        return {**meta, PAGE_METHODS: [stored(v) for v in methods]}
    return meta


def _page_methods(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with the stored ``PageMethod``s made ``PageMethod``s again.

    Raises:
        ValueError: a stored ``PageMethod`` is malformed, or scrapy-playwright is not installed.
    """
    methods = meta.get(PAGE_METHODS)
    if not isinstance(methods, dict | list):
        return meta

    def made(value: Any) -> Any:
        if not (isinstance(value, dict) and PAGE_METHOD in value):
            return value
        try:
            page_method = importlib.import_module("scrapy_playwright.page").PageMethod
        except ImportError as exc:
            raise ValueError(f"a stored PageMethod needs scrapy-playwright: {exc}") from None
        fields = value[PAGE_METHOD]
        try:
            return page_method(fields["method"], *fields["args"], **fields["kwargs"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a stored PageMethod is malformed: {fields!r:.200}") from exc

    if isinstance(methods, dict):
        return {**meta, PAGE_METHODS: {k: made(v) for k, v in methods.items()}}
    return {**meta, PAGE_METHODS: [made(v) for v in methods]}


def decode_request(payload: Any, spider: Spider) -> Request:
    """The request a job's payload holds, its callbacks found on ``spider`` again.

    Raises:
        ValueError: the payload is not a stored request, or names a method the spider has not.
    """
    if not isinstance(payload, dict) or payload.get("v") != FORMAT:
        raise ValueError(f"job payload is not a stored Scrapy request: {payload!r:.200}")
    data = dict(payload["request"])
    data["body"] = base64.b64decode(data.get("body") or "")
    if isinstance(data.get("meta"), dict):
        data["meta"] = _page_methods(data["meta"])
    return request_from_dict(data, spider=spider)


def _latin1(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
