"""`manage.py check_schema`: `buzz-admin check` (buzzrelay/admin_commands/check.py).

Named apart because `manage.py check` is Django's system check framework, which stays as it is
(with `--database default` it reports the readiness items as buzz.W001-W006).
"""

from buzzrelay.management.base import admin_command

Command = admin_command("check")
