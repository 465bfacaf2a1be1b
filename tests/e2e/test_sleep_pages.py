"""Sleep and wake from the environment page in headless Chromium: the Sleep card's savings and
buttons by state, at desktop and phone widths, with no console error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.e2e.api import call, environment, environment_status
from tests.e2e.conftest import WatchedPage


def test_the_owner_puts_it_to_sleep_and_wakes_it_from_its_page(browser_page: WatchedPage, kiln):
    # The server is shared by every browser test: a schedule that wants payments asleep now (on a
    # weekend, say) would put the other tests' READY environments to sleep. This one wants them
    # awake for the next three hours, asleep the rest of each day, and is removed at the end.
    now = datetime.now(UTC)
    window = {
        "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
        "start": (now - timedelta(hours=1)).strftime("%H:%M"),
        "end": (now + timedelta(hours=3)).strftime("%H:%M"),
    }
    status, body = call(
        kiln, "PUT", "/api/v1/teams/payments/sleep-schedule/", "engineer",
        {"time_zone": "UTC", "wake_windows": [window]},
    )  # fmt: skip
    assert status == 200, body
    try:
        _walk(browser_page, kiln)
    finally:
        status, body = call(kiln, "DELETE", "/api/v1/teams/payments/sleep-schedule/", "engineer")
        assert status in (200, 204), body


def _walk(browser_page: WatchedPage, kiln) -> None:
    env = environment(
        kiln, "sleep-walk", ttl_hours=48, cpu=8, memory_gib=32, database=True,
        tenant_control_plane=True,
    )  # fmt: skip
    environment_status(kiln, env["id"], "READY", timeout=120)
    browser_page.login("alice")
    page = browser_page.page
    browser_page.goto(f"/environments/{env['id']}/")
    card = page.locator("#sleep")
    assert "a day" in card.inner_text() and "On the team's schedule" in card.inner_text()
    browser_page.screenshot("sleep-ready")
    with page.expect_navigation():
        card.get_by_role("button", name="Put it to sleep").click()
    environment_status(kiln, env["id"], "SLEEPING", timeout=60)
    page.wait_for_timeout(300)
    for width, name in ((1280, "sleep-asleep"), (390, "sleep-asleep-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        browser_page.goto(f"/environments/{env['id']}/")
        assert page.locator("#env-status").inner_text() == "Sleeping"
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        browser_page.screenshot(name)
    page.set_viewport_size({"width": 1280, "height": 900})
    with page.expect_navigation():
        page.locator("#sleep").get_by_role("button", name="Wake it").click()
    environment_status(kiln, env["id"], "READY", timeout=120)
    browser_page.goto(f"/environments/{env['id']}/")
    assert "Last wake" in page.locator("#sleep").inner_text()
    browser_page.assert_clean()
