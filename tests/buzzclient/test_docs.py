"""docs/client.md's examples, run in order as one program against a real relay, so the API
reference cannot drift from the API. The one substitution is the relay's address."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from artifacts.models import ArtifactHead, Channel
from buzzclient.keys import write_new_key
from tests.buzzclient.world import HOST
from tests.factories import make_community
from tests.relay_server import ROOT, RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)


def examples() -> list[str]:
    text = (ROOT / "docs" / "client.md").read_text()
    return re.findall(r"```python\n(.*?)\n```", text, re.S)


def test_the_client_docs_examples_run_against_a_relay(
    relay_server: RelayProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    _secret, pubkey = write_new_key("me.key")  # the README's walk-through made it an admin
    make_community(HOST, admins=[pubkey])
    blocks = examples()
    assert len(blocks) == 4
    namespace: dict[str, object] = {"__name__": "docs_client"}
    for block in blocks:
        code = block.replace("ws://127.0.0.1:8000", relay_server.ws_url.rstrip("/"))
        exec(compile(code, "docs/client.md", "exec"), namespace)
    out = capsys.readouterr().out
    d = namespace["d"]
    assert isinstance(d, str)
    head = ArtifactHead.objects.get(artifact_id=uuid.UUID(d))
    assert head.event_id == namespace["done"].event_id  # type: ignore[attr-defined]
    assert Channel.objects.get(channel_id=uuid.UUID(str(namespace["h"]))).visibility == "private"
    assert f"{d} buzz.task Buy milk {{\"done\": true}}" in out
    assert "full round: +1 added, ~0 updated, -0 removed; 1 item in 1 page" in out
    assert "live stream subscribed" in out or "connecting to the live stream" in out
