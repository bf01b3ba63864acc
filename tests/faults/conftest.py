"""Each fault module gets a deployment of its own (tests/faults/deployment.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.deployment import Deployment, deployment


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with deployment(tmp_path_factory.mktemp("deployment")) as created:
        created.create_community()
        yield created
