"""The README's first-sync walk-through, run as it stands, with only the client installed.

Both distributions are built from this checkout (offline: no build isolation, the setuptools
already in .venv); the client's wheel goes into a fresh virtualenv, its four dependencies from
the package index, and nothing else: no Django, not this repository on the path. The README's
`<!-- walkthrough -->` block is extracted and run by bash there, against a real relay on the
pytest database. Its one substitution is the relay's address (the quickstart's port is 8000,
the test relay's is free); `buzz-admin` is the relay's own command on the test database, as the
quickstart's printed line is in a user's terminal.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from buzzclient import __version__
from tests.buzzclient.world import HOST
from tests.factories import make_community
from tests.relay_server import ROOT, RelayProcess, server_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLIENT_DEPENDENCIES = {"coincurve", "httpx", "websockets", "orjson"}


def readme_walkthrough() -> str:
    """The shell block after the README's `<!-- walkthrough -->` marker."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- walkthrough -->\n```sh\n(.*?)\n```", text, re.S)
    assert found, "README.md lost its <!-- walkthrough --> block"
    return found.group(1)


def build_wheels(into: Path) -> dict[str, Path]:
    """Both wheels, built from a copy of their sources: setuptools builds in the source tree
    (`build/`, `*.egg-info`), which must stay clean of it."""
    sources = into / "src"
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    sources.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, sources / name)
    # As a checkout has them: buzzrelay/templates is a link to the top-level templates/.
    for package in ("relaycore", "buzzrelay", "artifacts", "relayinfo", "buzzclient", "nostr",
                    "templates"):
        shutil.copytree(ROOT / package, sources / package, symlinks=True, ignore=ignore)
    # The client's directory links to the packages; the copy holds them as files.
    shutil.copytree(ROOT / "client", sources / "client", symlinks=False, ignore=ignore)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--disable-pip-version-check", "--wheel-dir", str(into), str(sources / "client"),
         str(sources)],
        check=True, capture_output=True, text=True, timeout=180, cwd=into,
    )
    return {path.name.split("-")[0]: path for path in into.glob("*.whl")}


def metadata(wheel: Path) -> tuple[list[str], list[str]]:
    """(Requires-Dist, top-level files) of a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = next(name for name in names if name.endswith(".dist-info/METADATA"))
        parsed = Parser().parsestr(archive.read(meta).decode())
    return parsed.get_all("Requires-Dist") or [], sorted({name.split("/")[0] for name in names})


def test_the_readme_walkthrough_runs_with_only_the_client_installed(
    relay_server: RelayProcess, tmp_path: Path
) -> None:
    wheels = build_wheels(tmp_path)
    client_requires, client_files = metadata(wheels["buzz_sync"])
    assert {re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in client_requires} == (
        CLIENT_DEPENDENCIES
    )
    assert [f for f in client_files if not f.endswith(".dist-info")] == ["buzzclient", "nostr"]
    relay_requires, relay_files = metadata(wheels["buzz_relay"])
    assert f"buzz-sync=={__version__}" in relay_requires
    assert any(r.startswith("Django") for r in relay_requires)
    assert "buzzclient" not in relay_files and "nostr" not in relay_files  # one owner per file
    assert {"relaycore", "artifacts", "relayinfo", "buzzrelay"} <= set(relay_files)
    with zipfile.ZipFile(wheels["buzz_relay"]) as archive:  # the pages ship with the relay
        assert {"buzzrelay/templates/admin/index.html", "buzzrelay/templates/relayinfo/home.html",
                "buzzrelay/templates/admin/relayinfo/readiness.html"} <= set(archive.namelist())
        # Every one of the top-level templates/ (the project card's layout), none left behind.
        templates = {f"buzzrelay/templates/{path.relative_to(ROOT / 'templates')}"
                     for path in (ROOT / "templates").rglob("*.html")}
        assert templates and templates <= set(archive.namelist())

    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=True)
    installed = subprocess.run(
        [fresh / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check",
         str(wheels["buzz_sync"])],
        capture_output=True, text=True, timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    alone = subprocess.run(
        [fresh / "bin" / "python", "-c", "import django"], capture_output=True, text=True,
        cwd=tmp_path,
    )
    assert "No module named 'django'" in alone.stderr

    make_community(HOST, name=f"Demo community ({HOST})")
    # `buzz-admin` as the relay's checkout has it, on the test database; this repository is on
    # its path only (the client's commands see the installed wheel alone).
    tools = tmp_path / "relay-bin"
    tools.mkdir()
    admin = tools / "buzz-admin"
    admin.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec "
                     f"{shlex.quote(sys.executable)} -m buzzrelay.cli \"$@\"\n")
    admin.chmod(0o755)
    env = {key: value for key, value in server_env().items() if key != "PYTHONPATH"}
    env["PATH"] = f"{fresh / 'bin'}:{tools}:/usr/bin:/bin"
    home = tmp_path / "home"
    home.mkdir()
    script = readme_walkthrough().replace("ws://127.0.0.1:8000", relay_server.ws_url.rstrip("/"))
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=home, env=env,
        capture_output=True, text=True, timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output

    assert (home / "me.key").stat().st_mode & 0o777 == 0o600
    assert f'serves "Demo community ({HOST})"' in output
    lines = result.stdout.splitlines()
    assert any(line.startswith("full round: +2 added, ~0 updated, -0 removed; 2 items in 1 page")
               for line in lines), output
    assert "continuation round: no changes; " in result.stdout
    assert [line.split()[-2:] for line in lines if "buzz.task" in line] == [
        ["Buy", "milk"], ["the", "report"]]
    assert "watching " in result.stderr and "live stream subscribed" in result.stderr
    # The change published while watching arrived as a round of its own, with its time.
    arrived = [line for line in lines
               if re.match(r"\d\d:\d\d:\d\d continuation round: \+0 added, ~1 updated", line)]
    assert arrived, output
    with sqlite3.connect(home / "local.sqlite") as db:
        rows = db.execute("SELECT title, json_extract(event, '$.content') FROM "
                          "collection_artifacts ORDER BY title").fetchall()
    assert rows == [("Buy milk", '{"done": false}'), ("Write the report", '{"done": true}')]


def test_the_walkthrough_block_is_commands_only() -> None:
    """What the test runs is what a reader copies: no placeholders, no comments to trip on."""
    block = readme_walkthrough()
    assert "<" not in block and "#" not in block
    assert block.count("buzz-sync") >= 10
