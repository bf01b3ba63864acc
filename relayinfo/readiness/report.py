"""What a readiness inspection found (PROTOCOL.md section 7): the six checks and the rows behind
them, as plain values every surface renders (NIP-11, /metrics, the staff page, buzz-admin)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from artifacts.schema import SchemaReport

CHECK_IDS = {1: "ledger", 2: "columns", 3: "indexes", 4: "writers", 5: "relay_key", 6: "fence"}
TITLES = {
    1: "Migrations 0076-0078 are recorded in the ledger",
    2: "The five sync columns have their type, default and nullability",
    3: "The five sync indexes exist, valid, ready and live",
    4: "Every live writer stamps, and all hold one relay key",
    5: "A stable relay key is configured",
    6: "The fence sees every writer",
}
# The columns of the reference's deployment table (buzz-admin readiness), by item.
AREAS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("Schema and indexes", (1, 2, 3)),
    ("Running timestamp writers", (4,)),
    ("Relay key", (5,)),
    ("Fence", (6,)),
)
APPLICATION_PREFIX = "buzzrelay/"


@dataclass(frozen=True)
class Check:
    item: int
    id: str
    title: str
    passed: bool
    found: str
    fix: str = ""

    @property
    def system_check_id(self) -> str:
        return f"buzz.W{self.item:03d}"


@dataclass(frozen=True)
class Announced:
    """What a `buzzrelay/...` application_name announces (PROTOCOL.md section 7 item 4)."""

    version: str
    stamps: bool
    key_id: str | None


def parse_application_name(name: str | None) -> Announced | None:
    """`buzzrelay/<version> stamps=1 key=<8 hex>` -> Announced; None for any other application."""
    if not name or not name.startswith(APPLICATION_PREFIX):
        return None
    words = name.split()
    version = words[0][len(APPLICATION_PREFIX):]
    key_id = next((w[4:] for w in words[1:] if w.startswith("key=")), None)
    return Announced(version=version, stamps="stamps=1" in words[1:], key_id=key_id or None)


@dataclass(frozen=True)
class InstanceRow:
    hostname: str
    pid: int
    version: str
    stamps: bool
    key_id: str
    key_generated: bool
    started_at: datetime
    last_seen_at: datetime
    live: bool  # seen within three refresh intervals

    @property
    def label(self) -> str:
        return f"instance {self.hostname}:{self.pid} ({self.version})"


@dataclass(frozen=True)
class ConnectionRow:
    pid: int
    application_name: str
    role: str | None
    client: str | None
    backend_start: datetime | None
    announced: Announced

    @property
    def label(self) -> str:
        where = f" from {self.client}" if self.client else ""
        return f"connection pid {self.pid} ({self.application_name!r}, role {self.role}{where})"


@dataclass(frozen=True)
class EpisodeRow:
    id: int
    opened_at: datetime
    opened_epoch: int
    reason: str
    closed_at: datetime | None
    closed_epoch: int | None


@dataclass(frozen=True)
class FleetReport:
    """The live writers of one database: registered instances and `buzzrelay/` connections."""

    registry_present: bool
    instances: tuple[InstanceRow, ...]  # every registered row, stale ones included (for pages)
    connections: tuple[ConnectionRow, ...]
    problems: tuple[str, ...]  # item 4 failures right now
    episodes_present: bool
    open_episode: EpisodeRow | None

    @property
    def live_instances(self) -> tuple[InstanceRow, ...]:
        return tuple(row for row in self.instances if row.live)

    @property
    def key_ids(self) -> dict[str, int]:
        """Each key id announced by a live writer, with how many writers announce it."""
        counts: dict[str, int] = {}
        ids = [row.key_id for row in self.live_instances if row.key_id]
        ids += [c.announced.key_id for c in self.connections if c.announced.key_id]
        for key_id in ids:
            counts[key_id] = counts.get(key_id, 0) + 1
        return counts


@dataclass(frozen=True)
class RoleRow:
    name: str
    superuser: bool
    read_all_stats: bool

    @property
    def sees_every_writer(self) -> bool:
        return self.superuser or self.read_all_stats


@dataclass(frozen=True)
class ReadinessReport:
    checks: tuple[Check, ...]
    evaluated_at: float  # time.time() of the evaluation
    schema: SchemaReport | None = None
    fleet: FleetReport | None = None
    roles: tuple[RoleRow, ...] = ()
    max_prepared_transactions: int | None = None
    error: str | None = None  # the database could not be inspected at all
    notes: tuple[str, ...] = field(default=())

    @property
    def ready(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failing(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def check(self, check_id: str) -> Check:
        return next(check for check in self.checks if check.id == check_id)

    def item(self, number: int) -> Check:
        return next(check for check in self.checks if check.item == number)

    def area_passed(self, items: Sequence[int]) -> bool:
        return all(self.item(number).passed for number in items)

