"""The user's secret key, read from a file: 64 hex characters or a NIP-19 ``nsec1...`` string."""

from __future__ import annotations

from pathlib import Path

from buzzclient.errors import BadKey
from nostr.schnorr import is_valid_secret, pubkey_from_secret

_BECH32_ALPHABET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_BECH32_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


def _bech32_polymod(values: list[int]) -> int:
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for i, generator in enumerate(_BECH32_GENERATOR):
            if (top >> i) & 1:
                checksum ^= generator
    return checksum


def decode_nsec(text: str) -> str:
    """The hex secret of a NIP-19 ``nsec1...`` string; raises ``ValueError`` if it is not one."""
    text = text.lower()
    hrp, sep, data_part = text.rpartition("1")
    if hrp != "nsec" or not sep or len(data_part) < 7:
        raise ValueError("not an nsec string")
    try:
        data = [_BECH32_ALPHABET.index(char) for char in data_part]
    except ValueError:
        raise ValueError("nsec string has a character outside bech32") from None
    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    if _bech32_polymod(expanded + data) != 1:  # NIP-19 uses bech32, not bech32m
        raise ValueError("nsec checksum does not match")
    accumulator, bits, out = 0, 0, bytearray()
    for value in data[:-6]:
        accumulator = (accumulator << 5) | value
        bits += 5
        while bits >= 8:
            bits -= 8
            out.append((accumulator >> bits) & 0xFF)
    if len(out) != 32 or bits >= 5 or accumulator & ((1 << bits) - 1):
        raise ValueError("nsec does not hold 32 bytes")
    return out.hex()


def parse_secret(text: str) -> str:
    """A 64-character lowercase hex secret from hex or nsec text; raises ``ValueError``."""
    text = text.strip()
    secret = decode_nsec(text) if text.lower().startswith("nsec1") else text.lower()
    if len(secret) != 64 or not is_valid_secret(secret):
        raise ValueError("expected 64 hex characters or an nsec1... string")
    return secret


def load_secret(path: str | Path) -> tuple[str, str]:
    """``(secret_hex, pubkey_hex)`` from a key file; raises ``BadKey`` with a one-line reason."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadKey(f"key file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not readable text"
        raise BadKey(f"key file {path}: cannot read ({reason})") from None
    try:
        secret = parse_secret(text)
    except ValueError as exc:
        raise BadKey(f"key file {path}: not a secret key ({exc})") from None
    return secret, pubkey_from_secret(secret)
