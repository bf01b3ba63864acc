"""buzz-admin bump-epoch: every client's next incremental round resets."""

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
    from relayinfo.sync_epoch import bump_epoch, current_sync_state

    before, identity = current_sync_state()
    after = bump_epoch(reason=args.reason)
    print(f"{'database':<12} {identity}")
    print(f"{'epoch':<12} {before} -> {after}")
    print(f"{'reason':<12} {args.reason}")
    return 0
