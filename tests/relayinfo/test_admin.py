"""The staff readiness page in the Django admin, through the test client and in real Chromium
(under `buzz-admin serve`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client

from artifacts.models import ArtifactHead, Community, Event
from artifacts.schema import INDEXES_BY_NAME
from relaycore import metrics
from relayinfo.models import RelayInstance
from tests.factories import create_artifact, make_channel, make_key
from tests.relay_server import start_relay
from tests.relayinfo.conftest import execute, transactional

pytestmark = transactional

PAGE = "/admin/relayinfo/readiness/"
SECTIONS = ("verdict", "checks", "columns", "indexes", "ledger", "fleet", "epoch", "lag", "plots",
            "traffic")
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
    metrics.record_round(reset_cause="start", full_round=True, rows=12, fence_lag_ms=3.0,
                         more=False)
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


def test_readiness_page_and_api_docs_in_chromium_under_buzz_admin_serve(
    community: Community, staff: User, member: User
) -> None:
    """The staff pages as operators get them: `buzz-admin serve` (a real subprocess, which
    registers itself in the fleet), its static files (WhiteNoise, hashed names), real Chromium."""
    import uuid

    from relayinfo import fleet

    fleet.register_instance(instance=uuid.uuid4())
    author = make_key()
    channel = make_channel(community, name="general", owner=author)
    create_artifact(community, author, channel, title="Quarterly roadmap")
    target, target_head = create_artifact(community, author, channel, title="Leaked secret")
    staff.is_superuser = True  # moderation needs the change permission on heads
    staff.save()
    OUTPUT.mkdir(exist_ok=True)
    relay = start_relay()
    try:
        with chromium() as browser:
            _drive(browser, relay.url, server_pid=relay.process.pid)
    finally:
        relay.stop()
    for shot in ("readiness-page", "api-docs-page", "admin-index", "artifact-heads",
                 "artifact-redacted"):
        assert (OUTPUT / f"{shot}.png").stat().st_size > 10_000, shot
    # The redaction clicked in the browser went through the writer and is on record.
    assert Event.objects.get(event_id=target_head).deleted_at is not None
    assert LogEntry.objects.get(change_message__contains=target_head
                                ).user.username == "operator"
    assert ArtifactHead.objects.get(artifact_id=target).event_id == target_head


def _styled(page: Any, selector: str) -> None:
    """The admin's stylesheet applied: `selector` has a background, not the browser default."""
    colour = page.locator(selector).evaluate("e => getComputedStyle(e).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), (selector, colour)


def _record_failed_asset(answer: Any, failed: list[str]) -> None:
    if answer.status >= 400 and "/static/" in answer.url:
        failed.append(answer.url)


def _drive(browser: Any, base: str, *, server_pid: int) -> None:
    # A member who is not staff is sent to the login page, which refuses them.
    failed: list[str] = []

    def watch(page: Any) -> Any:
        """`page`, recording every static file that failed to load."""
        page.on("requestfailed", lambda request: failed.append(request.url))
        page.on("response", lambda answer: _record_failed_asset(answer, failed))
        return page

    page = watch(browser.new_page())
    page.goto(f"{base}{PAGE}")
    assert "/admin/login/" in page.url
    _styled(page, "#header")
    page.fill("#id_username", "member")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    assert "/admin/login/" in page.url
    assert "staff account" in page.inner_text(".errornote")
    page.close()

    page = watch(browser.new_page(viewport={"width": 1400, "height": 1000}))
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
    # The server registered itself (lifespan), beside the instance this test registered.
    assert str(server_pid) in page.locator("#fleet").inner_text()
    assert page.locator("#fleet tbody tr").first.inner_text().count("0.1.0") == 1
    _styled(page, "#header")
    for figure in ("plot-lag", "plot-traffic", "plot-fleet"):
        assert page.locator(f"#{figure} svg").is_visible(), figure
    assert page.locator("#plot-fleet svg rect.instance.live").count() >= 2
    assert page.locator("ol.breadcrumbs li").count() == 3
    page.screenshot(path=str(OUTPUT / "readiness-page.png"), full_page=True)

    # The admin index heads with the verdict, linking the page.
    page.goto(f"{base}/admin/")
    assert page.locator("#readiness-verdict").inner_text().startswith("Ready.")
    page.screenshot(path=str(OUTPUT / "admin-index.png"), full_page=True)

    # Heads: browse, filter by title, redact one through the action.
    page.goto(f"{base}/admin/artifacts/artifacthead/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    assert "Quarterly roadmap" in rows.all_inner_texts()[0] + rows.all_inner_texts()[1]
    page.fill("#changelist-filter input[name=title]", "leaked")
    page.press("#changelist-filter input[name=title]", "Enter")
    page.wait_for_url("**title=leaked**")
    assert rows.count() == 1 and "Leaked secret" in rows.first.inner_text()
    assert "Quarterly roadmap" not in page.locator("#result_list").inner_text()
    _styled(page, "#header")
    page.screenshot(path=str(OUTPUT / "artifact-heads.png"), full_page=True)
    rows.first.locator("input.action-select").check()
    page.select_option("select[name=action]", "redact_heads")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert "1 event(s) redacted" in page.locator(".messagelist").inner_text()
    assert page.locator("#result_list tbody tr").first.locator("img[alt=True]").count() == 1
    page.screenshot(path=str(OUTPUT / "artifact-redacted.png"), full_page=True)

    # The API docs: Swagger UI from drf-spectacular-sidecar's static files ran and drew the
    # document's title.
    page.goto(f"{base}/admin/api/")
    title = page.locator(".swagger-ui .info .title")
    title.wait_for(timeout=15_000)
    assert "Buzz relay HTTP API" in title.inner_text()
    page.screenshot(path=str(OUTPUT / "api-docs-page.png"), full_page=False)
    page.close()
    assert failed == []
