"""Pure Nostr protocol code: strict JSON, BIP-340, NIP-01 events, NIP-98 and NIP-42.

Imports nothing from Django so that the relay and its clients share one implementation.
Modules: ``jsonstrict``, ``schnorr``, ``events`` (the ``Event`` type the relay and the client
carry, and the tag helpers), ``kinds`` (one constant per kind), ``nip98``, ``nip42``.
"""
