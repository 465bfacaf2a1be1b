"""The rollout dashboard in a real browser: the chart and the decisions update over the websocket."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.e2e import api

pytestmark = pytest.mark.e2e


def _wait_until(check, timeout: float = 90.0) -> None:
    """Poll the page from Python (the CSP forbids the eval that wait_for_function needs).

    Generous: in a fresh checkout the server's first cluster tick compiles the extender's
    kernels (numba, about 4 s of CPU on an idle machine, cached after), during which the
    in-process worker's rollout ticks wait; this test is about what the stream carries."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the dashboard did not update in time"
        time.sleep(0.25)


def test_rollout_page_streams_ticks_and_decisions(kiln, browser_page):
    # Signed in before the rollout starts: with this much traffic it has its evidence a few
    # ticks after the first step, and the page must be open while it is still live.
    page = browser_page.page
    browser_page.login("alice")
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    # 500 requests/s: enough evidence to promote within the test.
    service = api.payments_service(kiln, name, "high_volume")
    rollout = api.post(
        kiln,
        "/api/v1/rollouts/",
        {
            "service": service["id"],
            "baseline_version": "v1",
            "canary_version": "v2",
            "steps": [5, 25, 50, 100],
            "ticks_per_step": 8,
            # Five warm-up ticks come before any evidence: at 1.5 s the page (opened straight,
            # one load) has at least 7.5 s to connect while the rollout is still live.
            "tick_seconds": 1.5,
        },
    )
    browser_page.goto(f"/rollouts/{rollout['id']}/")
    page.wait_for_selector("#stream-state.ok", timeout=15_000)
    # The chart grows tick by tick and the step-ups arrive as decisions, all over the websocket.
    _wait_until(lambda: int(page.get_attribute("#rollout", "data-points") or 0) >= 4)
    # Each chart's data table grows with it: one row a tick, in the same redraw.
    rows, points = page.evaluate(
        "() => [document.querySelectorAll('#table-weight tbody tr[data-tick]:not([data-tick=now])').length,"
        " Number(document.getElementById('rollout').dataset.points)]"
    )
    assert rows == points >= 4
    # The per-channel evidence and the bounds are filled live too, not only once finished.
    if page.get_attribute("#rollout", "data-finished") != "true":
        _wait_until(lambda: page.locator("#channels tbody tr[data-channel]").count() == 3)
        assert page.inner_text("#rollout-bounds").startswith("Accept bound ")
    _wait_until(lambda: page.locator("#decisions tr[data-decision-id]").count() >= 2)
    assert page.locator(".uplot").count() == 4
    # Away from the charts their legends show the latest tick, not dashes (once the redraw
    # that brought the ticks has run: it is read between frames otherwise).
    _wait_until(
        lambda: (
            (texts := page.locator(".uplot .u-legend").all_inner_texts())
            and not [text for text in texts if "--" in text]
        ),
        timeout=10,
    )
    kinds = page.locator("#decisions tr[data-decision-id] td:nth-child(2)").all_inner_texts()
    # Started, then step-ups until promoted: on a slow machine a tick covers more traffic, and
    # the evidence can promote it from its first step, so no step-up is guaranteed.
    assert kinds[0] == "started" and set(kinds[1:]) <= {"step advanced", "promoted"}, kinds
    page.wait_for_selector("#rollout-status .badge[data-status='promoted']", timeout=60_000)
    # The live badge reads as the server renders it (and the list shows it): "Promoted".
    assert page.locator("#rollout-status .badge").inner_text() == "Promoted"
    assert page.locator("#rollout-weight").inner_text() == "100%"
    # The traffic chart ends at the promotion's 100%, not at the last analysed step.
    _wait_until(lambda: page.get_attribute("#rollout", "data-drawn-weight") == "100")
    # That last point is no analysed tick: its legend says "now"; the other charts end on a tick.
    weight_legend = page.locator("#chart-weight .u-legend").inner_text()
    assert "now" in weight_legend and "100" in weight_legend, weight_legend
    assert "now" not in page.locator("#chart-errors .u-legend").inner_text()
    # Its data table ends on the same point, as the server renders it on a reload.
    last_row = "#table-weight tbody tr:last-child"
    cells = "row => Array.from(row.cells, c => c.textContent)"
    assert page.locator(last_row).get_attribute("data-tick") == "now"
    assert page.locator(last_row).evaluate(cells) == ["now", "100"]
    assert page.locator("#table-errors tbody tr[data-tick=now]").count() == 0
    browser_page.goto(f"/rollouts/{rollout['id']}/")
    page.wait_for_selector("#table-weight tbody tr[data-tick=now]", state="attached")
    assert page.locator(last_row).evaluate(cells) == ["now", "100"]
    browser_page.screenshot("canary-rollout")
    browser_page.assert_clean()


def test_standalone_demo_promotes_one_rollout_and_rolls_back_the_other(kiln):
    admin = kiln.tokens["platform-admin"]
    deadline = time.monotonic() + 60
    while True:
        status, page = kiln.get_json("/api/v1/rollouts/?limit=500", token=admin)
        assert status == 200
        outcome = {
            r["service"]["name"]: r["status"]
            for r in page["results"]
            if r["service"]["name"] in ("checkout", "search-api")  # the demo's own rollouts
        }
        if outcome == {"checkout": "promoted", "search-api": "rolled_back"}:
            break
        assert time.monotonic() < deadline, outcome
        time.sleep(1)
