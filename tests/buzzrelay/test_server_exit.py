"""`buzz-admin serve` stops cleanly: nothing printed as an error by any of its processes on the
way out (the workers' metrics clean-up included, which runs after serve has removed its
temporary metrics directory)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.relay_server import start_relay


@pytest.mark.django_db(transaction=True)
def test_a_stopped_server_leaves_no_traceback(django_db_blocker: Any) -> None:
    relay = start_relay(workers=2)
    assert relay.stop() == 0
    log = relay.log()
    for words in ("Traceback", "Exception ignored", "Error"):
        assert words not in log, log
