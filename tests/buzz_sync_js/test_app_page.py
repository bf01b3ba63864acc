"""The task board at /app/ (buzz-sync-js in the browser) in Debian's Chromium: it syncs, another
client's write appears live, a reload keeps the collection (IndexedDB), writes made offline go
out when the browser is back online, and a write that lost a race is shown to the person.

The "other client" is this process writing through the relay's services (committed, so the
served relay sees it; its live subscribers hear it over the channel layer).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.db import connections

from artifacts.models import ArtifactHead
from buzzclient import Publisher
from tests.factories import create_artifact, make_channel, make_community, make_key, update_artifact
from tests.relay_server import RelayProcess, start_relay

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
PACKAGE = Path(__file__).resolve().parents[2] / "buzz-sync-js"
TIMEOUT = 20_000  # ms: a live write or a round under a loaded CI machine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def board_relay(django_db_setup: None) -> Iterator[RelayProcess]:
    relay = start_relay({"RELAY_APP": "1"})
    try:
        yield relay
    finally:
        relay.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail("Chromium is missing: bin/bootstrap test installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield found
        finally:
            found.close()


def db[T](work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Database work from a thread of its own: Playwright's sync API runs an event loop in
    this one, where Django refuses synchronous database calls."""

    def run() -> T:
        try:
            return work(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def head_of(d: str) -> ArtifactHead:
    return ArtifactHead.objects.get(artifact_id=d)


def test_the_board_syncs_goes_live_keeps_its_collection_works_offline_and_shows_conflicts(
    board_relay: RelayProcess, browser: Any
) -> None:
    community = db(make_community, host="127.0.0.1")
    alice = make_key()
    h = db(make_channel, community, owner=alice, name="open")  # open: any key reads, writes
    heads = {}
    for title in ("water the plants", "buy milk", "call bob"):
        d, head = db(create_artifact, community, alice, h, title=title, type="buzz.task",
                     content='{"done": false}')
        heads[d] = head

    # The page's CSP forbids eval; Playwright's wait_for_function evaluates strings.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    page.goto(f"{board_relay.url}/app/")
    tasks = page.locator(".task")
    page.wait_for_function("document.body.dataset.tasks === '3'")
    assert sorted(tasks.locator(".title").evaluate_all("els => els.map(e => e.value)")) == [
        "buy milk", "call bob", "water the plants"]
    page.wait_for_function("document.body.dataset.live === 'true'")

    # Another client's write appears live (the page polls only every 5 minutes under the stream).
    def another_client_writes() -> str:
        with Publisher(relay_url=board_relay.url, secret_hex=alice.secret) as other:
            published = other.create_artifact(channel=h, type="buzz.task",
                                              title="from another client",
                                              content='{"done": false}')
            assert published.accepted, published.message
            return published.event.tags[1][1]

    d_live = db(another_client_writes)
    page.locator(f'.task[data-d="{d_live}"]').wait_for()

    # The page's own writes: create, complete, edit.
    page.fill("#new-title", "written in the browser")
    page.click("#new-task button")
    page.wait_for_function("document.body.dataset.tasks === '5'")
    first = next(iter(heads))
    item = page.locator(f'.task[data-d="{first}"]')
    item.locator("input[type=checkbox]").check()
    item.and_(page.locator(".done")).wait_for()
    assert orjson.loads(db(_content, first)) == {"done": True}

    # A reload shows the collection from IndexedDB even while /query cannot be reached.
    page.route("**/query", lambda route: route.abort())
    page.reload()
    page.wait_for_function("document.body.dataset.tasks === '5'")
    page.unroute("**/query")

    # Offline: a new task and an edit wait in the outbox; meanwhile another client edits the
    # same task. Back online, the outbox goes in order and the lost race is shown.
    page.wait_for_function("document.body.dataset.live === 'true'")
    context.set_offline(True)
    page.fill("#new-title", "made offline")
    page.click("#new-task button")
    page.locator("#pending-list li").first.wait_for()
    title = page.locator(f'.task[data-d="{first}"] .title')
    title.fill("my offline edit")
    title.dispatch_event("change")
    page.wait_for_function("document.querySelectorAll('#pending-list li').length === 2")
    db(update_artifact, community, alice, first, h, prev=db(head_of, first).event_id,
       title="edited elsewhere first")
    context.set_offline(False)
    page.wait_for_function("document.getElementById('pending').hidden")
    conflict = page.locator("#conflict")
    conflict.wait_for(state="visible")
    assert "edited elsewhere first" in conflict.inner_text()
    page.wait_for_function("document.body.dataset.tasks === '6'")
    assert page.locator(f'.task[data-d="{first}"] .title').input_value() == "edited elsewhere first"
    context.close()


def test_under_its_own_csp_the_board_verifies_with_webassembly(
    board_relay: RelayProcess, browser: Any
) -> None:
    """The page as served (its CSP enforced, which the test above bypasses to evaluate script):
    the WebAssembly chunk loads, the verifier in use is libsecp256k1's, and the tasks sync.
    Only Playwright's locators are used here: they run outside the page's CSP."""
    community = db(make_community, host="127.0.0.1")
    alice = make_key()
    h = db(make_channel, community, owner=alice, name="open")
    for title in ("one", "two"):
        db(create_artifact, community, alice, h, title=title, type="buzz.task",
           content='{"done": false}')
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.goto(f"{board_relay.url}/app/")
    page.locator('body[data-verifier="wasm"]').wait_for(state="attached")
    page.locator('body[data-tasks="2"]').wait_for(state="attached")
    assert sorted(title.input_value() for title in page.locator(".task .title").all()) == [
        "one", "two"]
    assert refused == []
    context.close()


def _content(d: str) -> str:
    from artifacts.models import Event

    head = head_of(d)
    content: str = orjson.loads(Event.objects.get(event_id=head.event_id).raw)["content"]
    return content


def test_the_committed_assets_match_their_source() -> None:
    """buzzrelay/static/buzz-app/ is built from buzz-sync-js/app/ and committed (the quickstart
    needs no Node): a fresh esbuild build must give the same bytes."""
    node = shutil.which("node")
    if node is None or not (PACKAGE / "node_modules" / "esbuild").is_dir():
        pytest.skip("node and buzz-sync-js's npm packages are needed (bin/bootstrap test)")
    run = subprocess.run([node, "app/build.mjs", "--check"], cwd=PACKAGE, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_app_is_served_only_when_enabled(client: Any, settings: Any) -> None:
    """Off (the default outside the quickstart): the relay's JSON 404. On: the page, naming
    its script and style by their hashed static names, under a CSP that allows nothing else."""
    settings.RELAY_APP_ENABLED = False
    off = client.get("/app/", HTTP_HOST="127.0.0.1")
    assert off.status_code == 404
    assert off.json()["error"]
    settings.RELAY_APP_ENABLED = True
    on = client.get("/app/", HTTP_HOST="127.0.0.1")
    assert on.status_code == 200
    html = on.content.decode()
    assert "/static/buzz-app/board." in html and ".js" in html and "https://" not in html
    # Scripts from 'self' only; WebAssembly compilation allowed (the page's libsecp256k1), string
    # eval not.
    assert "script-src 'self' 'wasm-unsafe-eval';" in on["Content-Security-Policy"]
    assert "'unsafe-eval'" not in on["Content-Security-Policy"].replace("'wasm-unsafe-eval'", "")


def test_only_the_app_page_allows_webassembly(client: Any, settings: Any) -> None:
    """'wasm-unsafe-eval' is the task board's alone: the admin's pages do not carry it."""
    settings.RELAY_APP_ENABLED = True
    for path in ("/admin/login/", "/admin/"):
        response = client.get(path, HTTP_HOST="127.0.0.1")
        assert response.status_code in (200, 302), (path, response.status_code)
        assert "wasm-unsafe-eval" not in response.get("Content-Security-Policy", ""), path
