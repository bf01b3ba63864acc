#!/usr/bin/env python
"""Django's command-line utility for the Buzz relay (operators use `buzz-admin`)."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "buzzrelay.settings")
    from relaycore.config import ConfigError, load_config

    try:
        load_config()
    except ConfigError as exc:
        sys.stderr.write(f"configuration error: {exc}\n")
        sys.exit(2)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
