"""`manage.py readiness`: `buzz-admin readiness` (buzzrelay/admin_commands/readiness.py)."""

from buzzrelay.management.base import admin_command

Command = admin_command("readiness")
