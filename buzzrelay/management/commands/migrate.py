"""`manage.py migrate`: `buzz-admin migrate`, the runbook under the advisory lock.

Django's migrate options stay (the test runner's `run_syncdb`, `--plan`, `--check`, `--fake`,
`--database` ...), `--build-indexes` and `--lock-retries` are added, and every run goes through
`buzzrelay.admin_commands._migrations.run_migrate`: the advisory lock, the exit 3 before a
migration whose index must first be built concurrently on a populated table, the lock retries,
and the sessions named `buzz-admin/<version> ...` while it runs (then the relay's name again: the
test suite creates its database with this command, then runs as a relay).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO, cast

from django.core.management.base import CommandParser
from django.core.management.commands import migrate as django_migrate

from buzzrelay.admin_commands import migrate
from buzzrelay.management.base import DJANGO_OPTIONS

# Read by `migrate.run` from its arguments; every other option goes to Django's migrate.
RUNBOOK_OPTIONS = ("app_label", "migration_name", "build_indexes", "fake_initial", "lock_retries")


class Command(django_migrate.Command):
    help = f"{migrate.HELP}; Django's migrate options are kept"

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        migrate.add_runbook_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        runbook = argparse.Namespace(**{name: options.pop(name) for name in RUNBOOK_OPTIONS})
        django_options = {
            name: value for name, value in options.items()
            if name not in DJANGO_OPTIONS or name in ("verbosity", "skip_checks")
        }
        # call_command(stdout=..., stderr=...) hands its streams over among the options: they
        # are DJANGO_OPTIONS, left out above, and reach the runbook as self.stdout/self.stderr.
        out, err = cast(TextIO, self.stdout), cast(TextIO, self.stderr)  # write() and flush()
        code = migrate.run(runbook, out=out, err=err, **django_options)
        if code:
            raise SystemExit(code)
