"""A shop whose pages are written by JavaScript, for the browser fetcher (issue 42).

Served by :class:`support.sites.Site` (``shop`` is its handler). The listing ``/`` and the
product pages ``/p/<n>`` arrive with empty containers; a script fills them from the JSON API
(``/api/products``, ``/api/p/<n>``), the product's after a timer (``?delay=<ms>``, default
150), so its content arrives after the ``load`` event. ``/static/<n>`` is the same product
written in the HTML. Pages that misbehave:

* ``/spin``: a script that never yields (``while (true)``): the page never loads;
* ``/poll``: content at once, then a request every 200 ms forever (never network-idle);
* ``/leak?mb=<n>``: holds ``n`` MB in the renderer and keeps polling for a second and a
  half (what a leaking single-page app does to a browser's RSS);
* ``/oom``: allocates until V8's heap limit kills the renderer (the browser launched with
  ``--js-flags=--max-old-space-size=64``: :data:`SMALL_HEAP`);
* ``/busy?n=<n>``: a script doing ``n`` million steps of arithmetic before the load event
  (a fixed amount of CPU work, whatever the machine's load);
* ``/steal?to=<url>``: fetches ``to`` from the page and writes what it got in ``#loot``.

:func:`list_shop` is a smaller one for the Scrapy spiders of tests/contrib (``#list`` of links,
a product's ``#title``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

#: Products of the shop.
PRODUCTS = 12
#: The chromium flag that makes ``/oom`` kill its renderer within a second.
SMALL_HEAP = "--js-flags=--max-old-space-size=64"

_LISTING = """<!doctype html><html><head><title>Shop</title></head><body>
<ul id="grid"></ul>
<script>
fetch('/api/products').then(r => r.json()).then(items => {
  const grid = document.getElementById('grid');
  for (const it of items) {
    const li = document.createElement('li');
    li.className = 'product';
    li.innerHTML = '<a href="/p/' + it.id + '">' + it.name + '</a>';
    grid.appendChild(li);
  }
});
</script></body></html>"""

_PRODUCT = """<!doctype html><html><head><title>Product</title></head><body>
<h1 class="name"></h1><span class="price"></span><img src="/img/%(n)s.png">
<script>
setTimeout(() => fetch('/api/p/%(n)s').then(r => r.json()).then(p => {
  document.querySelector('.name').textContent = p.name;
  document.querySelector('.price').textContent = p.price;
}), %(delay)s);
</script></body></html>"""

_STATIC = """<!doctype html><html><head><title>Product</title></head><body>
<h1 class="name">Product %(n)s</h1><span class="price">%(price)s</span></body></html>"""

_SPIN = "<!doctype html><html><body><p>spin</p><script>while (true) {}</script></body></html>"

_POLL = """<!doctype html><html><body><h1 class="name">Polled</h1>
<script>setInterval(() => fetch('/api/tick'), 200);</script></body></html>"""

_LEAK = """<!doctype html><html><body><h1 class="name">Leak</h1><script>
window.kept = [];
for (let i = 0; i < %(mb)s; i++) {
  const a = new Float64Array(131072); a.fill(i + 1); window.kept.push(a);
}
let n = 0;
const t = setInterval(() => { fetch('/api/tick'); if (++n >= 6) clearInterval(t); }, 250);
</script></body></html>"""

_OOM = """<!doctype html><html><body><p>oom</p><script>
const kept = []; while (true) { kept.push(new Array(1000000).fill(1.5)); }
</script></body></html>"""

#: The arithmetic of ``/busy`` (``n`` million steps), also run by node for its CPU cost.
BUSY_LOOP = """function busy(n) {
  let x = 0;
  for (let i = 0; i < n * 1000000; i++) { x = (x * 31 + i) %% 1000003; }
  return x;
}"""

_BUSY = """<!doctype html><html><body><h1 class="name">Busy</h1><p id="out"></p><script>
%(loop)s
document.getElementById('out').textContent = String(busy(%(n)s));
</script></body></html>"""

_STEAL = """<!doctype html><html><body><pre id="loot">nothing</pre><script>
fetch(%(to)s).then(r => r.text()).then(t => { document.getElementById('loot').textContent = t; },
  e => { document.getElementById('loot').textContent = 'refused'; });
</script></body></html>"""


def price(n: int) -> str:
    return f"{n * 3 + 0.99:.2f}"


def _html(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html")


async def shop(request: web.Request) -> web.StreamResponse:
    """The shop's handler (see the module's text)."""
    path = request.path
    if path == "/":
        return _html(_LISTING)
    if path == "/api/products":
        items = [{"id": n, "name": f"Product {n}"} for n in range(1, PRODUCTS + 1)]
        return web.json_response(items)
    if path.startswith("/api/p/"):
        n = int(path.rsplit("/", 1)[1])
        return web.json_response({"name": f"Product {n}", "price": price(n)})
    if path.startswith("/p/"):
        delay = int(request.query.get("delay", "150"))
        return _html(_PRODUCT % {"n": int(path.rsplit("/", 1)[1]), "delay": delay})
    if path.startswith("/static/"):
        n = int(path.rsplit("/", 1)[1])
        return _html(_STATIC % {"n": n, "price": price(n)})
    if path.startswith("/img/"):
        return web.Response(body=b"\x89PNG\r\n\x1a\n", content_type="image/png")
    if path == "/api/tick":
        return web.json_response({"ok": True})
    pages = {"/spin": _SPIN, "/poll": _POLL, "/oom": _OOM}
    if path in pages:
        return _html(pages[path])
    if path == "/leak":
        return _html(_LEAK % {"mb": int(request.query.get("mb", "100"))})
    if path == "/busy":
        return _html(_BUSY % {"loop": BUSY_LOOP % (), "n": int(request.query.get("n", "1"))})
    if path == "/steal":
        return _html(_STEAL % {"to": json.dumps(request.query["to"])})
    return web.Response(status=404, text="no such page")


async def secret(request: web.Request) -> web.StreamResponse:
    """An internal service a page must not reach."""
    return web.Response(text="the secret", headers={"Access-Control-Allow-Origin": "*"})


def list_shop(
    products: int, fill_after_ms: int = 0
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A site whose ``/`` is an empty ``#list`` a script fills with links to ``/p/0`` ..
    ``/p/<products - 1>``, and whose ``/p/N`` is an empty ``#title`` a script fills with
    ``Product N`` (``fill_after_ms`` after the page loads, or at once)."""

    async def page(request: web.Request) -> web.StreamResponse:
        if request.path == "/":
            links = "".join(f"<a href=\\'/p/{n}\\'>item {n}</a>" for n in range(products))
            script = f"document.getElementById('list').innerHTML = '{links}';"
            body = f"<div id='list'></div><script>{script}</script>"
        elif request.path.startswith("/p/"):
            n = int(request.path.rsplit("/", 1)[1])
            fill = f"document.getElementById('title').textContent = 'Product {n}';"
            if fill_after_ms:
                fill = f"setTimeout(function () {{ {fill} }}, {fill_after_ms});"
            body = f"<h1 id='title'></h1><script>{fill}</script>"
        else:
            raise web.HTTPNotFound()
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    return page
