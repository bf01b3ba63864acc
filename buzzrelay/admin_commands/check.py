"""buzz-admin check: PROTOCOL.md section 7 items 1-3 (ledger, columns, indexes) as tables.

Read-only: catalogs and the migration ledger only. Exit 0 only when every check passes.
"""

from __future__ import annotations

import argparse
import sys

from artifacts.schema import SchemaReport, inspect_schema
from buzzrelay.admin_commands._pg import connect, database_label, describe_error
from buzzrelay.admin_commands._tables import print_table

HELP = "check the sync schema (PROTOCOL.md section 7 items 1-3); exit 0 only if all pass"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def print_report(report: SchemaReport) -> None:
    print_table(
        ["migration", "recorded", "applied at"],
        [[row.label, row.ok, row.applied_at.isoformat(timespec="seconds") if row.applied_at
          else None] for row in report.ledger],
        title="1. Migration ledger",
    )
    print_table(
        ["column", "expected", "found", "result"],
        [[c.label, c.expected, c.found or "missing", "ok" if c.ok else "FAIL"]
         for c in report.columns],
        title="\n2. Columns",
    )
    print_table(
        ["index", "table", "definition", "flags", "result"],
        [[c.name, c.spec.table, "exact" if c.definition_ok else ("differs" if c.exists else "-"),
          c.flags, "ok" if c.ok else c.state.upper()] for c in report.indexes],
        title="\n3. Indexes",
    )
    failing = [(row.label, "not recorded", row.fix) for row in report.ledger if not row.ok]
    failing += [(c.label, c.problem, c.fix) for c in report.columns if not c.ok]
    failing += [(c.name, c.problem, c.fix) for c in report.indexes if not c.ok]
    if failing:
        print_table(["item", "problem", "fix"], failing, title="\nTo fix")


def run(args: argparse.Namespace) -> int:
    try:
        with connect("check") as session:
            report = inspect_schema(session)
    except Exception as exc:  # one line for the operator, whatever the driver raised
        sys.stderr.write(f"buzz-admin check: {describe_error(exc)}\n")
        return 1
    sys.stdout.write(f"Sync schema of {database_label()} (PROTOCOL.md section 7 items 1-3)\n\n")
    print_report(report)
    total = len(report.ledger) + len(report.columns) + len(report.indexes)
    if report.ok:
        sys.stdout.write(f"\ncheck: all {total} checks pass\n")
        return 0
    sys.stdout.write(f"\ncheck: {len(report.problems)} of {total} checks fail\n")
    return 1
