"""The platform safety lever in a browser: a platform admin engages it from the levers page with
a reason, the running experiment stops, every chaos page and the home page say who engaged it and
why, and releasing it lets experiments start again; at desktop and phone widths."""

from __future__ import annotations

from tests.e2e.api import call
from tests.e2e.conftest import WatchedPage

LONG = {
    "name": "lever abort",
    "namespace": "payments-prod",
    "selector": {"app": "lever"},
    "service": "lever",
    "fault": "http-abort",
    "abort_http_status": 503,
    "percent": 10.0,
    "duration_seconds": 300,
    "max_duration_seconds": 600,
    "max_pods": 1,
    "max_percent": 25.0,
    "stop_conditions": [],
}


def test_engage_show_and_release_the_platform_lever(browser_page: WatchedPage, kiln):
    page = browser_page.page
    status, exp = call(kiln, "POST", "/api/v1/chaos/experiments/", "engineer", LONG)
    assert status == 201, exp
    browser_page.login("root")
    try:
        browser_page.goto("/chaos/levers/")
        page.fill("#reason-platform", "incident: payments error budget spent")
        with page.expect_navigation():
            page.click("text=Engage the platform lever")
        assert "is engaged" in page.locator(".messages").inner_text()
        browser_page.screenshot("chaos-levers-engaged")
        for path in ("/chaos/", f"/chaos/{exp['id']}/", "/chaos/new/", "/"):
            browser_page.goto(path)
            text = page.locator("main").inner_text()
            assert "Safety lever engaged" in text and "error budget spent" in text, path
        browser_page.goto(f"/chaos/{exp['id']}/")
        assert "Aborted" in page.locator("h1").inner_text()
        browser_page.screenshot("chaos-lever-detail")
        page.set_viewport_size({"width": 390, "height": 844})
        browser_page.goto("/chaos/levers/")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the levers page scrolls sideways on a phone: {width}px"
        browser_page.screenshot("chaos-levers-phone")
        browser_page.goto("/chaos/")
        browser_page.screenshot("chaos-list-lever-phone")
        refused, body = call(kiln, "POST", "/api/v1/chaos/experiments/", "engineer", LONG)
        assert refused == 409 and body["code"] == "chaos_lever_engaged"
    finally:
        status, _ = call(
            kiln, "POST", "/api/v1/chaos/levers/platform/release/", "platform-admin",
            {"reason": "browser test over"},
        )  # fmt: skip
    assert status == 200
    page.set_viewport_size({"width": 1280, "height": 800})
    browser_page.goto("/chaos/")
    assert "Safety levers released" in page.locator("main").inner_text()
    browser_page.assert_clean()
