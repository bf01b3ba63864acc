"""Publishing with buzz-sync against a real relay: every command's event is one the relay
accepts, `prev` comes from the local collection (or the relay's history), and the relay's OK
answer is printed as it came, a refusal included."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from artifacts.models import ArtifactHead, ChannelMember
from buzzclient import Publisher, Syncer
from buzzclient.cli import main as cli_main
from buzzclient.keys import encode_npub, write_new_key
from tests.buzzclient.world import HOST
from tests.factories import make_community
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_community_admin_publishes_everything_from_the_command_line(
    relay_server: RelayProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin_key, bob_key = tmp_path / "admin.key", tmp_path / "bob.key"
    _, admin = write_new_key(admin_key)
    _, bob = write_new_key(bob_key)
    make_community(HOST, admins=[admin])
    relay = ["--relay", relay_server.ws_url.rstrip("/"), "--key-file", str(admin_key)]
    db = tmp_path / "local.sqlite"

    code, out, _ = run(capsys, "create-channel", "todo", "--private", *relay)
    assert code == 0, out
    ok, made = out.splitlines()
    assert ok.startswith("OK ") and made.endswith("'todo' (private: only its members read it)")
    channel = made.split()[1]
    code, out, _ = run(capsys, "grant", channel, encode_npub(bob), *relay)
    assert code == 0 and out.splitlines()[1] == f"{encode_npub(bob)} is member of {channel}"
    assert ChannelMember.objects.get(pubkey=bob, removed_at=None).role == "member"

    code, out, _ = run(capsys, "--json", "create", "--channel", channel, "--type", "buzz.task",
                       "--title", "Buy milk", "--content", '{"done": false}', *relay)
    created = json.loads(out)
    assert code == 0 and created["accepted"] and created["message"] == ""
    d = created["d"]
    # The next revision finds its prev in the collection a sync stored.
    assert run(capsys, "--relay", relay_server.url, "--key-file", str(admin_key),
               "--db", str(db))[0] == 0
    code, out, _ = run(capsys, "--json", "update", d, "--content", '{"done": true}',
                       "--db", str(db), *relay)
    updated = json.loads(out)
    assert code == 0 and updated["accepted"] and updated["prev"] == created["event_id"]
    head = ArtifactHead.objects.get(artifact_id=uuid.UUID(d))
    assert head.event_id == updated["event_id"]

    # Not synced since: the collection's head is stale, so the history supplies prev... after
    # the relay refused the stale one, plainly, with what to do.
    code, out, _ = run(capsys, "update", d, "--title", "Buy oat milk", "--db", str(db),
                       "--prev", created["event_id"], *relay)
    assert code == 1
    assert out.startswith("refused: invalid: artifact head changed") and "--prev" in out
    code, out, _ = run(capsys, "--json", "update", d, "--title", "Buy oat milk", *relay)
    renamed = json.loads(out)
    assert code == 0 and renamed["prev"] == updated["event_id"]

    code, out, _ = run(capsys, "create-channel", "done", *relay)
    assert code == 0 and "(open: every key on 127.0.0.1 reads it)" in out
    done_channel = out.splitlines()[1].split()[1]
    code, out, _ = run(capsys, "--json", "move", d, "--to", done_channel, *relay)
    assert code == 0, out
    code, out, _ = run(capsys, "--json", "delete", d, *relay)
    deleted = json.loads(out)
    assert code == 0 and deleted["accepted"]
    code, out, _ = run(capsys, "--json", "restore", d, *relay)
    restored = json.loads(out)
    assert code == 0 and restored["accepted"] and restored["prev"] == deleted["event_id"]

    # Bob, the member, reads it back: moved, renamed, restored with its content from before.
    with Syncer(relay_url=relay_server.url, secret_hex=_secret(bob_key), db=db) as syncer:
        syncer.run_round()
        [(found_d, event)] = syncer.artifacts().items()
    tags = {tag[0]: tag[1] for tag in event.tags if len(tag) > 1}
    assert found_d == d and tags["h"] == done_channel and tags["op"] == "restore"
    assert tags["title"] == "Buy oat milk" and event.content == '{"done": true}'

    code, out, _ = run(capsys, "revoke", channel, bob, *relay)
    assert code == 0 and out.splitlines()[1] == f"{encode_npub(bob)} left {channel}"


def test_a_refusal_is_the_relay_s_own_words_and_exit_1(
    relay_server: RelayProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_community(HOST)
    key = tmp_path / "stranger.key"
    write_new_key(key)
    code, out, _ = run(capsys, "create-channel", "mine", "--relay", relay_server.url,
                       "--key-file", str(key))
    assert code == 1
    assert out.startswith("refused: restricted: ")
    code, _, err = run(capsys, "update", str(uuid.uuid4()), "--title", "x", "--relay",
                       relay_server.url, "--key-file", str(key))
    assert code == 1 and "is not in the local collection nor readable on" in err


def test_the_python_api_publishes_the_same_events(relay_server: RelayProcess, tmp_path: Path
                                                  ) -> None:
    key = tmp_path / "me.key"
    secret, me = write_new_key(key)
    make_community(HOST, admins=[me])
    with Publisher(relay_url=relay_server.url, secret_hex=secret) as publisher:
        channel = publisher.create_channel("notes")
        assert channel.accepted, channel.message
        h = channel.event.tags[0][1]
        note = publisher.create_artifact(channel=h, type="buzz.note", title="Hello")
        assert note.accepted and note.line() == f"OK {note.event_id}"
        # Another create of the same d (other content: another event) is the relay's to refuse.
        again = publisher.publish(note.event.kind, [list(t) for t in note.event.tags], "x")
        assert not again.accepted and again.line().startswith("refused: invalid: ")
    assert ArtifactHead.objects.filter(artifact_id=uuid.UUID(note.event.tags[1][1])).exists()


def _secret(path: Path) -> str:
    from buzzclient import load_secret

    return load_secret(path)[0]
