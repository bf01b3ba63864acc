"""Deployment state that is not artifact data: sync epoch, fleet, writer lag, auth replays."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class SyncState(models.Model):
    """The database's one row of sync state.

    `epoch` is bound into every progress token: bumping it (a non-stamping writer was seen, a
    restore, a manual fix) resets every client's next round, so correctness never depends on a
    runbook being followed.
    """

    id = models.SmallIntegerField(primary_key=True, default=1)
    epoch = models.BigIntegerField(default=1)
    bumped_at = models.DateTimeField(db_default=Now())
    reason = models.TextField(default="initial")

    class Meta:
        db_table = "sync_state"
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="sync_state_one_row")]


class RelayInstance(models.Model):
    """A serving relay process, registered at start and refreshed while it serves."""

    instance_id = models.UUIDField(unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    version = models.CharField(max_length=50)
    stamps = models.BooleanField(help_text="maintains the modification stamps")
    key_id = models.CharField(max_length=8, help_text="first 8 hex of the relay pubkey")
    # Readiness item 5 seen from outside the process (`buzz-admin readiness`): an instance whose
    # key was generated at start-up says so here.
    key_generated = models.BooleanField(default=False, db_default=False)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "relay_instances"

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid} ({self.version})"


class FleetEpisode(models.Model):
    """A period when readiness item 4 failed: a non-stamping writer or a second key was live.

    The sync epoch is bumped when an episode opens, while the offending writer is still live, so
    every older token resets; and again when it closes, after that writer left, because tokens
    issued during the episode come from rounds that could not see its unstamped changes. The open
    row is the durable, shared record that the closing bump is owed: whichever process next finds
    item 4 passing pays it before it reports the deployment ready.
    """

    opened_at = models.DateTimeField(db_default=Now())
    opened_epoch = models.BigIntegerField()
    reason = models.TextField()
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_epoch = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "fleet_episodes"

    def __str__(self) -> str:
        return f"episode {self.pk} opened at epoch {self.opened_epoch}"


class WriterLagSample(models.Model):
    """How long one write transaction ran from its stamp to its commit (database clock)."""

    recorded_at = models.DateTimeField(db_default=Now(), db_index=True)
    instance_id = models.UUIDField(null=True)
    lag_ms = models.FloatField()

    class Meta:
        db_table = "writer_lag_samples"


class AuthReplayClaim(models.Model):
    """NIP-98 event ids already used, claimed here while Redis is unavailable.

    `mirror`: claimed in Redis too, copied here only because another instance might still be
    claiming here (relaycore.edge.nip98); only claims that are not mirrors keep the copying on.
    """

    event_id = models.CharField(max_length=64, primary_key=True)
    expires_at = models.DateTimeField(db_index=True)
    # db_default: a relay of the version before, during a rolling upgrade, inserts without it.
    mirror = models.BooleanField(default=False, db_default=False)

    class Meta:
        db_table = "auth_replay_claims"


class StaffNostrKey(models.Model):
    """The Nostr key a staff user may sign in to the console with (relayinfo.nostr_login).

    Only this mapping grants console access to a key: a community's admin pubkeys (artifacts'
    Community.admin_pubkeys) are rights inside that community, never staff rights. Set with
    `buzz-admin staff nostr-key`.
    """

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="nostr_key")
    # 64 lowercase hex characters (x-only BIP-340 key), as NIP-98 events carry it.
    pubkey = models.CharField(max_length=64, unique=True)

    class Meta:
        db_table = "staff_nostr_keys"

    def __str__(self) -> str:
        return f"{self.user} {self.pubkey[:12]}"
