"""The approval queue in a browser: what an approver needs on each row, errors on the row they
belong to, and buttons of one size."""

from __future__ import annotations

from tests.e2e import api
from tests.e2e.conftest import WatchedPage


def test_queue_rows_show_team_age_cost_and_their_own_errors(browser_page: WatchedPage, kiln):
    """Item 7: team, age, cost per hour and over the TTL, the plan; rejecting without a reason names the
    request on its own row (not at the top); Approve and Reject are the same height."""
    first = api.environment(kiln, "queue-one", env_class="staging", ttl_hours=10)
    second = api.environment(kiln, "queue-two", env_class="staging")
    assert first["status"] == second["status"] == "PENDING_APPROVAL"
    page = browser_page.page
    browser_page.login("carol")
    browser_page.goto("/environments/approvals/")
    row = page.locator(f"#row-{first['id']}")
    assert row.locator(".q-team").inner_text() == "payments"
    assert row.locator(".q-age").inner_text().strip()
    cost = row.locator(".q-cost").inner_text()
    hourly = float(first["hourly_cost"])
    assert f"${hourly:.2f}/h" in cost and f"${hourly * 10:.2f} over 10 h" in cost, cost
    # The plan: what approving creates, its cost and verdicts, opened on the row beneath.
    plan = page.locator(f"#plan-{first['id']} details.portal-plan")
    summary = plan.locator(":scope > summary")
    assert summary.inner_text().startswith("Plan: ") and "policies allow" in summary.inner_text()
    summary.click()
    assert plan.locator(".portal-plan-diff").is_visible()
    assert "kind: Namespace" in plan.text_content()
    approve = row.locator("button[value=approve]").bounding_box()
    reject = row.locator("button[value=reject]").bounding_box()
    assert abs(approve["height"] - reject["height"]) < 1 and abs(approve["y"] - reject["y"]) < 1
    browser_page.screenshot("approval-queue")
    with page.expect_navigation():
        row.locator("button[value=reject]").click()
    row = page.locator(f"#row-{first['id']}")
    assert "reason" in row.locator(".q-error").inner_text().lower()
    assert page.locator(f"#row-{second['id']} .q-error").count() == 0
    assert page.locator(".messages .msg.error").count() == 0
    status = api.call(kiln, "GET", f"/api/v1/environments/{first['id']}/", "engineer")[1]
    assert status["status"] == "PENDING_APPROVAL"
    # The error is shown once: a reload is clean.
    browser_page.goto("/environments/approvals/")
    assert page.locator(".q-error").count() == 0
    browser_page.assert_clean()
