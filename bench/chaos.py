"""The chaos run's long form: seeded schedules one after another on one three-relay fleet behind
nginx, each with its four faults (kill -9 of one instance, a PostgreSQL restart, a synchronous
standby's promotion, a Redis master kill under Sentinel), until --minutes have passed
(tests/fleet/chaos.py: what it covers, and the oracle). Prints the figures after every schedule
and at the end; a failing schedule prints its seed, and `--seed N` replays it.

    .venv/bin/python bench/chaos.py [--minutes 30] [--first-seed 100] [--phase-seconds 20]
    .venv/bin/python bench/chaos.py --seed 123                # one schedule again
    .venv/bin/python bench/chaos.py --seed 112 --seed 115     # these schedules, in turn
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.deploy.nginx import PUBLIC_HOST
from tests.faults.deployment import deployment
from tests.fleet.chaos import Figures, Schedule, fleet_for


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--seed", type=int, action="append",
                        help="run this schedule only (repeat for several)")
    parser.add_argument("--phase-seconds", type=float, default=20)
    args = parser.parse_args()
    figures = Figures()
    failed: list[int] = []
    deadline = time.monotonic() + args.minutes * 60
    started = time.monotonic()
    with deployment("chaos-bench") as dep, tempfile.TemporaryDirectory() as folder:
        dep.create_community(PUBLIC_HOST)
        with fleet_for(dep, Path(folder)) as fleet:
            chosen = list(args.seed or [])
            seed = chosen.pop(0) if chosen else args.first_seed
            while True:
                before = figures.divergences
                try:
                    Schedule(fleet, seed, figures, phase_seconds=args.phase_seconds).run()
                except Exception:
                    # The harness itself failed (a fault it could not inject): the figures so
                    # far stand, the fleet may not, so the run ends here.
                    traceback.print_exc()
                    print(f"schedule {seed} CRASHED (harness); figures so far:"
                          f" {figures.line()}", flush=True)
                    failed.append(seed)
                    break
                if figures.divergences != before:
                    failed.append(seed)
                    print(f"schedule {seed} FAILED: {figures.notes[-3:]}\n  replay:"
                          f" .venv/bin/python bench/chaos.py --seed {seed}", flush=True)
                print(f"[{(time.monotonic() - started) / 60:.1f} min] seed {seed}:"
                      f" {figures.line()}", flush=True)
                if args.seed:
                    if not chosen:
                        break
                    seed = chosen.pop(0)
                    continue
                if time.monotonic() > deadline:
                    break
                seed += 1
    print(f"\n{figures.line()}\nnotes: {figures.notes}\nfailed seeds: {failed or 'none'}"
          f" ({(time.monotonic() - started) / 60:.1f} min)")
    return 1 if failed or figures.writes_lost else 0


if __name__ == "__main__":
    sys.exit(main())
