"""``buzz-sync``: keep a local SQLite collection of a relay's artifacts current.

    buzz-sync --relay URL --key-file F --db local.sqlite [--type T] [--channel H] [--watch]

One round per run (full the first time, a continuation afterwards when the relay advertises
``artifacts.incremental``), or with ``--watch`` rounds whenever the relay's live stream (or a
poll timer) says something changed. A one-line summary per round goes to stdout; progress and
errors to stderr. Exit codes: 0 success, 1 sync failed, 2 bad arguments or key.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from buzzclient.errors import BadKey, SyncError
from buzzclient.keys import load_secret
from buzzclient.progress import ProgressLine
from buzzclient.sync import RoundSummary, Syncer
from buzzclient.watch import watch

PROG = "buzz-sync"


def _split(values: Sequence[str] | None) -> list[str]:
    """Repeatable options that also take comma-separated lists."""
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Keep a local SQLite collection of a Buzz relay's artifacts current."
    )
    parser.add_argument("--relay", required=True, metavar="URL",
                        help="relay URL, e.g. http://127.0.0.1:8000 (its host names the community)")
    parser.add_argument("--key-file", required=True, metavar="F",
                        help="file holding your secret key: 64 hex characters or nsec1...")
    parser.add_argument("--db", required=True, metavar="PATH",
                        help="SQLite file of the collection (created if missing)")
    parser.add_argument("--type", action="append", metavar="T",
                        help="only artifacts of this type (repeatable or comma-separated)")
    parser.add_argument("--channel", action="append", metavar="H",
                        help="only artifacts homed in this channel UUID (repeatable)")
    parser.add_argument("--watch", action="store_true",
                        help="keep running: rounds on live events (artifacts.sync) or by polling")
    parser.add_argument("--interval", type=float, default=10.0, metavar="S",
                        help="seconds between polls with --watch when no live stream (10)")
    parser.add_argument("--limit", type=int, metavar="N",
                        help="page size, 1..1000 (default: the relay's maximum)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip checking event ids and signatures (a trusted relay, faster)")
    parser.add_argument("-q", "--quiet", action="store_true", help="errors only")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log retries (-v) and every page (-vv) to stderr")
    return parser


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    logging.basicConfig(level=level, stream=sys.stderr, format=f"{PROG}: %(message)s")
    if args.limit is not None and not 1 <= args.limit <= 1000:
        return _fail("--limit must be between 1 and 1000", 2)
    try:
        secret, _pubkey = load_secret(args.key_file)
    except BadKey as exc:
        return _fail(str(exc), 2)
    try:
        syncer = Syncer(
            relay_url=args.relay,
            secret_hex=secret,
            db=args.db,
            channels=_split(args.channel),
            types=_split(args.type),
            page_limit=args.limit,
            verify=not args.no_verify,
        )
    except ValueError as exc:
        return _fail(str(exc), 2)
    except SyncError as exc:
        return _fail(str(exc), 1)
    progress = ProgressLine(enabled=None if not args.quiet else False)

    def report(summary: RoundSummary) -> None:
        progress.clear()
        if not args.quiet:
            sys.stdout.write(summary.line() + "\n")
            sys.stdout.flush()

    def on_error(exc: SyncError) -> None:
        progress.clear()
        sys.stderr.write(f"{PROG}: {exc} (will retry)\n")
        sys.stderr.flush()

    try:
        with syncer:
            if args.watch:
                watch(syncer, interval=args.interval, report=report, on_error=on_error,
                      on_page=progress.update)
            else:
                summary = syncer.run_round(on_page=progress.update)
                report(summary)
                if summary.resumed:
                    # The round an interrupted run left open is finished, but its range ends
                    # where that run's first page put it: one more round brings the collection
                    # up to now.
                    report(syncer.run_round(on_page=progress.update))
    except SyncError as exc:
        progress.clear()
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        progress.clear()
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
