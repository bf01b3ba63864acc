"""The confidentiality sweep runs against a real relay (HTTP and WebSocket) of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.deployment import Deployment, Relay, deployment


@pytest.fixture(scope="module")
def dep() -> Iterator[Deployment]:
    with deployment("security") as created:
        yield created


@pytest.fixture(scope="module")
def relay(dep: Deployment) -> Relay:
    return dep.start_relay()
