"""Wide views (issue 39): view changes in communities with thousands of readable channels.

Seeds one community per width W (default 10, 1,000 and 10,000 open channels, every one readable
by the reader) with N artifacts spread over its channels (default N = 100k; `--n` to change),
with fast SQL, once (later runs reuse a community of the right size). Then, against the database
directly (in-process pages, as bench/reads.py), from a finished round's token (its stamps a day
old, outside the overlap):

- a quiet continuation round: p50 over `--runs`, W interleaved so machine load hits all alike;
  the target: W = 10,000 within 10% of W = 10;
- one new open channel with K artifacts (`--k`, default 50), created by the relay's service:
  rows the next round sends (target <= 2K + one page of `--limit`), whether it reset, and how
  long the first page took (it applies the view change);
- a grant of the reader into a new private channel with K artifacts: the same;
- that channel deleted: rows sent and `removed_channels` (target: its own removals);
- the page after one channel creation, p50 interleaved across W (target: about the channels
  that changed, so flat in W), beside the old recomputation of the reader's readable channels;
- 1,000 channel creations (`--creations`) then one page each for `--readers` readers (default
  10,000): what the view changes store (the listing change log, and the channel set store:
  rows and bytes), the readers' resets, and the largest token.

    .venv/bin/python bench/wide_views.py                        # W = 10, 1k, 10k; N = 100k
    .venv/bin/python bench/wide_views.py --n 20000 --readers 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._harness import print_table, relay_env, services  # noqa: E402

HOST = "bench-wide.example"
READER_SECRET = "5" * 64
OWNER_SECRET = "6" * 64


def seed(cursor: Any, community_id: int, width: int, n: int) -> None:
    """`width` open channels and N artifacts over them, stamped two days ago."""
    for table in ("events", "artifact_heads", "artifact_revisions", "channel_members",
                  "channels", "artifact_listing_changes"):
        cursor.execute(f"DELETE FROM {table} WHERE community_id = %s", [community_id])
    cursor.execute(
        "INSERT INTO channels (community_id, channel_id, name, visibility, created_by,"
        " created_at) SELECT %s, md5('ch' || i)::uuid, 'channel ' || i, 'open', '', now()"
        " FROM generate_series(1, %s) i", [community_id, width])
    cursor.execute(
        """
        CREATE TEMP TABLE seed_rows ON COMMIT DROP AS
        SELECT i, md5('a' || i)::uuid AS d, md5('e' || i) || md5('f' || i) AS eid,
               md5('ch' || (1 + i %% %(w)s))::uuid AS h, 1700000000 + i AS created_at,
               now() - interval '2 days' AS stamp
          FROM generate_series(1, %(n)s) i
        """, {"n": n, "w": width})
    _insert_artifacts(cursor, community_id, "seed_rows")


def _insert_artifacts(cursor: Any, community_id: int, rows: str) -> None:
    cursor.execute(
        f"""
        INSERT INTO events (community_id, event_id, pubkey, kind, created_at, channel_id, raw,
                            received_at)
        SELECT %(c)s, eid, repeat('ab', 32), 45010, created_at, h,
               json_build_object('id', eid, 'pubkey', repeat('ab', 32),
                 'created_at', created_at, 'kind', 45010,
                 'tags', json_build_array(json_build_array('d', d::text),
                     json_build_array('h', h::text), json_build_array('type', 'buzz.task')),
                 'content', repeat('lorem ipsum ', 20), 'sig', repeat('cd', 64))::text, now()
          FROM {rows};
        INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op,
                                        created_at, modified_at)
        SELECT %(c)s, eid, d, h, 'create', created_at, stamp FROM {rows};
        INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id,
                                    artifact_type, deleted, created_at, modified_at)
        SELECT %(c)s, d, eid, h, 'buzz.task', false, created_at, stamp FROM {rows}
        """, {"c": community_id})


def add_artifacts(community_id: int, channel: uuid.UUID, k: int) -> None:
    """K artifacts in `channel`, stamped now as a writer would."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TEMP TABLE new_rows ON COMMIT DROP AS
            SELECT i, gen_random_uuid() AS d, md5(random()::text) || md5(random()::text) AS eid,
                   %s::uuid AS h, 1800000000 + i AS created_at, now() AS stamp
              FROM generate_series(1, %s) i
            """, [channel, k])
        _insert_artifacts(cursor, community_id, "new_rows")


class Wide:
    """One community of `width` open channels and N artifacts, and a reader's finished round."""

    def __init__(self, width: int, n: int, limit: int) -> None:
        from django.db import connection

        from artifacts.models import ArtifactHead, Channel, Community
        from artifacts.services.communities import community_create
        from nostr.schnorr import pubkey_from_secret

        self.width, self.n, self.limit = width, n, limit
        self.reader = pubkey_from_secret(READER_SECRET)
        self.owner = pubkey_from_secret(OWNER_SECRET)
        host = f"w{width}-n{n}.{HOST}"
        community = Community.objects.filter(host=host).first()
        if community is None:
            community = community_create(host=host, name=f"Bench wide {width}")
        self.community_id = community.pk
        if (ArtifactHead.objects.filter(community=community).count() != n
                or Channel.objects.filter(community=community).count() != width):
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute("BEGIN")
                seed(cursor, community.pk, width, n)
                cursor.execute("COMMIT")
                for table in ("artifact_heads", "artifact_revisions", "events", "channels"):
                    cursor.execute(f"VACUUM ANALYZE {table}")
            print(f"seeded W={width} N={n} in {time.perf_counter() - started:.0f} s", flush=True)
        self.token = self.finished_token(self.reader)

    def query(self, progress: str | None, limit: int | None = None) -> Any:
        from artifacts.selectors.filters import parse_filter

        return parse_filter({"artifact": "current", "progress": progress,
                             "limit": limit or self.limit, "view_changes": "incremental"})

    def page(self, progress: str | None, reader: str | None = None) -> Any:
        from artifacts.selectors.rounds import prepare_round, read_page

        request = prepare_round(community_id=self.community_id, reader=reader or self.reader,
                                query=self.query(progress))
        return read_page(request, ready=True)

    def finished_token(self, reader: str) -> str:
        """A finished round's token as of now: the first page of a full round, sealed as if the
        round were done (its heads are two days old: the continuation's range holds none)."""
        from artifacts.selectors.rounds import prepare_round
        from artifacts.tokens import Phase, ProgressToken, decode_progress, encode_progress

        first = self.page(None, reader)
        request = prepare_round(community_id=self.community_id, reader=reader,
                                query=self.query(first.progress))
        token = decode_progress(first.progress, binding=request.binding)
        assert isinstance(token, ProgressToken)
        done = token._replace(phase=Phase.DONE, cursor_key=b"")
        return encode_progress(done, binding=request.binding)

    def round(self, progress: str) -> dict[str, Any]:
        """A whole round from `progress`: rows sent, removed channels, resets, first page ms."""
        rows = pages = resets = 0
        removed: list[str] = []
        first_ms = None
        while True:
            started = time.perf_counter()
            page = self.page(progress)
            if first_ms is None:
                first_ms = round((time.perf_counter() - started) * 1000, 2)
            pages += 1
            rows += len(page.events) + len(page.removed)
            removed += page.removed_channels
            resets += page.reset
            progress = page.progress
            if not page.more:
                return {"rows": rows, "pages": pages, "resets": resets,
                        "removed_channels": len(removed), "first_page_ms": first_ms,
                        "token": progress, "token_chars": len(progress)}


def age_recent_changes(community_id: int) -> None:
    """Send the community's recent stamps two days back, out of any round's overlap: each
    figure then counts its own change, not the overlap's re-reads of the previous one."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("artifact_heads", "artifact_revisions"):
            cursor.execute(
                f"UPDATE {table} SET modified_at = now() - interval '2 days'"
                " WHERE community_id = %s AND modified_at > now() - interval '1 day'",
                [community_id])


def view_change_pages(wides: list[Wide], runs: int) -> dict[int, dict[str, float]]:
    """The page after one channel creation (a view change applied from the listing log), p50
    interleaved across W; beside it, what recomputing the reader's readable channels (what
    every reader's next page did before) costs at that W."""
    from django.db import connection

    from artifacts.selectors.readability import readable_channels
    from artifacts.services.channels import channel_create

    old = f"""SELECT count(*), sha256(convert_to(coalesce(string_agg(r.channel_id::text, ','
              ORDER BY r.channel_id), ''), 'UTF8')) FROM ({readable_channels()}) r"""
    times: dict[int, list[float]] = {wide.width: [] for wide in wides}
    recompute: dict[int, list[float]] = {wide.width: [] for wide in wides}
    for _ in range(runs):
        for wide in wides:
            token = wide.finished_token(wide.reader)
            channel_create(community_id=wide.community_id, channel_id=uuid.uuid4(),
                           name="one more", created_by=wide.owner)
            started = time.perf_counter()
            page = wide.page(token)
            times[wide.width].append((time.perf_counter() - started) * 1000)
            assert not page.reset
            with connection.cursor() as cursor:
                started = time.perf_counter()
                cursor.execute(old, {"community": wide.community_id, "reader": wide.reader})
                cursor.fetchall()
                recompute[wide.width].append((time.perf_counter() - started) * 1000)
    return {w: {"page_p50_ms": round(statistics.median(times[w]), 3),
                "recompute_p50_ms": round(statistics.median(recompute[w]), 3)} for w in times}


def quiet_rounds(wides: list[Wide], runs: int) -> dict[int, float]:
    """p50 of a quiet continuation round (from the same finished token), interleaved."""
    times: dict[int, list[float]] = {wide.width: [] for wide in wides}
    for _ in range(runs):
        for wide in wides:
            started = time.perf_counter()
            page = wide.page(wide.token)
            times[wide.width].append((time.perf_counter() - started) * 1000)
            assert not page.more and not page.reset and not page.events
    return {width: round(statistics.median(values), 3) for width, values in times.items()}


def view_changes(wide: Wide, k: int) -> list[list[Any]]:
    """A new open channel with K artifacts, a grant into a new private one, its deletion."""
    from artifacts.services.channels import channel_create, channel_delete
    from artifacts.services.members import member_put

    rows = []
    community = wide.community_id
    age_recent_changes(community)
    fresh = uuid.uuid4()
    channel_create(community_id=community, channel_id=fresh, name="fresh", created_by=wide.owner)
    add_artifacts(community, fresh, k)
    result = wide.round(wide.token)
    rows.append([wide.width, "new open channel", k, result["rows"], 2 * k + wide.limit,
                 result["resets"], result["removed_channels"], result["first_page_ms"]])
    private = uuid.uuid4()
    channel_create(community_id=community, channel_id=private, name="private",
                   visibility="private", created_by=wide.owner)
    add_artifacts(community, private, k)
    before = wide.round(result["token"])  # the reader cannot read it: nothing to send
    age_recent_changes(community)
    member_put(community_id=community, channel_id=private, pubkey=wide.reader, role="member")
    result = wide.round(before["token"])
    rows.append([wide.width, "grant into private channel", k, result["rows"],
                 2 * k + wide.limit, result["resets"], result["removed_channels"],
                 result["first_page_ms"]])
    age_recent_changes(community)
    channel_delete(community_id=community, channel_id=private)
    result = wide.round(result["token"])
    rows.append([wide.width, "deleted (its K removals)", k, result["rows"], k,
                 result["resets"], result["removed_channels"], result["first_page_ms"]])
    channel_delete(community_id=community, channel_id=fresh)
    wide.round(result["token"])
    return rows


def many_readers(wide: Wide, readers: int, creations: int) -> dict[str, Any]:
    """`readers` readers with finished rounds; `creations` channels created; one page each."""
    from artifacts.services.channels import channel_create

    tokens = {}
    started = time.perf_counter()
    for i in range(readers):
        reader = f"{i:064x}"
        tokens[reader] = wide.finished_token(reader)
    made = time.perf_counter() - started
    rows_before, bytes_before = _table("artifact_listing_changes")
    sets_before, _ = _table("artifact_sync_channel_sets")
    for i in range(creations):
        channel_create(community_id=wide.community_id, channel_id=uuid.uuid4(), name=f"c{i}",
                       created_by=wide.owner)
    rows_after, bytes_after = _table("artifact_listing_changes")
    resets = longest = 0
    reasons: dict[str | None, int] = {}
    times = []
    age_recent_changes(wide.community_id)
    for reader, token in tokens.items():
        t0 = time.perf_counter()
        page = wide.page(token, reader)
        times.append((time.perf_counter() - t0) * 1000)
        resets += page.reset
        reasons[page.reset_reason] = reasons.get(page.reset_reason, 0) + 1
        longest = max(longest, len(page.progress))
    return {
        "readers": readers, "creations": creations, "tokens_s": round(made, 1),
        "log_rows": rows_after - rows_before, "log_bytes_all_communities": bytes_after,
        "log_bytes_added": bytes_after - bytes_before,
        "set_rows_added": _table("artifact_sync_channel_sets")[0] - sets_before,
        "set_bytes_all": _table("artifact_sync_channel_sets")[1],
        "set_data_bytes": _set_bytes(wide.community_id), "resets": resets,
        "reset_reasons": reasons,
        "page_p50_ms": round(statistics.median(times), 2), "longest_token": longest,
    }


def _table(name: str) -> tuple[int, int]:
    """(rows, bytes with indexes and TOAST) of a table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), pg_total_relation_size('{name}') FROM {name}")
        rows, size = cursor.fetchone()
    return rows, size


def _set_bytes(community_id: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(length(channels)), 0) FROM artifact_sync_channel_sets"
                       " WHERE community_id = %s", [community_id])
        return int(cursor.fetchone()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[10, 1000, 10_000])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--readers", type=int, default=10_000)
    parser.add_argument("--creations", type=int, default=1000)
    args = parser.parse_args()
    with services() as svc:
        os.environ.update(relay_env(svc))
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        wides = [Wide(width, args.n, args.limit) for width in args.widths]
        quiet = quiet_rounds(wides, args.runs)
        print("\nquiet continuation round, p50 ms (interleaved, same run)")
        print_table(["W", "p50 ms", "vs smallest W"],
                    [[w, ms, f"{ms / quiet[args.widths[0]]:.2f}x"] for w, ms in quiet.items()])
        changed = view_change_pages(wides, max(5, args.runs // 3))
        print("\nthe page after one channel creation (view change applied), p50 ms, interleaved;"
              " beside it the old recomputation of the reader's channels")
        smallest = changed[args.widths[0]]["page_p50_ms"]
        print_table(["W", "page p50 ms", "vs smallest W", "old recompute p50 ms"],
                    [[w, f["page_p50_ms"], f"{f['page_p50_ms'] / smallest:.2f}x",
                      f["recompute_p50_ms"]] for w, f in changed.items()])
        table = []
        for wide in wides[1:] or wides:
            table += view_changes(wide, args.k)
        print(f"\nview changes (N = {args.n}, K = {args.k}, page limit {args.limit})")
        print_table(["W", "change", "K", "rows sent", "target rows <=", "resets",
                     "removed_channels", "first page ms"], table)
        crowd = many_readers(wides[-1], args.readers, args.creations)
        print(f"\n{args.readers} readers, {args.creations} channel creations (W={wides[-1].width})")
        print_table(list(crowd), [list(crowd.values())])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
