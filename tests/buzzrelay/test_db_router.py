"""The database router keeps models and migrations on the primary; a standby is never migrated
and never chosen implicitly (reads that may lag name it: artifacts.selectors.standby)."""

from __future__ import annotations

from artifacts.models import Community
from buzzrelay.db_router import PrimaryRouter


def test_only_the_primary_is_migrated_and_models_stay_on_it() -> None:
    router = PrimaryRouter()
    assert router.allow_migrate("default", "artifacts") is True
    assert router.allow_migrate("replica", "artifacts") is False
    assert router.db_for_read(Community) is None  # Django's default: the primary
    assert router.db_for_write(Community) is None
