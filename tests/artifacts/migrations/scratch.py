"""Scratch databases for upgrade tests, beside pytest-django's test database.

The upgrade tests need a database at 0001 filled with data, then run `buzz-admin` against it as
an operator would (a subprocess with `--database-url`), so each test gets its own database,
cloned from a populated template, on the server DATABASE_URL names.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[3]


def buzz_admin_path() -> Path:
    """The installed console script (the command operators run)."""
    installed = ROOT / ".venv" / "bin" / "buzz-admin"
    return installed if installed.exists() else Path(sys.executable).parent / "buzz-admin"


def subprocess_env(**overrides: str | None) -> dict[str, str]:
    """The test environment, with this checkout first on the import path (the editable install
    may point at another checkout), and `overrides` applied (None removes a variable)."""
    env = dict(os.environ)
    paths = [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def url_for(database: str) -> str:
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{database}"))


def base_name() -> str:
    return urlsplit(os.environ["DATABASE_URL"]).path.lstrip("/")


def short_id(text: str) -> str:
    """Eight hex characters naming a test's scratch database (names are limited to 63 bytes)."""
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def admin_connect() -> psycopg.Connection[Any]:
    return psycopg.connect(url_for("postgres"), autocommit=True)


@dataclass
class Scratch:
    name: str

    @property
    def url(self) -> str:
        return url_for(self.name)

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True)

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def value(self, query: str, params: Any = None) -> Any:
        return self.sql(query, params)[0][0]

    def buzz_admin(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(buzz_admin_path()), *args[:1], "--database-url", self.url, *args[1:]],
            capture_output=True, text=True, timeout=timeout, env=subprocess_env(), cwd=ROOT,
        )

    def start_buzz_admin(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(buzz_admin_path()), *args[:1], "--database-url", self.url, *args[1:]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
            cwd=ROOT,
        )

    def ledger(self) -> set[str]:
        return {
            name for (name,) in self.sql(
                "SELECT name FROM django_migrations WHERE app = 'artifacts'"
            )
        }


def drop_database(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_database(name: str, *, template: str | None = None) -> Scratch:
    drop_database(name)
    with admin_connect() as conn:
        clause = f' TEMPLATE "{template}"' if template else ""
        for attempt in range(20):
            try:
                conn.execute(f'CREATE DATABASE "{name}"{clause}')
                break
            except psycopg.errors.ObjectInUse:
                # A template cannot be copied while a session (a subprocess still closing) uses it.
                if attempt == 19:
                    raise
                time.sleep(0.25)
    return Scratch(name)


@contextmanager
def scratch_database(name: str, *, template: str | None = None) -> Iterator[Scratch]:
    scratch = create_database(name, template=template)
    try:
        yield scratch
    finally:
        drop_database(name)


POPULATE_SQL = """
INSERT INTO communities (host, name, admin_pubkeys, artifacts_enabled, open_channel_creation,
                         listing_version, created_at)
VALUES ('a.example', 'A', '{{}}', true, false, 0, now());
INSERT INTO channel_members (community_id, channel_id, pubkey, role, joined_at)
SELECT (SELECT id FROM communities), md5('c' || mod(g, 50))::uuid,
       md5('p' || g) || md5('q' || g), 'member', now()
FROM generate_series(1, {members}) g;
INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id, artifact_type,
                            deleted, created_at)
SELECT (SELECT id FROM communities), md5('a' || g)::uuid, md5('e' || g) || md5('f' || g),
       md5('c' || mod(g, 50))::uuid, 'buzz.task', false, 1700000000 + g
FROM generate_series(1, {heads}) g;
INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op, created_at)
SELECT (SELECT id FROM communities), md5('r' || g) || md5('s' || g),
       md5('a' || mod(g, {heads}))::uuid, md5('c' || mod(g, 50))::uuid, 'update', 1700000000 + g
FROM generate_series(1, {revisions}) g;
"""


def build_populated_at_0001(
    name: str, *, revisions: int = 200_000, heads: int = 100_000, members: int = 5_000
) -> Scratch:
    """A database at artifacts 0001 (the schema before incremental reads) holding data."""
    scratch = create_database(name)
    result = scratch.buzz_admin("migrate", "artifacts", "0001")
    assert result.returncode == 0, result.stdout + result.stderr
    with scratch.connect() as conn:
        sql = POPULATE_SQL.format(revisions=int(revisions), heads=int(heads), members=int(members))
        conn.execute(sql.encode())
        conn.execute("VACUUM ANALYZE")
    return scratch


_shared: dict[str, Scratch] = {}


def populated_template() -> Scratch:
    """One database at 0001 with 200k revisions and 100k heads, built once per test process
    and shared (as a CREATE DATABASE template) by every module that needs one."""
    if "0001" not in _shared:
        name = f"{base_name()}_tmpl_0001"
        _shared["0001"] = build_populated_at_0001(name)
        atexit.register(drop_database, name)
    return _shared["0001"]


def catalog_snapshot(scratch: Scratch) -> list[tuple[Any, ...]]:
    """Everything 0077 could change, down to catalog row versions (xmin): equal snapshots mean
    nothing was rewritten, altered or even re-stored."""
    tables = ["artifact_heads", "artifact_revisions", "channel_members", "communities"]
    rows = scratch.sql(
        """
        SELECT c.relname, c.relfilenode, c.xmin::text, c.relnatts
        FROM pg_class c WHERE c.relname = ANY(%s) ORDER BY c.relname
        """,
        [tables],
    )
    rows += scratch.sql(
        """
        SELECT c.relname, a.attname, a.attnum, a.xmin::text, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, a.atthasdef, a.atthasmissing, a.attmissingval::text
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relname = ANY(%s) AND a.attnum > 0 ORDER BY 1, 3
        """,
        [tables],
    )
    rows += scratch.sql(
        """
        SELECT c.relname, d.oid::text, d.xmin::text, d.adnum, pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
        WHERE c.relname = ANY(%s) ORDER BY 1, 4
        """,
        [tables],
    )
    return rows


def relfilenodes(scratch: Scratch) -> dict[str, int]:
    return dict(scratch.sql(
        "SELECT relname, relfilenode FROM pg_class WHERE relname = ANY(%s)",
        [["artifact_heads", "artifact_revisions", "channel_members", "communities"]],
    ))


def wait_until(predicate: Any, *, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
