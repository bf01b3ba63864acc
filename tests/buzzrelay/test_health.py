from __future__ import annotations

import pytest
from django.test import Client

from artifacts.models import Community


@pytest.mark.django_db
def test_healthz_answers_without_a_community() -> None:
    response = Client().get("/healthz", HTTP_HOST="nowhere.example")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_ready_once_migrated() -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "ready"


@pytest.mark.django_db
def test_unknown_host_is_a_json_404_with_cors() -> None:
    response = Client().get("/info", HTTP_HOST="unknown.example:8080")
    assert response.status_code == 404
    assert response.json()["error"] == "unknown_community"
    assert response["Access-Control-Allow-Origin"] == "*"


@pytest.mark.django_db(transaction=True)
def test_known_host_is_resolved_case_insensitively_without_port() -> None:
    Community.objects.create(host="team.example", name="Team")
    response = Client().get("/info", HTTP_HOST="TEAM.example:8443")
    assert response.status_code == 200


def test_preflight_needs_no_authentication() -> None:
    response = Client().options("/query", HTTP_HOST="anything.example")
    assert response.status_code == 204
    assert "Authorization" in response["Access-Control-Allow-Headers"]


@pytest.mark.django_db
def test_oversized_body_is_413_before_the_community_is_looked_up() -> None:
    response = Client().post(
        "/event", data=b"x" * (64 * 1024 + 1), content_type="application/json",
        HTTP_HOST="unknown.example",
    )
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
