"""Fleet registry (PROTOCOL.md section 7 item 4): every serving process registers in PostgreSQL.

Each process registers a row in `relay_instances` (host, pid, version, stamping capability, key
id, whether its key was generated) when the ASGI application starts, refreshes it every
RELAY_FLEET_REFRESH_SECONDS from a daemon thread, and deletes it on shutdown. Rows not refreshed
for three intervals are stale: readiness ignores them and the next refresh of any instance
deletes them. Its connections name it in `application_name` (settings.RELAY_APPLICATION_NAME),
which covers writers that never registered.

Each refresh also evaluates readiness, so a non-stamping writer that appears is noticed, and the
sync epoch bumped, within one refresh interval even when no request arrives.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import uuid

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections

from relaycore.asgi_types import ASGIApp, Receive, Scope, Send
from relayinfo.readiness.verdict import on_unrecorded_episode

logger = logging.getLogger(__name__)


_lock = threading.Lock()
_stop = threading.Event()
_wake = threading.Event()
_thread: threading.Thread | None = None
_identity: tuple[int, uuid.UUID] | None = None  # (pid, instance id): a forked child gets its own
_atexit_registered = False


def instance_id() -> uuid.UUID:
    """This process's instance id (a new one after a fork: workers are separate instances)."""
    global _identity
    with _lock:
        if _identity is None or _identity[0] != os.getpid():
            _identity = (os.getpid(), uuid.uuid4())
        return _identity[1]


def register_instance(*, instance: uuid.UUID) -> None:
    """Insert this process's row, or mark it seen now (database clock)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO relay_instances
                (instance_id, hostname, pid, version, stamps, key_id, key_generated,
                 started_at, last_seen_at)
            VALUES (%s, %s, %s, %s, true, %s, %s, now(), now())
            ON CONFLICT (instance_id) DO UPDATE SET last_seen_at = now()
            """,
            [
                instance,
                socket.gethostname()[:255],
                os.getpid(),
                settings.RELAY_VERSION,
                settings.RELAY_PUBKEY[:8],
                bool(settings.RELAY_KEY_GENERATED),
            ],
        )


def expire_stale_instances() -> int:
    """Delete rows not refreshed for three intervals (their process died without deregistering)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM relay_instances WHERE last_seen_at < now() - make_interval(secs => %s)",
            [3 * int(settings.RELAY_FLEET_REFRESH_SECONDS)],
        )
        return int(cursor.rowcount)


def deregister_instance(*, instance: uuid.UUID) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM relay_instances WHERE instance_id = %s", [instance])


def refresh_once() -> None:
    """One refresh: register or touch this instance, expire stale ones, re-evaluate readiness."""
    from relayinfo.readiness import reconcile_readiness

    register_instance(instance=instance_id())
    expire_stale_instances()
    # The only place the sync epoch's episodes are reconciled: request handlers never write.
    reconcile_readiness()


def _run() -> None:
    interval = float(settings.RELAY_FLEET_REFRESH_SECONDS)
    while True:
        try:
            refresh_once()
        except Exception as exc:  # the database may be down: keep trying, never die
            logger.warning("fleet refresh failed: %s", exc)
        finally:
            # Hold no connection between refreshes (this thread's connections only).
            connections.close_all()
        # Woken early when a request's verdict saw an item-4 failure nobody recorded yet.
        _wake.wait(interval)
        _wake.clear()
        if _stop.is_set():
            return


def start_fleet_registration() -> bool:
    """Start this process's refresher thread (idempotent). True when it was started now."""
    global _thread, _atexit_registered
    with _lock:
        if _thread is not None and _thread.is_alive():
            return False
        _stop.clear()
        _thread = threading.Thread(target=_run, name="buzz-fleet-registry", daemon=True)
        _thread.start()
        on_unrecorded_episode(_wake.set)
        if not _atexit_registered:
            atexit.register(stop_fleet_registration)
            _atexit_registered = True
        return True


def stop_fleet_registration() -> None:
    """Stop refreshing and remove this instance's row (shutdown)."""
    global _thread
    with _lock:
        thread, _thread = _thread, None
    if thread is None:
        return
    on_unrecorded_episode(None)
    _stop.set()
    _wake.set()
    thread.join(timeout=5)
    try:
        deregister_instance(instance=instance_id())
    except Exception as exc:
        logger.warning("fleet deregistration failed: %s", exc)
    finally:
        connection.close()


def fleet_lifecycle(app: ASGIApp) -> ASGIApp:
    """Wrap the ASGI application: register on start, deregister on shutdown.

    With an ASGI lifespan (uvicorn, daphne, granian) the startup and shutdown events drive it;
    with lifespan off, the first connection starts it and process exit deregisters (atexit).
    """

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            start_fleet_registration()
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                start_fleet_registration()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await sync_to_async(stop_fleet_registration, thread_sensitive=False)()
                await send({"type": "lifespan.shutdown.complete"})
                return

    return application
