"""``buzz-sync``: keep a local SQLite collection of a relay's artifacts current, and publish.

    buzz-sync --relay URL --key-file F --db local.sqlite [--type T] [--channel H] [--watch]
    buzz-sync keygen --key-file F          buzz-sync whoami --key-file F [--relay URL]
    buzz-sync create-channel NAME [--private]      buzz-sync grant|revoke CHANNEL PUBKEY
    buzz-sync create --channel H --type T --title X [--content C]
    buzz-sync update|move|delete|restore D ...

Syncing runs one round (full the first time, a continuation afterwards when the relay
advertises ``artifacts.incremental``), or with ``--watch`` rounds whenever the relay's live
stream (or a poll timer) says something changed. A one-line summary per round goes to stdout
(``--json``: one JSON object per line); progress, status and errors to stderr. Each publishing
command prints the relay's ``OK`` answer. ``--relay``, ``--key-file`` and ``--db`` default to
``$BUZZ_RELAY``, ``$BUZZ_KEY_FILE`` and ``$BUZZ_DB``. Exit codes: 0 success, 1 the relay refused
or syncing failed, 2 bad arguments or key.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from buzzclient import __version__
from buzzclient.errors import BadKey, SyncError, Unauthorized, UnknownCommunity
from buzzclient.keys import encode_npub, load_secret, parse_pubkey, write_new_key
from buzzclient.progress import ProgressLine
from buzzclient.publish import ROLES, Published, Publisher
from buzzclient.store import CollectionStore
from buzzclient.sync import RoundSummary, Syncer, plural
from buzzclient.transport import RelayAddress, RelayHttp, RelayInfo
from buzzclient.watch import watch

PROG = "buzz-sync"
COMMANDS = (
    "sync", "keygen", "whoami", "list", "create-channel", "grant", "revoke",
    "create", "update", "move", "delete", "restore",
)


class UsageError(Exception):
    """Bad arguments found after parsing (exit 2)."""


def _split(values: Sequence[str] | None) -> list[str]:
    """Repeatable options that also take comma-separated lists."""
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _env_default(name: str) -> dict[str, Any]:
    value = os.environ.get(name)
    return {"default": value} if value else {"required": True}


def _add_output(parser: argparse.ArgumentParser, quiet: str = "errors only") -> None:
    parser.add_argument("--json", action="store_true",
                        help="print JSON (one object per line) instead of sentences, for scripts")
    parser.add_argument("-q", "--quiet", action="store_true", help=quiet)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="show the relay's answers and retries (-v), and more (-vv)")


def _add_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key-file", metavar="F", **_env_default("BUZZ_KEY_FILE"),
                        help="file holding your secret key: nsec1... or 64 hex characters "
                        "($BUZZ_KEY_FILE)")


def _add_relay(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    options = _env_default("BUZZ_RELAY") if required else {
        "default": os.environ.get("BUZZ_RELAY")}
    parser.add_argument("--relay", metavar="URL", **options,
                        help="relay URL: ws://host:port, wss://host, http(s)://... (its host "
                        "names the community; $BUZZ_RELAY)")


def _add_db(parser: argparse.ArgumentParser, *, required: bool) -> None:
    options = _env_default("BUZZ_DB") if required else {"default": os.environ.get("BUZZ_DB")}
    parser.add_argument("--db", metavar="PATH", **options,
                        help="SQLite file of the collection ($BUZZ_DB)" if required else
                        "the collection to look the current revision up in ($BUZZ_DB; "
                        "otherwise the relay's history)")


def build_sync_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Keep a local SQLite collection of a Buzz relay's artifacts "
        "current. Other commands: " + ", ".join(COMMANDS[1:]) + f" ({PROG} COMMAND --help).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _add_relay(parser)
    _add_key(parser)
    _add_db(parser, required=True)
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
    _add_output(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The commands other than syncing (which is ``build_sync_parser``)."""
    parser = argparse.ArgumentParser(prog=PROG)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, quiet: str = "errors only") -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=help_)
        _add_output(sub, quiet)
        return sub

    sub = command("keygen", "make a new key: writes it (nsec) to --key-file, mode 0600, never "
                  "over an existing file, and prints its npub")
    _add_key(sub)
    sub = command("whoami", "print your key's npub and hex pubkey; with --relay, the community "
                  "the relay serves at that URL")
    _add_key(sub)
    _add_relay(sub, required=False)
    sub.add_argument("--pubkey", action="store_true",
                     help="print the hex pubkey only (for buzz-admin community --add-admin)")
    sub = command("list", "print the local collection: one line per artifact (id, channel, "
                  "type, title)")
    _add_relay(sub)
    _add_key(sub)
    _add_db(sub, required=True)

    def writer(name: str, help_: str, *, lookup: bool = False) -> argparse.ArgumentParser:
        sub = command(name, help_, "print only the id of what was made (the event's, or the "
                      "new channel's or artifact's), for $(...); a refusal on stderr")
        _add_relay(sub)
        _add_key(sub)
        if lookup:
            _add_db(sub, required=False)
            sub.add_argument("--prev", metavar="ID",
                             help="the revision this one follows (default: the current head)")
        return sub

    sub = writer("create-channel", "create a channel (kind 9007); you become its owner")
    sub.add_argument("name", help="the channel's name")
    sub.add_argument("--private", action="store_true",
                     help="readable by its members only (default: open to every key)")
    sub.add_argument("--id", metavar="UUID", help="the channel's id (default: a new UUID)")
    sub = writer("grant", "add a member to a channel, or change its role (kind 9000)")
    sub.add_argument("channel", metavar="CHANNEL")
    sub.add_argument("pubkey", metavar="PUBKEY", help="npub1... or 64 hex characters")
    sub.add_argument("--role", choices=ROLES, default="member")
    sub = writer("revoke", "remove a member from a channel (kind 9001)")
    sub.add_argument("channel", metavar="CHANNEL")
    sub.add_argument("pubkey", metavar="PUBKEY", help="npub1... or 64 hex characters")

    sub = writer("create", "create an artifact (kind 45010, op create)")
    sub.add_argument("--channel", required=True, metavar="H", help="its home channel")
    sub.add_argument("--type", required=True, metavar="T", help="e.g. buzz.task (immutable)")
    sub.add_argument("--title", required=True)
    sub.add_argument("--content", default="", help="its content, e.g. JSON ('' by default)")
    sub.add_argument("--id", metavar="UUID", help="its d (default: a new UUID)")
    for name, help_ in (
        ("update", "a new revision of an artifact: a new title and/or content"),
        ("restore", "bring a deleted artifact back (with its title and content from before)"),
    ):
        sub = writer(name, help_, lookup=True)
        sub.add_argument("d", metavar="ARTIFACT", help="the artifact's id (its d)")
        sub.add_argument("--title", help="default: the current one")
        sub.add_argument("--content", help="default: the current one")
    sub = writer("move", "move an artifact to another channel", lookup=True)
    sub.add_argument("d", metavar="ARTIFACT")
    sub.add_argument("--to", required=True, metavar="H", help="the channel it moves to")
    sub = writer("delete", "delete an artifact (restore brings it back)", lookup=True)
    sub.add_argument("d", metavar="ARTIFACT")
    return parser


class Output:
    """Where a command's words go: stdout for results, stderr for status, both in JSON with
    ``--json``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.json = bool(args.json)
        self.quiet = bool(args.quiet)

    def result(self, text: str, data: dict[str, Any]) -> None:
        if self.json:
            sys.stdout.write(orjson.dumps(data).decode() + "\n")
        elif not self.quiet:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def status(self, text: str) -> None:
        if not self.quiet and not self.json:
            sys.stderr.write(f"{PROG}: {text}\n")
            sys.stderr.flush()


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    return code


def _set_up_logging(verbose: int) -> None:
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, stream=sys.stderr, format=f"{PROG}: %(message)s")
    # -v is about the relay's answers; the HTTP and WebSocket libraries' own records (every
    # connection, header and frame) would bury them.
    for noisy in ("httpx", "httpcore", "websockets", "hpack"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _command_first(list(sys.argv[1:] if argv is None else argv))
    if arguments and arguments[0] in COMMANDS[1:]:
        args = build_parser().parse_args(arguments)
        _set_up_logging(args.verbose)
        try:
            return COMMAND_RUNNERS[args.command](args, Output(args))
        except UsageError as exc:
            return _fail(str(exc), 2)
        except BadKey as exc:
            return _fail(str(exc), 2)
        except SyncError as exc:
            return _fail(str(exc), 1)
    if arguments and arguments[0] == "sync":
        arguments = arguments[1:]
    elif arguments and not arguments[0].startswith("-"):
        return _fail(f"unknown command {arguments[0]!r} (commands: {', '.join(COMMANDS)}; "
                     "none: sync)", 2)
    args = build_sync_parser().parse_args(arguments)
    _set_up_logging(args.verbose)
    return run_sync(args, Output(args))


_OUTPUT_FLAGS = frozenset({"--json", "-q", "--quiet", "-v", "-vv", "--verbose"})


def _command_first(arguments: list[str]) -> list[str]:
    """``buzz-sync --json create ...`` as ``buzz-sync create --json ...``: the output options
    are everyone's, so they may come before the command too."""
    leading = 0
    while leading < len(arguments) and arguments[leading] in _OUTPUT_FLAGS:
        leading += 1
    if leading < len(arguments) and arguments[leading] in COMMANDS:
        return [arguments[leading], *arguments[:leading], *arguments[leading + 1:]]
    return arguments


def run_sync(args: argparse.Namespace, out: Output) -> int:
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
    progress = ProgressLine(enabled=not (args.quiet or args.json))

    def report(summary: RoundSummary) -> None:
        progress.clear()
        stamp = time.strftime("%H:%M:%S ") if args.watch else ""
        out.result(stamp + summary.line(), {"at": _now_iso(), **summary.as_dict()})

    def on_error(exc: SyncError) -> None:
        progress.clear()
        sys.stderr.write(f"{PROG}: {time.strftime('%H:%M:%S')} {exc} (will retry)\n")
        sys.stderr.flush()

    def on_status(text: str) -> None:
        progress.clear()
        out.status(f"{time.strftime('%H:%M:%S')} {text}")

    try:
        with syncer:
            first_run = syncer.store.state(syncer.collection_id).rounds == 0
            info: RelayInfo | None = None
            try:
                info = syncer.relay_info()
            except (Unauthorized, UnknownCommunity):
                raise
            except SyncError as exc:
                if not args.watch:
                    raise
                on_error(exc)  # a watch started while the relay is down waits for it
            if first_run and info is not None:
                # Another host is another community (PROTOCOL.md section 1): say which one
                # this URL reaches, so a wrong host is obvious before an empty collection is.
                out.status(f"{_community(syncer.address.base_url, info)}; first sync of "
                           f"{args.db} as {encode_npub(syncer.pubkey)}")
            if args.watch:
                out.status(f"{time.strftime('%H:%M:%S')} watching {syncer.address.base_url} "
                           "(Ctrl-C stops)")
                watch(syncer, interval=args.interval, report=report, on_error=on_error,
                      on_page=progress.update, on_status=on_status)
            else:
                summary = syncer.run_round(info=info, on_page=progress.update)
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


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def run_list(args: argparse.Namespace, out: Output) -> int:
    _secret, pubkey = load_secret(args.key_file)
    address = _address(args.relay)
    with CollectionStore(args.db) as store:
        rows = store.listing(relay=address.base_url, community=address.host, reader=pubkey)
    if out.json:
        for row in rows:
            out.result("", row)
    else:
        for row in rows:
            out.result(f"{row['d']}  {row['channel']}  {row['type']}  {row['title']}", row)
        out.status(f"{plural(len(rows), 'artifact')} in {args.db} for {address.base_url}")
    return 0


def _community(base_url: str, info: RelayInfo) -> str:
    name = f'"{info.name}"' if info.name else "a community with no name"
    return f"{base_url} serves {name}"


def run_keygen(args: argparse.Namespace, out: Output) -> int:
    _secret, pubkey = write_new_key(args.key_file)
    npub = encode_npub(pubkey)
    out.result(
        f"wrote a new secret key to {args.key_file} (readable by you only: keep it safe, it is "
        f"your identity)\nnpub:   {npub}\npubkey: {pubkey}",
        {"key_file": args.key_file, "npub": npub, "pubkey": pubkey},
    )
    return 0


def run_whoami(args: argparse.Namespace, out: Output) -> int:
    _secret, pubkey = load_secret(args.key_file)
    if args.pubkey:
        out.result(pubkey, {"pubkey": pubkey})
        return 0
    npub = encode_npub(pubkey)
    lines = [f"npub:   {npub}", f"pubkey: {pubkey}"]
    data: dict[str, Any] = {"npub": npub, "pubkey": pubkey}
    if args.relay:
        with RelayHttp(_address(args.relay), _secret) as http:
            info = http.relay_info()
        lines.append(f"relay:  {_community(http.address.base_url, info)}")
        data.update(relay=http.address.base_url, community=info.name)
    out.result("\n".join(lines), data)
    return 0


def _address(url: str) -> RelayAddress:
    try:
        return RelayAddress.parse(url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _publisher(args: argparse.Namespace) -> Publisher:
    secret, _pubkey = load_secret(args.key_file)
    _address(args.relay)
    return Publisher(relay_url=args.relay, secret_hex=secret, db=getattr(args, "db", None))


def _answer(
    out: Output, published: Published, text: str = "", *, made: str | None = None, **data: Any
) -> int:
    """Prints the relay's OK answer (and what it made, once accepted); exit 1 if refused.
    With ``-q`` an accepted write prints only the id of what it made (for ``$(...)``), a
    refusal goes to stderr."""
    if out.quiet and not out.json:
        if published.accepted:
            sys.stdout.write((made or published.event_id) + "\n")
            sys.stdout.flush()
            return 0
        return _fail(published.line(), 1)
    line = published.line()
    if published.accepted and text:
        line += "\n" + text
    out.result(line, {"accepted": published.accepted, "message": published.message,
                      "event_id": published.event_id, **data})
    return 0 if published.accepted else 1


def _pubkey_arg(text: str) -> str:
    try:
        return parse_pubkey(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _writing(run: Callable[[argparse.Namespace, Output, Publisher], int]) -> Callable[
    [argparse.Namespace, Output], int
]:
    def runner(args: argparse.Namespace, out: Output) -> int:
        with _publisher(args) as publisher:
            try:
                return run(args, out, publisher)
            except ValueError as exc:
                raise UsageError(str(exc)) from None

    return runner


@_writing
def run_create_channel(args: argparse.Namespace, out: Output, publisher: Publisher) -> int:
    published = publisher.create_channel(args.name, private=args.private, channel=args.id)
    channel = published.event.tags[0][1]
    visibility = ("private: only its members read it" if args.private else
                  f"open: every key on {publisher.address.host} reads it")
    return _answer(out, published, f"channel {channel} {args.name!r} ({visibility})",
                   made=channel, channel=channel, private=args.private)


@_writing
def run_grant(args: argparse.Namespace, out: Output, publisher: Publisher) -> int:
    pubkey = _pubkey_arg(args.pubkey)
    published = publisher.put_member(args.channel, pubkey, args.role)
    return _answer(out, published, f"{encode_npub(pubkey)} is {args.role} of {args.channel}",
                   channel=args.channel, pubkey=pubkey, role=args.role)


@_writing
def run_revoke(args: argparse.Namespace, out: Output, publisher: Publisher) -> int:
    pubkey = _pubkey_arg(args.pubkey)
    published = publisher.remove_member(args.channel, pubkey)
    return _answer(out, published, f"{encode_npub(pubkey)} left {args.channel}",
                   channel=args.channel, pubkey=pubkey)


@_writing
def run_create(args: argparse.Namespace, out: Output, publisher: Publisher) -> int:
    published = publisher.create_artifact(channel=args.channel, type=args.type,
                                          title=args.title, content=args.content, d=args.id)
    d = published.event.tags[1][1]
    return _answer(out, published, f"artifact {d} {args.title!r} in {args.channel}",
                   made=d, d=d)


def _revision(op: str) -> Callable[[argparse.Namespace, Output], int]:
    def run(args: argparse.Namespace, out: Output, publisher: Publisher) -> int:
        if op == "update":
            if args.title is None and args.content is None:
                raise UsageError("update needs --title and/or --content")
            published = publisher.update_artifact(args.d, title=args.title,
                                                  content=args.content, prev=args.prev)
        elif op == "restore":
            published = publisher.restore_artifact(args.d, title=args.title,
                                                   content=args.content, prev=args.prev)
        elif op == "move":
            published = publisher.move_artifact(args.d, args.to, prev=args.prev)
        else:
            published = publisher.delete_artifact(args.d, prev=args.prev)
        prev = next((tag[1] for tag in published.event.tags if tag[0] == "prev"), None)
        hint = ""
        if not published.accepted and "head changed" in published.message:
            hint = " (sync first, or name the current revision with --prev)"
        if hint:
            published = Published(published.event, False, published.message + hint)
        return _answer(out, published, f"artifact {args.d}: {op} after {prev}", d=args.d,
                       op=op, prev=prev)

    return _writing(run)


COMMAND_RUNNERS: dict[str, Callable[[argparse.Namespace, Output], int]] = {
    "keygen": run_keygen,
    "whoami": run_whoami,
    "list": run_list,
    "create-channel": run_create_channel,
    "grant": run_grant,
    "revoke": run_revoke,
    "create": run_create,
    **{op: _revision(op) for op in ("update", "move", "delete", "restore")},
}


if __name__ == "__main__":
    sys.exit(main())
