"""`buzz-admin`: the operators' command (PROTOCOL.md section 9).

Each subcommand is a module of `buzzrelay.admin_commands` exposing `HELP`, `add_arguments(parser)`
and `run(args) -> int`; this file only discovers them, reads the configuration and dispatches.
Every subcommand takes the deployment from DATABASE_URL or `--database-url`. `manage.py` has the
same commands (buzzrelay/management/commands: the same modules' arguments and `run`), named as
`management_command_name` says.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from types import ModuleType

from buzzrelay import VERSION, admin_commands

# `manage.py check` stays Django's system check framework (which reports the readiness items as
# buzz.W001-W006 with `--database default`); buzz-admin's schema tables are `check_schema` there.
MANAGE_PY_NAMES = {"check": "check_schema"}


def management_command_name(subcommand: str) -> str:
    """The `manage.py` name of a `buzz-admin` subcommand (`bump-epoch`: `bump_epoch`)."""
    return MANAGE_PY_NAMES.get(subcommand, subcommand.replace("-", "_"))


def subcommands() -> dict[str, ModuleType]:
    """Every `buzz-admin` subcommand by name, each the module that implements it."""
    found = {}
    for info in pkgutil.iter_modules(admin_commands.__path__):
        if not info.name.startswith("_"):
            module = importlib.import_module(f"{admin_commands.__name__}.{info.name}")
            found[info.name.replace("_", "-")] = module
    return found


def build_parser(commands: dict[str, ModuleType]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="buzz-admin", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in sorted(commands.items()):
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        command_parser.add_argument(
            "--database-url", help="the deployment's database (default: $DATABASE_URL)"
        )
        module.add_arguments(command_parser)
    return parser


def setup_django(database_url: str | None, *, session_name: str | None = None) -> None:
    """Configure Django for `database_url`; exits with one line on a configuration error.

    `session_name` replaces the relay's `buzzrelay/... stamps=1 key=...` application_name:
    an operator may run buzz-admin without the fleet's relay key, and a session announcing
    another key would fail readiness item 4 for the whole deployment while it runs.
    """
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")
    from relaycore.config import ConfigError, load_config

    try:
        load_config()
    except ConfigError as exc:
        fail(f"configuration error: {exc}", code=2)
    import django

    django.setup()
    if session_name is not None:
        name_sessions(session_name)


def name_sessions(session_name: str) -> None:
    """Name every database session of this process `session_name` in pg_stat_activity.

    Connections open lazily, so naming them before the command's first query covers all of them.
    """
    from django.conf import settings

    for database in settings.DATABASES.values():
        options = database.setdefault("OPTIONS", {})
        assert isinstance(options, dict)
        options["application_name"] = session_name


def fail(message: str, *, code: int = 1) -> None:
    sys.stderr.write(f"buzz-admin: {message}\n")
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> int:
    commands = subcommands()
    args = build_parser(commands).parse_args(argv)
    module = commands[args.command]
    if getattr(module, "SETUP_DJANGO", True):
        setup_django(args.database_url, session_name=f"buzz-admin/{VERSION} {args.command}")
    try:
        return int(module.run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
