"""Shared plumbing for the serving benchmarks: a database, a community, relay processes, wrk.

The relay is served the way the README deploys it (`buzz-admin serve` = uvicorn, or the other
ASGI servers under comparison), against PostgreSQL and Redis on this machine: DATABASE_URL and
REDIS_URL when set, else an embedded PostgreSQL (.data/bench-postgres) and a throwaway Redis.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Re-exported: the benchmarks print their tables with buzz-admin's printer.
from buzzrelay.admin_commands._tables import print_table as print_table

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
OUT = ROOT / "bench" / "out"
BENCH_RELAY_SECRET = "7c0ffee0" * 8
BENCH_HOST = "127.0.0.1"


@dataclass
class Services:
    database_url: str
    redis_url: str


@contextmanager
def services() -> Iterator[Services]:
    """PostgreSQL and Redis for a benchmark run (the environment's, else embedded ones)."""
    sys.path.insert(0, str(ROOT))
    from buzzrelay.embedded import ensure_postgres, start_redis

    database_url = os.environ.get("DATABASE_URL")
    redis_url = os.environ.get("REDIS_URL")
    redis = None
    if not database_url:
        pg = ensure_postgres(ROOT / ".data" / "bench-postgres")
        pg.create_database("buzz_bench")
        database_url = pg.url("buzz_bench")
    if not redis_url:
        redis = start_redis()
        redis_url = redis.url
    try:
        yield Services(database_url, redis_url)
    finally:
        if redis is not None:
            redis.stop()


def relay_env(svc: Services, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=svc.database_url,
        REDIS_URL=svc.redis_url,
        RELAY_SIGNING_KEY=BENCH_RELAY_SECRET,
        DJANGO_SETTINGS_MODULE="buzzrelay.settings",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def setup_database(svc: Services, *, host: str = BENCH_HOST, name: str = "Bench") -> None:
    """Migrate (building indexes) and make sure the benchmark community exists."""
    env = relay_env(svc)
    _buzz_admin(env, "migrate", "--build-indexes")
    _buzz_admin(env, "community", "--host", host, "--name", name, "--artifacts", "on")


def _buzz_admin(env: dict[str, str], *argv: str) -> None:
    """Run a buzz-admin command; on failure stop the benchmark with its one-line message (it
    went to stderr above), not a traceback of this harness."""
    done = subprocess.run([str(VENV_BIN / "buzz-admin"), *argv], env=env,
                          stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"bench: `buzz-admin {argv[0]}` failed (exit {done.returncode}); "
                         f"its message is above")


def free_port() -> int:
    from buzzrelay.embedded import free_port as _free_port

    return _free_port()


# `buzz-admin serve` from a source tree of our choosing (A/B runs: a git worktree of the
# baseline, and the candidate's tree). The venv's `buzz-admin` script would run whatever tree
# PYTHONPATH names too, but `python -c` puts the working directory (the tree) first on sys.path
# as well, and this launcher writes down which `buzzrelay` and `artifacts` it imported (to
# $BUZZ_BENCH_MARKER) so the benchmark can show each server's code is the tree's, not the
# editable install's. uvicorn's worker processes are spawned with this process's sys.path.
SERVE_FROM_TREE = """\
import os, sys
import artifacts, buzzrelay, buzzrelay.cli
with open(os.environ["BUZZ_BENCH_MARKER"], "w") as marker:
    marker.write(f"buzzrelay {buzzrelay.VERSION} from {os.path.dirname(buzzrelay.__file__)}, "
                 f"artifacts from {os.path.dirname(artifacts.__file__)}")
sys.argv[0] = "buzz-admin"
sys.exit(buzzrelay.cli.main())
"""

SERVER_COMMANDS = {
    # The relay as deployed: `buzz-admin serve` (uvicorn with the relay's own options).
    "serve": lambda port, workers: [
        str(VENV_BIN / "buzz-admin"), "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers),
    ],
    # The same command, run from the tree start_server_in names (see SERVE_FROM_TREE).
    "serve-tree": lambda port, workers: [
        str(VENV_BIN / "python"), "-c", SERVE_FROM_TREE, "serve", "--host", "127.0.0.1",
        "--port", str(port), "--workers", str(workers),
    ],
    "uvicorn": lambda port, workers: [
        str(VENV_BIN / "uvicorn"), "buzzrelay.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--workers", str(workers), "--lifespan", "off",
        "--log-level", "warning", "--no-access-log",
    ],
    "granian": lambda port, workers: [
        str(VENV_BIN / "granian"), "--interface", "asgi", "--host", "127.0.0.1",
        "--port", str(port), "--workers", str(workers), "--no-ws",
        "--log-level", "warning", "buzzrelay.asgi:application",
    ],
    # daphne has no worker processes of its own: one process is what it offers.
    "daphne": lambda port, workers: [
        str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port),
        "buzzrelay.asgi:application",
    ],
}


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    # "serve-tree" servers: the modules the server imported, as its launcher wrote them down.
    code: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def start_server(kind: str, svc: Services, *, workers: int = 1, **env: str) -> Server:
    """Start a relay server from this tree on a free port and wait for `/healthz`."""
    return start_server_in(ROOT, kind, svc, workers=workers, env=env)


def start_server_in(
    root: Path, kind: str, svc: Services, *, workers: int = 1,
    env: dict[str, str] | None = None,
) -> Server:
    """start_server from the source tree `root` (working directory and PYTHONPATH); only
    "serve-tree" also records which code the server imported (`Server.code`)."""
    port = free_port()
    extra = {**(env or {}), "PYTHONPATH": str(root)}
    marker = None
    if kind == "serve-tree":
        fd, name = tempfile.mkstemp(prefix="buzz-bench-marker-")
        os.close(fd)
        marker = Path(name)
        extra["BUZZ_BENCH_MARKER"] = name
    process = subprocess.Popen(
        SERVER_COMMANDS[kind](port, workers), env=relay_env(svc, **extra), cwd=root,
        start_new_session=True, stdout=subprocess.DEVNULL,
    )
    server = Server(process, port)
    try:
        wait_until_serving(server, f"{server.url}/healthz", f"{kind} did not start (from {root})")
        if marker is not None:
            server.code = marker.read_text()
        return server
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)


def wait_until_serving(
    server: Server, url: str, failure: str, *, headers: dict[str, str] | None = None
) -> None:
    """Wait up to 60 s for `url` to answer 200; else stop `server` and raise `failure`."""
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url, headers=headers, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if server.process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(failure)
        time.sleep(0.2)


@contextmanager
def git_worktree(ref: str, patch: Path | None = None) -> Iterator[tuple[Path, str]]:
    """A detached `git worktree` of `ref` in a temporary directory, removed on exit, with
    `patch` applied to its files when given (`git apply`: a baseline brought to a protocol
    change it predates, bench/patches/).

    Yields the tree and the commit. Only the temporary worktree is added and removed: the
    repository's own work tree, index and branches are left alone.
    """
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True, text=True,
    ).stdout.strip()
    if not commit:
        raise SystemExit(f"--baseline {ref}: not a commit of {ROOT}")
    parent = Path(tempfile.mkdtemp(prefix="buzz-baseline-")).resolve()
    tree = parent / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), commit],
        check=True,
    )
    try:
        if patch is not None:
            applied = subprocess.run(["git", "-C", str(tree), "apply", str(patch.resolve())],
                                     capture_output=True, text=True)
            if applied.returncode != 0:
                raise SystemExit(f"--baseline-patch {patch}: {applied.stderr.strip()}")
        yield tree, commit
    finally:
        removed = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            capture_output=True, text=True,
        )
        shutil.rmtree(parent, ignore_errors=True)
        if removed.returncode != 0:
            print(f"warning: git worktree remove {tree} failed ({removed.stderr.strip()}); "
                  f"`git worktree prune` clears its record", file=sys.stderr)


def describe_tree(root: Path) -> str:
    """The commit a tree is at, and how many tracked files differ from it (read-only git)."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), *args],
            capture_output=True, text=True,
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    changed = [line for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
               if line.strip()]
    return f"{head} + {len(changed)} uncommitted file(s)" if changed else head


@dataclass
class WrkResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    errors: int
    requests: int = 0
    output: str = ""  # wrk's whole report (what a Lua script's done() printed included)


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(
    url: str, *, seconds: int, connections: int, threads: int = 1,
    script: Path | None = None, headers: dict[str, str] | None = None,
) -> WrkResult:
    """Drive `url` with wrk (Debian's package; bin/bootstrap bench installs it)."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: run bin/bootstrap bench (apt-get install wrk)")
    command = ["wrk", "--latency", f"-t{threads}", f"-c{connections}", f"-d{seconds}s"]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    if script is not None:
        command += ["-s", str(script)]
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    requests = re.search(r"(\d+) requests in", output)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    return WrkResult(
        requests_per_second=rps, p50_ms=p50, p99_ms=p99,
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(g) for g in errors.groups()) if errors else 0,
        requests=int(requests.group(1)) if requests else 0, output=output,
    )
