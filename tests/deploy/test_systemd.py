"""deploy/systemd: the unit starts what the docs say, with arguments `buzz-admin` accepts, and
stops the way the rolling restart needs; its environment file names only variables the relay
reads and the docs list. (systemd itself does not run here: no unit is started.)"""

from __future__ import annotations

import configparser
import re
import shlex

from buzzrelay.cli import build_parser, subcommands
from tests.relay_server import ROOT

UNIT = ROOT / "deploy" / "systemd" / "buzz-relay@.service"
ENVIRONMENT = ROOT / "deploy" / "systemd" / "relay.env.example"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_serves_the_instance_port_with_buzz_admin() -> None:
    service = _unit()["Service"]
    argv = shlex.split(service["ExecStart"].replace("%i", "8001"))
    assert argv[0] == "/opt/buzz/.venv/bin/buzz-admin"
    args = build_parser(subcommands()).parse_args(argv[1:])
    assert (args.command, args.host, args.port, args.workers) == ("serve", "127.0.0.1", 8001, 2)
    # The drain (WebSockets closed with 1001 within 2 s, uvicorn's 10 s graceful shutdown) fits
    # before systemd kills anything, and SIGTERM is what starts it.
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > 12
    assert service["Environment"].startswith("PROMETHEUS_MULTIPROC_DIR=/run/buzz-relay-%i/")
    assert service["RuntimeDirectory"] == "buzz-relay-%i"
    assert service["EnvironmentFile"] == "/etc/buzz/relay.env"


def test_the_environment_file_names_documented_variables_the_relay_reads() -> None:
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)`", (ROOT / "docs" / "operations.md")
                                .read_text(), re.MULTILINE))
    read = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', (ROOT / "relaycore" / "config.py")
                          .read_text()))
    names = [line.split("=", 1)[0] for line in ENVIRONMENT.read_text().splitlines()
             if line and not line.startswith("#")]
    assert names
    for name in names:
        # *_FILE twins are documented with their variable (`RELAY_SIGNING_KEY` / `..._FILE`).
        base = name.removesuffix("_FILE")
        assert base in documented, name
        assert base in read or name in read, name
