"""The quickstart (README command 1, `bin/quickstart`): a working relay on this machine.

With DATABASE_URL unset it runs an embedded PostgreSQL with its data in `.data/postgres` (or
`$BUZZ_DATA_DIR/postgres`) and keeps a generated relay key in `.data/relay.key`, stable across
restarts; with REDIS_URL unset the settings use an in-process cache and channel layer. It applies
the migrations and builds the indexes (`buzz-admin migrate --build-indexes`), creates a demo
community for each host it serves and a staff user for the Django admin, prints the URL, the
relay pubkey and the staff login, then serves until Ctrl-C or SIGTERM, and stops the embedded
PostgreSQL it started. It serves exactly what `buzz-admin serve` serves (buzzrelay/server.py: the
same application, lifespan and fleet registration, static files): only the defaults differ.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from pathlib import Path
from types import FrameType

from buzzrelay.embedded import EmbeddedPostgres, ensure_postgres
from buzzrelay.server import metrics_directory
from buzzrelay.static_files import StaticFilesError

ROOT = Path(__file__).resolve().parent.parent
LOCAL_HOSTS = ("127.0.0.1", "localhost")
STAFF_USERNAME = "admin"


class Stopped(Exception):
    """SIGTERM arrived: unwind and stop cleanly, like Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Stopped()


def data_dir() -> Path:
    return Path(os.environ.get("BUZZ_DATA_DIR") or ROOT / ".data").resolve()


def _read_or_create_secret(path: Path, make: str) -> str:
    """The secret kept in `path`, created (readable by the owner only) on the first start."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(make + "\n")
    return make


def ensure_relay_key(directory: Path) -> Path:
    """`relay.key` in `directory`: a generated secp256k1 secret, the same at every restart."""
    from nostr.schnorr import generate_secret

    path = directory / "relay.key"
    _read_or_create_secret(path, generate_secret())
    os.chmod(path, 0o600)
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/quickstart", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--host", action="append", metavar="NAME",
        help="host name clients use; a demo community is created for each "
        "(repeatable; default: 127.0.0.1 and localhost)",
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--listen", help="address to listen on (default: 127.0.0.1 when every host is local, "
        "else 0.0.0.0)",
    )
    args = parser.parse_args(argv)
    args.host = [host.lower() for host in (args.host or LOCAL_HOSTS)]
    if args.listen is None:
        args.listen = "127.0.0.1" if set(args.host) <= set(LOCAL_HOSTS) else "0.0.0.0"
    return args


def _prepare_environment(directory: Path) -> EmbeddedPostgres | None:
    """Set DATABASE_URL and the relay key before Django reads its settings."""
    server = None
    if not os.environ.get("DATABASE_URL"):
        print(f"Starting the embedded PostgreSQL ({directory / 'postgres'}) ...", flush=True)
        server = ensure_postgres(directory / "postgres")
        server.create_database("buzz")
        os.environ["DATABASE_URL"] = server.url("buzz")
    if not (os.environ.get("RELAY_SIGNING_KEY") or os.environ.get("RELAY_SIGNING_KEY_FILE")):
        os.environ["RELAY_SIGNING_KEY_FILE"] = str(ensure_relay_key(directory))
    os.environ.setdefault("RELAY_APP", "1")  # the task board at /app/ (buzz-sync-js)
    return server


def _demo_communities(hosts: list[str]) -> list[str]:
    from artifacts.models import Community

    created = []
    for host in hosts:
        _, was_created = Community.objects.get_or_create(
            host=host, defaults={"name": f"Demo community ({host})"}
        )
        if was_created:
            created.append(host)
    return created


def _staff_login(directory: Path) -> tuple[str, Path]:
    """A superuser for the Django admin whose password is kept in `admin-password`."""
    from django.contrib.auth import get_user_model

    path = directory / "admin-password"
    password = _read_or_create_secret(path, secrets.token_urlsafe(12))
    user_model = get_user_model()
    user = user_model.objects.filter(username=STAFF_USERNAME).first()
    if user is None:
        user_model.objects.create_superuser(STAFF_USERNAME, "", password)
    elif not user.check_password(password):
        user.set_password(password)
        user.save(update_fields=["password"])
    return password, path


def first_user_guide(
    *,
    hosts: list[str],
    port: int,
    relay_pubkey: str,
    password: str,
    password_file: Path,
    database: str,
    database_url: str,
) -> str:
    """What a first user needs, printed at start: where the relay is, the database (so
    `buzz-admin` reaches it), the line that makes their key a community admin, and a first sync
    (the README's walk-through, shortened)."""
    urls = [f"http://{host}:{port}/" for host in hosts]
    host = hosts[0]
    relay = f"ws://{host}:{port}"
    admin = ROOT / ".venv" / "bin" / "buzz-admin"
    from django.conf import settings  # configured by the time the guide is printed

    return (
        "\nBuzz relay is starting.\n"
        f"  URL:          {'  '.join(urls)}  (Nostr clients: {relay})\n"
        f"  relay pubkey: {relay_pubkey}\n"
        + (f"  task board:   {urls[0]}app/  (buzz-sync-js in the browser; RELAY_APP=0 turns it "
           "off)\n" if settings.RELAY_APP_ENABLED else "")
        + f"  staff login:  {urls[0]}admin/  user {STAFF_USERNAME!r}, password {password!r} "
        f"(kept in {password_file})\n"
        f"  database:     {database}\n"
        f"                DATABASE_URL={database_url}\n"
        f"Each host is a community of its own ({', '.join(hosts)}). To let your key create "
        f"channels in {host}'s,\nmake it a community admin (adds to the admins, keeps the "
        "others):\n"
        f"  DATABASE_URL={database_url} {admin} community --host {host} "
        "--add-admin <your hex pubkey>\n"
        "First sync, in another terminal (pip install ./client gives buzz-sync; README, "
        "\"Keeping a local collection\"):\n"
        f"  export BUZZ_RELAY={relay} BUZZ_KEY_FILE=me.key BUZZ_DB=local.sqlite\n"
        "  buzz-sync keygen && buzz-sync whoami --pubkey    # that pubkey goes in the line above\n"
        "  CHANNEL=$(buzz-sync create-channel todo --private -q)\n"
        '  buzz-sync create --channel "$CHANNEL" --type buzz.task --title "Buy milk"\n'
        "  buzz-sync && buzz-sync list        # then buzz-sync --watch follows changes live\n"
        "Ctrl-C stops it."
    )


def _serve(args: argparse.Namespace) -> None:
    """`buzz-admin serve`'s server and application, on the quickstart's defaults."""
    from buzzrelay.server import run_server

    run_server(host=args.listen, port=args.port, workers=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Before Django's set-up imports prometheus_client (buzzrelay/server.py).
    with metrics_directory():
        return _run(args, directory)


def _run(args: argparse.Namespace, directory: Path) -> int:
    server: EmbeddedPostgres | None = None
    try:
        server = _prepare_environment(directory)
        from buzzrelay.admin_commands._migrations import run_migrate
        from buzzrelay.cli import setup_django

        setup_django(None)
        status = run_migrate(with_index_builds=True)
        if status != 0:
            sys.stderr.write(f"quickstart: migrations failed (exit {status})\n")
            return status
        from django.conf import settings

        _demo_communities(args.host)
        password, password_file = _staff_login(directory)
        print(first_user_guide(
            hosts=args.host, port=args.port, relay_pubkey=settings.RELAY_PUBKEY,
            password=password, password_file=password_file,
            database=(f"embedded, {server.data_dir}" if server else "DATABASE_URL"),
            database_url=os.environ["DATABASE_URL"],
        ), flush=True)
        _serve(args)
    except (KeyboardInterrupt, Stopped):
        pass
    except StaticFilesError as exc:
        sys.stderr.write(f"quickstart: {exc}\n")
        return 2
    finally:
        if server is not None:
            print("Stopping the embedded PostgreSQL ...", flush=True)
            server.stop()
    print("Stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
