"""buzz-sync as a person runs it: a real subprocess, its exit code, stdout and stderr."""

from __future__ import annotations

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
