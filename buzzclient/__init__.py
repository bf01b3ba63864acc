"""Buzz client: keeps local SQLite collections of a relay's artifacts current.

Pure Python on top of ``nostr/`` (no Django): NIP-11 discovery, NIP-98 signed ``POST /query``
rounds applied page by page with their progress tokens, NIP-42 live hints for ``--watch``,
and writes (``Publisher``) over ``POST /event``. docs/client.md documents the API.
"""

# The client distribution's version (client/pyproject.toml reads it; `buzz-sync --version`).
__version__ = "0.1.0"

from buzzclient.backoff import RetryPolicy
from buzzclient.errors import (
    BadKey,
    ConcurrentSync,
    ProtocolViolation,
    RelayBusy,
    RelayRejected,
    RelayUnreachable,
    SyncError,
    Unauthorized,
    UnknownCommunity,
)
from buzzclient.keys import encode_npub, load_secret, parse_pubkey, write_new_key
from buzzclient.publish import ArtifactNotFound, Published, Publisher
from buzzclient.store import CollectionStore
from buzzclient.sync import (
    HeadChanges,
    Round,
    RoundSummary,
    Syncer,
    SyncFilter,
    diff_heads,
    sync_once,
)
from buzzclient.transport import RelayAddress, RelayHttp, RelayInfo
from buzzclient.watch import watch

__all__ = [
    "ArtifactNotFound",
    "BadKey",
    "CollectionStore",
    "ConcurrentSync",
    "HeadChanges",
    "ProtocolViolation",
    "Published",
    "Publisher",
    "RelayAddress",
    "RelayBusy",
    "RelayHttp",
    "RelayInfo",
    "RelayRejected",
    "RelayUnreachable",
    "RetryPolicy",
    "Round",
    "RoundSummary",
    "SyncError",
    "SyncFilter",
    "Syncer",
    "Unauthorized",
    "UnknownCommunity",
    "__version__",
    "diff_heads",
    "encode_npub",
    "load_secret",
    "parse_pubkey",
    "sync_once",
    "watch",
    "write_new_key",
]
