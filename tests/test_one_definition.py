"""One definition of each rule (issues 15 and 35, docs/architecture.md): what used to be written
several times stays written once.

Read from the source with `ast` (comments and docstrings do not count): the event kinds are named
only by `nostr/kinds.py`, the tag helpers and the Redis-down exception are defined once, no
relay or client module handles an event as a raw dict where `nostr.events.Event` is the type, and
no module-level name (function, async function, class, assignment, type alias) is defined twice
within one distribution, under the same name or a near one (`_first_tags` beside `first_tag`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from nostr import kinds

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nostr", "buzzclient", "relaycore", "artifacts", "relayinfo", "buzzrelay")
# The two distributions (pyproject.toml, client/pyproject.toml): `nostr` is in the client's and
# the relay depends on it. A name is one definition within a distribution; the client cannot
# import the relay, so the same name on both sides of that line is two things.
CLIENT = ("nostr", "buzzclient")
RELAY = ("nostr", "relaycore", "artifacts", "relayinfo", "buzzrelay")
# Names a framework or the project's own command protocol asks every module of a kind to define.
INTERFACE_NAMES = {
    "__all__": "Python's export list",
    "logger": "each module's own logger (logging.getLogger(__name__))",
    "urlpatterns": "Django's URL modules",
    "Command": "Django's management commands (buzzrelay/management/commands)",
    "HELP": "a buzz-admin subcommand's help line (buzzrelay/admin_commands)",
    "SETUP_DJANGO": "whether a buzz-admin subcommand needs Django set up",
    "add_arguments": "a buzz-admin subcommand's arguments",
    "run": "a buzz-admin subcommand's body",
    "main": "a console script's entry (pyproject's [project.scripts])",
}
# Two things that share a name on purpose, each with the reason.
TWO_THINGS = {
    "Event": "nostr's event, and the model of the table that stores events (its migrations "
             "name it)",
    "sign": "nostr.schnorr.sign signs 32 bytes (BIP-340); nostr.events.sign builds an event and "
            "signs its id with it",
}
KIND_VALUES = {
    value for name, value in vars(kinds).items() if name.startswith("KIND_") and value >= 1000
}


def sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            relative = str(path.relative_to(ROOT))
            yield relative, ast.parse(path.read_text(), relative)


def test_every_kind_is_named_by_its_constant_only() -> None:
    found = [
        f"{path}:{node.lineno}: {node.value}"
        for path, tree in sources()
        if path != "nostr/kinds.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and type(node.value) is int
        and node.value in KIND_VALUES
    ]
    assert not found, "kind literals outside nostr/kinds.py:\n" + "\n".join(found)


def _defined_names(node: ast.AST) -> list[str]:
    """The names a statement defines: a function, async function or class, an assignment's
    targets, a type alias."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.TypeAlias):
        return [node.name.id]
    return []


def _definitions(name: str) -> list[str]:
    """Every definition of `name`: a function, async function or class at any depth (a method
    or a nested function counts), a module-level assignment (a local variable does not)."""
    return [
        f"{path}:{node.lineno}"
        for path, tree in sources()
        for node in ast.walk(tree)
        if name in _defined_names(node)
        and (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
             or node in tree.body)
    ]


def near(name: str) -> str:
    """What two names that mean the same thing share: without the leading underscores of a
    module-private name and a plural's `s` (`_first_tags` ~ `first_tag`)."""
    bare = name.lstrip("_")
    return bare[:-1] if bare.endswith("s") and len(bare) > 2 else bare


def delegates(node: ast.AST, name: str) -> bool:
    """Whether `node` is a function whose body only returns a call of another module's function
    of the same name: an adapter of the one rule to another caller's types (relaycore.http's
    `client_address(request)` -> `addressing.client_address(address)`), not a second rule."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    body = [statement for statement in node.body
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    call = body[0].value
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == name)


def module_level_definitions() -> dict[str, list[tuple[str, str]]]:
    """near name -> [(path:line, name)] of every module-level definition (adapters left out)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path, tree in sources():
        for node in tree.body:
            for name in _defined_names(node):
                if not delegates(node, name):
                    found.setdefault(near(name), []).append((f"{path}:{node.lineno}", name))
    return found


def twice_in_one_distribution(places: list[tuple[str, str]]) -> bool:
    """Whether two of `places` are in one distribution and not both module-private."""
    for index, (here, name) in enumerate(places):
        for there, other in places[index + 1:]:
            if name.startswith("_") and other.startswith("_"):
                continue  # each module's own helper, invisible to the other
            tops = {here.split("/")[0], there.split("/")[0]}
            if tops <= set(CLIENT) or tops <= set(RELAY):
                return True
    return False


def duplicates() -> list[str]:
    return [
        ", ".join(f"{place} {name}" for place, name in places)
        for _key, places in sorted(module_level_definitions().items())
        if twice_in_one_distribution([
            (place, name) for place, name in places
            if name.lstrip("_") not in INTERFACE_NAMES and name not in TWO_THINGS
        ])
    ]


def test_no_module_level_name_is_defined_twice() -> None:
    found = duplicates()
    assert not found, "defined twice (same or near name):\n" + "\n".join(found)


def test_near_names_and_async_definitions_are_seen(tmp_path: Path) -> None:
    assert near("_first_tags") == near("first_tag") == "first_tag"
    tree = ast.parse("async def fetch(): ...\nLIMIT: int = 3\nrows = []\ntype Rows = list[int]\n")
    assert [name for node in tree.body for name in _defined_names(node)] == [
        "fetch", "LIMIT", "rows", "Rows"]
    assert twice_in_one_distribution([("buzzclient/page.py:70", "_first_tags"),
                                      ("nostr/events.py:314", "first_tag")])
    # The client and the relay are two distributions: the same name on each side is two things.
    assert not twice_in_one_distribution([("buzzclient/page.py:55", "Page"),
                                          ("artifacts/selectors/rounds.py:107", "Page")])
    adapter = ast.parse("def client_address(request):\n    return addressing.client_address(x)\n")
    assert delegates(adapter.body[0], "client_address")
    # Two modules' private helpers of one name are each module's own.
    assert not twice_in_one_distribution([("relaycore/metrics.py:1", "_lock"),
                                          ("relayinfo/fleet.py:1", "_lock")])


def test_the_tag_helpers_and_redis_unavailable_are_defined_once() -> None:
    for name in ("single_tag", "single_tag_value", "first_tag", "tag_values", "has_tag"):
        assert _definitions(name) == [_definitions(name)[0]], name
        assert _definitions(name)[0].startswith("nostr/events.py:"), name
    assert len(_definitions("RedisUnavailable")) == 1


def test_events_are_typed_where_they_travel() -> None:
    """No parameter called `event` is a dict in the modules an event travels through (the
    WebSocket's message parser holds the unchecked JSON object, which is not yet an event)."""
    found = []
    for path, tree in sources():
        if path == "nostr/events.py" or path == "artifacts/ws/messages.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for arg in [*node.args.args, *node.args.kwonlyargs]:
                    if arg.arg == "event" and arg.annotation is not None and ast.unparse(
                        arg.annotation
                    ).startswith("dict"):
                        found.append(f"{path}:{node.lineno}: {node.name}")
    assert not found, "events passed as dicts:\n" + "\n".join(found)
