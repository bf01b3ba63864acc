"""`manage.py` commands for every `buzz-admin` subcommand (buzzrelay/cli.py)."""
