"""bin/bootstrap on a fresh machine says what it does and nothing else: no pip traceback.

The checkout is copied (its tracked files) to a temporary folder and bootstrapped there with a
new venv, as a first `bin/quickstart` does. Its requirements are replaced by an empty list to
keep the test short: what printed the traceback was the relay's own editable install, in a venv
of Python >= 3.12 that has no setuptools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _copy_checkout(target: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # client/'s links to the packages it ships, kept as links
            (target / name).symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target / name)


def test_first_bootstrap_prints_no_traceback_and_installs_the_commands(tmp_path: Path) -> None:
    checkout = tmp_path / "buzz"
    _copy_checkout(checkout)
    (checkout / "requirements.txt").write_text("# emptied by the test\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_REQUIRE", "VIRTUAL_ENV"))}
    # The interpreter running the suite (>= 3.12): the one bootstrap would find.
    env["BUZZ_PYTHON"] = str(Path(sys.base_prefix) / "bin" / "python3")
    first = subprocess.run(
        ["bin/bootstrap", "run"], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stderr.splitlines()
    assert "Traceback" not in first.stderr and "BackendUnavailable" not in first.stderr, lines
    assert [line.split(" with ")[0] for line in lines] == [
        "bootstrap: creating .venv", "bootstrap: installing requirements.txt",
    ], lines
    assert first.stdout == ""
    assert (checkout / ".venv" / "bin" / "buzz-admin").exists()
    # Nothing changed: the second run installs nothing and says nothing.
    second = subprocess.run(
        ["bin/bootstrap", "run"], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=120,
    )
    assert second.returncode == 0 and second.stderr == "" and second.stdout == ""
