"""BIP-340 Schnorr signatures over secp256k1, as Nostr uses them (via coincurve/libsecp256k1).

Keys and signatures travel as hex strings; messages are bytes (Nostr signs the 32-byte event
id). Verification never raises on malformed input: untrusted data is expected to be bad.
"""

from __future__ import annotations

import os

from coincurve import PrivateKey, PublicKeyXOnly

__all__ = [
    "generate_secret",
    "is_valid_secret",
    "pubkey_from_secret",
    "sign",
    "verify",
    "verify_bytes",
]

PUBKEY_BYTES = 32  # x-only public key
SIG_BYTES = 64
SECRET_BYTES = 32
MSG_BYTES = 32  # what libsecp256k1's schnorrsig_sign32 signs
# Order of the secp256k1 group: a secret key is an integer in [1, N - 1].
_CURVE_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def verify_bytes(pubkey: bytes, msg: bytes, sig: bytes) -> bool:
    """Verify a BIP-340 signature given raw bytes (32-byte x-only key, 64-byte signature).

    BIP-340 allows messages of any length; Nostr passes the 32-byte event id.
    """
    if len(pubkey) != PUBKEY_BYTES or len(sig) != SIG_BYTES:
        return False
    try:
        # Parsing fails for x coordinates not on the curve or not below the field size.
        return PublicKeyXOnly(pubkey).verify(sig, msg)
    except (ValueError, TypeError):
        return False


def verify(pubkey_hex: str, msg32: bytes, sig_hex: str) -> bool:
    """Verify a BIP-340 signature; False for any malformed key, signature or message."""
    try:
        pubkey = bytes.fromhex(pubkey_hex)
        sig = bytes.fromhex(sig_hex)
    except (ValueError, TypeError):
        return False
    return verify_bytes(pubkey, msg32, sig)


def sign(secret_hex: str, msg32: bytes, aux: bytes | None = None) -> str:
    """Sign a 32-byte message; returns the 64-byte signature as lowercase hex.

    ``aux`` is BIP-340's auxiliary randomness (32 bytes). ``None`` draws fresh randomness,
    which BIP-340 recommends against side channels; pass bytes only for reproducible tests.
    Raises ``ValueError`` for an invalid secret, a message that is not 32 bytes (libsecp256k1
    as exposed by coincurve signs 32-byte messages only) or an ``aux`` of the wrong length.
    """
    key = _private_key(secret_hex)
    if len(msg32) != MSG_BYTES:
        raise ValueError("message must be 32 bytes")
    if aux is None:
        aux = os.urandom(32)
    elif len(aux) != 32:  # BIP-340 fixes aux_rand at 32 bytes
        raise ValueError("aux must be 32 bytes")
    return key.sign_schnorr(msg32, aux).hex()


def pubkey_from_secret(secret_hex: str) -> str:
    """The x-only public key (64 lowercase hex characters) of a secret key."""
    return _private_key(secret_hex).public_key_xonly.format().hex()


def generate_secret() -> str:
    """A fresh random secret key as 64 lowercase hex characters."""
    return PrivateKey().secret.hex()


def is_valid_secret(secret_hex: str) -> bool:
    """True for 64 hex characters encoding an integer in [1, N - 1]."""
    try:
        _private_key(secret_hex)
    except ValueError:
        return False
    return True


def _private_key(secret_hex: str) -> PrivateKey:
    if not isinstance(secret_hex, str) or len(secret_hex) != 2 * SECRET_BYTES:
        raise ValueError("secret key must be 64 hex characters")
    try:
        secret = bytes.fromhex(secret_hex)
    except ValueError:
        raise ValueError("secret key must be 64 hex characters") from None
    # fromhex skips whitespace, so 64 characters may hold fewer bytes.
    if len(secret) != SECRET_BYTES:
        raise ValueError("secret key must be 64 hex characters")
    if not 0 < int.from_bytes(secret, "big") < _CURVE_ORDER:
        raise ValueError("secret key out of range")
    return PrivateKey(secret)
