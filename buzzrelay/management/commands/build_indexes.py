"""`manage.py build_indexes`: `buzz-admin build-indexes` (admin_commands/build_indexes.py)."""

from buzzrelay.management.base import admin_command

Command = admin_command("build-indexes")
