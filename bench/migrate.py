"""Benchmark: the incremental-reads runbook on a populated database, with a writer running.

Builds a scratch database at artifacts 0001 holding --revisions artifact revisions (default
1,000,000) and half as many heads, starts a writer that keeps committing small transactions
(a revision insert, a head update, a member upsert), then runs the runbook step by step as
`buzz-admin migrate --build-indexes` does: the concurrent prebuild, 0076, 0077, the four
concurrent builds, 0078. Prints, per step, its time and the longest transaction the writer saw
meanwhile (an upper bound on its lock waits).

    .venv/bin/python bench/migrate.py [--revisions N] [--database-url postgres://.../any]

The scratch database (<dbname>_bench_migrate) is created on the server of --database-url (default
DATABASE_URL) and dropped afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POPULATE_SQL = """
INSERT INTO communities (host, name, admin_pubkeys, artifacts_enabled, open_channel_creation,
                         listing_version, created_at)
VALUES ('bench.example', 'Bench', '{{}}', true, false, 0, now());
INSERT INTO channel_members (community_id, channel_id, pubkey, role, joined_at)
SELECT (SELECT id FROM communities), md5('c' || mod(g, 200))::uuid,
       md5('p' || g) || md5('q' || g), 'member', now()
FROM generate_series(1, {members}) g;
INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id, artifact_type,
                            deleted, created_at)
SELECT (SELECT id FROM communities), md5('a' || g)::uuid, md5('e' || g) || md5('f' || g),
       md5('c' || mod(g, 200))::uuid, 'buzz.task', false, 1700000000 + g
FROM generate_series(1, {heads}) g;
INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op, created_at)
SELECT (SELECT id FROM communities), md5('r' || g) || md5('s' || g),
       md5('a' || mod(g, {heads}))::uuid, md5('c' || mod(g, 200))::uuid, 'update', 1700000000 + g
FROM generate_series(1, {revisions}) g;
"""

WRITE_SQL = [
    """
    INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op,
                                    created_at)
    SELECT id, md5(random()::text) || md5(random()::text), md5('a' || %(n)s)::uuid,
           md5('c' || mod(%(n)s, 200))::uuid, 'update', 1800000000 + %(n)s
    FROM communities
    """,
    """
    UPDATE artifact_heads SET created_at = created_at + 1
    WHERE community_id = (SELECT id FROM communities) AND artifact_id = md5('a' || %(n)s)::uuid
    """,
    """
    INSERT INTO channel_members (community_id, channel_id, pubkey, role)
    SELECT id, md5('c' || mod(%(n)s, 200))::uuid, md5('w' || %(n)s) || md5('x' || %(n)s), 'member'
    FROM communities
    ON CONFLICT (community_id, channel_id, pubkey) DO UPDATE SET role = 'member'
    """,
]


@dataclass
class Writer:
    """Commits small write transactions back to back and records how long each took."""

    url: str
    heads: int
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (end time, seconds)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name="bench writer") as conn:
            # A writer gives up after 5 s: a wait that long would show up as an error here.
            conn.execute("SET lock_timeout = '5s'")
            n = 0
            while not self.stop.is_set():
                n += 1
                started = time.monotonic()
                try:
                    with conn.transaction():
                        for sql in WRITE_SQL:
                            conn.execute(sql, {"n": 1 + n % self.heads})
                except psycopg.Error as exc:
                    self.errors.append(str(exc).splitlines()[0])
                ended = time.monotonic()
                self.latencies.append((ended, ended - started))
                time.sleep(0.005)

    def window(self, start: float, end: float) -> list[float]:
        return [seconds for at, seconds in self.latencies if start <= at <= end]


def scratch_url(base_url: str, name: str) -> str:
    return urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))


def buzz_admin(url: str, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "buzzrelay.cli", args[0], "--database-url", url, *args[1:]],
        check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", type=int, default=1_000_000)
    parser.add_argument("--heads", type=int, help="default: half the revisions")
    parser.add_argument("--members", type=int, default=20_000)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    if not args.database_url:
        parser.error("set DATABASE_URL or pass --database-url (any database on the server)")
    heads = args.heads or max(1, args.revisions // 2)
    name = f"{urlsplit(args.database_url).path.lstrip('/')}_bench_migrate"
    url = scratch_url(args.database_url, name)
    admin_url = scratch_url(args.database_url, "postgres")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        return run(args, url, heads)
    finally:
        if not args.keep:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(args: argparse.Namespace, url: str, heads: int) -> int:
    print(f"Populating: {args.revisions:,} revisions, {heads:,} heads, {args.members:,} members")
    buzz_admin(url, "migrate", "artifacts", "0001")
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        sql = POPULATE_SQL.format(revisions=args.revisions, heads=heads, members=args.members)
        conn.execute(sql.encode())
        conn.execute("VACUUM ANALYZE")
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        row = size.fetchone()
    print(f"  done in {time.monotonic() - started:.1f} s, database size {row[0] if row else '?'}")

    os.environ["DATABASE_URL"] = url
    from buzzrelay.cli import setup_django

    setup_django(None)
    from artifacts.migrations._sync_steps import apply_sync_columns
    from artifacts.schema import INDEXES
    from buzzrelay.admin_commands._indexes import Progress, build_indexes
    from buzzrelay.admin_commands._migrations import apply_migrations

    writer = Writer(url, heads)
    thread = threading.Thread(target=writer.run, daemon=True)
    thread.start()
    time.sleep(1.0)
    rows: list[list[Any]] = []
    quiet = Progress(io.StringIO(), interactive=False)

    def step(label: str, action: Any) -> None:
        begin = time.monotonic()
        action()
        end = time.monotonic()
        rows.append([label, end - begin, writer.window(begin, end)])

    for spec in INDEXES:
        if spec.name == "idx_artifact_revisions_artifact":
            step(f"CREATE INDEX CONCURRENTLY {spec.name}",
                 lambda spec=spec: build_indexes(progress=quiet, specs=[spec]))
    sink = io.StringIO()
    step("0076 (verify and record)", lambda: apply_migrations(
        app_label="artifacts", migration_name="0076", out=sink))

    def apply_0077() -> None:
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            apply_sync_columns(conn)

    step("0077 transaction (5 columns, no rewrite)", apply_0077)
    step("0077 migrate (re-applied: nothing to do, recorded)", lambda: apply_migrations(
        app_label="artifacts", migration_name="0077", out=sink))
    for spec in INDEXES[1:]:
        step(f"CREATE INDEX CONCURRENTLY {spec.name}",
             lambda spec=spec: build_indexes(progress=quiet, specs=[spec]))
    step("0078 (verify and record)", lambda: apply_migrations(
        app_label="artifacts", migration_name="0078", out=sink))
    time.sleep(0.5)
    writer.stop.set()
    thread.join()

    from buzzrelay.admin_commands._tables import print_table

    table = []
    for label, seconds, window in rows:
        longest = max(window) * 1000 if window else None
        p99 = statistics.quantiles(window, n=100)[98] * 1000 if len(window) >= 2 else None
        table.append([label, f"{seconds:.2f}", len(window),
                      f"{longest:.1f}" if longest is not None else "-",
                      f"{p99:.1f}" if p99 is not None else "-"])
    with psycopg.connect(url) as conn:
        sizes = conn.execute(
            "SELECT relname, pg_size_pretty(pg_relation_size(oid)) FROM pg_class "
            "WHERE relname = ANY(%s)", [[spec.name for spec in INDEXES]],
        ).fetchall()
    size_of: dict[str, str] = dict(sizes)
    all_latencies = [seconds for _, seconds in writer.latencies]
    print()
    print_table(["step", "seconds", "writer txns", "writer max ms", "writer p99 ms"], table,
                title=f"Runbook on {args.revisions:,} revisions / {heads:,} heads "
                      f"(PostgreSQL {server_version(url)})")
    print()
    print_table(["index", "size"], [[spec.name, size_of.get(spec.name)] for spec in INDEXES])
    print(f"\nWriter: {len(all_latencies)} transactions, longest {max(all_latencies) * 1000:.1f} "
          f"ms, median {statistics.median(all_latencies) * 1000:.1f} ms, errors: "
          f"{len(writer.errors)}{' (' + writer.errors[0] + ')' if writer.errors else ''}")
    return 0 if not writer.errors else 1


def server_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


if __name__ == "__main__":
    sys.exit(main())
