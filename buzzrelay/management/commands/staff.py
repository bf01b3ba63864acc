"""`manage.py staff`: `buzz-admin staff` (buzzrelay/admin_commands/staff.py)."""

from buzzrelay.management.base import admin_command

Command = admin_command("staff")
