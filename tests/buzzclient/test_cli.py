"""buzz-sync as a person runs it: a real subprocess, its exit code, stdout and stderr."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from buzzclient.keys import encode_npub, load_secret
from nostr.schnorr import generate_secret
from tests.buzzclient.fake_relay import serve

ROOT = Path(__file__).resolve().parents[2]


def buzz_sync(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "buzzclient.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "reader.key"
    path.write_text(generate_secret() + "\n")
    return path


def test_one_round_prints_one_summary_line(tmp_path: Path, key_file: Path) -> None:
    channel = str(uuid.uuid4())
    with serve() as relay:
        for i in range(5):
            relay.create(channel, f"task {i}")
        db = tmp_path / "local.sqlite"
        result = buzz_sync("--relay", relay.url, "--key-file", str(key_file), "--db", str(db),
                           "--channel", channel, "--limit", "2")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith(
            "full round: +5 added, ~0 updated, -0 removed; 5 items in 3 pages, "
        )
        relay.create(channel, "later")
        again = buzz_sync("--relay", relay.url, "--key-file", str(key_file), "--db", str(db),
                          "--channel", channel)
        assert again.stdout.startswith("continuation round: +1 added")


def test_a_bad_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("not a key\n")
    result = buzz_sync("--relay", "http://127.0.0.1:9", "--key-file", str(bad),
                       "--db", str(tmp_path / "x.sqlite"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"buzz-sync: error: key file {bad}: not a secret key "
        "(expected 64 hex characters or an nsec1... string)"
    ]


def test_an_unreachable_relay_is_one_line_within_seconds(tmp_path: Path, key_file: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    started = time.monotonic()
    result = buzz_sync("--relay", f"http://127.0.0.1:{port}", "--key-file", str(key_file),
                       "--db", str(tmp_path / "x.sqlite"))
    assert time.monotonic() - started < 15
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"buzz-sync: error: cannot reach relay http://127.0.0.1:{port}: ")


def test_a_401_is_one_line_with_the_relay_s_reason(tmp_path: Path, key_file: Path) -> None:
    with serve() as relay:
        relay.script = [(401, {"WWW-Authenticate": "Nostr"},
                         {"error": "unauthorized", "message": "this pubkey is banned"})]
        result = buzz_sync("--relay", relay.url, "--key-file", str(key_file),
                           "--db", str(tmp_path / "x.sqlite"))
    assert result.returncode == 1
    # The first run names the community first (NIP-11 answered), then the one-line error.
    assert result.stderr.splitlines() == [
        f'buzz-sync: {relay.url} serves "fake"; first sync of {tmp_path / "x.sqlite"} as '
        f"{encode_npub(load_secret(key_file)[1])}",
        f"buzz-sync: error: relay {relay.url} refused our key (401): this pubkey is banned",
    ]


def test_a_bad_relay_url_or_channel_is_a_usage_error(tmp_path: Path, key_file: Path) -> None:
    result = buzz_sync("--relay", "ftp://x", "--key-file", str(key_file),
                       "--db", str(tmp_path / "x.sqlite"))
    assert result.returncode == 2 and result.stderr.startswith("buzz-sync: error: URL scheme")
    result = buzz_sync("--relay", "http://127.0.0.1:9", "--key-file", str(key_file),
                       "--db", str(tmp_path / "x.sqlite"), "--channel", "General")
    assert result.returncode == 2 and "not a lowercase canonical UUID" in result.stderr


def test_keygen_writes_an_nsec_readable_by_its_owner_only_and_never_overwrites(
    tmp_path: Path,
) -> None:
    key = tmp_path / "me.key"
    made = buzz_sync("keygen", "--key-file", str(key))
    assert made.returncode == 0, made.stderr
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("nsec1")
    _secret, pubkey = load_secret(key)
    npub_line, hex_line = made.stdout.splitlines()[1:]
    assert npub_line == f"npub:   {encode_npub(pubkey)}" and hex_line == f"pubkey: {pubkey}"
    before = key.read_text()
    again = buzz_sync("keygen", "--key-file", str(key))
    assert again.returncode == 2
    assert again.stderr == f"buzz-sync: error: key file {key} already exists; not overwriting it\n"
    assert key.read_text() == before
    who = buzz_sync("whoami", "--key-file", str(key), "--json")
    assert who.returncode == 0
    assert json.loads(who.stdout) == {"npub": encode_npub(pubkey), "pubkey": pubkey}


def test_version_and_the_first_run_names_the_community(tmp_path: Path, key_file: Path) -> None:
    from buzzclient import __version__

    version = buzz_sync("--version")
    assert version.returncode == 0 and version.stdout == f"buzz-sync {__version__}\n"
    with serve() as relay:
        db = str(tmp_path / "x.sqlite")
        first = buzz_sync("--relay", relay.url.replace("http://", "ws://"), "--key-file",
                          str(key_file), "--db", db)
        assert first.returncode == 0, first.stderr
        assert first.stderr.startswith(f'buzz-sync: {relay.url} serves "fake"; first sync of')
        assert first.stdout.startswith("full round: no changes; 0 items in 1 page")
        second = buzz_sync("--relay", relay.url, "--key-file", str(key_file), "--db", db,
                           "--json")
        assert second.stderr == ""  # the second run says nothing about the community
        summary = json.loads(second.stdout)
        assert summary["round"] == "continuation" and summary["items"] == 0


def test_verbose_shows_the_relay_s_answers_not_the_http_library_s(
    tmp_path: Path, key_file: Path
) -> None:
    channel = str(uuid.uuid4())
    with serve() as relay:
        relay.create(channel, "task")
        result = buzz_sync("--relay", relay.url, "--key-file", str(key_file),
                           "--db", str(tmp_path / "x.sqlite"), "-vv")
    assert result.returncode == 0, result.stderr
    assert "relay answered NIP-11: community 'fake'" in result.stderr
    assert "relay answered: 1 event, 0 removals, more: false, reset: true" in result.stderr
    for internal in ("httpcore", "HTTP Request:", "connect_tcp", "send_request_headers"):
        assert internal not in result.stderr


def test_an_unknown_command_is_named() -> None:
    result = buzz_sync("pubish", "--title", "x")
    assert result.returncode == 2
    assert result.stderr.startswith("buzz-sync: error: unknown command 'pubish' (commands: sync,")


def test_a_watch_started_while_the_relay_is_down_waits_for_it(
    tmp_path: Path, key_file: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, "-m", "buzzclient.cli", "--relay", f"http://127.0.0.1:{port}",
         "--key-file", str(key_file), "--db", str(tmp_path / "x.sqlite"), "--watch"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stderr is not None
        first = child.stderr.readline()
        assert first.startswith("buzz-sync: ") and first.rstrip().endswith(
            f"cannot reach relay http://127.0.0.1:{port}: connection failed "
            "([Errno 111] Connection refused) (will retry)"), first
        assert child.poll() is None  # still watching
    finally:
        child.terminate()
        child.wait(10)
