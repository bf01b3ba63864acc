"""`manage.py bump_epoch`: `buzz-admin bump-epoch` (buzzrelay/admin_commands/bump_epoch.py)."""

from buzzrelay.management.base import admin_command

Command = admin_command("bump-epoch")
