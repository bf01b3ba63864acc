from __future__ import annotations

from pathlib import Path

import pytest

from buzzclient.errors import BadKey
from buzzclient.keys import decode_nsec, load_secret, parse_secret

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
