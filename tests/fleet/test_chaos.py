"""The chaos run's short form (tests/fleet/chaos.py says what it covers and how it judges): a few
seeded schedules on one three-relay fleet behind nginx, each with a kill -9, a PostgreSQL restart,
a synchronous standby's promotion and a Redis master kill under Sentinel, raw-HTTP and buzz-sync
readers. `BUZZ_CHAOS_SEED=<seed>` runs that one schedule again; bench/chaos.py is the long form.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.deploy.nginx import PUBLIC_HOST
from tests.faults.deployment import deployment
from tests.fleet.chaos import Figures, Schedule, fleet_for

# Two schedules with their four faults each: about 3-4 minutes on the 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

SEEDS = [int(os.environ["BUZZ_CHAOS_SEED"])] if os.environ.get("BUZZ_CHAOS_SEED") else [1, 2]


def test_chaos_schedules_keep_every_acknowledged_write_and_converge(tmp_path: Path) -> None:
    figures = Figures()
    with deployment("chaos") as dep:
        dep.create_community(PUBLIC_HOST)
        with fleet_for(dep, tmp_path) as fleet:
            for seed in SEEDS:
                before = figures.divergences
                Schedule(fleet, seed, figures).run()
                assert figures.divergences == before, (
                    f"chaos schedule {seed} failed: {figures.notes}\n"
                    f"replay: BUZZ_CHAOS_SEED={seed} .venv/bin/python -m pytest"
                    f" tests/fleet/test_chaos.py")
    sys.stderr.write(f"\n{figures.line()}\n")
    assert figures.writes_lost == 0
    # Five checks a schedule (after each of four faults, at the end), each of the owner and
    # five readers; every kind of fault injected once a schedule.
    assert figures.collections_checked == len(SEEDS) * 5 * 6
    assert set(figures.fault_kinds.values()) == {len(SEEDS)} and len(figures.fault_kinds) == 4
