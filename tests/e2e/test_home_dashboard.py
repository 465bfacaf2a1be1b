"""The home page is a dashboard: my environments with status and expiry, approvals waiting for
me, rollouts and experiments running, and this month's spend."""

from __future__ import annotations

from tests.e2e import api
from tests.e2e.conftest import WatchedPage


def test_engineer_and_approver_dashboards(browser_page: WatchedPage, kiln):
    env = api.environment(kiln, "dash-mine")
    api.environment_status(kiln, env["id"], "READY")
    waiting = api.environment(kiln, "dash-waits", env_class="staging")
    rollout = api.running_rollout(kiln, "dash-svc")
    experiment = api.running_experiment(kiln, "dash-delay")
    try:
        _dashboards(browser_page, rollout, experiment, waiting)
    finally:
        api.stop(kiln, rollout=rollout, experiment=experiment)


def _dashboards(browser_page: WatchedPage, rollout: dict, experiment: dict, waiting: dict):
    page = browser_page.page
    browser_page.login("alice")
    mine = page.locator(".dash-envs")
    assert "dash-mine" in mine.inner_text() and "Ready" in mine.inner_text()
    assert "expires" in mine.inner_text()
    assert page.locator("#dash-spend").inner_text().startswith("$")
    # A running rollout and a live experiment of her team, each by name with a link to its page.
    rollouts = page.locator(".dash-rollouts")
    link = rollouts.locator(f"a[href='/rollouts/{rollout['id']}/']")
    assert link.count() == 1, rollouts.inner_text()
    assert "payments-prod/dash-svc" in link.inner_text() and "Running" in link.inner_text()
    chaos = page.locator(".dash-chaos")
    link = chaos.locator(f"a[href='/chaos/{experiment['id']}/']")
    assert link.count() == 1, chaos.inner_text()
    assert "dash-delay" in link.inner_text() and "payments-prod" in link.inner_text()
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
