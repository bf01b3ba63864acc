"""Hostile characters: every write path, then every read path, byte for byte (PROTOCOL.md 2-5, 8).

The defect class: an event whose content or a tag value held U+0000 was once accepted, and then
every read whose predicate needs the stored event's JSON (`raw::jsonb`: free tag predicates such
as `#title`, history with `#op`) answered 500 for every reader, for good: PostgreSQL's jsonb
cannot hold `\\u0000`. The relay now refuses such events at ingest (`check_storable`).

Hypothesis writes events holding every class of character (NUL, C0 controls and DEL, U+2028/2029,
non-BMP, `"` and `\\`, text that merely looks like an escape, markup, long strings, tag values at
the 4096-byte limit and titles at 512), each spelled as its client chose: compact orjson,
`json.dumps` with ASCII escapes and surrogate pairs, indented, `\\/`, or a client of its own
(random escapes of any character in either hex case, `\\u003a` colons, whitespace, shuffled
keys). They go through `POST /event` and the WebSocket of a real relay process (PostgreSQL and
Redis), and then every read path runs on them:

- plain `current` with each kind of predicate (none, `#d`, `#h`, `#type`, free tags `#title`,
  `#label`, a 4096-byte `#big`, all of them together) and `history` (`#d` with `#op`, `#h`,
  `#title`, a free tag);
- rounds: incremental `/query` with `progress` over small pages, a whole collection and one
  scoped by `#h` and `#type`, continued from example to example;
- the WebSocket: the live stream, and replay by `#d`, `#h` and `ids`;
- `buzz-sync` (its command line) into its SQLite store;
- the admin pages. No admin page shows an event; what events write that they show is channel
  names (kinds 9007 and 9002), so those are hostile too.

The properties: no answer is a 5xx; an event with a NUL anywhere in its content or tags is
refused (`OK false "invalid: ... U+0000 ..."`) over both transports and never stored; every other
event is accepted and found by every path; and what readers get is the author's own text: each
plain answer is exactly `[` + the stored texts in protocol order + `]`, and each event inside a
round's page and a WebSocket frame is exactly the text its author sent (the HTTP body, or the
event inside the `EVENT` frame).
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import orjson
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient
from django.utils.html import escape
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from artifacts.models import Channel, ChannelMember, Community, Event
from buzzclient.cli import main as buzz_sync
from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import Key, artifact_tags, make_channel, make_community, make_key
from tests.faults.clients import Client
from tests.relay_server import RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)

# buzz-sync names the community by the relay URL's host, and the relay listens on loopback.
HOST = "127.0.0.1"
TYPES = ("buzz.task", "buzz.note")
MAX_EVENT_BYTES = 65536
MAX_TAG_VALUE_BYTES = 4096
MAX_TITLE_BYTES = 512
MAX_CHANNEL_NAME_CHARS = 200
JSON_WHITESPACE = " \t\r\n"

NUL = "\x00"
CHARACTER_CLASSES: dict[str, tuple[str, ...]] = {
    "c0": (*(chr(code) for code in range(1, 0x20)), "\x7f"),
    "separators": ("\u2028", "\u2029"),
    "non_bmp": ("\U00010000", "\U0001f600", "\U0001d11e", "\U000e0001", "\U0010ffff"),
    # Quote and backslash, and text that only looks like an escape: a backslash before `u0000`
    # is not a NUL, and `\ud83d` written out is not a lone surrogate.
    "json": ('"', "\\", "/", '\\"', "\\\\", "\\/", "\\u0000", "\\\\u0000", "\\ud83d", "u0000"),
    "bmp": ("\u00e9", "\u00a0", "\u0301", "\u4e2d", "\u200b", "\ufeff", "\ufffe", "\uffff",
            "\ud7ff", "\ue000"),
    "markup": ("<", ">", "&", "'", "</script>", "<!--", ":", ",", "{", "]", "%s", "{{ x }}"),
}
EVERY_CLASS = "".join("".join(chars) for chars in CHARACTER_CLASSES.values())
# Where a NUL is put: the content, the title, free tag values (one at the 4096-byte limit), a
# tag's name and its third element.
POISON_TARGETS = ("content", "title", "label", "big", "name", "third")
# Subscription ids are part of every frame the relay writes: hostile too.
LIVE = 'live \x00\x1f"\\\u2028\U0001f600'


# --- how a client spells its JSON -------------------------------------------------------------

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t", "/": "\\/"}
_WHITESPACE_POOL = ("", "", " ", "\n", "\t", "\r\n", "  \n\t")


def _hex_escape(code: int, rng: random.Random) -> str:
    digits = f"{code:04x}"
    return "\\u" + (digits.upper() if rng.random() < 0.5 else digits)


def _escaped_char(char: str, rng: random.Random, rate: float) -> str:
    code = ord(char)
    if char not in '"\\' and code >= 0x20 and rng.random() >= rate:
        return char
    options = [_SHORT_ESCAPES[char]] if char in _SHORT_ESCAPES else []
    if code < 0x10000:
        options.append(_hex_escape(code, rng))
    else:  # a surrogate pair, as json.dumps writes it
        code -= 0x10000
        options.append(_hex_escape(0xD800 + (code >> 10), rng)
                       + _hex_escape(0xDC00 + (code & 0x3FF), rng))
    return rng.choice(options)


@dataclass(frozen=True)
class Spelling:
    """How one client writes an event's JSON text; every spelling parses to the same event."""

    style: str  # orjson | json_ascii | json_indent | slashes | custom
    seed: int = 0
    escape_rate: float = 0.0  # custom: the chance any character is written as an escape
    spaces: bool = False  # custom: whitespace between tokens
    shuffle: bool = False  # custom: keys in another order
    outer: tuple[str, str] = ("", "")  # custom: whitespace around the event (body or frame)

    def event_text(self, event: dict[str, Any]) -> str:
        if self.style == "orjson":
            text = orjson.dumps(event).decode()
        elif self.style == "json_ascii":  # \uXXXX for all non-ASCII, surrogate pairs
            text = json.dumps(event)
        elif self.style == "json_indent":
            text = json.dumps(event, ensure_ascii=False, indent=2)
        elif self.style == "slashes":  # every "/" written `\/` (only strings hold a "/")
            text = orjson.dumps(event).decode().replace("/", "\\/")
        else:
            text = self._custom(event, random.Random(self.seed))
        assert orjson.loads(text) == event and json.loads(text) == event  # the test's own check
        return text

    def http_body(self, text: str) -> str:
        return self.outer[0] + text + self.outer[1]

    def ws_frame(self, text: str) -> str:
        if self.style != "custom":
            return '["EVENT",' + text + "]"
        rng = random.Random(self.seed + 1)
        return ("[" + self._ws(rng) + self._custom("EVENT", rng) + self._ws(rng) + ","
                + self.outer[0] + text + self.outer[1] + "]")

    def _ws(self, rng: random.Random) -> str:
        return rng.choice(_WHITESPACE_POOL) if self.spaces else ""

    def _custom(self, value: Any, rng: random.Random) -> str:
        if isinstance(value, str):
            return '"' + "".join(_escaped_char(c, rng, self.escape_rate) for c in value) + '"'
        if isinstance(value, int):
            return str(value)
        if isinstance(value, list):
            if not value:
                return "[" + self._ws(rng) + "]"
            return "[" + ",".join(
                self._ws(rng) + self._custom(item, rng) + self._ws(rng) for item in value
            ) + "]"
        keys = list(value)
        if self.shuffle:
            rng.shuffle(keys)
        return "{" + ",".join(
            self._ws(rng) + self._custom(key, rng) + self._ws(rng) + ":" + self._ws(rng)
            + self._custom(value[key], rng) + self._ws(rng)
            for key in keys
        ) + "}"


_outer_ws = st.sampled_from(["", " ", "\n", "\t\r\n", "  "])
spellings = st.one_of(
    st.sampled_from([Spelling("orjson"), Spelling("json_ascii"), Spelling("json_indent"),
                     Spelling("slashes")]),
    st.builds(Spelling, style=st.just("custom"), seed=st.integers(0, 2**32),
              escape_rate=st.sampled_from([0.0, 0.3, 1.0]), spaces=st.booleans(),
              shuffle=st.booleans(), outer=st.tuples(_outer_ws, _outer_ws)),
)


# --- hostile values ---------------------------------------------------------------------------

def _truncate_bytes(text: str, limit: int) -> str:
    while len(text.encode()) > limit:
        text = text[:-1]
    return text


def at_limit(prefix: str, filler: str, limit: int) -> str:
    """`prefix`, then `filler` repeated, then ASCII: exactly `limit` UTF-8 bytes."""
    value = _truncate_bytes(prefix, limit // 2)
    value += filler * ((limit - len(value.encode())) // len(filler.encode()))
    value += "x" * (limit - len(value.encode()))
    assert len(value.encode()) == limit
    return value


_piece = st.one_of(
    *(st.sampled_from(chars) for chars in CHARACTER_CLASSES.values()),
    st.characters(exclude_categories=["Cs"], exclude_characters=NUL),  # any code point
    st.text(alphabet="ab z", min_size=1, max_size=4),
)
hostile = st.lists(_piece, max_size=10).map("".join)
# Fillers of long strings; none is escaped by more than 12 bytes in any spelling, which keeps
# every event under 64 KiB (the relay's limit, checked by `WritePlan` below).
_fillers = st.sampled_from(["x", "\u00e9", "\u20ac", "\u2028", "\U0001f600", '"', "\\"])


@st.composite
def contents(draw: st.DrawFn) -> str:
    text = draw(hostile)
    if draw(st.booleans()):
        text += draw(_fillers) * draw(st.integers(200, 1500))
    return text


@st.composite
def titles(draw: st.DrawFn) -> str:
    if draw(st.booleans()):  # at its 512-byte limit
        return at_limit("t" + draw(hostile), draw(_fillers), MAX_TITLE_BYTES)
    return _truncate_bytes("t" + draw(hostile), MAX_TITLE_BYTES)


@st.composite
def big_values(draw: st.DrawFn) -> str:
    return at_limit(draw(hostile), draw(_fillers), MAX_TAG_VALUE_BYTES)


def _poisoned(value: str, at: int) -> str:
    """`value` with one character replaced by NUL (never longer: limits stay as they were)."""
    if not value:
        return NUL
    i = at % len(value)
    return value[:i] + NUL + value[i + 1:]


@dataclass(frozen=True)
class WritePlan:
    """One event to write: what it holds, where a NUL goes (if anywhere), how it is sent."""

    kind: str  # artifact | channel (9007) | rename (9002)
    transport: str  # http | ws
    spelling: Spelling
    content: str = ""
    title: str = "t"
    label: str = ""
    big: str | None = None  # a free tag value at the 4096-byte limit
    odd: tuple[str, str, str] | None = None  # a free tag with a hostile name and two values
    update: int | None = None  # artifact: update an existing one (an index) instead of create
    channel: int = 0  # artifact create: the home (an index); rename: the channel renamed
    type_: str = TYPES[0]
    poison: str | None = None  # one of POISON_TARGETS
    poison_at: int = 0
    resend: Spelling | None = None  # send it again, so spelled, over the other transport

    def __repr__(self) -> str:  # the strings are long: show their start and size
        def short(value: object) -> str:
            text = repr(value)
            return text if len(text) <= 60 else f"{text[:50]}...<{len(text)} chars>"
        return "WritePlan(" + ", ".join(
            f"{name}={short(value)}" for name, value in self.__dict__.items()
            if value is not None) + ")"


@st.composite
def write_plans(draw: st.DrawFn) -> WritePlan:
    kind = draw(st.sampled_from(["artifact", "artifact", "artifact", "channel", "rename"]))
    return WritePlan(
        kind=kind,
        transport=draw(st.sampled_from(["http", "ws"])),
        spelling=draw(spellings),
        content=draw(contents()),
        title=draw(titles()) if kind == "artifact" else "c" + draw(hostile),
        label=draw(hostile),
        big=draw(st.none() | big_values()),
        odd=draw(st.none() | st.tuples(hostile.map(lambda name: "x-" + name), hostile, hostile)),
        update=draw(st.none() | st.integers(0, 1000)),
        channel=draw(st.integers(0, 1000)),
        type_=draw(st.sampled_from(TYPES)),
        poison=draw(st.none() | st.none() | st.sampled_from(POISON_TARGETS)),
        poison_at=draw(st.integers(0, 10_000)),
        resend=draw(st.none() | st.none() | spellings),
    )


# --- the world: a relay, a community, an author and a reader, and what was stored ---------------

@dataclass
class Stored:
    """An accepted event and the text the relay must serve for it."""

    event: dict[str, Any]
    raw: str  # the HTTP body, or the event inside the WebSocket frame, exactly

    @property
    def id(self) -> str:
        return str(self.event["id"])

    @property
    def sort_key(self) -> tuple[int, str]:  # PROTOCOL.md section 5: created_at desc, id asc
        return (-int(self.event["created_at"]), self.id)

    def tag(self, name: str) -> str:
        return next(tag[1] for tag in self.event["tags"] if tag[0] == name)

    def matches(self, predicates: dict[str, Sequence[str]]) -> bool:
        """Tag predicates: values of one name OR, names AND (d, h, type as for any tag)."""
        return all(
            any(tag[0] == name and len(tag) > 1 and tag[1] in values
                for tag in self.event["tags"])
            for name, values in predicates.items()
        )


@dataclass
class Rounds:
    """A reader's collection kept by incremental rounds, holding each event's text as served."""

    client: Client
    filter: dict[str, Any]
    limit: int
    items: dict[str, str] = field(default_factory=dict)  # d -> the event text as served
    progress: str | None = None

    def round(self, relay: RelayProcess) -> None:
        for _ in range(1000):
            body = {"artifact": "current", **self.filter, "limit": self.limit,
                    "progress": self.progress}
            response = self.client.post("/query", [body])
            assert response.status_code == 200, _answer(relay, response, body)
            page = orjson.loads(response.content)
            served = _json_items(_json_members(response.content.decode())["events"])
            assert len(served) == len(page["events"]) <= self.limit
            if page["reset"]:
                self.items.clear()
            for text in served:
                self.items[_d(orjson.loads(text))] = text
            for removal in page["removed"]:
                self.items.pop(removal["d"], None)
            self.progress = page["progress"]
            if not page["more"]:
                return
        raise AssertionError("the round did not finish")


@dataclass(repr=False)
class World:
    relay: RelayProcess
    community: Community
    alice_key: Key
    bob_key: Key
    alice: Client  # writes
    bob: Client  # reads: a member of the private channel, so every channel is his to read
    channels: list[str]  # homes of artifacts, all in Bob's live subscription
    names: dict[str, str]  # channel -> its name
    admin_cookie: str
    key_file: Path
    sync_db: Path
    heads: dict[str, Stored] = field(default_factory=dict)  # d -> current head
    revisions: list[Stored] = field(default_factory=list)  # every accepted 45010
    created_channels: list[str] = field(default_factory=list)  # homes from the next batch on
    accepted: set[str] = field(default_factory=set)  # ids of every event the relay accepted
    whole: Rounds | None = None
    scoped: Rounds | None = None

    def __repr__(self) -> str:
        return f"World({len(self.heads)} heads, {len(self.revisions)} revisions, {self.names})"

    def selected(self, artifact: str, predicates: dict[str, Sequence[str]]) -> list[Stored]:
        """What a plain read of `artifact` ("current" or "history") must answer Bob."""
        stored = self.heads.values() if artifact == "current" else self.revisions
        return [s for s in stored if s.matches(predicates)]


def _d(event: dict[str, Any]) -> str:
    return str(next(tag[1] for tag in event["tags"] if tag[0] == "d"))


@pytest.fixture(scope="module")
def relay_process(django_db_setup: None, django_db_blocker: object) -> Iterator[RelayProcess]:
    """One relay process for the module (tests/relay_server.py, on the pytest database; not
    this folder's `relay`, which has a deployment of its own), without rate limits: a batch's
    reads run back to back, faster than the 50 requests a second a reader is allowed."""
    server = start_relay({"RELAY_RATE_LIMIT_PUBKEY_RATE": "0",
                          "RELAY_RATE_LIMIT_ADDRESS_RATE": "0"})
    try:
        yield server
    finally:
        server.stop()
        server.log_path.unlink(missing_ok=True)


@pytest.fixture
def world(relay_process: RelayProcess, tmp_path: Path) -> Iterator[World]:
    relay = relay_process
    alice, bob = make_key(), make_key()
    community = make_community(HOST, name="Hostile", open_channel_creation=True)
    open_h = make_channel(community, owner=alice, name="lobby")
    private_h = make_channel(community, owner=alice, name="team", visibility="private",
                             members=[bob])
    staff = get_user_model().objects.create_user(
        "staff", password=None, is_staff=True, is_superuser=True
    )
    django_client = DjangoClient()
    django_client.force_login(staff)  # a session row the relay process reads too
    key_file = tmp_path / "bob.key"
    key_file.write_text(bob.secret + "\n")
    made = World(
        relay=relay, community=community, alice_key=alice, bob_key=bob,
        alice=Client(relay.url, alice.secret), bob=Client(relay.url, bob.secret),
        channels=[open_h, private_h], names={open_h: "lobby", private_h: "team"},
        admin_cookie=django_client.cookies[django_settings.SESSION_COOKIE_NAME].value,
        key_file=key_file, sync_db=tmp_path / "buzz-sync.sqlite",
    )
    made.whole = Rounds(made.bob, {}, limit=3)
    made.scoped = Rounds(made.bob, {"#h": [private_h], "#type": [TYPES[1]]}, limit=2)
    yield made
    made.alice.close()
    made.bob.close()


# --- reading JSON texts without re-encoding them ----------------------------------------------

def _json_items(container: str) -> list[str]:
    """The elements of a JSON array (or members of an object) exactly as written, whitespace
    around them included: the bytes a client received, not a re-encoding of them."""
    container = container.strip(JSON_WHITESPACE)
    assert container[:1] in ("[", "{") and container[-1:] in ("]", "}"), container[:100]
    items: list[str] = []
    depth, start, in_string, escaped = 0, 1, False, False
    for i, char in enumerate(container):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                assert i == len(container) - 1, container[:100]
                last = container[start:i]
                if items or last.strip(JSON_WHITESPACE):
                    items.append(last)
        elif char == "," and depth == 1:
            items.append(container[start:i])
            start = i + 1
    return items


def _json_members(text: str) -> dict[str, str]:
    """A JSON object's members: key -> the value's text exactly as written."""
    members = {}
    for member in _json_items(text):
        member = member.lstrip(JSON_WHITESPACE)
        end, escaped = 1, False
        while escaped or member[end] != '"':
            escaped = not escaped and member[end] == "\\"
            end += 1
        rest = member[end + 1:].lstrip(JSON_WHITESPACE)
        assert rest[:1] == ":", member[:100]
        members[json.loads(member[: end + 1])] = rest[1:]
    return members


def _answer(relay: RelayProcess, response: httpx.Response, what: object) -> str:
    return (f"{what!r:.300}: {response.status_code} {response.text[:300]}\n"
            f"relay log:\n{relay.log()}")


def _ids(texts: Sequence[str]) -> list[str]:
    return [str(orjson.loads(text)["id"]) for text in texts]


# --- writing ------------------------------------------------------------------------------------

@dataclass
class Written:
    plan: WritePlan
    event: dict[str, Any]
    text: str  # the event's JSON text as spelled (no outer whitespace)
    stored_as: str  # what the relay must serve: the HTTP body, or `text` when sent over WS
    refused: bool  # a NUL somewhere: must be refused


def _event_for(world: World, plan: WritePlan) -> tuple[dict[str, Any], bool]:
    """The signed event `plan` describes, and whether it holds a NUL."""
    def put(target: str, value: str) -> str:
        return _poisoned(value, plan.poison_at) if plan.poison == target else value

    content = put("content", plan.content)
    if plan.kind in ("channel", "rename"):
        name = plan.title[:MAX_CHANNEL_NAME_CHARS]
        name = name if plan.poison in (None, "content") else _poisoned(name, plan.poison_at)
        if plan.kind == "channel":
            tags = [["h", str(uuid.uuid4())], ["name", name]]
            event = world.alice.sign(9007, tags, content)
        else:
            h = sorted(world.names)[plan.channel % len(world.names)]
            event = world.alice.sign(9002, [["h", h], ["name", name]], content)
        return event, NUL in name or NUL in content
    extra = [["label", put("label", plan.label)]]
    if plan.big is not None or plan.poison == "big":
        extra.append(["big", put("big", plan.big or at_limit("", "x", MAX_TAG_VALUE_BYTES))])
    if plan.odd is not None or plan.poison in ("name", "third"):
        name, second, third = plan.odd or ("x-odd", "v", "w")
        extra.append([put("name", name), second, put("third", third)])
    title = put("title", plan.title)
    if plan.update is not None and world.heads:
        head = world.heads[sorted(world.heads)[plan.update % len(world.heads)]]
        tags = artifact_tags(op="update", d=_d(head.event), h=head.tag("h"), prev=head.id,
                             type=head.tag("type"), title=title, extra=extra)
    else:
        h = world.channels[plan.channel % len(world.channels)]
        tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, type=plan.type_,
                             title=title, extra=extra)
    poisoned = plan.poison is not None
    return world.alice.sign(45010, tags, content), poisoned


def _send(world: World, writer: NostrWs, transport: str, spelling: Spelling, text: str
          ) -> tuple[list[Any], str]:
    """Send one event's text; the OK answer and the text the relay must now serve for it."""
    event_id = orjson.loads(text)["id"]
    if transport == "http":
        body = spelling.http_body(text)
        response = world.alice.post("/event", body.encode())
        assert response.status_code == 200, _answer(world.relay, response, body[:200])
        answer = response.json()
        assert isinstance(answer, list)
        return answer, body
    writer.send(spelling.ws_frame(text))
    frames = writer.recv_until(lambda f: f[0] == "NOTICE" or (f[0] == "OK" and f[1] == event_id))
    assert frames[-1][0] == "OK", (frames[-1], world.relay.log())
    return frames[-1], text


def _write(world: World, writer: NostrWs, plan: WritePlan) -> Written:
    event, refused = _event_for(world, plan)
    text = plan.spelling.event_text(event)
    assert len(plan.spelling.http_body(text).encode()) <= MAX_EVENT_BYTES  # the test's own bound
    # Two plans can describe one event (a rename of a channel to the same name in the same
    # second): the second is a duplicate, and the text first stored stays the one served.
    duplicate = event["id"] in world.accepted
    answer, stored_as = _send(world, writer, plan.transport, plan.spelling, text)
    if duplicate:
        stored_as = next((s.raw for s in world.revisions if s.id == event["id"]), stored_as)
    written = Written(plan, event, text, stored_as, refused)
    if answer[2] is True and not duplicate:  # what the relay now holds, whatever it should have
        _remember(world, written)
    if refused:
        assert answer[:3] == ["OK", event["id"], False], answer
        assert answer[3].startswith("invalid: ") and "U+0000" in answer[3], answer
    else:
        assert answer == [
            "OK", event["id"], True, "duplicate: already have this event" if duplicate else ""
        ], answer
    if plan.resend is not None:
        other = "ws" if plan.transport == "http" else "http"
        again, _ = _send(world, writer, other, plan.resend, plan.resend.event_text(event))
        if refused:
            assert again[2] is False and "U+0000" in again[3], again
        else:  # a duplicate: nothing changes, the first text stays the one served
            assert again[:3] == ["OK", event["id"], True], again
            assert again[3].startswith("duplicate: "), again
    return written


def _remember(world: World, written: Written) -> None:
    world.accepted.add(written.event["id"])
    stored = Stored(written.event, written.stored_as)
    kind = written.event["kind"]
    if kind == 45010:
        world.heads[_d(written.event)] = stored
        world.revisions.append(stored)
    elif kind in (9007, 9002):
        h = stored.tag("h")
        world.names[h] = stored.tag("name")
        if kind == 9007:
            world.created_channels.append(h)  # open: Bob reads it


# --- reading ------------------------------------------------------------------------------------

def _plain(world: World, artifact: str, predicates: dict[str, Sequence[str]],
           **extra: Any) -> None:
    """A plain read answers exactly `[` + the stored texts, newest first, + `]`."""
    filter_ = {"artifact": artifact, "limit": 1000, **extra,
               **{f"#{name}": list(values) for name, values in predicates.items()}}
    response = world.bob.post("/query", [filter_])
    assert response.status_code == 200, _answer(world.relay, response, filter_)
    ordered = sorted(world.selected(artifact, predicates), key=lambda s: s.sort_key)
    wanted = b"[" + b",".join(s.raw.encode() for s in ordered) + b"]"
    same = response.content == wanted
    assert same, (filter_, _ids(_json_items(response.content.decode())), [s.id for s in ordered])


def _plain_reads(world: World, batch: list[Written]) -> None:
    artifacts = [w for w in batch if w.event["kind"] == 45010]
    ds = sorted({_d(w.event) for w in artifacts}) or [str(uuid.uuid4())]
    clean = [Stored(w.event, w.stored_as) for w in artifacts if not w.refused]

    def values(name: str) -> list[str]:
        return sorted({t[1] for s in clean for t in s.event["tags"] if t[0] == name})

    _plain(world, "current", {})
    _plain(world, "current", {"d": ds})
    for h in sorted({Stored(w.event, "").tag("h") for w in artifacts}):
        _plain(world, "current", {"h": [h]})
    for type_ in TYPES:
        _plain(world, "current", {"type": [type_]})
    for name in ("title", "label", "big"):  # free tags: matched in the stored event's JSON
        if found := values(name):
            _plain(world, "current", {name: found})
    for s in clean[:3]:  # every kind of predicate at once
        _plain(world, "current", {name: [s.tag(name)] for name in
                                  ("d", "h", "type", "title", "label")}, kinds=[45010])
    _plain(world, "history", {"d": ds})
    for ops in (["create"], ["update"], ["create", "update"]):
        _plain(world, "history", {"d": ds, "op": ops})
    for h in world.channels[:2]:
        _plain(world, "history", {"d": ds, "h": [h]})
    for name in ("title", "label"):
        if found := values(name):
            _plain(world, "history", {"d": ds, name: found})


def _raw_frames(ws: NostrWs, done: Callable[[list[Any]], bool], timeout: float = 15
                ) -> list[str]:
    """Frames as received (text), up to and including the first one `done` accepts."""
    frames: list[str] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            frame = ws.ws.recv(timeout=left)
        except TimeoutError:
            break
        frames.append(frame if isinstance(frame, str) else frame.decode())
        if done(orjson.loads(frames[-1])):
            return frames
    raise AssertionError(f"expected frame never came; got {[f[:120] for f in frames]}")


def _quiet_frames(ws: NostrWs, seconds: float) -> list[str]:
    frames: list[str] = []
    while True:
        try:
            frame = ws.ws.recv(timeout=seconds)
        except TimeoutError:
            return frames
        frames.append(frame if isinstance(frame, str) else frame.decode())


def _event_texts(frames: list[str], sub_id: str) -> list[str]:
    """The event texts of `sub_id`'s EVENT frames, exactly as framed."""
    texts = []
    for frame in frames:
        items = _json_items(frame)
        if orjson.loads(items[0]) == "EVENT" and orjson.loads(items[1]) == sub_id:
            assert len(items) == 3, frame[:200]
            texts.append(items[2])
    return texts


def _replay(world: World, reader: NostrWs, sub_id: str, filter_: dict[str, Any],
            expected: list[Stored]) -> None:
    reader.send(["REQ", sub_id, filter_])
    frames = _raw_frames(reader, lambda f: f[0] in ("EOSE", "CLOSED") and f[1] == sub_id)
    assert orjson.loads(frames[-1])[0] == "EOSE", (frames[-1], world.relay.log())
    texts = _event_texts(frames, sub_id)
    wanted = [s.raw for s in sorted(expected, key=lambda s: s.sort_key)]
    assert texts == wanted, (filter_, _ids(texts), _ids(wanted))
    reader.send(["CLOSE", sub_id])


def _live(world: World, reader: NostrWs, batch: list[Written]) -> None:
    """Every accepted revision arrives live, as written; no refused event ever does."""
    served = {s.id: s.raw for s in world.revisions}
    wanted = {w.event["id"] for w in batch if w.event["kind"] == 45010 and not w.refused}
    seen: set[str] = set()
    frames: list[str] = []
    while not wanted <= seen:
        try:
            frames += _raw_frames(reader, lambda f: f[0] == "EVENT" and f[1] == LIVE)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; missing {wanted - seen}; relay log:\n"
                                 f"{world.relay.log()}") from None
        seen = set(_ids(_event_texts(frames, LIVE)))
    frames += _quiet_frames(reader, 0.2)
    refused = {w.event["id"] for w in batch if w.refused}
    for text in _event_texts(frames, LIVE):
        event_id = orjson.loads(text)["id"]
        assert event_id not in refused, text[:200]
        assert text == served[event_id], (event_id, text[:200], served[event_id][:200])


def _websocket_reads(world: World, reader: NostrWs, batch: list[Written]) -> None:
    _live(world, reader, batch)
    artifacts = [Stored(w.event, "") for w in batch if w.event["kind"] == 45010]
    ds = sorted({_d(s.event) for s in artifacts})
    if ds:
        _replay(world, reader, "by-d \x00\u2029", {"kinds": [45010], "#d": ds},
                world.selected("current", {"d": ds}))
    for h in sorted({s.tag("h") for s in artifacts} | {world.channels[0]}):
        _replay(world, reader, "by-h", {"kinds": [45010, 45011], "#h": [h]},
                world.selected("current", {"h": [h]}))
    ids = sorted({w.event["id"] for w in batch})
    _replay(world, reader, "by-id", {"ids": ids},
            [s for s in world.heads.values() if s.id in ids])


def _until_caught_up(check: Callable[[], object], timeout: float = 10) -> None:
    """Repeat `check` (rounds) until it passes: a round covers stamps below its fence, which
    stops at the oldest transaction still open, so a round just after a write may leave it to
    the next one while one that began before it is open (PROTOCOL.md section 5)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def _rounds(world: World) -> None:
    assert world.whole is not None and world.scoped is not None
    for collection in (world.whole, world.scoped):
        predicates = {key[1:]: values for key, values in collection.filter.items()}
        wanted = {_d(s.event): s.raw for s in world.selected("current", predicates)}

        def caught_up(collection: Rounds = collection, wanted: dict[str, str] = wanted) -> None:
            collection.round(world.relay)
            same = collection.items == wanted
            assert same, (collection.filter, sorted(set(collection.items) ^ set(wanted)),
                          [d for d in wanted if collection.items.get(d) not in (None, wanted[d])])

        _until_caught_up(caught_up)


def _buzz_sync_store(world: World) -> dict[str, tuple[str, str | None, str]]:
    with sqlite3.connect(world.sync_db) as db:
        rows = db.execute("SELECT d, event_id, title, event FROM collection_artifacts").fetchall()
    return {d: (event_id, title, event) for d, event_id, title, event in rows}


def _buzz_sync(world: World) -> None:
    """buzz-sync's collection holds every head, checked (ids, signatures) and intact."""
    def caught_up() -> None:
        assert buzz_sync(["--relay", world.relay.url, "--key-file", str(world.key_file),
                          "--db", str(world.sync_db), "--limit", "3", "-q"]) == 0
        store = _buzz_sync_store(world)
        assert set(store) == set(world.heads), sorted(set(store) ^ set(world.heads))
        for d, (event_id, title, text) in store.items():
            head = world.heads[d]
            assert (event_id, title) == (head.id, head.tag("title")), d
            assert orjson.loads(text) == head.event, d
            if head.raw == orjson.dumps(head.event).decode():
                # Compact orjson spelling: served and stored bytes are the author's. (Other
                # spellings: see test_buzz_sync_stores_the_text_the_relay_served.)
                assert text == head.raw, d

    _until_caught_up(caught_up)


def _admin_get(world: World, path: str, params: dict[str, str] | None = None) -> str:
    response = httpx.get(
        f"{world.relay.url}{path}", params=params, timeout=15,
        headers={"Cookie": f"{django_settings.SESSION_COOKIE_NAME}={world.admin_cookie}"},
    )
    assert response.status_code == 200, _answer(world.relay, response, (path, params))
    return response.content.decode()


def _admin_pages(world: World, batch: list[Written]) -> None:
    """The channel pages show each channel's name as written, escaped as HTML."""
    changelist = _admin_get(world, "/admin/artifacts/channel/", {"all": ""})
    for h, name in world.names.items():
        assert escape(name) in changelist, (h, name)
    touched = {w.event["tags"][0][1] for w in batch if w.event["kind"] in (9007, 9002)}
    for h in sorted(touched & set(world.names)):
        pk = Channel.objects.get(community=world.community, channel_id=h).pk
        assert escape(world.names[h]) in _admin_get(world, f"/admin/artifacts/channel/{pk}/change/")
        assert escape(world.names[h]) in _admin_get(world, "/admin/artifacts/channel/", {"q": h})
        _admin_get(world, "/admin/artifacts/channel/", {"q": world.names[h]})


def run_batch(world: World, plans: list[WritePlan]) -> None:
    reader = NostrWs(world.relay.port, HOST, compression=False)
    writer = NostrWs(world.relay.port, HOST, compression=False)
    try:
        assert reader.auth(world.bob_key)[2] is True
        assert writer.auth(world.alice_key)[2] is True
        reader.send(["REQ", LIVE, {"kinds": [45010, 45011], "#h": list(world.channels)}])
        _raw_frames(reader, lambda f: f[0] in ("EOSE", "CLOSED") and f[1] == LIVE)
        batch = [_write(world, writer, plan) for plan in plans]
        # New channels home artifacts from the next batch on, once a live subscription names
        # them.
        world.channels += world.created_channels
        world.created_channels.clear()
        for w in batch:
            if w.refused:  # never stored, not even as a bare event row
                assert not Event.objects.filter(event_id=w.event["id"]).exists()
        _websocket_reads(world, reader, batch)
        _plain_reads(world, batch)
        _admin_pages(world, batch)
        _rounds(world)
        _buzz_sync(world)
    finally:
        reader.close()
        writer.close()


# --- the property -------------------------------------------------------------------------------

_FIXED_SPELLINGS = [
    Spelling("orjson"), Spelling("json_ascii"), Spelling("json_indent"), Spelling("slashes"),
    Spelling("custom", seed=7, escape_rate=1.0, spaces=True, shuffle=True, outer=(" \r\n", "\t")),
    Spelling("custom", seed=8, escape_rate=0.3, shuffle=True, outer=("", "\n")),
]
_FULL = WritePlan(
    kind="artifact", transport="http", spelling=_FIXED_SPELLINGS[0],
    content=EVERY_CLASS + "\U0001f600" * 1200, title=at_limit("t" + EVERY_CLASS, "\u2028", 512),
    label=EVERY_CLASS, big=at_limit(EVERY_CLASS, "\U0001f600", MAX_TAG_VALUE_BYTES),
    odd=("x-" + EVERY_CLASS, EVERY_CLASS, ""), type_=TYPES[1], channel=1,
)
# Every character class in every spelling over both transports; a NUL in each place over both;
# an update, channels created and renamed, and resubmissions in another spelling.
EVERYTHING_ONCE = [
    *(replace(_FULL, spelling=spelling, transport=transport, channel=i)
      for i, spelling in enumerate(_FIXED_SPELLINGS) for transport in ("http", "ws")),
    *(replace(_FULL, spelling=_FIXED_SPELLINGS[i], transport=transport, poison=target,
              poison_at=3 + i)
      for i, target in enumerate(POISON_TARGETS) for transport in ("http", "ws")),
    replace(_FULL, update=0, spelling=_FIXED_SPELLINGS[4]),
    replace(_FULL, update=1, transport="ws", resend=_FIXED_SPELLINGS[1]),
    WritePlan(kind="channel", transport="http", spelling=_FIXED_SPELLINGS[1],
              title="c" + EVERY_CLASS, content=EVERY_CLASS, resend=_FIXED_SPELLINGS[4]),
    WritePlan(kind="channel", transport="ws", spelling=_FIXED_SPELLINGS[4],
              title="c" + EVERY_CLASS[::-1]),
    WritePlan(kind="channel", transport="ws", spelling=_FIXED_SPELLINGS[0],
              title="c" + EVERY_CLASS, poison="name", poison_at=5),
    WritePlan(kind="rename", transport="http", spelling=_FIXED_SPELLINGS[5],
              title="r" + EVERY_CLASS, channel=0),
    WritePlan(kind="rename", transport="ws", spelling=_FIXED_SPELLINGS[2],
              title="r" + EVERY_CLASS, content="\U0010ffff", poison="content"),
]


@settings(
    max_examples=15,
    deadline=None,
    # The world (relay, community, what was stored) carries over from example to example, so
    # rounds continue and reads see every earlier example's events; shrinking would replay
    # examples against a different world, so a failure is reported as found.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(plans=st.lists(write_plans(), min_size=1, max_size=4))
@example(plans=EVERYTHING_ONCE)
def test_every_character_in_every_spelling_is_refused_or_served_byte_for_byte_by_every_read(
    world: World, plans: list[WritePlan]
) -> None:
    for plan in plans:  # shown by --hypothesis-show-statistics
        hypothesis.event(f"{plan.kind} over {plan.transport}, spelled {plan.spelling.style}")
        hypothesis.event(f"NUL in {plan.poison}" if plan.poison else "no NUL")
    run_batch(world, plans)


# --- refusals that must stay refusals, never 500s ---------------------------------------------

def test_read_predicates_holding_nul_are_refused_with_400_not_500(world: World) -> None:
    """No read can match a NUL (nothing stored holds one): each is a 400 on /query and a CLOSED
    on the WebSocket (whose connection stays usable); the staff searches answer their page."""
    d = str(uuid.uuid4())
    for filter_, error in [
        ({"artifact": "current", "#title": ["a\x00b"]}, "invalid_filter"),
        ({"artifact": "current", "#label": [NUL], "#h": world.channels[:1]}, "invalid_filter"),
        ({"artifact": "current", "#ti\x00tle": ["t"]}, "invalid_filter"),
        ({"artifact": "current", "#d": [d[:-1] + NUL]}, "invalid_filter"),
        ({"artifact": "history", "#d": [d], "#op": ["up\x00date"]}, "invalid_filter"),
        ({"artifact": "history", "#d": [d], "#title": ["\x00"]}, "invalid_filter"),
        ({"artifact": "current", "#type": ["buzz\x00.task"], "progress": None}, "invalid_filter"),
        ({"artifact": "current", "progress": "token\x00"}, "invalid_progress"),
        ({"artifact": "cur\x00rent"}, "invalid_filter"),
    ]:
        response = world.bob.post("/query", [filter_])
        assert response.status_code == 400, _answer(world.relay, response, filter_)
        assert response.json()["error"] == error, response.text
    reader = NostrWs(world.relay.port, HOST, compression=False)
    try:
        assert reader.auth(world.bob_key)[2] is True
        for i, filter_ in enumerate([
            {"#d": [d[:-1] + NUL]}, {"#h": [NUL]}, {"ids": [NUL * 64]}, {"authors": [NUL]},
            {"kinds": [45010], "#h": world.channels[:1], "#x\x00": ["y"]},
        ]):
            reader.send(["REQ", f"nul {i}", filter_])
            answer = reader.recv_until(lambda f, i=i: f[0] != "AUTH" and f[1] == f"nul {i}")[-1]
            assert answer[0] == "CLOSED" and answer[2].startswith("invalid: "), answer
        # The connection is still fine.
        reader.send(["REQ", "after \x00", {"kinds": [45010], "#h": world.channels}])
        assert reader.recv_until(lambda f: f[0] in ("EOSE", "CLOSED"))[-1] == ["EOSE", "after \x00"]
    finally:
        reader.close()
    for path in ("/admin/artifacts/channel/", "/admin/artifacts/channelmember/",
                 "/admin/artifacts/community/"):
        _admin_get(world, path, {"q": "lob\x00by"})


def test_raw_controls_lone_surrogates_and_bad_utf8_are_refused_on_both_transports(
    world: World,
) -> None:
    """Raw control characters or NUL bytes inside strings, escaped lone surrogates and invalid
    UTF-8 are not JSON an event can be written in: 400 `invalid_event` over HTTP, a NOTICE over
    the WebSocket; nothing is stored."""
    event = world.alice.sign(45010, artifact_tags(op="create", d=str(uuid.uuid4()),
                                                  h=world.channels[0], title="AB"), "AB")
    text = orjson.dumps(event).decode()
    spellings_ = {
        "raw C0": text.replace('"content":"AB"', '"content":"A\x01B"'),
        "raw NUL": text.replace('"content":"AB"', '"content":"A\x00B"'),
        "raw newline in a tag": text.replace('"title","AB"', '"title","A\nB"'),
        "lone high surrogate": text.replace('"content":"AB"', '"content":"A\\ud83dB"'),
        "lone low surrogate": text.replace('"title","AB"', '"title","\\ude00"'),
    }
    bodies = {name: spelled.encode() for name, spelled in spellings_.items()}
    bodies["invalid UTF-8"] = text.replace('"content":"AB"', '"content":"A\xffB"').encode(
        "latin-1")
    for name, body in bodies.items():
        assert body != text.encode(), name
        response = world.alice.post("/event", body)
        assert response.status_code == 400, _answer(world.relay, response, name)
        assert response.json()["error"] == "invalid_event", (name, response.text)
    writer = NostrWs(world.relay.port, HOST, compression=False)
    try:
        assert writer.auth(world.alice_key)[2] is True
        for name, spelled in spellings_.items():
            writer.send('["EVENT",' + spelled + "]")
            answer = writer.recv()
            assert answer[0] == "NOTICE" and answer[1].startswith("invalid: "), (name, answer)
    finally:
        writer.close()
    assert not Event.objects.filter(event_id=event["id"]).exists()


def test_every_admin_page_renders_channel_names_holding_every_character(world: World) -> None:
    """Events write channel names (9007, 9002), which every admin page about a channel shows,
    escaped as HTML; the other pages render too."""
    created = str(uuid.uuid4())
    named = "c" + EVERY_CLASS
    renamed = "r" + EVERY_CLASS[::-1]
    writer = NostrWs(world.relay.port, HOST, compression=False)
    try:
        assert writer.auth(world.alice_key)[2] is True
        for event, transport in [
            (world.alice.sign(9007, [["h", created], ["name", named]], EVERY_CLASS), "http"),
            (world.alice.sign(9002, [["h", world.channels[0]], ["name", renamed]]), "ws"),
        ]:
            answer, _ = _send(world, writer, transport, Spelling("json_ascii"),
                              Spelling("json_ascii").event_text(event))
            assert answer == ["OK", event["id"], True, ""], answer
    finally:
        writer.close()
    for h, name in [(created, named), (world.channels[0], renamed)]:
        channel = Channel.objects.get(community=world.community, channel_id=h)
        assert channel.name == name  # stored as written
        for path, params in [
            ("/admin/artifacts/channel/", {"all": ""}),
            ("/admin/artifacts/channel/", {"q": h}),
            (f"/admin/artifacts/channel/{channel.pk}/change/", None),
            (f"/admin/artifacts/channel/{channel.pk}/history/", None),
            (f"/admin/artifacts/channel/{channel.pk}/delete/", None),
        ]:
            assert escape(name) in _admin_get(world, path, params), (path, params)
        _admin_get(world, "/admin/artifacts/channel/", {"q": name})
    owner = ChannelMember.objects.get(community=world.community, channel_id=created,
                                      pubkey=world.alice_key.pubkey)
    assert owner.role == "owner"
    assert created in _admin_get(world, "/admin/artifacts/channelmember/")
    for path in ("/admin/", "/admin/artifacts/", "/admin/artifacts/community/",
                 f"/admin/artifacts/community/{world.community.pk}/change/",
                 f"/admin/artifacts/channelmember/{owner.pk}/change/",
                 "/admin/relayinfo/readiness/"):
        _admin_get(world, path)
