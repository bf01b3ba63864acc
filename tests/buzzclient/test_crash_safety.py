"""Crash safety: buzz-sync killed (SIGKILL) at random points, between and inside pages, many
times while the relay's data keeps changing; the next run still ends with a collection equal to
a fresh full read and to what the reader may read.

Kill points, in turn: right after the client logs "applying page" (it logs it inside the page's
SQLite transaction, so most of these kills land before COMMIT), right after it logs "page
committed" (between pages: the next request is in flight), and at a random time.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buzzclient import Syncer
from buzzclient.store import CollectionKey
from tests.buzzclient.world import World
from tests.factories import redact, write
from tests.relay_server import ROOT, RelayProcess, start_relay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KILLS = 30


@pytest.fixture
def fast_relay(django_db_setup: None) -> Iterator[RelayProcess]:
    relay = start_relay({"RELAY_RATE_LIMIT_PUBKEY_RATE": "0"})
    try:
        yield relay
    finally:
        relay.stop()


def buzz_sync(relay: RelayProcess, key_file: Path, db: Path, limit: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "buzzclient.cli", "--relay", relay.url, "--key-file",
         str(key_file), "--db", str(db), "--limit", str(limit), "-vv"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def kill_after_line(child: subprocess.Popen[str], marker: str, skip: int) -> tuple[bool, int]:
    """SIGKILL as soon as the `skip`-th line containing `marker` appears. Returns whether it
    was killed (False: the run ended first) and how many pages it reported committed."""
    assert child.stderr is not None
    seen = committed = 0
    for line in child.stderr:
        committed += "page committed" in line
        if marker in line:
            if seen == skip:
                child.send_signal(signal.SIGKILL)
                return True, committed
            seen += 1
    return False, committed


def enough_kills(killed: dict[str, int], before_commit: int) -> bool:
    """Two thirds of KILLS landed, at least 3 of each kind, and one inside a page's transaction
    before its commit."""
    return (sum(killed.values()) >= KILLS * 2 // 3 and min(killed.values()) >= 3
            and before_commit >= 1)


def applied_pages(db: Path) -> int:
    """Pages applied so far (each bumps its collection's version), 0 before the first."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return int(conn.execute("SELECT coalesce(sum(version), 0) FROM collections")
                       .fetchone()[0])
        except sqlite3.OperationalError:  # killed before its schema was created
            return 0


def random_writes(world: World, rng: random.Random) -> None:
    channels = [world.open_h, world.member_h, world.secret_h]
    for _ in range(rng.randint(2, 8)):
        live = sorted(world.heads)
        op = rng.choice(["create", "create", "update", "update", "delete", "move", "redact"])
        if op == "create" or not live:
            world.create(rng.choice(channels))
        elif op == "update":
            world.update(rng.choice(live))
        elif op == "delete":
            world.delete(rng.choice(live))
        elif op == "move":
            d = rng.choice(live)
            world.move(d, rng.choice([h for h in channels if h != world.heads[d][0]]))
        else:
            d = rng.choice(live)
            h, head = world.heads.pop(d)
            redact(world.community, world.alice, h, head)


def test_killed_anywhere_the_next_run_ends_equal_to_a_fresh_full_read(
    fast_relay: RelayProcess, tmp_path: Path
) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 30)))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    world = World()
    for h in (world.open_h, world.member_h, world.secret_h):
        world.create(h, 40)
    readable = {world.open_h, world.member_h}
    key_file = tmp_path / "bob.key"
    key_file.write_text(world.bob.secret + "\n")
    db = tmp_path / "local.sqlite"

    killed = {"inside": 0, "between": 0, "random": 0}
    # "inside" kills whose page provably did not commit: the database holds no more pages
    # than the child had reported committed when the kill was sent.
    before_commit = 0
    # At least KILLS attempts, and more (up to three times as many) until enough kills landed:
    # whether a kill finds the child running is timing, and a loaded machine shifts it.
    for i in range(KILLS * 3):
        if i >= KILLS and enough_kills(killed, before_commit):
            break
        random_writes(world, rng)
        if i % 6 == 5:
            # Toggle the open channel's visibility: the reader's view changes, its next round
            # resets and runs (staged) as a full round, a long window to be killed in.
            flag = "private" if world.open_h in readable else "public"
            write(world.community, world.alice, 9002, [["h", world.open_h], [flag]])
            readable ^= {world.open_h}
        pages_before = applied_pages(db)
        child = buzz_sync(fast_relay, key_file, db, limit=rng.choice([1, 2, 5]))
        mode = ("inside", "between", "random")[i % 3]
        if mode == "inside":
            hit, committed = kill_after_line(child, "applying page", rng.randint(0, 3))
        elif mode == "between":
            hit, _ = kill_after_line(child, "page committed", rng.randint(0, 3))
        else:
            # Within a child's usual life (interpreter start-up included): since rounds were
            # made faster, a run often ends within a second, and later kills hit nothing.
            time.sleep(rng.uniform(0.05, 0.6))
            child.send_signal(signal.SIGKILL)
            # Hit when the kill found it running: it may have finished just before.
            hit = child.wait(60) == -signal.SIGKILL
        code = child.wait(60)
        if hit:
            assert code == -signal.SIGKILL
            killed[mode] += 1
            if mode == "inside" and applied_pages(db) == pages_before + committed:
                before_commit += 1
        else:
            assert code == 0, child.stderr.read() if child.stderr else ""
        with sqlite3.connect(db) as check:
            assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    print(f"kills: {killed}, inside a page's transaction before its commit: {before_commit}")
    assert enough_kills(killed, before_commit), (killed, before_commit)

    final = buzz_sync(fast_relay, key_file, db, limit=25)
    _out, err = final.communicate(timeout=120)
    assert final.returncode == 0, err

    expected = world.readable(readable)
    with Syncer(relay_url=fast_relay.url, secret_hex=world.bob.secret, db=db) as resumed:
        collection = resumed.heads()
        state = resumed.store.state(resumed.collection_id)
        assert resumed.key == CollectionKey(
            relay=fast_relay.url, community="127.0.0.1", pubkey=world.bob.pubkey, filter="{}"
        )
    assert not state.round_open and state.complete
    with Syncer(relay_url=fast_relay.url, secret_hex=world.bob.secret,
                db=tmp_path / "fresh.sqlite") as fresh:
        assert fresh.run_round().kind == "full"
        fresh_read = fresh.heads()
    assert fresh_read == expected
    assert collection == fresh_read, f"seed {seed}"
