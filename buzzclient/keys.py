"""The user's key: a file holding 64 hex characters or a NIP-19 ``nsec1...`` string, and the
NIP-19 ``npub``/``nsec`` texts of keys."""

from __future__ import annotations

import os
from pathlib import Path

from buzzclient.errors import BadKey
from nostr.schnorr import generate_secret, is_valid_secret, pubkey_from_secret

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


def _convert_bits(data: bytes | list[int], source: int, target: int) -> list[int]:
    """Regroups ``source``-bit values into ``target``-bit ones, zero-padding the last (BIP-173)."""
    accumulator, bits, out = 0, 0, []
    for value in data:
        accumulator = (accumulator << source) | value
        bits += source
        while bits >= target:
            bits -= target
            out.append((accumulator >> bits) & ((1 << target) - 1))
    if bits:
        out.append((accumulator << (target - bits)) & ((1 << target) - 1))
    return out


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def bech32_encode(hrp: str, payload: bytes) -> str:
    """NIP-19's bech32 (not bech32m) text of ``payload`` under ``hrp`` (``npub``, ``nsec``).

    Hand-written (BIP-173's reference is a page of code): the client depends on four libraries
    only, and none of them speaks bech32.
    """
    data = _convert_bits(payload, 8, 5)
    polymod = _bech32_polymod([*_hrp_expand(hrp), *data, 0, 0, 0, 0, 0, 0]) ^ 1
    checksum = [(polymod >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_BECH32_ALPHABET[v] for v in data + checksum)


def bech32_decode(text: str, hrp: str) -> bytes:
    """The 32 bytes of a NIP-19 string under ``hrp``; raises ``ValueError`` if it is not one."""
    text = text.strip().lower()
    found, sep, data_part = text.rpartition("1")
    if found != hrp or not sep or len(data_part) < 7:
        raise ValueError(f"not an {hrp} string")
    try:
        data = [_BECH32_ALPHABET.index(char) for char in data_part]
    except ValueError:
        raise ValueError(f"{hrp} string has a character outside bech32") from None
    if _bech32_polymod(_hrp_expand(hrp) + data) != 1:  # NIP-19 uses bech32, not bech32m
        raise ValueError(f"{hrp} checksum does not match")
    accumulator, bits, out = 0, 0, bytearray()
    for value in data[:-6]:
        accumulator = (accumulator << 5) | value
        bits += 5
        while bits >= 8:
            bits -= 8
            out.append((accumulator >> bits) & 0xFF)
    if len(out) != 32 or bits >= 5 or accumulator & ((1 << bits) - 1):
        raise ValueError(f"{hrp} does not hold 32 bytes")
    return bytes(out)


def decode_nsec(text: str) -> str:
    """The hex secret of a NIP-19 ``nsec1...`` string; raises ``ValueError`` if it is not one."""
    return bech32_decode(text, "nsec").hex()


def encode_nsec(secret_hex: str) -> str:
    return bech32_encode("nsec", bytes.fromhex(secret_hex))


def encode_npub(pubkey_hex: str) -> str:
    return bech32_encode("npub", bytes.fromhex(pubkey_hex))


def parse_pubkey(text: str) -> str:
    """A 64-character lowercase hex pubkey from hex (any case) or ``npub1...`` text; raises
    ``ValueError``."""
    text = text.strip()
    pubkey = bech32_decode(text, "npub").hex() if text.lower().startswith("npub1") else text.lower()
    if len(pubkey) != 64 or any(c not in "0123456789abcdef" for c in pubkey):
        raise ValueError(f"{text!r} is not a pubkey (64 hex characters or npub1...)")
    return pubkey


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


def write_new_key(path: str | Path) -> tuple[str, str]:
    """Generates a key and writes it to ``path`` as ``nsec1...`` (mode 0600), never over an
    existing file; ``(secret_hex, pubkey_hex)``. Raises ``BadKey`` with a one-line reason."""
    secret = generate_secret()
    try:
        # O_EXCL: refuse to overwrite (a lost key is a lost identity); 0600 from creation on,
        # so the secret is never readable by others, not even for a moment.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise BadKey(f"key file {path} already exists; not overwriting it") from None
    except OSError as exc:
        raise BadKey(f"key file {path}: cannot create ({exc.strerror})") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(encode_nsec(secret) + "\n")
    return secret, pubkey_from_secret(secret)
