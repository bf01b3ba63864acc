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


def test_add_admin_keeps_the_list_and_concurrent_lists_merge(
    db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, third = make_key(), make_key(), make_key()
    assert main(["community", "--host", "team.example", "--add-admin", first.pubkey]) == 0
    assert Community.objects.get(host="team.example").admin_pubkeys == [first.pubkey]
    stamp = Community.objects.get(host="team.example").listing_version
    assert main(["community", "--host", "team.example", "--add-admin", second.pubkey,
                 "--add-admin", third.pubkey]) == 0
    assert "updated: admin_pubkeys" in capsys.readouterr().out
    community = Community.objects.get(host="team.example")
    assert community.admin_pubkeys == sorted([first.pubkey, second.pubkey, third.pubkey])
    assert community.listing_version == stamp + 1  # an admin change is a policy change
    # Adding one already there changes nothing; --admin then --add-admin: replace, then add.
    assert main(["community", "--host", "team.example", "--add-admin", first.pubkey]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert main(["community", "--host", "team.example", "--admin", first.pubkey,
                 "--add-admin", second.pubkey]) == 0
    assert Community.objects.get(host="team.example").admin_pubkeys == sorted(
        [first.pubkey, second.pubkey])


def test_relay_information_is_set_shown_and_returned_to_the_default(
    db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["community", "--host", "team.example", "--description", "Our tasks.",
                 "--contact", "mailto:ops@team.example", "--icon", "https://team.example/i.png",
                 "--terms-of-service", "https://team.example/terms",
                 "--max-content-length", "2000"]) == 0
    out = capsys.readouterr().out
    assert "Our tasks." in out and "https://team.example/terms" in out and "2000" in out
    community = Community.objects.get(host="team.example")
    assert (community.description, community.contact, community.icon,
            community.terms_of_service, community.max_content_length) == (
        "Our tasks.", "mailto:ops@team.example", "https://team.example/i.png",
        "https://team.example/terms", 2000)
    assert main(["community", "--host", "team.example", "--description", "",
                 "--max-content-length", "default"]) == 0
    out = capsys.readouterr().out
    assert "updated: description, max_content_length" in out
    assert "(default)" in out  # the description shown is the deployment's
    community.refresh_from_db()
    assert community.description == "" and community.max_content_length is None
    assert community.listing_version == 0  # information is not policy


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--icon", "icon.png"], "icon must be an http:// or https:// URL"),
        (["--max-content-length", "lots"], "--max-content-length must be a whole number"),
    ],
)
def test_bad_information_exits_2_with_one_line(
    db: None, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["community", "--host", "ok.example", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not Community.objects.exists()
