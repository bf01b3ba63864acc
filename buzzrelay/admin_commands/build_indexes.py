"""buzz-admin build-indexes: the CREATE INDEX CONCURRENTLY of the runbook (the five sync indexes
and the WebSocket replay's), with progress.

Run before `buzz-admin migrate` on a populated database (or let `migrate --build-indexes` call
it). Exit 0 when every index is valid or waiting for its columns (0077 not applied yet), 1 when
a build failed or an index was left alone, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys

import psycopg

from artifacts.schema import INDEXES_BY_NAME
from buzzrelay.admin_commands._indexes import BuildInterrupted, Progress, build_indexes
from buzzrelay.admin_commands._pg import describe_error, migration_lock
from buzzrelay.admin_commands._tables import print_table

HELP = (
    "build the five sync indexes and the replay's concurrently (invalid ones are dropped first),"
    " with progress"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replace-mismatched", action="store_true",
        help="also drop and rebuild an index whose definition differs from the expected one",
    )
    parser.add_argument(
        "--index", action="append", choices=sorted(INDEXES_BY_NAME), metavar="NAME",
        help="only this index (repeatable; default: all six)",
    )


def run(args: argparse.Namespace) -> int:
    specs = [INDEXES_BY_NAME[name] for name in args.index] if args.index else None
    try:
        with migration_lock(sys.stdout):
            sys.stdout.write("Building indexes concurrently (writers keep writing):\n")
            sys.stdout.flush()
            kwargs = {"specs": specs} if specs else {}
            outcomes = build_indexes(
                progress=Progress(sys.stderr), replace_mismatched=args.replace_mismatched,
                **kwargs,
            )
    except BuildInterrupted as exc:
        sys.stderr.write(f"buzz-admin build-indexes: {exc}\n")
        return 130
    except psycopg.Error as exc:
        sys.stderr.write(f"buzz-admin build-indexes: {describe_error(exc)}\n")
        return 1
    print_table(
        ["index", "table", "action", "seconds", "state now", "fix"],
        [
            [o.name, o.before.spec.table, o.action,
             f"{o.seconds:.1f}" if o.seconds is not None else None, o.after.state,
             o.after.fix or (o.error or "")]
            for o in outcomes
        ],
    )
    failed = [o for o in outcomes if not o.ok]
    if failed:
        sys.stderr.write(
            "buzz-admin build-indexes: not done: "
            + ", ".join(f"{o.name} ({o.after.state})" for o in failed) + "\n"
        )
        return 1
    return 0
