"""``buzz-sync --watch``: rounds triggered by live WebSocket events (revisions, markers and
redactions), or by a poll timer.

PROTOCOL.md section 8: the live stream is a view, not a sync log, so a live event is only a hint
that something changed; the collection itself only ever changes through an HTTP round, which
keeps the token-beside-data guarantee. Missed hints cost latency, never correctness: a
reconnect, a ``NOTICE`` (the relay may announce dropped deliveries that way) or a ``CLOSED``
each trigger a round, and a slow poll keeps running under the live stream as a safety net.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from buzzclient.backoff import RetryPolicy
from buzzclient.errors import SyncError, Unauthorized, UnknownCommunity
from buzzclient.sync import Round, RoundSummary, Syncer
from nostr.kinds import KIND_REDACTION, SYNC_KINDS
from nostr.nip42 import make_auth

logger = logging.getLogger("buzzclient")

# Redactions too (PROTOCOL.md section 8): a redacted artifact leaves the collection in the
# round its 9005 triggers. Access changes need no kind: they arrive as NOTICE or CLOSED.
LIVE_KINDS = [*SYNC_KINDS, KIND_REDACTION]
MAX_TAG_VALUES = 256  # PROTOCOL.md section 5 bounds tag values per filter; REQ filters alike
SESSION_TIMEOUT = 10.0


class LiveHints(threading.Thread):
    """Keeps one authenticated subscription and calls ``on_hint(reason)`` when a live event, a
    notice or a reconnect suggests running a round.

    With no ``channels`` the REQ names no ``#h``: it follows every channel the reader can read,
    including channels created later. With channels, it names them (at most 256 per REQ).
    """

    def __init__(
        self,
        ws_url: str,
        secret_hex: str,
        *,
        on_hint: Callable[[str], None],
        channels: Sequence[str] = (),
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(name="buzz-sync-live", daemon=True)
        self.ws_url = ws_url
        self._secret = secret_hex
        self._on_hint = on_hint
        self.channels = sorted(set(channels))
        self._stop = threading.Event()
        self.retry = retry or RetryPolicy(base=1.0, cap=60.0)
        self.connected = threading.Event()  # authenticated and subscribed
        # What the REQs name: without 9005 after a relay refused it (`blocked:`, a relay from
        # before redactions were served live), which then still hints revisions and markers.
        self.kinds = list(LIVE_KINDS)

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        # websockets' asyncio client on a loop of this thread's own, not its threaded (sync)
        # client: that one reads the socket on a second thread while the caller writes, and
        # over TLS 1.3 that races the server's session tickets on one OpenSSL connection, which
        # does not allow it; the upgrade request was lost now and then (docs/reliability.md,
        # "Handshakes under churn"). asyncio's TLS reads and writes on one thread.
        asyncio.run(self._run())

    async def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                async with connect(self.ws_url, open_timeout=SESSION_TIMEOUT,
                                   max_size=2**22) as ws:
                    await self._session(ws, after_failure=failures > 0)
                failures = 0
            except (OSError, TimeoutError, WebSocketException, SessionError) as exc:
                failures += 1
                logger.info("live connection to %s lost: %s", self.ws_url, exc)
            finally:
                self.connected.clear()
            await self._pause(self.retry.backoff(max(failures, 1)))

    async def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, ending early once stopped."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.25))

    async def _session(self, ws: ClientConnection, *, after_failure: bool) -> None:
        challenge = (await self._expect(ws, "AUTH"))[1:2]
        if not challenge or not isinstance(challenge[0], str):
            raise SessionError("relay sent a malformed AUTH challenge")
        auth = make_auth(self._secret, challenge=challenge[0], relay_url=self.ws_url)
        await ws.send(f'["AUTH",{auth.raw}]')
        answer = await self._expect(ws, "OK")
        if len(answer) < 3 or answer[1] != auth.id or answer[2] is not True:
            raise SessionError(f"relay refused our AUTH: {answer[3] if len(answer) > 3 else ''}")
        subscriptions = await self._subscribe(ws)
        self.connected.set()
        # Whatever changed between the last round and this subscription (or while we were
        # disconnected) reached no live stream of ours: one round covers it.
        self._on_hint("reconnected" if after_failure else "subscribed")
        live: set[str] = set()
        while not self._stop.is_set():
            try:
                async with asyncio.timeout(1.0):  # cancelling recv loses no message
                    raw = await ws.recv()
            except TimeoutError:
                continue
            message = _decode(raw)
            verb = message[0] if message else None
            if verb == "EOSE" and len(message) > 1:
                live.add(message[1])  # replay done: later EVENTs are news
            elif verb == "EVENT" and len(message) > 2 and message[1] in live:
                event = message[2] if isinstance(message[2], dict) else {}
                self._on_hint(f"live event {str(event.get('id', ''))[:12]}")
            elif verb == "NOTICE":
                # The relay announces dropped live deliveries this way: a round catches up.
                logger.info("relay notice: %s", message[1] if len(message) > 1 else "")
                self._on_hint("notice")
            elif verb == "CLOSED" and len(message) > 1 and message[1] in subscriptions:
                reason = str(message[2]) if len(message) > 2 else ""
                logger.info("subscription closed by relay: %s", reason)
                if reason.startswith("blocked:") and KIND_REDACTION in self.kinds:
                    self.kinds = list(SYNC_KINDS)
                    raise SessionError("the relay does not serve redactions live: subscribing"
                                       " to revisions and markers only")
                subscriptions.remove(message[1])
                # Access to named channels was revoked: a round removes what went with it.
                self._on_hint("subscription closed")
                if not subscriptions:
                    raise SessionError(f"every subscription closed ({reason})")

    async def _subscribe(self, ws: ClientConnection) -> list[str]:
        filters: list[dict[str, Any]] = []
        # limit 1: the replay before EOSE is not needed (rounds fetch the data).
        for start in range(0, len(self.channels), MAX_TAG_VALUES):
            chunk = self.channels[start : start + MAX_TAG_VALUES]
            filters.append({"kinds": self.kinds, "#h": chunk, "limit": 1})
        if not filters:
            filters.append({"kinds": self.kinds, "limit": 1})
        sub_ids = []
        for filter_ in filters:
            sub_id = "buzz-sync-" + secrets.token_hex(4)
            await ws.send(orjson.dumps(["REQ", sub_id, filter_]).decode())
            sub_ids.append(sub_id)
        logger.info("live subscription to %s", f"{len(self.channels)} channels"
                    if self.channels else "every readable channel")
        return sub_ids

    async def _expect(self, ws: ClientConnection, verb: str) -> list[Any]:
        """Waits for a message starting with ``verb``, skipping others (notices and the like)."""
        try:
            async with asyncio.timeout(SESSION_TIMEOUT):
                while True:
                    message = _decode(await ws.recv())
                    if message and message[0] == verb:
                        return message
        except TimeoutError:
            raise SessionError(f"relay sent no {verb} within {SESSION_TIMEOUT:.0f} s") from None


class SessionError(Exception):
    pass


def _decode(raw: str | bytes) -> list[Any]:
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return message if isinstance(message, list) else []


# A burst of hints (one write can send several events: a move's revision and its marker) is
# let to arrive before the round, so that it costs one round. Short: a round started after a
# write's live event includes that write (PROTOCOL.md section 5, read-your-writes).
SETTLE_SECONDS = 0.02


def watch(
    syncer: Syncer,
    *,
    interval: float,
    report: Callable[[RoundSummary], None],
    on_error: Callable[[SyncError], None],
    on_page: Callable[[Round], None] | None = None,
    live: bool = True,
    safety_interval: float = 300.0,
    stop: threading.Event | None = None,
    on_status: Callable[[str], None] | None = None,
) -> None:
    """Run rounds until ``stop`` is set: after live hints where the relay offers
    ``artifacts.sync``, every ``interval`` seconds otherwise (and every ``safety_interval``
    under a live subscription). Errors a later round may not see again (relay down, busy,
    a malformed page) are reported and retried with backoff; a 401 or an unknown community
    end the watch. ``on_status`` hears, in words, what the watch waits for."""
    stop = stop or threading.Event()
    wake = threading.Event()
    hints: LiveHints | None = None
    failures = 0
    polling_announced = False
    backoff = RetryPolicy(base=max(interval, 1.0), cap=max(interval, 300.0))

    def status(text: str) -> None:
        if on_status is not None:
            on_status(text)

    def hint(reason: str) -> None:
        logger.info("round triggered: %s", reason)
        if reason in ("subscribed", "reconnected") and hints is not None:
            scope = (f"{len(hints.channels)} channel" + ("" if len(hints.channels) == 1 else "s")
                     if hints.channels else "every readable channel")
            status(f"live stream {reason} ({hints.ws_url}, {scope}): waiting for changes, "
                   f"with a poll every {max(interval, safety_interval):g} s as a safety net")
        wake.set()

    try:
        while not stop.is_set():
            info = None
            try:
                info = syncer.relay_info()
                report(syncer.run_round(info=info, on_page=on_page))
                failures = 0
            except (Unauthorized, UnknownCommunity):
                raise
            except SyncError as exc:
                failures += 1
                on_error(exc)
            if info is not None and live:
                if info.sync and hints is None:
                    ws_url = syncer.address.ws_url(info.sync_endpoint)
                    hints = LiveHints(ws_url, syncer.http.secret, on_hint=hint,
                                      channels=syncer.filter.channels)
                    status(f"connecting to the live stream at {ws_url}")
                    hints.start()
                elif not info.sync and hints is not None:
                    hints.stop()
                    hints = None
            if info is not None and hints is None and not polling_announced:
                polling_announced = True
                why = "the relay offers no live stream" if live else "no live stream asked for"
                status(f"{why}: polling every {interval:g} s")
            if failures:
                timeout = backoff.backoff(failures)
            elif hints is not None and hints.connected.is_set():
                timeout = max(interval, safety_interval)
            else:
                timeout = interval
            if _wait(wake, stop, timeout):
                stop.wait(SETTLE_SECONDS)
            wake.clear()
    finally:
        if hints is not None:
            hints.stop()


def _wait(event: threading.Event, stop: threading.Event, timeout: float) -> bool:
    """Waits for ``event`` up to ``timeout`` seconds, returning early (False) on ``stop``."""
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if event.wait(min(remaining, 0.25)):
            return True
    return False
