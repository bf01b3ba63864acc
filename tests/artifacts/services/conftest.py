from __future__ import annotations

import pytest

from artifacts.models import Community
from tests.factories import Key, make_community, make_key


@pytest.fixture
def community(db: None) -> Community:
    return make_community()


@pytest.fixture
def alice() -> Key:
    return make_key()


@pytest.fixture
def bob() -> Key:
    return make_key()


@pytest.fixture
def carol() -> Key:
    return make_key()
