"""buzz-admin migrate: apply migrations under the advisory lock (PROTOCOL.md section 9).

Exit 0 on success, 3 when a migration stops because an index must first be built concurrently
on a populated table (the output names `build-indexes` and the exact SQL), 1 on other failures.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from buzzrelay.admin_commands._migrations import run_migrate

HELP = "apply migrations under an advisory lock (exit 3: build indexes first)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app_label", nargs="?", help="only this app (e.g. artifacts)")
    parser.add_argument(
        "migration_name", nargs="?",
        help="migrate the app to this migration (forwards or backwards; a prefix such as 0077)",
    )
    add_runbook_arguments(parser)
    parser.add_argument(
        "--fake-initial", action="store_true",
        help="record an initial migration whose tables all exist instead of creating them",
    )


def add_runbook_arguments(parser: argparse.ArgumentParser) -> None:
    """The options buzz-admin's migrate adds to Django's (`manage.py migrate` has them too)."""
    parser.add_argument(
        "--build-indexes", action="store_true",
        help="the whole runbook in one go: prebuild, 0076, 0077, the concurrent builds, 0078",
    )
    parser.add_argument(
        "--lock-retries", type=int, default=3,
        help="retries when a migration gives up waiting for a table lock (default 3)",
    )


def run(
    args: argparse.Namespace, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
    **django_options: Any,
) -> int:
    """`args` as `add_arguments` parses them; `django_options`: more of Django's migrate options
    (`manage.py migrate` passes those it was given, and its own output streams)."""
    if args.build_indexes and args.app_label:
        parser_error = "--build-indexes runs the whole runbook: it takes no app or migration"
        raise SystemExit(f"buzz-admin migrate: {parser_error}")
    return run_migrate(
        app_label=args.app_label,
        migration_name=args.migration_name,
        with_index_builds=args.build_indexes,
        fake_initial=args.fake_initial,
        lock_retries=max(0, args.lock_retries),
        django_options=django_options,
        out=out,
        err=err,
    )
