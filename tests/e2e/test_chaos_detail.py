"""Chaos experiment detail in a browser: once the experiment ends the page says so and stops polling."""

from __future__ import annotations

from tests.e2e.api import call
from tests.e2e.conftest import WatchedPage

SHORT = {
    "name": "short abort",
    "namespace": "payments-prod",
    "selector": {"app": "checkout"},
    "service": "checkout",
    "fault": "http-abort",
    "abort_http_status": 503,
    "percent": 10.0,
    # Long enough that a page load on a loaded machine still finds it running.
    "duration_seconds": 20,
    "max_duration_seconds": 40,
    "max_pods": 1,
    "max_percent": 25.0,
    "stop_conditions": [],
}


def test_detail_shows_the_end_and_stops_polling(browser_page: WatchedPage, kiln):
    """Item 2: open while running; after it completes the header says Completed, Ended has a
    time, Abort is gone and no more lease requests are sent; lease times carry no microseconds."""
    page = browser_page.page
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if "/lease/" in r.url else None)
    browser_page.login("alice")
    status, exp = call(kiln, "POST", "/api/v1/chaos/experiments/", "engineer", SHORT)
    assert status == 201, exp
    # The timer starts before the page loads: the suite's page-load bound, not the poll's 1 s.
    with page.expect_request(lambda r: "/lease/" in r.url, timeout=90_000):
        browser_page.goto(f"/chaos/{exp['id']}/")
        assert "Running" in page.locator("h1").inner_text()
        assert page.locator("text=Abort and revert").count() == 1
    page.wait_for_function(
        "() => document.querySelector('h1').innerText.includes('Completed')", timeout=60_000
    )
    page.wait_for_load_state("networkidle")
    ended = page.locator("dt:text-is('Ended') + dd").inner_text()
    assert ended.startswith("20"), ended
    assert page.locator("text=Abort and revert").count() == 0
    injected = page.locator(".chaos-injections tbody td:nth-child(5)").first.inner_text()
    assert injected.count(":") == 2 and "." not in injected, injected
    settled = len(polls)
    page.wait_for_timeout(2500)
    assert len(polls) == settled, f"still polling: {polls[settled:]}"
    browser_page.assert_clean()
