"""Dependencies flow one way (DESIGN.md, shape of the code): entry points -> services/selectors
-> models, and `nostr/` (and the client, `buzzclient/`) import nothing of Django.

Read from the source with `ast`, every import counts: module-level, inside functions (a
function-level import does not make an upward dependency acceptable, it only hides it) and
type-only ones.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nostr", "buzzclient", "artifacts", "relayinfo", "buzzrelay")
PROJECT = (*PACKAGES, "django")

PURE, MODELS, LOGIC, ENTRY = 0, 1, 2, 3
LAYER_NAMES = {PURE: "pure Nostr", MODELS: "models", LOGIC: "services/selectors",
               ENTRY: "entry points"}

# Below the services: tables, shared database helpers, token format, signals, configuration.
MODEL_MODULES = (
    "artifacts.models", "artifacts.db", "artifacts.schema", "artifacts.tokens",
    "artifacts.signals", "relayinfo.models", "buzzrelay.config", "buzzrelay.settings",
    "buzzrelay.redis_topology",  # which Redis each client reaches: settings-level
)
# Writes and reads, and what relayinfo computes from them for every surface.
LOGIC_MODULES = (
    "artifacts.services", "artifacts.selectors", "relayinfo.readiness",
    "relayinfo.metrics", "relayinfo.fleet",
)


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> int:
    top = module.split(".")[0]
    if top == "nostr":
        return PURE
    if module in ("buzzrelay",) or _within(module, MODEL_MODULES) or ".migrations" in module:
        return MODELS
    if _within(module, LOGIC_MODULES):
        return LOGIC
    return ENTRY  # HTTP views, the WebSocket, admin, system checks, buzz-admin, ASGI, urls


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            yield name.removesuffix(".__init__"), path


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import of a project package or of Django."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            # `from package import module` names a module too.
            names += [f"{node.module}.{alias.name}" for alias in node.names
                      if (ROOT / node.module.replace(".", "/") / f"{alias.name}.py").exists()]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PROJECT:
                yield node.lineno, name


def violations() -> list[str]:
    found = []
    for module, path in modules():
        here = layer(module)
        for line, target in imports(path):
            where = f"{path.relative_to(ROOT)}:{line}: {module} imports {target}"
            top = target.split(".")[0]
            if module.split(".")[0] in ("nostr", "buzzclient"):
                if top not in ("nostr", "buzzclient") or (
                    module.startswith("nostr") and top == "buzzclient"
                ):
                    found.append(f"{where} (nostr/ and buzzclient/ stay free of the relay and "
                                 f"of Django)")
                continue
            if top == "django" or top == "buzzclient":
                continue
            there = layer(target)
            if there > here:
                found.append(f"{where} ({LAYER_NAMES[here]} must not import "
                             f"{LAYER_NAMES[there]})")
            elif here == LOGIC and there == LOGIC:
                # relayinfo reads what artifacts' writers and reads maintain (readiness,
                # metrics); the other way round would loop between the apps.
                if module.startswith("artifacts.") and target.startswith("relayinfo."):
                    found.append(f"{where} (artifacts' services and selectors sit below "
                                 f"relayinfo's)")
                # Reads never write.
                if module.startswith("artifacts.selectors") and target.startswith(
                    "artifacts.services"
                ):
                    found.append(f"{where} (selectors must not import services)")
    return found


def test_dependencies_flow_from_entry_points_to_services_to_models() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("nostr.events", PURE),
        ("artifacts.models", MODELS),
        ("artifacts.migrations.0001_initial", MODELS),
        ("relayinfo.readiness.verdict", LOGIC),
        ("artifacts.selectors.rounds", LOGIC),
        ("artifacts.ws.consumer", ENTRY),
        ("artifacts.api.views", ENTRY),
        ("buzzrelay.middleware", ENTRY),
        ("relayinfo.views", ENTRY),
    ],
)
def test_layers_are_assigned_as_documented(module: str, expected: int) -> None:
    assert layer(module) == expected


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from buzzrelay.middleware import x\n")
    assert list(imports(source)) == [(2, "buzzrelay.middleware")]
