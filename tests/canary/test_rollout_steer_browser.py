"""A person steers a rollout in a real browser: start it from the form, see it held, extend it."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.e2e.conftest import browser, browser_page, kiln  # noqa: F401 - fixtures

pytestmark = pytest.mark.e2e


def _post(server, path: str, body: dict, token: str) -> dict:
    request = urllib.request.Request(  # noqa: S310 - the local test server
        server.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


def _wait_for(page, selector: str, timeout: float = 40.0) -> None:
    """Poll (the page reloads itself when the rollout changes state)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if page.locator(selector).count():
                return
        except PlaywrightError:  # the page was reloading: look again
            pass
        assert time.monotonic() < deadline, f"{selector} did not appear"
        time.sleep(0.25)


def _decision_kinds(page, *, until: str, timeout: float = 40.0) -> list[str]:
    """The decisions table's kinds once `until` is among them; the page may reload meanwhile
    (the extended rollout runs on and changes state), so a read cut short is read again."""
    deadline = time.monotonic() + timeout
    kinds: list[str] = []
    while until not in kinds and time.monotonic() < deadline:
        try:
            kinds = page.locator("#decisions tr[data-decision-id] td:nth-child(2)").all_inner_texts()
        except PlaywrightError:
            kinds = []
        if until not in kinds:
            time.sleep(0.25)
    return kinds


def test_start_from_the_form_see_it_held_and_extend_it(kiln, browser_page):  # noqa: F811
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    service = _post(
        kiln,
        "/api/v1/canary/services/",
        {
            "team": "payments",
            "name": name,
            "namespace": "payments-prod",
            "sim_traffic_class": "low_traffic",
        },
        kiln.tokens["platform-admin"],
    )
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto("/rollouts/new/")
    page.select_option("#id_service", service["id"])
    page.fill("#id_steps", "10, 100")
    page.fill("#id_ticks_per_step", "3")
    page.fill("#id_tick_seconds", "0.5")
    page.fill("#id_max_ticks", "3")
    page.get_by_role("button", name="Start rollout").click()
    page.wait_for_url(lambda url: "/rollouts/new" not in url, timeout=30_000)
    # Low traffic and three ticks: the analysis cannot decide, the rollout holds and says why.
    _wait_for(page, "#inconclusive")
    assert "held at 10%" in page.inner_text("#inconclusive")
    assert "What would settle it" in page.inner_text("#inconclusive")
    assert page.locator("#rollout-status .badge[data-status='inconclusive']").count() == 1
    legend = page.inner_text("#analysis")
    for term in ("LLR", "Bounds", "CUSUM", "Requests still needed"):
        assert term in legend
    assert page.locator("#channels tbody tr").count() == 3
    browser_page.screenshot("canary-inconclusive-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    _wait_for(page, "#inconclusive")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    browser_page.screenshot("canary-inconclusive-390")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.reload()  # a full-page screenshot leaves the next click unreliable in Chromium
    # alice (engineer of the team) may extend, retry or abort; promoting anyway is an approver's.
    assert page.locator("button[value=promote]").count() == 0
    page.fill("#id_reason", "more traffic after the lunch peak")
    page.fill("#id_ticks", "2")
    with page.expect_navigation():
        page.focus("button[value=extend]")
        page.keyboard.press("Enter")
    assert "extend: done" in page.inner_text(".messages")
    assert "extended" in _decision_kinds(page, until="extended")
    # Still too little traffic: held again after the extension, then aborted: finished, not live.
    _wait_for(page, "#inconclusive")
    page.fill("#id_reason", "not worth the wait")
    with page.expect_navigation():
        page.focus("button[value=abort]")
        page.keyboard.press("Enter")
    _wait_for(page, "#stream-state[data-finished='true']")
    assert page.inner_text("#stream-state").startswith("finished")
    assert page.locator("#steer").count() == 0
    browser_page.screenshot("canary-finished-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    browser_page.goto("/rollouts/new/")
    browser_page.screenshot("canary-rollout-new-390")
    browser_page.assert_clean()
