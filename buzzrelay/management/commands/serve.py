"""`manage.py serve`: `buzz-admin serve` (buzzrelay/admin_commands/serve.py)."""

from buzzrelay.management.base import admin_command

Command = admin_command("serve")
