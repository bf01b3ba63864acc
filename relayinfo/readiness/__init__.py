"""Deployment readiness (PROTOCOL.md section 7): the one verdict NIP-11, rounds, system checks,
`buzz-admin readiness`, /metrics and the staff page all show.

By concern:

- `report`: what an inspection found (the six `Check`s and the rows behind them);
- `inspection`: `inspect_deployment(connection)`, read-only, on a Django or psycopg connection;
- `verdict`: the serving process's verdict, cached per process, read-only
  (`evaluate_readiness`, `deployment_ready`, `cached_readiness`);
- `episodes`: the sync epoch's item-4 episodes, reconciled by the fleet refresher alone
  (`reconcile_readiness`).

The names below are the package's interface; import them from here.
"""

from relayinfo.readiness.episodes import reconcile_episode, reconcile_readiness
from relayinfo.readiness.inspection import (
    inspect_deployment,
    inspect_fence,
    inspect_fleet,
    unreachable_report,
)
from relayinfo.readiness.report import (
    APPLICATION_PREFIX,
    AREAS,
    CHECK_IDS,
    TITLES,
    Announced,
    Check,
    ConnectionRow,
    EpisodeRow,
    FleetReport,
    InstanceRow,
    ReadinessReport,
    RoleRow,
    parse_application_name,
)
from relayinfo.readiness.verdict import (
    EVALUATION_BUDGET_MS,
    cached_readiness,
    deployment_ready,
    evaluate_afresh,
    evaluate_readiness,
    forget_cached_readiness,
    separate_connection,
)

__all__ = [
    "APPLICATION_PREFIX",
    "AREAS",
    "CHECK_IDS",
    "EVALUATION_BUDGET_MS",
    "TITLES",
    "Announced",
    "Check",
    "ConnectionRow",
    "EpisodeRow",
    "FleetReport",
    "InstanceRow",
    "ReadinessReport",
    "RoleRow",
    "cached_readiness",
    "deployment_ready",
    "evaluate_afresh",
    "evaluate_readiness",
    "forget_cached_readiness",
    "inspect_deployment",
    "inspect_fence",
    "inspect_fleet",
    "parse_application_name",
    "reconcile_episode",
    "reconcile_readiness",
    "separate_connection",
    "unreachable_report",
]
