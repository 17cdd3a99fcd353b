"""The thread browser served at ``/`` by ``tplog serve``: one HTML page, a stylesheet and a
few small vanilla ES modules, shipped as package data (no build step, no CDN). The script reads the
server's JSON endpoints and follows a thread's SSE tail; it never puts stored text into HTML
(every string goes in through ``textContent``/attributes), and loads no remote URL: a stored
image or file at a web address is shown as a link (the app's Content-Security-Policy, set on
every response by :mod:`tplog.integrations.server.security`, allows ``'self'`` and ``data:`` only).
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["ASSETS", "browser_routes"]

#: the files under ``/ui/`` and their media types; nothing else is served from the package
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "list.js": "text/javascript; charset=utf-8",
    "thread.js": "text/javascript; charset=utf-8",
    "family.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}

@functools.cache
def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


async def _index(request: Request) -> Response:
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8",
                    headers={"cache-control": "no-cache"})


async def _ui(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return Response(f"no asset {name!r}\n", status_code=404, media_type="text/plain")
    return Response(_asset(name), media_type=ASSETS[name], headers={"cache-control": "no-cache"})


def browser_routes() -> list[Route]:
    """``GET /`` (the page) and ``GET /ui/{name}`` (its script and stylesheet)."""
    return [Route("/", _index, methods=["GET"]), Route("/ui/{name}", _ui, methods=["GET"])]
