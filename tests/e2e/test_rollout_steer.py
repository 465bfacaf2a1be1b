"""A person steers a rollout in a real browser: start it from the form, see it held, extend it."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.e2e import api
from tests.kiln.pages import tables

CHARTS = ("weight", "errors", "sprt", "cusum")
ROWS = "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))"

pytestmark = pytest.mark.e2e


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
            kinds = page.locator(
                "#decisions tr[data-decision-id] td:nth-child(2)"
            ).all_inner_texts()
        except PlaywrightError:
            kinds = []
        if until not in kinds:
            time.sleep(0.25)
    return kinds


def test_start_from_the_form_see_it_held_and_extend_it(kiln, browser_page):
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    service = api.payments_service(kiln, name, "low_traffic")
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto("/rollouts/new/")
    page.select_option("#id_service", service["id"])
    page.fill("#id_steps", "10, 100")
    page.fill("#id_ticks_per_step", "3")
    # 1 s ticks: the page reloads itself when the status changes, and the one-time message
    # after a decision must be read before the rollout is held again (ticks later).
    page.fill("#id_tick_seconds", "1")
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
    page.fill("#id_ticks", "3")
    _press(page, "button[value=extend]")
    assert "The analysis goes on with more ticks" in page.inner_text(".messages")
    assert "extended" in _decision_kinds(page, until="extended")
    # Still too little traffic: held again after the extension, then aborted: finished, not live.
    _wait_for(page, "#inconclusive")
    page.fill("#id_reason", "not worth the wait")
    _press(page, "button[value=abort]")
    _wait_for(page, "#stream-state[data-finished='true']")
    # Under "Finished", when: the time it finished, said once.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page.inner_text("#stream-state"))
    assert page.locator("#steer").count() == 0
    browser_page.screenshot("canary-finished-1280")
    _charts_have_their_tables_and_resize(page, browser_page)
    page.set_viewport_size({"width": 390, "height": 844})
    browser_page.goto("/rollouts/new/")
    browser_page.screenshot("canary-rollout-new-390")
    browser_page.assert_clean()


def _press(page, selector: str) -> None:
    """Submit a decision from the keyboard (a full-page screenshot leaves a click unreliable)."""
    with page.expect_navigation():
        page.focus(selector)
        page.keyboard.press("Enter")


def test_retry_by_the_team_then_promote_anyway_by_an_approver(kiln, browser_page):
    """Rollouts item: the Retry button restarts a held rollout's analysis from its first step
    (the team's engineer); Promote anyway (an approver, who may not retry) finishes it."""
    service = api.payments_service(kiln, f"e2e-{uuid.uuid4().hex[:8]}", "low_traffic")
    rollout = api.post(
        kiln,
        "/api/v1/rollouts/",
        {"service": service["id"], "baseline_version": "v1", "canary_version": "v2",
         "steps": [10, 100], "ticks_per_step": 3, "tick_seconds": 1.0,
         "config": {"max_ticks": 3}},
    )  # fmt: skip
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto(f"/rollouts/{rollout['id']}/")
    _wait_for(page, "#inconclusive")
    assert page.locator("button[value=promote]").count() == 0  # not an engineer's to press
    page.fill("#id_reason", "the metrics source was misconfigured")
    _press(page, "button[value=retry]")
    assert "The analysis starts again from the first step." in page.inner_text(".messages")
    assert "retried" in _decision_kinds(page, until="retried")
    _wait_for(page, "#inconclusive")  # still too little traffic: held again
    page.context.clear_cookies()
    browser_page.login("carol")
    browser_page.goto(f"/rollouts/{rollout['id']}/")
    _wait_for(page, "#inconclusive")
    assert page.locator("button[value=retry]").count() == 0  # an approver does not retry
    page.fill("#id_reason", "checked the canary's logs by hand")
    _press(page, "button[value=promote]")
    _wait_for(page, "#rollout-status .badge[data-status='promoted']")
    _wait_for(page, "#stream-state[data-finished='true']")
    assert page.locator("#steer").count() == 0
    assert "promoted" in _decision_kinds(page, until="promoted")
    browser_page.assert_clean()


def _charts_have_their_tables_and_resize(page, watched) -> None:
    """Each chart's table, rebuilt by the page from the websocket's ticks, reads as the server
    renders it; opened, the tables fit a phone, and the charts shrink to it without a reload."""
    deadline = time.monotonic() + 20
    while int(page.get_attribute("#rollout", "data-points") or 0) == 0:
        assert time.monotonic() < deadline, "no tick drawn"
        time.sleep(0.25)
    served = tables(page.request.get(page.url).text())
    for name in CHARTS:
        live = page.eval_on_selector_all(f"#table-{name} tr", ROWS)
        assert len(live) > 1 and live == served[f"table-{name}"], name
    summaries = page.locator("details.chart-data summary")
    assert summaries.count() == len(CHARTS)
    for i in range(len(CHARTS)):
        summaries.nth(i).click()
    assert page.locator("#table-sprt").is_visible()
    watched.screenshot("canary-chart-tables-1280")
    wide = page.locator("#chart-weight .uplot").bounding_box()["width"]
    page.set_viewport_size({"width": 390, "height": 844})
    deadline = time.monotonic() + 10
    while page.locator("#chart-weight .uplot").bounding_box()["width"] >= wide:
        assert time.monotonic() < deadline, "the chart kept its desktop width"
        time.sleep(0.25)
    for name in CHARTS:
        assert page.locator(f"#chart-{name} .uplot").bounding_box()["width"] <= 390
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    watched.screenshot("canary-chart-tables-390")
    page.set_viewport_size({"width": 1280, "height": 800})
