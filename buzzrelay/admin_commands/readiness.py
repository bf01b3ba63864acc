"""buzz-admin readiness: PROTOCOL.md section 7 for one or several deployments, as one table.

Read-only: each deployment is inspected over a connection of its own (application_name
`buzz-admin/<version> readiness`, so it never counts as a relay writer), with the same check
functions the relay itself uses. Item 5 is judged from the registered instances, since this
command does not run with the deployment's key.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING

from buzzrelay import VERSION
from buzzrelay.cli import fail, setup_django

if TYPE_CHECKING:
    from relayinfo.readiness import ReadinessReport

HELP = "check every readiness item (PROTOCOL.md section 7) of one or several deployments"
# Django is configured below, without the deployments' URLs (they are connected to directly).
SETUP_DJANGO = False
_LABELLED = re.compile(r"^(?P<label>[^=:/]+)=(?P<url>postgres(ql)?://.*)$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Replace the single --database-url every subcommand has with a repeatable one.
    parser.conflict_handler = "resolve"
    # argparse checks conflicts in the group the option lands in, which copied the handler.
    parser._optionals.conflict_handler = "resolve"
    parser.add_argument(
        "--database-url",
        action="extend",
        nargs="+",
        metavar="URL",
        help="deployments to check, each `postgres://...` or `LABEL=postgres://...` "
        "(default: $DATABASE_URL)",
    )


def _split(argument: str) -> tuple[str, str]:
    """(label, url): the label given as LABEL=URL, else host:port/dbname from the URL."""
    from relaycore.config import parse_database_url

    match = _LABELLED.match(argument)
    if match:
        return match["label"].strip(), match["url"]
    try:
        db = parse_database_url(argument)
    except Exception:
        return argument.split("@")[-1], argument
    host = db.host or "local socket"
    return f"{host}{':' + db.port if db.port else ''}/{db.name}", argument


def inspect_url(url: str) -> ReadinessReport:
    import psycopg

    from relaycore.config import ConfigError, parse_database_url
    from relaycore.db import psycopg_connect_kwargs
    from relayinfo.readiness import inspect_deployment, unreachable_report

    try:
        db = parse_database_url(url)
    except ConfigError as exc:
        return unreachable_report(str(exc))
    kwargs = {
        **psycopg_connect_kwargs(db.django_settings()),
        "connect_timeout": 10,
        "application_name": f"buzz-admin/{VERSION} readiness",
    }
    try:
        with psycopg.connect(autocommit=True, **kwargs) as conn:
            return inspect_deployment(conn)
    except psycopg.Error as exc:
        return unreachable_report(str(exc).strip().splitlines()[0] if str(exc) else repr(exc))


def run(args: argparse.Namespace) -> int:
    arguments = list(args.database_url or [])
    if not arguments:
        if not os.environ.get("DATABASE_URL"):
            fail("no deployment: set DATABASE_URL or pass --database-url URL ...", code=2)
        arguments = [os.environ["DATABASE_URL"]]
    setup_django(None)
    from buzzrelay.admin_commands._tables import print_table
    from relayinfo.readiness import AREAS

    results = [(label, inspect_url(url)) for label, url in map(_split, arguments)]
    print_table(
        ["Deployment", *(name for name, _ in AREAS)],
        [
            [label, *("Pass" if report.area_passed(items) else "Fail" for _, items in AREAS)]
            for label, report in results
        ],
    )
    failing = []
    for label, report in results:
        if report.error is not None:  # one line, not the same error six times
            failing.append([label, "all", f"database unreachable: {report.error}",
                            report.checks[0].fix])
            continue
        failing += [
            [label, f"{check.item} {check.id}", check.found.replace("; ", "\n"),
             (check.fix or "-").replace("; ", "\n")]
            for check in report.failing
        ]
    if failing:
        print()
        print_table(["Deployment", "Item", "Found", "Fix"], failing, title="Failing items")
        sys.stdout.flush()
        return 1
    print()
    print("Every deployment is ready: continuation rounds are served, and NIP-11 advertises")
    print("artifacts.incremental for every community with artifacts enabled.")
    return 0
