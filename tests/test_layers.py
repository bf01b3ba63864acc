"""Imports run down only (docs/architecture.md): three floors, and within the apps entry points ->
services/selectors -> models.

1. the ground: `relaycore/` (configuration, addressing, Redis, the database threads, metrics,
   the DRF edge's base classes), importing no app; beside it `nostr/` and the client,
   `buzzclient/`, pure: the standard library and the client's own dependencies, nothing of the
   web stack;
2. the apps, `artifacts` and `relayinfo`, each in three layers (models, services/selectors,
   entry points); `artifacts` never imports `relayinfo`;
3. the project, `buzzrelay/` (settings, URLs, ASGI, `buzz-admin`), on the apps.

Every module has its layer by name in `LAYERS`: a module the table does not name fails
(`test_every_module_has_a_layer_by_name`), so a new module is placed on purpose, never by
default. Entry points are checked between themselves too: each belongs to one surface (the HTTP
API, the WebSocket, the staff admin, ...) and imports no other surface's entry points.

Read from the source with `ast`, every import counts: module-level, inside functions (a
function-level import does not make an upward dependency acceptable, it only hides it) and
type-only ones.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nostr", "buzzclient", "relaycore", "artifacts", "relayinfo", "buzzrelay")
APPS = ("artifacts", "relayinfo")
PURE_PACKAGES = ("nostr", "buzzclient")

PURE, GROUND, MODELS, LOGIC, ENTRY, PROJECT = range(6)
LAYER_NAMES = {
    PURE: "pure Nostr and client", GROUND: "the ground floor (relaycore)", MODELS: "app models",
    LOGIC: "app services/selectors", ENTRY: "app entry points", PROJECT: "the project (buzzrelay)",
}

# Module (or package: then every module in it) -> layer. The apps are listed module by module
# (packages only where a whole package shares a layer), so no module of theirs lands anywhere by
# default; the other packages are one floor each by definition.
LAYERS: dict[str, int] = {
    "nostr": PURE,
    "buzzclient": PURE,
    "relaycore": GROUND,
    "buzzrelay": PROJECT,
    # artifacts
    "artifacts.models": MODELS,
    "artifacts.schema": MODELS,  # the tables' indexes and checks, as the migrations build them
    "artifacts.tokens": MODELS,  # the progress token's format
    "artifacts.signals": MODELS,
    "artifacts.migrations": MODELS,
    "artifacts.services": LOGIC,
    "artifacts.selectors": LOGIC,
    # The WebSocket's machinery below its consumer: fan-out, filters, frames, the outbox.
    "artifacts.ws": LOGIC,
    "artifacts.ws.filters": LOGIC,
    "artifacts.ws.hints": LOGIC,
    "artifacts.ws.hub": LOGIC,
    "artifacts.ws.messages": LOGIC,
    "artifacts.ws.outbox": LOGIC,
    "artifacts.ws.publish": LOGIC,
    "artifacts.ws.scope": LOGIC,
    "artifacts.ws.sequence": LOGIC,
    "artifacts.ws.shutdown": LOGIC,
    "artifacts.ws.consumer": ENTRY,
    "artifacts.ws.routing": ENTRY,
    "artifacts.api": ENTRY,
    "artifacts.urls": ENTRY,
    "artifacts.admin": ENTRY,
    "artifacts.admin_artifacts": ENTRY,
    "artifacts.admin_browse": ENTRY,
    "artifacts.admin_paging": ENTRY,
    "artifacts": ENTRY,  # the package's __init__
    "artifacts.apps": ENTRY,
    # relayinfo
    "relayinfo.models": MODELS,
    "relayinfo.migrations": MODELS,
    "relayinfo.readiness": LOGIC,
    "relayinfo.fleet": LOGIC,
    "relayinfo.nip11": LOGIC,
    "relayinfo.exposition": LOGIC,
    "relayinfo.staff": LOGIC,
    "relayinfo.admin_plots": LOGIC,
    "relayinfo.views": ENTRY,
    "relayinfo.urls": ENTRY,
    "relayinfo.checks": ENTRY,
    "relayinfo.admin": ENTRY,
    "relayinfo.admin_apps": ENTRY,
    "relayinfo.admin_login": ENTRY,
    "relayinfo.admin_site": ENTRY,
    "relayinfo.nostr_login": ENTRY,
    "relayinfo": ENTRY,
    "relayinfo.apps": ENTRY,
}

# Each app entry point's surface: an entry point imports only its own surface's entry points
# (and an app's AppConfig, which wires receivers and checks, its own app's).
SURFACES: dict[str, str] = {
    "artifacts.api": "artifacts http",
    "artifacts.urls": "artifacts http",
    "artifacts.ws.consumer": "artifacts websocket",
    "artifacts.ws.routing": "artifacts websocket",
    "artifacts.admin": "artifacts admin",
    "artifacts.admin_artifacts": "artifacts admin",
    "artifacts.admin_browse": "artifacts admin",
    "artifacts.admin_paging": "artifacts admin",
    "artifacts": "artifacts package",
    "artifacts.apps": "artifacts wiring",
    "relayinfo.views": "relayinfo http",
    "relayinfo.urls": "relayinfo http",
    "relayinfo.checks": "relayinfo checks",
    "relayinfo.admin": "relayinfo admin",
    "relayinfo.admin_apps": "relayinfo admin",
    "relayinfo.admin_login": "relayinfo admin",
    "relayinfo.admin_site": "relayinfo admin",
    "relayinfo.nostr_login": "relayinfo admin",
    "relayinfo": "relayinfo package",
    "relayinfo.apps": "relayinfo wiring",
}


def _client_dependencies() -> set[str]:
    """The import names of the client distribution's dependencies (client/pyproject.toml)."""
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    names = set()
    for requirement in project["dependencies"]:
        name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        names.add(name.lower().replace("-", "_"))
    return names


# What the pure packages may import besides the standard library and each other.
PURE_MAY_IMPORT = _client_dependencies()
# The web stack the relay runs on, named for a clear message (the allow-list above is the rule).
WEB_PACKAGES = (
    "django", "rest_framework", "channels", "channels_redis", "drf_spectacular",
    "drf_spectacular_sidecar", "asgiref", "daphne", "uvicorn", "starlette", "whitenoise",
    "django_redis", "redis", "psycopg", "psycopg_pool", "prometheus_client", "axes", "django_otp",
)


def _covering(module: str) -> str | None:
    """The longest key of LAYERS naming `module` or a package holding it."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            # The apps' top-level keys name their __init__ only, never their modules.
            if prefix in APPS and module != prefix:
                return None
            return prefix
    return None


def layer(module: str) -> int:
    key = _covering(module)
    if key is None:
        raise KeyError(f"{module} has no layer in tests/test_layers.py LAYERS")
    return LAYERS[key]


def surface(module: str) -> str | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in SURFACES and (prefix not in APPS or module == prefix):
            return SURFACES[prefix]
    return None


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            yield name.removesuffix(".__init__"), path


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every absolute import (a relative one would name the
    project's own modules too: none is used, and `ast` gives no module for it to check)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` names that module (and the package only for what
            # else it imports from it).
            folder = ROOT / node.module.replace(".", "/")
            submodules = [f"{node.module}.{alias.name}" for alias in node.names
                          if (folder / f"{alias.name}.py").exists()
                          or (folder / alias.name / "__init__.py").exists()]
            names = submodules if len(submodules) == len(node.names) else [
                node.module, *submodules]
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, "." * node.level + (node.module or "")
            continue
        else:
            continue
        for name in names:
            yield node.lineno, name


def check(module: str, target: str) -> str | None:
    """Why `module` may not import `target`, or None when it may."""
    top, target_top = module.split(".")[0], target.split(".")[0]
    if target.startswith("."):
        return "relative import: name the module"
    if top in PURE_PACKAGES:
        if target_top in WEB_PACKAGES:
            return f"{top}/ stays free of the web stack ({target_top})"
        if target_top in PACKAGES and target_top not in PURE_PACKAGES:
            return f"{top}/ stays free of the relay"
        if top == "nostr" and target_top == "buzzclient":
            return "nostr/ sits below the client"
        if target_top not in (*PURE_PACKAGES, *PURE_MAY_IMPORT, "__future__") and (
            target_top not in sys.stdlib_module_names
        ):
            return (f"{top}/ imports only the standard library and the client's dependencies "
                    f"({', '.join(sorted(PURE_MAY_IMPORT))})")
        return None
    if target_top not in PACKAGES:
        return None  # the ground, the apps and the project may use the web stack
    here, there = layer(module), layer(target)
    if there > here:
        return f"{LAYER_NAMES[here]} must not import {LAYER_NAMES[there]}"
    if top == "artifacts" and target_top == "relayinfo":
        return "artifacts never imports relayinfo (both apps stand on the ground floor)"
    if module.startswith("artifacts.selectors") and target.startswith("artifacts.services"):
        return "selectors must not import services (reads never write)"
    if here == ENTRY and there == ENTRY:
        mine, theirs = surface(module), surface(target)
        wiring_own_app = mine is not None and mine.endswith(" wiring") and top == target_top
        if mine != theirs and not wiring_own_app:
            return f"an entry point ({mine}) must not import another's ({theirs})"
    return None


def violations() -> list[str]:
    found = []
    for module, path in modules():
        for line, target in imports(path):
            why = check(module, target)
            if why is not None:
                found.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target} ({why})")
    return found


def test_every_module_has_a_layer_by_name() -> None:
    unplaced = [module for module, _path in modules() if _covering(module) is None]
    assert unplaced == [], "add these to LAYERS in tests/test_layers.py"
    entry_without_surface = [
        module for module, _path in modules()
        if module.split(".")[0] in APPS and layer(module) == ENTRY and surface(module) is None
    ]
    assert entry_without_surface == [], "add these to SURFACES in tests/test_layers.py"


def test_the_table_names_only_modules_that_exist() -> None:
    names = {module for module, _path in modules()}
    stale = [key for key in (*LAYERS, *SURFACES)
             if not any(name == key or name.startswith(key + ".") for name in names)]
    assert stale == []


def test_imports_run_down_only() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("nostr.events", PURE),
        ("buzzclient.sync", PURE),
        ("relaycore.edge.views", GROUND),
        ("relaycore.dbthreads", GROUND),
        ("artifacts.models", MODELS),
        ("artifacts.migrations.0001_initial", MODELS),
        ("relayinfo.readiness.verdict", LOGIC),
        ("artifacts.selectors.rounds", LOGIC),
        ("artifacts.ws.consumer", ENTRY),
        ("artifacts.api.views", ENTRY),
        ("relayinfo.views", ENTRY),
        ("buzzrelay.settings", PROJECT),
        ("buzzrelay.asgi", PROJECT),
    ],
)
def test_layers_are_assigned_as_documented(module: str, expected: int) -> None:
    assert layer(module) == expected


@pytest.mark.parametrize(
    ("module", "target"),
    [
        # The back-arrows issue 35 removed: each is refused again if it comes back.
        ("artifacts.services.communities", "buzzrelay.settings"),
        ("artifacts.api.views", "relayinfo.readiness"),
        ("artifacts.ws.hub", "relayinfo.models"),
        ("relayinfo.views", "buzzrelay.urls"),
        ("relaycore.edge.views", "artifacts.models"),
        ("relaycore.metrics", "relayinfo.readiness"),
        # Within an app: up a layer, across surfaces, reads into writes.
        ("artifacts.services.channels", "artifacts.api.views"),
        ("artifacts.api.views", "artifacts.ws.consumer"),
        ("relayinfo.views", "artifacts.admin"),
        ("artifacts.selectors.rounds", "artifacts.services.ingest"),
        # The pure packages and the web stack, whichever part of it.
        ("nostr.events", "rest_framework.request"),
        ("nostr.nip98", "channels.layers"),
        ("buzzclient.sync", "django.conf"),
        ("buzzclient.sync", "drf_spectacular.utils"),
        ("nostr.events", "buzzclient.store"),
        ("nostr.events", "relaycore.config"),
    ],
)
def test_a_back_arrow_is_refused(module: str, target: str) -> None:
    assert check(module, target) is not None


def test_an_unlisted_module_has_no_layer() -> None:
    with pytest.raises(KeyError):
        layer("artifacts.new_module")


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from buzzrelay.middleware import x\n")
    assert list(imports(source)) == [(2, "buzzrelay.middleware")]
