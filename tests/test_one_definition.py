"""One definition of each rule (issue 15): what used to be written several times stays written once.

Read from the source with `ast` (comments and docstrings do not count): the event kinds are named
only by `nostr/kinds.py`, the tag helpers and the Redis-down exception are defined once, and no
relay or client module handles an event as a raw dict where `nostr.events.Event` is the type.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from nostr import kinds

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nostr", "buzzclient", "relaycore", "artifacts", "relayinfo", "buzzrelay")
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


def _definitions(name: str) -> list[str]:
    return [
        f"{path}:{node.lineno}"
        for path, tree in sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name
    ]


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
