"""A `buzz-admin` subcommand as a Django management command: one implementation, two doors.

The command's arguments are the subcommand module's `add_arguments`, and its work is the module's
`run(args)`: `manage.py bump_epoch --reason ...` and `buzz-admin bump-epoch --reason ...` are the
same code. Differences, both because Django is configured before the command is parsed:
`manage.py` takes the deployment from DATABASE_URL only (`buzz-admin --database-url URL`), and
names its sessions `buzz-admin/<version> <command>` just before the command's first query.
A non-zero result is the process's exit code, as with `buzz-admin`.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from buzzrelay import VERSION
from buzzrelay.cli import name_sessions, subcommands

# BaseCommand's own options: not the subcommand's.
DJANGO_OPTIONS = frozenset({
    "verbosity", "settings", "pythonpath", "traceback", "no_color", "force_color", "skip_checks",
    "stdout", "stderr",
})


class AdminCommand(BaseCommand):
    """`subcommand` (a `buzz-admin` name such as `bump-epoch`) under `manage.py`."""

    subcommand = ""
    # buzz-admin runs no system checks before a subcommand; `check` and `migrate` run their own.
    requires_system_checks: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = self.module.HELP

    @property
    def module(self) -> ModuleType:
        return subcommands()[self.subcommand]

    def add_arguments(self, parser: CommandParser) -> None:
        self.module.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        module = self.module
        if getattr(module, "SETUP_DJANGO", True):
            name_sessions(f"buzz-admin/{VERSION} {self.subcommand}")
        values = {k: v for k, v in options.items() if k not in DJANGO_OPTIONS}
        namespace = argparse.Namespace(**{"database_url": None, **values})
        code = int(module.run(namespace))
        if code:
            raise SystemExit(code)


def admin_command(subcommand: str) -> type[AdminCommand]:
    """The management command class of `subcommand`."""
    return type("Command", (AdminCommand,), {"subcommand": subcommand, "__module__": __name__})
