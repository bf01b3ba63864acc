"""`buzz-admin community`: creates or updates a community through the stamping services."""

from __future__ import annotations

import pytest

from artifacts.models import Community
from buzzrelay.cli import main
from tests.factories import make_key


def test_creates_then_updates_and_stamps_only_policy_changes(
    db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = make_key()
    assert main(["community", "--host", "Team.Example", "--admin", admin.pubkey,
                 "--artifact-types", "buzz.task,buzz.note"]) == 0
    out = capsys.readouterr().out
    assert "community team.example: created" in out and admin.pubkey in out
    community = Community.objects.get(host="team.example")
    assert community.admin_pubkeys == [admin.pubkey]
    assert community.artifact_types == ["buzz.note", "buzz.task"]
    stamp, version = community.artifact_policy_modified_at, community.listing_version

    assert main(["community", "--host", "team.example", "--name", "Team"]) == 0
    assert "updated: name" in capsys.readouterr().out
    community.refresh_from_db()
    assert (community.artifact_policy_modified_at, community.listing_version) == (stamp, version)

    assert main(["community", "--host", "team.example", "--artifacts", "off",
                 "--open-channel-creation", "on", "--artifact-types", "all", "--admin"]) == 0
    out = capsys.readouterr().out
    assert "updated: admin_pubkeys, artifacts_enabled, artifact_types, open_channel_creation" in out
    community.refresh_from_db()
    assert community.listing_version == version + 1
    assert community.artifact_policy_modified_at > stamp
    assert (community.admin_pubkeys, community.artifacts_enabled, community.artifact_types,
            community.open_channel_creation) == ([], False, None, True)

    assert main(["community", "--host", "team.example", "--artifacts", "off"]) == 0
    assert "unchanged" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["community", "--host", "bad host"],
        ["community", "--host", "ok.example", "--admin", "not-a-pubkey"],
        ["community", "--host", "ok.example", "--artifact-types", "Buzz.Task"],
    ],
)
def test_bad_values_exit_non_zero_with_one_line(
    db: None, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("buzz-admin: ") and err.count("\n") == 1
    assert not Community.objects.exists()
