"""nostr/ against nostr-tools (the reference JavaScript client library), both directions.

Two node processes (tests/interop/*.mjs) answer one JSON line per request, so each hypothesis
example costs a pipe round trip rather than a node start-up.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr import schnorr
from nostr.events import InvalidEvent, compute_event_id, parse_event, sign_event

INTEROP = Path(__file__).resolve().parent.parent / "interop"
SECRETS = [
    f"{1:064x}",
    "7f7ff03d123792d6ac594bfa67bf6d0c0ab55b6b1fdb6249303fe861f1ccba9a",
    f"{0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364140:064x}",
    schnorr.generate_secret(),
]
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


class NodeWorker:
    """One long-lived ``node <script>``: a JSON line in, a JSON line out."""

    def __init__(self, script: str) -> None:
        self._process = subprocess.Popen(
            [cast(str, NODE), script],
            cwd=INTEROP,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def ask(self, request: Any) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(orjson.dumps(request) + b"\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        assert line, f"node exited with {self._process.poll()}"
        return orjson.loads(line)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=10)


def _ensure_node_modules() -> None:
    if (INTEROP / "node_modules" / "nostr-tools").is_dir():
        return
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed to install tests/interop (npm ci)"
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=INTEROP, check=True)


@pytest.fixture(scope="module")
def hasher() -> Iterator[NodeWorker]:
    _ensure_node_modules()
    worker = NodeWorker("event_id.mjs")
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def signer() -> Iterator[NodeWorker]:
    _ensure_node_modules()
    worker = NodeWorker("sign_event.mjs")
    yield worker
    worker.close()


# Characters that serializers are known to disagree on, mixed into arbitrary Unicode.
_TRICKY = st.sampled_from(
    [
        *'"\\/\n\r\t\b\f\x00\x01\x0b\x1f\x7f\x80\xa0\xad\u0301\u2028\u2029\ufeff\uffff',
        *"😀é<>&'\U0010ffff",
    ]
)
_text = st.text(alphabet=st.characters(codec="utf-8") | _TRICKY, max_size=120)
_tags = st.lists(st.lists(_text, min_size=1, max_size=4), max_size=8)
_templates = st.fixed_dictionaries(
    {
        "kind": st.integers(0, 65535),
        "tags": _tags,
        "content": _text,
        # JavaScript numbers are exact integers up to 2**53.
        "created_at": st.integers(0, 2**53 - 1),
    }
)


@settings(max_examples=300, deadline=None)
@given(template=_templates, secret=st.sampled_from(SECRETS))
def test_nostr_tools_agrees_with_our_ids_and_signatures(
    hasher: NodeWorker, template: dict[str, Any], secret: str
) -> None:
    event = sign_event(secret, **template)
    assert hasher.ask(event) == {"id": event["id"], "valid": True}


@settings(max_examples=300, deadline=None)
@given(template=_templates, secret=st.sampled_from(SECRETS))
def test_events_signed_by_nostr_tools_pass_our_verification(
    signer: NodeWorker, template: dict[str, Any], secret: str
) -> None:
    event = signer.ask({"sk": secret, "template": template})
    assert "error" not in event
    assert event["pubkey"] == schnorr.pubkey_from_secret(secret)
    raw = orjson.dumps(event)  # nostr-tools' own JSON would be the same bytes
    assert parse_event(raw, now=template["created_at"]).to_dict() == event
    assert (
        compute_event_id(
            event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
        )
        == event["id"]
    )


@settings(max_examples=100, deadline=None)
@given(template=_templates, secret=st.sampled_from(SECRETS), extra=_text.filter(bool))
def test_tampered_events_are_refused_by_both(
    hasher: NodeWorker, template: dict[str, Any], secret: str, extra: str
) -> None:
    event = sign_event(secret, **template)
    tampered = dict(event, content=event["content"] + extra)
    assert hasher.ask(tampered)["valid"] is False
    with pytest.raises(InvalidEvent, match="bad event id"):
        parse_event(tampered, now=template["created_at"])

    # A valid signature, but over another event (the tampered one): the id still binds it.
    other = sign_event(secret, **dict(template, content=tampered["content"]))
    resigned_elsewhere = dict(event, sig=other["sig"])
    assert hasher.ask(resigned_elsewhere)["valid"] is False
    with pytest.raises(InvalidEvent, match="bad signature"):
        parse_event(resigned_elsewhere, now=template["created_at"])


def test_escape_heavy_event_has_the_same_id_on_both_sides(hasher: NodeWorker) -> None:
    content = "".join(map(chr, range(0x00, 0x80))) + "\u2028\u2029\ufeff😀\U0010ffff"
    event = sign_event(SECRETS[1], kind=1, tags=[["t", content]], content=content, created_at=0)
    assert hasher.ask(event) == {"id": event["id"], "valid": True}
