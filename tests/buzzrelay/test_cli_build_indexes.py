"""buzz-admin build-indexes on a populated database: writers keep writing, progress, repairs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from artifacts.schema import INDEXES, normalize_indexdef
from tests.artifacts.migrations.scratch import (
    Scratch,
    base_name,
    create_database,
    drop_database,
    populated_template,
    scratch_database,
    short_id,
    wait_until,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template() -> Iterator[Scratch]:
    """Populated, with 0076 and 0077 applied: the four 0078 indexes are still to build."""
    name = f"{base_name()}_builds_tmpl"
    scratch = create_database(name, template=populated_template().name)
    assert scratch.buzz_admin("build-indexes", "--index", INDEXES[0].name).returncode == 0
    assert scratch.buzz_admin("migrate").returncode == 3  # applied 0076 and 0077
    yield scratch
    drop_database(name)


@pytest.fixture
def db(template: Scratch, request: pytest.FixtureRequest) -> Iterator[Scratch]:
    name = f"{base_name()}_builds_{short_id(request.node.nodeid)}"
    with scratch_database(name, template=template.name) as scratch:
        yield scratch


class Writer:
    """Writes like the relay does (revision insert, head update, member upsert, all stamped),
    one short transaction after another, and records how long each took."""

    def __init__(self, db: Scratch) -> None:
        self.db = db
        self.durations: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with self.db.connect() as conn:
            conn.execute("SET lock_timeout = '5s'")
            n = 0
            while not self.stop.is_set():
                n += 1
                started = time.monotonic()
                try:
                    with conn.transaction():
                        conn.execute(
                            """
                            INSERT INTO artifact_revisions (community_id, event_id, artifact_id,
                                channel_id, op, created_at, modified_at, source_channel_id)
                            SELECT id, md5(random()::text) || md5(random()::text),
                                   md5('a' || %(n)s)::uuid, md5('c' || mod(%(n)s, 50))::uuid,
                                   'move', 1800000000, now(), gen_random_uuid()
                            FROM communities
                            """,
                            {"n": n},
                        )
                        conn.execute(
                            "UPDATE artifact_heads SET modified_at = now() "
                            "WHERE artifact_id = md5('a' || %(n)s)::uuid",
                            {"n": n},
                        )
                        conn.execute(
                            """
                            INSERT INTO channel_members (community_id, channel_id, pubkey, role)
                            SELECT id, md5('c' || mod(%(n)s, 50))::uuid, md5('w' || %(n)s),
                                   'member'
                            FROM communities
                            ON CONFLICT (community_id, channel_id, pubkey)
                            DO UPDATE SET sync_modified_at = now()
                            """,
                            {"n": n},
                        )
                except psycopg.Error as exc:
                    self.errors.append(str(exc))
                ended = time.monotonic()
                self.durations.append((ended, ended - started))
                time.sleep(0.002)

    def __enter__(self) -> Writer:
        self.thread.start()
        wait_until(lambda: len(self.durations) >= 5, what="the writer to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_a_writer_keeps_writing_during_build_indexes(db: Scratch) -> None:
    with Writer(db) as writer:
        build = db.start_buzz_admin("build-indexes")
        out, err = build.communicate(timeout=240)
        build_ended = time.monotonic()
        time.sleep(0.2)
    assert build.returncode == 0, out + err
    assert writer.errors == []
    for spec in INDEXES[1:]:
        assert f"{spec.name}: built in" in err
    during = [seconds for at, seconds in writer.durations if at <= build_ended]
    assert len(during) > 20, "the writer made no progress while the indexes were built"
    assert max(during) < 1.0, f"a write waited {max(during):.2f} s"
    # The rows written during the builds are in the index (a validated concurrent build).
    moved_sql = ("SELECT count(*) FROM artifact_revisions WHERE source_channel_id IS NOT NULL "
                 "AND community_id = (SELECT id FROM communities)")
    with db.connect() as conn:
        by_scan = conn.execute(moved_sql).fetchone()
        conn.execute("SET enable_seqscan = off")
        plan = " ".join(str(row[0]) for row in conn.execute("EXPLAIN " + moved_sql).fetchall())
        by_index = conn.execute(moved_sql).fetchone()
    assert "artifact_revisions_moves" in plan
    assert by_scan is not None and by_scan == by_index and by_scan[0] >= len(during)
    assert db.value(
        "SELECT count(*) FROM pg_index WHERE indexrelid = ANY(ARRAY[%s, %s, %s, %s]::regclass[]) "
        "AND indisvalid AND indisready AND indislive",
        [spec.name for spec in INDEXES[1:]],
    ) == 4
    assert db.buzz_admin("migrate").returncode == 0
    assert db.buzz_admin("check").returncode == 0


def test_progress_names_the_transaction_a_build_waits_for(db: Scratch) -> None:
    with db.connect() as blocker:
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE channel_members IN ROW EXCLUSIVE MODE")
        blocker_pid = blocker.info.backend_pid
        build = db.start_buzz_admin("build-indexes", "--index", "channel_members_sync")
        wait_until(
            lambda: db.value(
                "SELECT count(*) FROM pg_stat_progress_create_index WHERE current_locker_pid = %s",
                [blocker_pid],
            ) == 1,
            timeout=60, what="the build to wait for the open transaction",
        )
        # While it waits, `check` reports the index as being built, not as broken.
        check = db.buzz_admin("check")
        assert "BUILDING" in check.stdout
        time.sleep(0.6)  # at least one progress poll while waiting
        blocker.execute("COMMIT")
    out, err = build.communicate(timeout=120)
    assert build.returncode == 0, out + err
    assert "channel_members_sync: waiting for writers before build" in err
    assert f"now backend pid {blocker_pid}" in err
    assert "channel_members_sync: built in" in err


def test_an_index_with_another_definition_is_replaced_only_when_asked(db: Scratch) -> None:
    with db.connect() as conn:
        conn.execute("CREATE INDEX artifact_heads_modified ON artifact_heads (community_id, "
                     "modified_at)")
    refused = db.buzz_admin("build-indexes", "--index", "artifact_heads_modified")
    assert refused.returncode == 1
    assert "wrong definition" in refused.stdout
    assert "--replace-mismatched" in refused.stdout
    check = db.buzz_admin("check")
    assert check.returncode == 1
    assert "differs" in check.stdout
    migrate = db.buzz_admin("migrate")
    assert migrate.returncode == 3
    assert "wrong definition" in migrate.stdout

    replaced = db.buzz_admin("build-indexes", "--replace-mismatched")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    found = db.value("SELECT pg_get_indexdef(to_regclass('artifact_heads_modified'))")
    assert normalize_indexdef(found) == INDEXES[1].definition
    assert db.buzz_admin("migrate").returncode == 0
