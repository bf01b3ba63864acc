"""The relay's tables, with the operational names runbooks and SQL checks use.

Every table the incremental-reads runbook names lives here, because migrations 0076-0078 alter
them. Surrogate integer keys plus natural-key unique constraints: Django's admin cannot register
composite primary keys. Channel ids are plain UUID columns (not foreign keys) in the member, head
and revision tables, as in the original schema, so the sync indexes cover them directly and 0077
adds no foreign-key validation scan.

The five sync columns (`modified_at`, `sync_modified_at`, `artifact_policy_modified_at`,
`source_channel_id`) are added by 0077 with constant defaults, then defaulted to `now()` in the
database. `db_default=Now()` keeps new rows stamped by PostgreSQL's clock even for inserts that do
not name the column; writers still set them explicitly to `Now()` on every change.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from relaycore.db import TransactionNow


class Community(models.Model):
    host = models.CharField(max_length=253, unique=True, help_text="lowercase, without port")
    name = models.CharField(max_length=200)
    admin_pubkeys = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    artifacts_enabled = models.BooleanField(default=True)
    # NULL = every artifact type is allowed.
    artifact_types = ArrayField(models.CharField(max_length=100), null=True, blank=True)
    open_channel_creation = models.BooleanField(default=False)
    # Incremented under the community's row lock by every listing or policy change, so a round can
    # tell "nothing changed" without comparing timestamps (stamps are not unique).
    listing_version = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    artifact_policy_modified_at = models.DateTimeField(db_default=TransactionNow())
    # NIP-11 relay information of this host (relayinfo/nip11.py, migration 0079). Blank or NULL:
    # the deployment's default (settings.RELAY_INFO_DEFAULTS, from RELAY_INFO_*).
    description = models.TextField(
        blank=True, db_default="",
        help_text="blank: the deployment's default, RELAY_INFO_DESCRIPTION",
    )
    contact = models.CharField(
        max_length=500, blank=True, db_default="",
        help_text="the admins' address: an email address or a mailto:/https: URI",
    )
    icon = models.CharField(max_length=500, blank=True, db_default="",
                            help_text="URL of a square image")
    banner = models.CharField(max_length=500, blank=True, db_default="",
                              help_text="URL of a wide image")
    terms_of_service = models.CharField(max_length=500, blank=True, db_default="",
                                        help_text="URL")
    privacy_policy = models.CharField(max_length=500, blank=True, db_default="", help_text="URL")
    posting_policy = models.CharField(max_length=500, blank=True, db_default="", help_text="URL")
    # Enforced on every event written to the community (artifacts.services.ingest).
    max_content_length = models.IntegerField(
        null=True, blank=True,
        help_text="the most characters of an event's content (limitation.max_content_length); "
        "empty: the deployment's RELAY_INFO_MAX_CONTENT_LENGTH",
    )

    class Meta:
        db_table = "communities"
        verbose_name_plural = "communities"

    def __str__(self) -> str:
        return f"{self.name} ({self.host})"

    def relay_info(self) -> dict[str, str | int]:
        """This community's NIP-11 fields: its own value, else the deployment's default; a field
        neither sets is left out."""
        from django.conf import settings

        defaults = settings.RELAY_INFO_DEFAULTS
        values: dict[str, str | int] = {}
        for field_name in INFO_FIELDS:
            own = getattr(self, field_name)
            value = own if own not in ("", None) else getattr(defaults, field_name)
            if value not in ("", None):
                values[field_name] = value
        return values

    def content_limit(self) -> int | None:
        """The most characters an event's content may have here (None: no limit of its own)."""
        limit = self.relay_info().get("max_content_length")
        return int(limit) if limit is not None else None


# Community columns that are NIP-11 fields, in the document's order (name is the community's).
INFO_FIELDS = ("description", "contact", "icon", "banner", "terms_of_service",
               "privacy_policy", "posting_policy", "max_content_length")


class Channel(models.Model):
    class Visibility(models.TextChoices):
        OPEN = "open"
        PRIVATE = "private"

    community = models.ForeignKey(
        Community, on_delete=models.CASCADE, related_name="channels", db_index=False
    )
    channel_id = models.UUIDField()
    name = models.CharField(max_length=200, blank=True, default="")
    visibility = models.CharField(
        max_length=7, choices=Visibility.choices, default=Visibility.OPEN
    )
    created_by = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    archived_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "channels"
        constraints = [
            models.UniqueConstraint(
                fields=["community", "channel_id"], name="channels_community_channel_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name or self.channel_id}"


class ChannelMember(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        MEMBER = "member"

    community = models.ForeignKey(
        Community, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    channel_id = models.UUIDField()
    pubkey = models.CharField(max_length=64)
    role = models.CharField(max_length=6, choices=Role.choices, default=Role.MEMBER)
    joined_at = models.DateTimeField(db_default=Now())
    removed_at = models.DateTimeField(null=True, blank=True)
    sync_modified_at = models.DateTimeField(db_default=TransactionNow())

    class Meta:
        db_table = "channel_members"
        constraints = [
            models.UniqueConstraint(
                fields=["community", "channel_id", "pubkey"],
                name="channel_members_natural_uniq",
            )
        ]
        indexes = [
            # Built by 0078. Rounds use it to list a reader's channels and to see whether its
            # memberships changed since a token.
            models.Index(
                fields=["community", "pubkey", "sync_modified_at", "channel_id"],
                name="channel_members_sync",
            )
        ]

    def __str__(self) -> str:
        return f"{self.pubkey[:12]} in {self.channel_id}"


class Event(models.Model):
    """A stored signed event, kept byte-for-byte as received (reads emit `raw` as stored)."""

    community = models.ForeignKey(
        Community, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    event_id = models.CharField(max_length=64)
    pubkey = models.CharField(max_length=64)
    kind = models.IntegerField()
    created_at = models.BigIntegerField()
    channel_id = models.UUIDField(null=True, blank=True)
    raw = models.TextField()
    received_at = models.DateTimeField(db_default=Now())
    # Redaction (kind 9005) sets this; the row stays so the head can still point at it.
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "events"
        constraints = [
            models.UniqueConstraint(
                fields=["community", "event_id"], name="events_community_event_uniq"
            )
        ]
        indexes = [
            # WebSocket REQ replay of removal markers and channel events by channel and kind.
            models.Index(
                fields=["community", "channel_id", "kind", "created_at"],
                name="events_channel_kind",
            )
        ]


class ArtifactHead(models.Model):
    community = models.ForeignKey(
        Community, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    artifact_id = models.UUIDField()
    event_id = models.CharField(max_length=64)
    channel_id = models.UUIDField()
    artifact_type = models.CharField(max_length=100)
    root = models.CharField(max_length=64, null=True, blank=True)
    deleted = models.BooleanField(default=False)
    created_at = models.BigIntegerField(help_text="created_at of the head event")
    modified_at = models.DateTimeField(db_default=TransactionNow())

    class Meta:
        db_table = "artifact_heads"
        constraints = [
            models.UniqueConstraint(
                fields=["community", "artifact_id"], name="artifact_heads_natural_uniq"
            )
        ]
        # Built by migrations 0078 and 0080 (the runbook names them).
        indexes = [
            # Full-round paging on (modified_at, artifact_id) and continuation candidates.
            models.Index(
                fields=["community", "modified_at", "artifact_id"], name="artifact_heads_modified"
            ),
            # Plain reads by channel.
            models.Index(
                fields=["community", "channel_id", "artifact_id"], name="artifact_heads_channel"
            ),
            # WebSocket replay, newest first within a channel (0080; not a sync index).
            models.Index(
                fields=["community", "channel_id", "-created_at", "event_id"],
                name="artifact_heads_replay",
            ),
        ]


class ArtifactRevision(models.Model):
    class Op(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        MOVE = "move"
        DELETE = "delete"
        RESTORE = "restore"

    community = models.ForeignKey(
        Community, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    event_id = models.CharField(max_length=64)
    artifact_id = models.UUIDField()
    channel_id = models.UUIDField()
    op = models.CharField(max_length=7, choices=Op.choices)
    prev_event_id = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.BigIntegerField()
    # The old home of an accepted move; NULL for every other revision. Plain UUID column.
    source_channel_id = models.UUIDField(null=True, blank=True)
    modified_at = models.DateTimeField(db_default=TransactionNow())

    class Meta:
        db_table = "artifact_revisions"
        constraints = [
            models.UniqueConstraint(
                fields=["community", "event_id"], name="artifact_revisions_natural_uniq"
            )
        ]
        # idx_artifact_revisions_artifact (community_id, artifact_id): history reads and the
        #   head's revision lookup; created in migration 0076 (its name is longer than Django's
        #   30-character index-name limit, so it is not declared here).
        indexes = [
            # Continuation rounds' moved candidates; built by migration 0078.
            models.Index(
                fields=["community", "modified_at", "event_id"],
                name="artifact_revisions_moves",
                condition=models.Q(source_channel_id__isnull=False),
            )
        ]


class ListingChange(models.Model):
    """One row per increment of `communities.listing_version` (migration 0081).

    Written by the same statement that increments the counter (`services.transactions`), so a
    snapshot that sees version v sees exactly the rows up to v: rounds find the channels whose
    listing changed since a token's view was computed, and each one's readability before that
    change, without listing the community's channels (`selectors.reader_view`). Policy and
    admin-list changes write a row without a channel. Rows older than the longest a token lives are
    collected by the writers themselves. `community_id` is a plain column: no foreign key to
    validate or lock, and a deleted community's rows age out like any others.
    """

    class Readable(models.IntegerChoices):
        # Before this change the channel did not exist or was deleted: readable by nobody.
        NOBODY = 0
        OPEN = 1
        # Private: readable by its active members.
        MEMBERS = 2

    community_id = models.BigIntegerField()
    listing_version = models.BigIntegerField()
    channel_id = models.UUIDField(null=True, blank=True)
    readable_before = models.SmallIntegerField(choices=Readable.choices, null=True, blank=True)
    changed_at = models.DateTimeField(db_default=TransactionNow())

    class Meta:
        db_table = "artifact_listing_changes"
        constraints = [
            # Rounds read the versions after a token's (and check none is missing); the writers'
            # collection walks it from the oldest.
            models.UniqueConstraint(
                fields=["community_id", "listing_version"], name="listing_changes_version_uniq"
            )
        ]


class ChannelSet(models.Model):
    """A set of channel ids too large for a token, stored by its digest (migration 0081).

    Rounds store here the parts of a reader's view reference (its private channels) and of a
    round's catch-up set that exceed what a token carries inline, and the token names the
    digest: content-addressed, so every reader and round with the same set shares one row.
    Written after the page's read transaction commits, before the token is handed out; a page
    that carries a reference on refreshes `touched_at` when it is older than half the longest a
    token lives, and rows untouched for twice that are collected by the pages that store sets
    (`selectors.reader_view`): no token still alive can name them.
    """

    community_id = models.BigIntegerField()
    digest = models.BinaryField(max_length=16)
    # The channel ids, 16 bytes each, sorted.
    channels = models.BinaryField()
    touched_at = models.DateTimeField(db_default=TransactionNow())

    class Meta:
        db_table = "artifact_sync_channel_sets"
        constraints = [
            models.UniqueConstraint(
                fields=["community_id", "digest"], name="channel_sets_digest_uniq"
            )
        ]
        # The collection takes the oldest rows first.
        indexes = [models.Index(fields=["touched_at"], name="channel_sets_touched")]
