"""The home page is a dashboard: my environments with status and expiry, approvals waiting for
me, rollouts and experiments running, and this month's spend."""

from __future__ import annotations

from tests.e2e import api
from tests.e2e.conftest import WatchedPage


def test_engineer_and_approver_dashboards(browser_page: WatchedPage, kiln):
    env = api.environment(kiln, "dash-mine")
    api.environment_status(kiln, env["id"], "READY")
    waiting = api.environment(kiln, "dash-waits", env_class="staging")
    page = browser_page.page
    browser_page.login("alice")
    mine = page.locator(".dash-envs")
    assert "dash-mine" in mine.inner_text() and "Ready" in mine.inner_text()
    assert "expires" in mine.inner_text()
    assert page.locator("#dash-spend").inner_text().startswith("$")
    assert page.locator(".dash-rollouts").is_visible() and page.locator(".dash-chaos").is_visible()
    assert page.locator(".dash-approvals").count() == 0  # alice approves nothing
    browser_page.screenshot("home-dashboard")
    page.context.clear_cookies()
    browser_page.login("carol")
    approvals = page.locator(".dash-approvals")
    assert "dash-waits" in approvals.inner_text()
    with page.expect_navigation():
        approvals.locator("a", has_text="dash-waits").click()
    assert page.url.endswith(f"/environments/approvals/#row-{waiting['id']}")
    browser_page.assert_clean()
