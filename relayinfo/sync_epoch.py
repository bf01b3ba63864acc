"""The sync epoch and database identity, defined in artifacts (the rounds read them there).

Re-exported here for the callers that still name this module (the HTTP fast path, bench/).
"""

from __future__ import annotations

from artifacts.selectors.sync_epoch import (
    EPOCH_SQL,
    cached_database_identity,
    current_sync_state,
    database_identity,
)
from artifacts.services.sync_epoch import bump_epoch

__all__ = [
    "EPOCH_SQL",
    "bump_epoch",
    "cached_database_identity",
    "current_sync_state",
    "database_identity",
]
