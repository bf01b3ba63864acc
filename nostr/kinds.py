"""The event kinds the relay and its client speak: one constant per kind, defined here only.

Pure (no Django), so the relay (ingest, stores, reads, live stream) and the client (buzzclient)
name the same constants.
"""

from __future__ import annotations

from typing import Final

# NIP-09 deletion requests: refused here (artifacts are deleted with `op delete`).
KIND_DELETION: Final = 5

# NIP-AR: an artifact revision, and the relay-signed removal marker a move leaves in the source.
KIND_ARTIFACT: Final = 45010
KIND_REMOVAL_MARKER: Final = 45011
# What the WebSocket sync serves (PROTOCOL.md section 8), in this order in NIP-11.
SYNC_KINDS: Final = (KIND_ARTIFACT, KIND_REMOVAL_MARKER)

# NIP-29-style moderation events of a channel (PROTOCOL.md section 2).
KIND_PUT_MEMBER: Final = 9000
KIND_REMOVE_MEMBER: Final = 9001
KIND_EDIT_CHANNEL: Final = 9002
KIND_REDACTION: Final = 9005
KIND_CREATE_CHANNEL: Final = 9007
KIND_DELETE_CHANNEL: Final = 9008
CHANNEL_KINDS: Final = (
    KIND_PUT_MEMBER, KIND_REMOVE_MEMBER, KIND_EDIT_CHANNEL, KIND_REDACTION, KIND_CREATE_CHANNEL,
    KIND_DELETE_CHANNEL,
)
# The stored events that tell a subscriber its own access to a channel changed (PROTOCOL.md
# section 8): streamed to a REQ that names their kind, live only.
HINT_KINDS: Final = (KIND_PUT_MEMBER, KIND_REMOVE_MEMBER, KIND_EDIT_CHANNEL, KIND_DELETE_CHANNEL)
# What a REQ may name besides SYNC_KINDS: streamed live only, never replayed.
LIVE_ONLY_KINDS: Final = (KIND_REDACTION, *HINT_KINDS)

# Authentication events: NIP-42 (WebSocket) and NIP-98 (HTTP).
KIND_CLIENT_AUTH: Final = 22242
KIND_HTTP_AUTH: Final = 27235
