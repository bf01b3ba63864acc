"""The client as a reader driver for other tests: `sync_once` over `httpx.WSGITransport`
reaches the relay's Django application in this process (no server), one SQLite file holding
every reader's collection. This is how the incremental-reads model test can use it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from django.core.wsgi import get_wsgi_application

from buzzclient import CollectionStore, Unauthorized, sync_once
from tests.factories import (
    Key,
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    update_artifact,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_sync_once_drives_an_in_process_relay(tmp_path: Path) -> None:
    community = make_community(host="127.0.0.1")
    alice, bob, carol = make_key(), make_key(), make_key()
    open_h = make_channel(community, owner=alice)
    private_h = make_channel(community, owner=alice, visibility="private", members=[bob])
    d1, head1 = create_artifact(community, alice, open_h)
    d2, head2 = create_artifact(community, alice, private_h)
    http = httpx.Client(transport=httpx.WSGITransport(app=get_wsgi_application()))
    with CollectionStore(tmp_path / "readers.sqlite") as store:

        def read(who: Key) -> dict[str, str]:
            _summary, collection = sync_once(
                relay_url="http://127.0.0.1", secret_hex=who.secret, db=store, page_limit=1,
                http_client=http,
            )
            return {d: event.id for d, event in collection.items()}

        assert read(bob) == {d1: head1, d2: head2}
        assert read(carol) == {d1: head1}
        head1b = update_artifact(community, alice, d1, open_h, prev=head1, title="new")
        add_member(community, private_h, carol)
        # Read-your-writes: a round started after the writes includes them.
        assert read(bob) == read(carol) == {d1: head1b, d2: head2}


def test_a_401_from_the_relay_is_one_clear_error(tmp_path: Path, settings: object) -> None:
    # The relay is told it is public at another address: the NIP-98 `u` tag the client signs
    # (the URL it actually uses) no longer matches, and the relay answers 401.
    settings.RELAY_PUBLIC_URL = "https://relay.example"  # type: ignore[attr-defined]
    make_community(host="relay.example")
    http = httpx.Client(transport=httpx.WSGITransport(app=get_wsgi_application()))
    with pytest.raises(Unauthorized) as refused:
        sync_once(relay_url="http://127.0.0.1", secret_hex=make_key().secret,
                  db=tmp_path / "c.sqlite", http_client=http)
    assert str(refused.value) == (
        "relay http://127.0.0.1 refused our key (401): auth event u tag does not match the"
        " request URL"
    )
