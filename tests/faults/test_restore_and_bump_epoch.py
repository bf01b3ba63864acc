"""A restore from a base backup, then `buzz-admin bump-epoch`: every client resets and converges.

After a restore the database forgets writes the clients already applied; stamps cannot tell a
continuation round about them (the restored rows are older than the clients' watermarks), so the
operator bumps the sync epoch (PROTOCOL.md section 7): every token of the old epoch resets, and
each client's collection equals a fresh full read again.
"""

from __future__ import annotations

from tests.faults.clients import Client, Collection, d_of, fresh_full_read
from tests.faults.deployment import Deployment


def test_restore_then_bump_epoch_resets_every_client_and_they_converge(dep: Deployment) -> None:
    relay = dep.start_relay()
    alice = Client(relay.url)
    bob = Client(relay.url)
    channel = alice.create_channel(name="restore")
    private = alice.create_channel(private=True, name="restore-private")
    assert alice.put_member(private, bob.pubkey)[2] is True
    kept = [alice.artifact(channel, title=f"kept {i}") for i in range(3)]
    for event in kept:
        assert alice.publish(event)[2] is True
    collections = [
        Collection(alice),
        Collection(bob),
        Collection(bob, {"#h": [channel, private]}),
        Collection(alice, {"#type": ["buzz.task"]}),
    ]
    for collection in collections:
        collection.catch_up()

    backup = dep.base_backup("base")

    # Written after the backup: the restore loses these, though clients applied them.
    lost = alice.artifact(private, title="lost")
    assert alice.publish(lost)[2] is True
    gone = alice.artifact(channel, op="delete", d=d_of(kept[0]), prev=kept[0]["id"])
    assert alice.publish(gone)[2] is True
    for collection in collections:
        collection.catch_up()
        assert d_of(lost) in collection.items
        assert d_of(kept[0]) not in collection.items

    dep.restore(backup)
    output = dep.admin("bump-epoch")
    assert output.strip()

    for collection in collections:
        resets = collection.resets
        # The relay's pooled connections were broken by the restart: a page may answer 503
        # database_unavailable ("retry later") before the pool replaces them.
        collection.catch_up(retry_unavailable=True)
        assert collection.resets == resets + 1, "the first round after the bump must reset"
        assert collection.ids() == fresh_full_read(collection.client, collection.filter)
        assert d_of(lost) not in collection.items
        assert d_of(kept[0]) in collection.items  # alive again in the restored database
    # Writes after the restore flow normally again.
    after = alice.artifact(channel, title="after restore")
    assert alice.publish(after)[2] is True
    for collection in collections[:2]:
        collection.catch_up()
        assert d_of(after) in collection.items
        assert collection.ids() == fresh_full_read(collection.client, collection.filter)
