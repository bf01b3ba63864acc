"""The front door against Django's handler, both serving the same DRF views in real relays.

Two relays on the pytest database: one with the front door (the default), one with
RELAY_FRONT_DOOR=false, so every request there goes through Django's handler and middleware.
The same requests go to both and must get the same answers: status, body (a page's token
aside, which is sealed with a fresh nonce) and headers. `/metrics` shows which door served, so a
test cannot pass because everything silently went through Django.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from django.db import connection

from artifacts.models import Community
from tests.factories import (
    Key,
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    nip98_header,
)
from tests.relay_server import RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)

HOST = "127.0.0.1"
# Headers whose values differ between any two answers.
VOLATILE = {"date", "content-length"}


def both_doors(django_db_blocker: Any, **env: str) -> Iterator[dict[str, RelayProcess]]:
    """A relay with the front door and one without, both with `env`."""
    with django_db_blocker.unblock():
        fast = start_relay(env)
        try:
            django = start_relay({**env, "RELAY_FRONT_DOOR": "false"})
        except BaseException:
            fast.stop()
            raise
    yield {"fast": fast, "django": django}
    fast.stop()
    django.stop()


@pytest.fixture(scope="module")
def relays(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, RelayProcess]]:
    yield from both_doors(django_db_blocker)


@pytest.fixture(scope="module")
def quiet_relays(
    django_db_setup: None, django_db_blocker: Any
) -> Iterator[dict[str, RelayProcess]]:
    """Both doors without an overlap: a continuation right after a round is quiet, so the
    fast path's guessed page is read whole in its first message."""
    yield from both_doors(django_db_blocker, ARTIFACT_SYNC_OVERLAP_SECONDS="0")


@dataclass
class World:
    community: Community
    owner: Key
    open_h: str
    # (d, head event id) of the open channel's artifacts; the private channel's are not listed.
    artifacts: list[tuple[str, str]]


@pytest.fixture
def world() -> World:
    community = make_community(HOST)
    owner = make_key()
    open_h = make_channel(community, name="open", owner=owner)
    secret_h = make_channel(community, name="secret", visibility="private", owner=owner,
                            members=[owner])
    artifacts = [create_artifact(community, owner, open_h, title=f"open {i}") for i in range(5)]
    for i in range(3):
        create_artifact(community, owner, secret_h, title=f"secret {i}")
    return World(community, owner, open_h, artifacts)


def post(relay: RelayProcess, body: bytes, who: Key | None = None, *,
         authorization: str | None = None, **headers: str) -> httpx.Response:
    url = f"{relay.url}/query"
    if authorization is None and who is not None:
        authorization = nip98_header(who, url, "POST", body)
    if authorization is not None:
        headers["Authorization"] = authorization
    return httpx.post(url, content=body, headers={"Content-Type": "application/json", **headers},
                      timeout=30)


def query(progress: str | None, limit: int = 100, **extra: Any) -> bytes:
    return orjson.dumps([{"artifact": "current", "progress": progress, "limit": limit, **extra}])


def full_round(relay: RelayProcess, who: Key, **extra: Any) -> tuple[list[dict[str, Any]], str]:
    """Pages until `more` is false: (pages without their tokens, the last token)."""
    pages, progress = [], None
    while True:
        response = post(relay, query(progress, limit=3, **extra), who)
        assert response.status_code == 200, response.text
        page = response.json()
        progress = page.pop("progress")
        pages.append(page)
        if not page["more"]:
            return pages, progress


def front_door_served(relay: RelayProcess) -> int:
    """How many requests the front door served (`/metrics`)."""
    text = httpx.get(f"{relay.url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("buzz_front_door_requests_total "):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("buzz_front_door_requests_total missing from /metrics")


def same_headers(a: httpx.Response, b: httpx.Response) -> None:
    def shown(response: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in response.headers.items() if k not in VOLATILE}

    assert shown(a) == shown(b)


def test_rounds_are_the_same_pages_whichever_path_answers(
    relays: dict[str, RelayProcess], world: World
) -> None:
    reader = make_key()
    answered_before = front_door_served(relays["fast"])
    rounds = {name: full_round(relay, reader) for name, relay in relays.items()}
    d, head = world.artifacts[0]
    delete_artifact(world.community, world.owner, d, world.open_h, prev=head)
    continued = {}
    for name, relay in relays.items():
        response = post(relay, query(rounds[name][1]), reader)
        assert response.status_code == 200, response.text
        page = response.json()
        page.pop("progress")
        continued[name] = (page, response)
    # The reader reads the five open artifacts, never the private channel's.
    assert sum(len(page["events"]) for page in rounds["fast"][0]) == 5
    assert rounds["fast"][0] == rounds["django"][0]
    # (A continuation may send again what changed within the overlap; both send the same.)
    assert continued["fast"][0] == continued["django"][0]
    assert continued["fast"][0]["removed"] == [{"d": d, "reason": "deleted"}]
    assert continued["fast"][0]["reset"] is False
    same_headers(continued["fast"][1], continued["django"][1])
    answered_after = front_door_served(relays["fast"])
    assert answered_after > answered_before, "the front door served none of the rounds"
    assert front_door_served(relays["django"]) == 0


@pytest.mark.parametrize(
    "case",
    [
        "unknown host",
        "bad signature",
        "signed for another URL",
        "signed for https with a forged scheme header",
        "no authorization",
        "not json",
        "invalid filter",
        "plain read",
        "foreign token",
        "malformed token",
        "body over the limit",
    ],
)
def test_refusals_are_djangos_answers(
    relays: dict[str, RelayProcess], world: World, case: str
) -> None:
    reader, other = make_key(), make_key()
    foreign = full_round(relays["django"], other)[1]
    answers = []
    for relay in relays.values():
        body = query(None)
        kwargs: dict[str, Any] = {}
        if case == "unknown host":
            kwargs["Host"] = "nowhere.example"
        elif case == "bad signature":
            header = nip98_header(reader, f"{relay.url}/query", "POST", body)
            kwargs["authorization"] = header[:-8] + "AAAAAAA="
        elif case == "signed for another URL":
            kwargs["authorization"] = nip98_header(reader, "http://elsewhere/query", "POST", body)
        elif case == "signed for https with a forged scheme header":
            # The relay's scheme rule, not the client's own X-Buzz-Public-Scheme (the header
            # Django's is_secure() reads), decides the `u` NIP-98 must name: plain http here.
            https_url = relay.url.replace("http://", "https://", 1) + "/query"
            kwargs["authorization"] = nip98_header(reader, https_url, "POST", body)
            kwargs["X-Buzz-Public-Scheme"] = "https"
        elif case == "not json":
            body = b"[{"
        elif case == "invalid filter":
            body = query(None, kinds="everything")
        elif case == "plain read":
            body = orjson.dumps([{"artifact": "current", "limit": 5}])
        elif case == "foreign token":
            body = query(foreign)
        elif case == "malformed token":
            body = query("AAAA")
        elif case == "body over the limit":
            body = query(None, padding="x" * 70_000)
        who = None if case == "no authorization" else reader
        answers.append(post(relay, body, who, **kwargs))
    fast, django = answers
    assert fast.status_code == django.status_code
    # Every case is a refusal except the plain read.
    assert (fast.status_code == 200) == (case == "plain read")
    assert fast.json() == django.json()
    same_headers(fast, django)


@pytest.mark.parametrize(
    "case", ["quiet", "bad signature", "replayed", "host given to another community"]
)
def test_a_quiet_continuation_guessed_early_is_answered_as_without_a_guess(
    quiet_relays: dict[str, RelayProcess], world: World, case: str
) -> None:
    """The fast path reads a quiet continuation in the page's first message, guessing the
    community (the one it last served at the host) and the reader (the auth header's key)
    before either is checked (`async_reads.guess_round`). The answers are still
    Django's, in the contract's order: a page only for the authenticated reader at the host's
    community, 401 for a bad or replayed signature, 400 for a token the host's community did
    not issue."""
    reader = make_key()
    tokens = {name: full_round(relay, reader)[1] for name, relay in quiet_relays.items()}
    if case == "host given to another community":
        world.community.host = "old.127.0.0.1"
        world.community.save(update_fields=["host"])
        make_community(HOST)
    answers = []
    for name, relay in quiet_relays.items():
        body = query(tokens[name])
        header = nip98_header(reader, f"{relay.url}/query", "POST", body)
        if case == "bad signature":  # still names the reader's key: the page is guessed
            event = orjson.loads(base64.b64decode(header.split()[1]))
            forged = orjson.dumps({**event, "sig": "0" * 128})
            header = "Nostr " + base64.b64encode(forged).decode()
        elif case == "replayed":
            assert post(relay, body, authorization=header).status_code == 200
        answers.append(post(relay, body, authorization=header))
    fast, django = answers
    expected = {"quiet": 200, "bad signature": 401, "replayed": 401,
                "host given to another community": 400}[case]
    assert fast.status_code == django.status_code == expected, fast.text
    if case == "quiet":
        pages = [answer.json() for answer in answers]
        for page in pages:
            page.pop("progress")
        assert pages[0] == pages[1]
        assert (pages[0]["events"], pages[0]["removed"], pages[0]["more"]) == ([], [], False)
    else:
        assert fast.json() == django.json()
    same_headers(fast, django)


def test_a_quiet_continuation_is_read_whole_in_the_pages_first_message(
    quiet_relays: dict[str, RelayProcess], world: World
) -> None:
    """With nothing in its range (no overlap here), the fast path reads the continuation in
    one message: PostgreSQL's own record of the pool's sessions shows it, the fence through the
    guessed first statement (its range up to infinity, the reader's key in it) and COMMIT."""
    relay = quiet_relays["fast"]
    reader = make_key()
    _pages, token = full_round(relay, reader)
    answer = post(relay, query(token), reader)
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert (page["events"], page["removed"], page["more"], page["reset"]) == (
        [], [], False, False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE query LIKE %s",
                       [f"%{reader.pubkey}%"])
        messages = [text for (text,) in cursor.fetchall()]
    assert any(text.startswith("BEGIN; EXECUTE buzz_fence; COMMIT; BEGIN ISOLATION")
               and text.endswith("'infinity'); COMMIT") for text in messages), messages


POOL_ROLLBACK = "rolling back returned connection"  # psycopg_pool's warning


def test_refusals_and_plain_reads_end_the_pages_transaction_themselves(
    relays: dict[str, RelayProcess], world: World
) -> None:
    """A `/query` refused after its page's transaction began (401, 400) and a plain read (which
    does not use it) end that read-only transaction with COMMIT (`async_reads.end_read`): the
    pool never rolls their connection back, which logs a warning and makes psycopg deallocate
    every statement the session prepared, the fence's among them."""
    relay = relays["fast"]
    reader = make_key()
    full_round(relay, reader)  # the pool's connections prepare the page's statements

    def rollbacks() -> int:
        return relay.log_path.read_text(errors="replace").count(POOL_ROLLBACK)

    before = rollbacks()
    body = query(None)
    forged = nip98_header(reader, f"{relay.url}/query", "POST", body)[:-8] + "AAAAAAA="
    for _ in range(3):
        assert post(relay, body, authorization=forged).status_code == 401
        assert post(relay, query("AAAA"), reader).status_code == 400
        plain = post(relay, orjson.dumps([{"artifact": "current", "limit": 5}]), reader)
        assert plain.status_code == 200 and len(plain.json()) == 5
        pages, _ = full_round(relay, reader)
        assert sum(len(page["events"]) for page in pages) == 5
    assert rollbacks() == before


def test_a_replayed_auth_event_is_refused_by_the_front_door(
    relays: dict[str, RelayProcess], world: World
) -> None:
    reader = make_key()
    relay = relays["fast"]
    full_round(relay, reader)  # the process caches readiness and the database identity
    body = query(None)
    header = nip98_header(reader, f"{relay.url}/query", "POST", body)
    first = post(relay, body, authorization=header)
    answered = front_door_served(relay)
    again = post(relay, body, authorization=header)
    assert first.status_code == 200
    assert again.status_code == 401
    assert again.json()["error"] == "unauthorized" and "replay" in again.json()["message"]
    assert again.headers["www-authenticate"] == "Nostr"
    assert front_door_served(relay) == answered + 1
    # The same event id is refused by the other instance too (the claim is in Redis).
    elsewhere = post(relays["django"], body, authorization=header)
    assert elsewhere.status_code == 401


def test_the_front_door_applies_the_rate_limits(
    world: World,
) -> None:
    limited = start_relay({"RELAY_RATE_LIMIT_PUBKEY_RATE": "0.01",
                           "RELAY_RATE_LIMIT_PUBKEY_BURST": "3"})
    try:
        reader = make_key()
        statuses = [post(limited, query(None), reader) for _ in range(6)]
        codes = [r.status_code for r in statuses]
        assert codes[:3] == [200, 200, 200] and set(codes[3:]) == {429}, codes
        refused = statuses[-1]
        assert refused.json()["error"] == "rate_limited"
        assert int(refused.headers["retry-after"]) >= 1
        assert front_door_served(limited) >= 3
    finally:
        limited.stop()
