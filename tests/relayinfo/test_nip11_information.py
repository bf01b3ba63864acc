"""NIP-11 relay information per community: its own fields, else the deployment's defaults from
the environment (RELAY_INFO_*), else left out; `limitation.max_content_length` announced and
enforced on every write."""

from __future__ import annotations

import uuid

import pytest

from artifacts.models import Community
from artifacts.services.communities import community_update_policy
from artifacts.services.errors import Invalid
from relaycore.config import ConfigError, RelayInfoDefaults, read_config
from tests.factories import artifact_op, make_channel, make_key
from tests.relayinfo.conftest import nip11, transactional

pytestmark = transactional

OWN = {
    "description": "Where the team keeps its tasks.",
    "contact": "mailto:ops@team.example",
    "icon": "https://team.example/icon.png",
    "banner": "https://team.example/banner.png",
    "terms_of_service": "https://team.example/terms",
    "privacy_policy": "https://team.example/privacy",
    "posting_policy": "https://team.example/posting",
}


def test_a_communitys_own_information_is_its_document(community: Community) -> None:
    changed = community_update_policy(
        community_id=community.pk, info={**OWN, "max_content_length": 280}
    )
    assert sorted(changed) == sorted([*OWN, "max_content_length"])
    document = nip11().json()
    assert {key: document[key] for key in OWN} == OWN
    assert document["name"] == "Team"
    assert document["limitation"]["max_content_length"] == 280
    community.refresh_from_db()
    # Information is no policy: nothing is stamped, no reader resets.
    assert community.listing_version == 0


def test_blank_fields_take_the_deployments_defaults_and_the_rest_is_left_out(
    community: Community, settings: object
) -> None:
    settings.RELAY_INFO_DEFAULTS = RelayInfoDefaults(  # type: ignore[attr-defined]
        description="A Buzz relay.", contact="ops@relay.example",
        privacy_policy="https://relay.example/privacy", max_content_length=5000,
    )
    document = nip11().json()
    assert document["description"] == "A Buzz relay."
    assert document["contact"] == "ops@relay.example"
    assert document["privacy_policy"] == "https://relay.example/privacy"
    assert document["limitation"]["max_content_length"] == 5000
    for absent in ("icon", "banner", "terms_of_service", "posting_policy"):
        assert absent not in document
    # The community's own value wins; clearing it returns to the default.
    community_update_policy(community_id=community.pk,
                            info={"contact": "mailto:team@team.example", "max_content_length": 9})
    assert nip11().json()["contact"] == "mailto:team@team.example"
    assert nip11().json()["limitation"]["max_content_length"] == 9
    community_update_policy(community_id=community.pk,
                            info={"contact": "", "max_content_length": None})
    assert nip11().json()["contact"] == "ops@relay.example"
    assert nip11().json()["limitation"]["max_content_length"] == 5000


def test_without_a_limit_none_is_announced(community: Community) -> None:
    assert "max_content_length" not in nip11().json()["limitation"]
    assert community.content_limit() is None


def test_the_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_INFO_NAME", "Acme relay")
    monkeypatch.setenv("RELAY_INFO_CONTACT", "mailto:ops@acme.example")
    monkeypatch.setenv("RELAY_INFO_TERMS_OF_SERVICE", "https://acme.example/terms")
    monkeypatch.setenv("RELAY_INFO_MAX_CONTENT_LENGTH", "10000")
    info = read_config().relay_info
    assert (info.name, info.contact, info.terms_of_service, info.max_content_length) == (
        "Acme relay", "mailto:ops@acme.example", "https://acme.example/terms", 10000
    )
    assert info.description == RelayInfoDefaults().description and info.icon is None


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("RELAY_INFO_ICON", "ftp://acme.example/i.png", "RELAY_INFO_ICON must be an http"),
        ("RELAY_INFO_PRIVACY_POLICY", "privacy", "RELAY_INFO_PRIVACY_POLICY must be an http"),
        ("RELAY_INFO_MAX_CONTENT_LENGTH", "0", "RELAY_INFO_MAX_CONTENT_LENGTH must be at least 1"),
        ("RELAY_INFO_CONTACT", "x" * 501, "RELAY_INFO_CONTACT must be at most 500 characters"),
    ],
)
def test_a_bad_default_is_one_configuration_error(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=message):
        read_config()


@pytest.mark.parametrize(
    "info",
    [{"icon": "not a url"}, {"banner": "javascript:alert(1)"}, {"max_content_length": 0},
     {"max_content_length": -5}, {"name": "not information"}],
)
def test_bad_information_is_refused_by_the_service(community: Community, info: dict) -> None:
    with pytest.raises(Invalid):
        community_update_policy(community_id=community.pk, info=info)


def test_max_content_length_is_enforced_on_every_write(community: Community) -> None:
    owner = make_key()
    h = make_channel(community, owner=owner)
    community_update_policy(community_id=community.pk, info={"max_content_length": 40})
    community.refresh_from_db()
    fits = artifact_op(community, owner, op="create", d=str(uuid.uuid4()), h=h,
                       content="x" * 40)
    assert fits.accepted
    refused = artifact_op(community, owner, op="create", d=str(uuid.uuid4()), h=h,
                          content="é" * 41, expect=False)
    assert refused.message == (
        "invalid: content is longer than this community's 40 characters (41)"
    )
