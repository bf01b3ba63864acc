"""`/app/`: the task board built on buzz-sync-js (buzz-sync-js/app/), when RELAY_APP is on.

The page is static: its script and style are built from buzz-sync-js/app/ into
buzzrelay/static/buzz-app/ (committed; tests/buzz_sync_js/test_app_page.py checks they match
the source) and served like the admin's files (WhiteNoise, hashed names). The page talks to the
relay it was loaded from, as any client would: NIP-11, `POST /query`, `POST /event`, the
WebSocket. Off, `/app/` is the relay's JSON 404.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render


def app_page(request: HttpRequest) -> HttpResponse:
    if not settings.RELAY_APP_ENABLED:
        raise Http404("the task board is not enabled (RELAY_APP)")
    response = render(request, "buzz-app/index.html")
    # Everything the page loads is its own: no CDN, no inline script. 'wasm-unsafe-eval' lets
    # the page compile its own WebAssembly (libsecp256k1, built by buzz-sync-js/verifier/ and
    # bundled, served from 'self', in the page and in its verify worker): signature checks ~16x
    # cheaper than pure JS (docs/performance.md), which were most of a first sync's time.
    # It allows WebAssembly compilation only, not eval() of strings; this page only.
    response["Content-Security-Policy"] = (
        "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
        "style-src 'self'; script-src 'self' 'wasm-unsafe-eval'; base-uri 'none'; "
        "frame-ancestors 'none'"
    )
    response["Cache-Control"] = "no-cache"
    return response
