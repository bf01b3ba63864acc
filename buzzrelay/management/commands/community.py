"""`manage.py community`: `buzz-admin community` (buzzrelay/admin_commands/community.py)."""

from buzzrelay.management.base import admin_command

Command = admin_command("community")
