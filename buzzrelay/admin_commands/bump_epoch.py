"""buzz-admin bump-epoch: every client's next incremental round resets.

Run after restoring a backup (or any point-in-time recovery) and after manual data fixes. The
new epoch is past every epoch handed out before the restore
(artifacts.services.sync_epoch.bump_epoch, `past_any_restore`), so no token issued before it
continues.
"""

from __future__ import annotations

import argparse

HELP = "bump the sync epoch: every client's next incremental round starts with a full round"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reason",
        default="buzz-admin bump-epoch",
        help="recorded with the epoch (e.g. 'restored from backup 2026-11-03')",
    )


def run(args: argparse.Namespace) -> int:
    from artifacts.selectors.sync_epoch import current_sync_state
    from artifacts.services.sync_epoch import bump_epoch

    before, identity = current_sync_state()
    after = bump_epoch(reason=args.reason, past_any_restore=True)
    print(f"{'database':<12} {identity}")
    print(f"{'epoch':<12} {before} -> {after}")
    print(f"{'reason':<12} {args.reason}")
    return 0
