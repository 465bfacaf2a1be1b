"""Showback in the browser: a period selector, spend by day as a chart with a table beside it,
teams at $0 listed, and a CSV download that shows only what the page shows."""

from __future__ import annotations

from tests.e2e.conftest import WatchedPage


def test_showback_period_chart_zero_teams_and_csv(browser_page: WatchedPage):
    page = browser_page.page
    browser_page.login("root")  # sees every team (an approver sees only their own)
    browser_page.goto("/environments/showback/")
    assert page.locator("#showback-period").input_value() == "30d"
    assert page.locator("svg.spend-chart rect").count() == 30
    page.locator("details.spend-data summary").click()
    assert page.locator("details.spend-data tbody tr").count() == 30
    zero = page.locator("section[data-team='data-platform']")
    assert "$0.00" in zero.inner_text()
    page.select_option("#showback-period", "7d")
    with page.expect_navigation():
        page.get_by_role("button", name="Show").click()
    assert "period=7d" in page.url
    assert page.locator("svg.spend-chart rect").count() == 7
    with page.expect_download() as info:
        page.locator("#showback-csv").click()
    download = info.value
    assert download.suggested_filename == "showback-7d.csv"
    text = open(download.path()).read()
    assert text.splitlines()[0].startswith("team,environment,class,status,hours")
    assert {"payments", "search", "data-platform"} <= {
        line.split(",")[0] for line in text.splitlines()
    }
    page.context.clear_cookies()
    browser_page.login("alice")
    csv = page.request.get(browser_page.base_url + "/environments/showback.csv?period=90d").text()
    assert {line.split(",")[0] for line in csv.splitlines()[1:]} == {"payments"}
    bad = page.request.get(browser_page.base_url + "/environments/showback.csv?period=2y")
    assert bad.status == 400 and "period must be one of" in bad.text()
    browser_page.assert_clean()
