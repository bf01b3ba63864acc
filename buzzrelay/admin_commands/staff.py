"""buzz-admin staff: the staff console's accounts from a shell, for when the console cannot help.

    buzz-admin staff unlock USERNAME [--address IP]   forget the failed sign-ins that lock them
    buzz-admin staff unlock --address IP              a client address alone
    buzz-admin staff reset-factor USERNAME            remove the authenticator and recovery codes
    buzz-admin staff nostr-key USERNAME --pubkey HEX  let them sign in with that Nostr key
    buzz-admin staff nostr-key USERNAME --remove      no longer

The same services as the admin (relayinfo.staff); each prints what it did.
"""

from __future__ import annotations

import argparse
import sys

HELP = ("staff console accounts: unlock a locked-out sign-in, reset a lost second factor, "
        "link a Nostr key")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["unlock", "reset-factor", "nostr-key"])
    parser.add_argument("username", nargs="?", help="the staff user's username")
    parser.add_argument("--address", help="unlock: a client address as the relay sees it")
    parser.add_argument("--pubkey", help="nostr-key: the staff member's key, 64 hex characters")
    parser.add_argument("--remove", action="store_true", help="nostr-key: remove their key")


def run(args: argparse.Namespace) -> int:
    from relayinfo import staff

    if args.action == "unlock":
        if args.username is None and args.address is None:
            sys.stderr.write("buzz-admin: staff unlock needs a USERNAME or --address\n")
            return 2
        removed = staff.unlock(username=args.username, address=args.address)
        print(f"unlocked {args.username or args.address}: {removed} failed sign-ins forgotten")
        return 0
    if args.username is None:
        sys.stderr.write(f"buzz-admin: staff {args.action} needs a USERNAME\n")
        return 2
    try:
        if args.action == "nostr-key":
            return _nostr_key(args)
        removed = staff.reset_second_factor(username=args.username)
    except staff.UnknownStaffUser as exc:
        sys.stderr.write(f"buzz-admin: {exc}\n")
        return 1
    print(f"second factor of {args.username} reset: {removed} devices removed; "
          "they enrol again at their next sign-in")
    return 0


def _nostr_key(args: argparse.Namespace) -> int:
    from nostr.events import is_lower_hex
    from relayinfo import staff

    pubkey = None if args.remove else (args.pubkey or "").strip().lower()
    if pubkey is not None and not is_lower_hex(pubkey, 64):
        sys.stderr.write("buzz-admin: staff nostr-key needs --pubkey <64 hex characters> "
                         "or --remove\n")
        return 2
    staff.set_nostr_key(username=args.username, pubkey=pubkey)
    print(f"{args.username}: " + (f"signs in with Nostr key {pubkey}" if pubkey
                                  else "Nostr key removed"))
    return 0
