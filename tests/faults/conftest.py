"""One deployment (tests/faults/deployment.py) for the fault modules: each test starts the relays
it needs and makes its own channels, so they share the servers' start-up cost (CI time)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.deployment import Deployment, deployment


@pytest.fixture(scope="session")
def dep() -> Iterator[Deployment]:
    with deployment("faults") as created:
        created.create_community()
        yield created
