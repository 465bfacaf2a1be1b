"""Budgets in headless Chromium: the showback month chart (spend, forecast, budget) and the request
form's estimate against the budget, at desktop and phone widths, with no console error."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.e2e.api import call, environment
from tests.e2e.conftest import WatchedPage


def test_showback_draws_the_month_and_the_form_meets_the_budget(browser_page: WatchedPage, kiln):
    status, body = call(
        kiln, "PUT", "/api/v1/teams/payments/budget/", "platform-admin",
        {"monthly_amount": "40.00", "warn_percent": 75},
    )  # fmt: skip
    assert status == 200, body
    try:
        _walk(browser_page, kiln)
    finally:
        # The server is shared by every browser test: a budget this small would send the later
        # tests' payments requests to an approver. Raised far out of their way.
        status, body = call(
            kiln, "PUT", "/api/v1/teams/payments/budget/", "platform-admin",
            {"monthly_amount": "9999999.00"},
        )  # fmt: skip
        assert status == 200, body


def _walk(browser_page: WatchedPage, kiln) -> None:
    environment(kiln, "budget-walk", ttl_hours=48, cpu=4, memory_gib=16)
    browser_page.login("alice")
    page = browser_page.page
    for width, name in ((1280, "budget-showback"), (390, "budget-showback-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        browser_page.goto("/environments/showback/?team=payments")
        card = page.locator(".budget-month[data-budget-team=payments]")
        assert card.count() == 1
        # uPlot drew its canvas inside the card, no wider than the screen.
        page.wait_for_selector("#budget-chart-payments canvas")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # Away from the chart its legend shows today's figures, not dashes.
        legend = page.locator("#budget-chart-payments .u-legend").inner_text()
        assert "--" not in legend and "USD" in legend, legend
        # Today's point is today's, as the table beside it says (not the next day's).
        assert datetime.now(UTC).date().isoformat() in legend, legend
        assert "Forecast" in card.inner_text() and "USD 40.00" in card.inner_text()
        browser_page.screenshot(name)
    page.set_viewport_size({"width": 1280, "height": 900})
    browser_page.goto("/environments/new/")
    page.fill("#id_name", "one-more")
    page.fill("#id_cpu", "8")
    page.wait_for_selector("[data-budget-outcome]")
    line = page.locator("[data-budget-outcome]")
    assert "payments has left after its forecast" in line.inner_text()
    browser_page.screenshot("budget-request")
    browser_page.assert_clean()
