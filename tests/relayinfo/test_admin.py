"""The staff readiness page in the Django admin, through the test client and in real Chromium."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from artifacts.models import Community
from artifacts.schema import INDEXES_BY_NAME
from relayinfo import metrics
from relayinfo.models import RelayInstance
from tests.relayinfo.conftest import execute, transactional

pytestmark = transactional

PAGE = "/admin/relayinfo/readiness/"
SECTIONS = ("verdict", "checks", "columns", "indexes", "ledger", "fleet", "epoch", "lag", "traffic")
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
]


@pytest.fixture
def staff() -> User:
    return User.objects.create_user("operator", password="correct horse", is_staff=True)


@pytest.fixture
def member() -> User:
    return User.objects.create_user("member", password="correct horse", is_staff=False)


def test_staff_sees_verdict_checks_schema_fleet_epoch_lag_and_traffic(
    community: Community, staff: User
) -> None:
    import uuid

    from relayinfo import fleet

    fleet.register_instance(instance=uuid.uuid4())
    metrics.record_round(reset=True, rows=12, fence_lag_ms=3.0, more=False)
    client = Client()
    client.force_login(staff)
    response = client.get(PAGE)
    assert response.status_code == 200
    page = response.content.decode()
    for section in SECTIONS:
        assert f'id="{section}"' in page
    assert "Ready." in page
    assert "artifacts.modified_at" not in page  # columns are named table.column
    assert "artifact_heads.modified_at" in page and "timestamp with time zone" in page
    assert "CREATE INDEX artifact_revisions_moves" in page
    assert "0078_artifact_sync_indexes" in page
    assert RelayInstance.objects.get().hostname in page
    assert "Stamp-to-commit lag" in page and "Fence lag" in page and "120000 ms" in page
    assert "Rounds / min" in page
    # The admin's own look: its base template and navigation.
    assert "Buzz relay administration" in page and 'class="breadcrumbs"' in page


def test_page_explains_why_and_how_to_fix_when_not_ready(
    community: Community, staff: User
) -> None:
    spec = INDEXES_BY_NAME["artifact_revisions_moves"]
    execute(spec.drop_sql(concurrently=False))
    try:
        client = Client()
        client.force_login(staff)
        page = client.get(PAGE).content.decode()
    finally:
        execute(spec.create_sql(concurrently=False))
    assert "Not ready." in page
    assert "artifact_revisions_moves: no index named artifact_revisions_moves" in page
    assert "buzz-admin build-indexes" in page


def test_non_staff_and_anonymous_go_to_the_login_page(community: Community, member: User) -> None:
    anonymous = Client().get(PAGE)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/admin/login/?next=")
    client = Client()
    client.force_login(member)
    response = client.get(PAGE)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_admin_index_links_the_page_and_lists_relayinfo_read_only(
    community: Community, staff: User
) -> None:
    staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    index = client.get("/admin/").content.decode()
    assert PAGE in index and "Deployment readiness" in index
    assert client.get("/admin/relayinfo/relayinstance/").status_code == 200
    assert client.get("/admin/relayinfo/syncstate/").status_code == 200
    assert client.get("/admin/relayinfo/relayinstance/add/").status_code == 403


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright. Playwright's sync API runs an event loop in this
    thread, so the test does its database work before entering this block."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail("Chromium is missing: bin/bootstrap test installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def test_readiness_page_in_chromium(
    live_server: Any, community: Community, staff: User, member: User
) -> None:
    import uuid

    from relayinfo import fleet

    fleet.register_instance(instance=uuid.uuid4())
    metrics.record_round(reset=False, rows=25, fence_lag_ms=12.0, more=False)
    OUTPUT.mkdir(exist_ok=True)
    with chromium() as browser:
        _drive(browser, live_server.url)
    assert (OUTPUT / "readiness-page.png").stat().st_size > 10_000


def _drive(browser: Any, base: str) -> None:
    # A member who is not staff is sent to the login page, which refuses them.
    page = browser.new_page()
    page.goto(f"{base}{PAGE}")
    assert "/admin/login/" in page.url
    page.fill("#id_username", "member")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    assert "/admin/login/" in page.url
    assert "staff account" in page.inner_text(".errornote")
    page.close()

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{base}{PAGE}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{PAGE}")
    for section in SECTIONS:
        assert page.locator(f"#{section}").is_visible(), section
    assert page.locator("#verdict").inner_text().startswith("Ready.")
    assert page.locator("#checks tbody tr").count() == 6
    assert page.locator("#columns tbody tr").count() == 5
    assert page.locator("#indexes tbody tr").count() == 5
    assert page.locator("#ledger tbody tr").count() == 3
    assert page.locator("#fleet tbody tr").first.inner_text().count("0.1.0") == 1
    # The admin's stylesheet applied (the header bar is styled, not default black on white).
    header = page.locator("#header").evaluate("e => getComputedStyle(e).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent")
    page.screenshot(path=str(OUTPUT / "readiness-page.png"), full_page=True)
    page.close()
