"""The dashboard's page: ``static/index.html`` with its script and style sheet, and the sign-in
page (``static/login.html``), all package data (no network at run time, no build step)."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

__all__ = ["CSP", "LOGIN_PAGE", "STATIC", "index", "static"]

#: The page's files, shipped as package data (no network at run time, no build step).
STATIC = resources.files("scrapeq.interfaces") / "static"
_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
#: Only the page's own files, only same-origin fetches; nothing inline, no frames.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def static_file(name: str) -> web.Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in _STATIC_TYPES:
        raise web.HTTPNotFound()
    resource = STATIC / name
    if not resource.is_file():
        raise web.HTTPNotFound()
    return web.Response(
        body=resource.read_bytes(),
        content_type=_STATIC_TYPES[suffix],
        charset="utf-8",
        headers={"Content-Security-Policy": CSP},
    )


async def index(request: web.Request) -> web.Response:
    return static_file("index.html")


async def static(request: web.Request) -> web.Response:
    return static_file(request.match_info["name"])


#: Shown instead of the page when a token is required and none was presented.
LOGIN_PAGE = (STATIC / "login.html").read_text(encoding="utf-8")
