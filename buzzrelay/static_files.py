"""The staff pages' static files: collected when they change, served by the ASGI application.

`collect_static()` runs Django's `collectstatic` into STATIC_ROOT with WhiteNoise's
CompressedManifestStaticFilesStorage (hashed names such as `admin/css/base.<hash>.css`, a
manifest the templates' `{% static %}` reads, gzip copies), but only when the installed apps'
files changed since the last collection: a fingerprint of their names, sizes and modification
times is kept beside the manifest. `buzz-admin serve` (and so the quickstart) and the test suite
call it before serving; several servers starting at once wait for each other on a file lock.

`StaticFiles` answers `/static/...` from WhiteNoise's index of STATIC_ROOT before any of the
relay's HTTP stack runs (no community lookup, no body read, no Django middleware): hashed names
with `Cache-Control: max-age=315360000, public, immutable`, the unhashed ones with 60 s (their
content changes with a release), 304 on a matching ETag or date, ranges, and the gzip copy to
clients that accept it. It is ASGI-native on purpose: WhiteNoise's Django middleware answers
with a synchronous file iterator, which Django's ASGI handler reads whole on a thread and warns
about on every response.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import time
from pathlib import Path
from typing import IO, Any, TextIO

from django.conf import settings

from relaycore.asgi_types import ASGIApp, Receive, Scope, Send

__all__ = ["StaticFiles", "StaticFilesError", "collect_static", "is_collected"]


STAMP_NAME = ".buzz-collected"
MANIFEST_NAME = "staticfiles.json"
CHUNK_BYTES = 256 * 1024


class StaticFilesError(Exception):
    """The static files cannot be collected; the message is one line for the operator."""


def source_fingerprint() -> str:
    """What `collectstatic` would collect, as one hash: every source file's name, size and
    modification time (a new release or an upgraded package changes it), and the storage."""
    from django.contrib.staticfiles import finders

    digest = hashlib.sha256()
    digest.update(f"{settings.STORAGES['staticfiles']['BACKEND']}\0{settings.STATIC_URL}".encode())
    entries = []
    for finder in finders.get_finders():
        for path, storage in finder.list(None):
            stat = os.stat(storage.path(path))
            prefix = getattr(storage, "prefix", None) or ""
            entries.append(f"{prefix}/{path}\0{stat.st_size}\0{stat.st_mtime_ns}")
    for entry in sorted(entries):
        digest.update(entry.encode() + b"\n")
    return digest.hexdigest()


def _root() -> Path:
    return Path(settings.STATIC_ROOT)


def is_collected(fingerprint: str | None = None) -> bool:
    """Whether STATIC_ROOT holds the current files (manifest present, fingerprint unchanged)."""
    root = _root()
    try:
        stamp = (root / STAMP_NAME).read_text().strip()
    except OSError:
        return False
    current = fingerprint or source_fingerprint()
    return stamp == current and (root / MANIFEST_NAME).is_file()


def collect_static(*, out: TextIO | None = None) -> bool:
    """Collect the static files into STATIC_ROOT unless they are current; True when it did.

    Nothing is deleted (no `--clear`): pages rendered by the previous release, still open in
    browsers or cached, keep finding their hashed files. Prints one line when it collected.
    """
    fingerprint = source_fingerprint()
    if is_collected(fingerprint):
        return False
    root = _root()
    started = time.monotonic()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with (root / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another server collecting: wait for it
            if is_collected(fingerprint):
                return False
            count = _run_collectstatic()
            (root / STAMP_NAME).write_text(fingerprint + "\n")
    except OSError as exc:
        raise StaticFilesError(
            f"cannot write the static files to {root} ({exc.strerror or exc}): set STATIC_ROOT "
            "to a directory this user can write, or collect them beforehand as a user who can "
            "(`manage.py collectstatic --noinput`)"
        ) from None
    if out is not None:
        out.write(
            f"Collected {count} static files into {root} ({time.monotonic() - started:.1f} s)\n"
        )
        out.flush()
    return True


def _run_collectstatic() -> int:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    class Counter:
        """collectstatic's verbosity-1 summary, read for its count instead of printed."""

        text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    summary = Counter()
    try:
        call_command("collectstatic", interactive=False, verbosity=1, stdout=summary)
    except CommandError as exc:
        raise StaticFilesError(f"collectstatic failed: {exc}") from None
    words = summary.text.split()
    return int(words[0]) if words and words[0].isdigit() else 0


class StaticFiles:
    """ASGI middleware: `/static/...` answered from WhiteNoise's index of STATIC_ROOT, every other
    request passed to `app`. The index is built on the first static request (the server starts
    without walking the directory; a collection made after start-up is still found)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.prefix = "/" + settings.STATIC_URL.strip("/") + "/"
        self._whitenoise: Any = None

    def _index(self) -> Any:
        if self._whitenoise is None:
            from whitenoise.middleware import WhiteNoiseMiddleware

            # Its constructor reads the WHITENOISE_* settings and indexes STATIC_ROOT.
            self._whitenoise = WhiteNoiseMiddleware(get_response=None)
        return self._whitenoise

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        index = self._index()
        path = scope["path"]
        static_file = index.find_file(path) if index.autorefresh else index.files.get(path)
        if static_file is None:
            await self.app(scope, receive, send)
            return
        await _serve(static_file, scope, send)


async def _serve(static_file: Any, scope: Scope, send: Send) -> None:
    # WhiteNoise reads the request's headers from a WSGI environ.
    environ = {
        "HTTP_" + name.decode("latin-1").upper().replace("-", "_"): value.decode("latin-1")
        for name, value in scope["headers"]
    }
    response = static_file.get_response(scope["method"], environ)
    await send({
        "type": "http.response.start",
        "status": int(response.status),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers
        ],
    })
    handle: IO[bytes] | None = response.file
    if handle is None:
        await send({"type": "http.response.body", "body": b""})
        return
    try:
        chunk = await asyncio.to_thread(handle.read, CHUNK_BYTES)
        while True:
            # A short read is the end of the file (or of the requested range).
            full = len(chunk) == CHUNK_BYTES
            following = await asyncio.to_thread(handle.read, CHUNK_BYTES) if full else b""
            await send({"type": "http.response.body", "body": chunk,
                        "more_body": bool(following)})
            if not following:
                return
            chunk = following
    finally:
        handle.close()
