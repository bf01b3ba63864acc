from __future__ import annotations

from pathlib import Path

import pytest

from buzzclient.errors import BadKey
from buzzclient.keys import (
    decode_nsec,
    encode_npub,
    encode_nsec,
    load_secret,
    parse_pubkey,
    parse_secret,
    write_new_key,
)

# NIP-19's own example.
NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
NSEC_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"


def test_nsec_decodes_to_the_nip19_example_secret() -> None:
    assert decode_nsec(NSEC) == NSEC_HEX
    assert parse_secret(f"  {NSEC.upper()}\n") == NSEC_HEX


@pytest.mark.parametrize(
    "text",
    [
        NSEC[:-1] + "6",  # checksum
        "npub180cvv07tjdrrgpa0j7j7tmnyl2yr6yr7l8j4s3evf6u64th6gkwsyjh6w6",  # not a secret
        "nsec1qqqqqqqqqq",
        "ab" * 31,
        "zz" * 32,
        "00" * 32,  # zero is not a key
        "ff" * 32,  # above the group order
        "",
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_secret(text)


def test_key_file_errors_are_one_line_and_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(BadKey, match=r"nope\.key: no such file"):
        load_secret(missing)
    bad = tmp_path / "bad.key"
    bad.write_text("hello\n")
    with pytest.raises(BadKey, match=r"bad\.key: not a secret key") as info:
        load_secret(bad)
    assert "\n" not in str(info.value)
    good = tmp_path / "good.key"
    good.write_text(NSEC_HEX.upper() + "\n")
    secret, pubkey = load_secret(good)
    assert secret == NSEC_HEX and len(pubkey) == 64


# NIP-19's own example of a public key.
NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
NPUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"


def test_npub_and_nsec_are_written_as_nip19_writes_them() -> None:
    assert encode_npub(NPUB_HEX) == NPUB
    assert decode_nsec(encode_nsec(NSEC_HEX)) == NSEC_HEX
    assert parse_pubkey(NPUB) == NPUB_HEX == parse_pubkey(NPUB_HEX) == parse_pubkey(
        NPUB_HEX.upper())
    for bad in (NPUB[:-1] + "q", "nsec" + NPUB[4:], NPUB_HEX[:-2], "g" * 64):
        with pytest.raises(ValueError):
            parse_pubkey(bad)


def test_a_new_key_is_owner_only_from_the_start_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "me.key"
    secret, pubkey = write_new_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_secret(path) == (secret, pubkey)
    with pytest.raises(BadKey, match="already exists; not overwriting it"):
        write_new_key(path)
    assert load_secret(path) == (secret, pubkey)
