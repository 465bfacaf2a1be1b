"""Narrow screens (360 and 390 px) and a desktop (1366 px): nothing scrolls sideways, the
navigation is one row, the audit table stays inside its card; a skip link leads to the content."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import WatchedPage

# (user, path) of pages known to be too wide on a phone, beside the list pages test_phone_width checks.
PAGES = [
    ("alice", "/"),
    ("alice", "/environments/new/"),
    ("alice", "/chaos/new/"),
    ("erin", "/audit/events/1/"),
    ("erin", "/audit/"),
    ("carol", "/environments/approvals/"),
]


@pytest.mark.parametrize("width", [360, 390])
def test_narrow_pages_fit_and_the_navigation_is_one_row(browser_page: WatchedPage, width):
    """Item 9: every page fits the screen and the navigation links share one row."""
    page = browser_page.page
    page.set_viewport_size({"width": width, "height": 800})
    current = None
    for user, path in PAGES:
        if user != current:
            page.context.clear_cookies()
            browser_page.login(user)
            current = user
        browser_page.goto(path)
        page.wait_for_load_state("networkidle")
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"{path} is {scroll} px wide at {width} px"
        tops = page.eval_on_selector_all(
            "nav.mainnav a", "links => links.map(a => Math.round(a.getBoundingClientRect().top))"
        )
        assert len(set(tops)) == 1, f"navigation on {path} wraps: {tops}"
        if width == 360:
            browser_page.screenshot(f"narrow-{user}{path.replace('/', '-').rstrip('-')}")
    browser_page.assert_clean()


def test_audit_table_stays_inside_its_card_on_a_desktop(browser_page: WatchedPage):
    """Item 9: at 1366 px the audit table's right edge is inside its card."""
    page = browser_page.page
    page.set_viewport_size({"width": 1366, "height": 900})
    browser_page.login("erin")
    browser_page.goto("/audit/")
    card = page.locator(".table-card").bounding_box()
    table = page.locator("table.audit-events").bounding_box()
    assert (
        card
        and table
        and table["x"] + min(table["width"], card["width"]) <= card["x"] + card["width"] + 1
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    # Targets link to what they name.
    link = page.locator(
        "table.audit-events a[href^='/environments/'], table.audit-events a[href^='/rollouts/']"
    ).first
    assert link.count() == 1
    browser_page.assert_clean()


def test_skip_link_is_the_first_stop_and_jumps_to_the_content(browser_page: WatchedPage):
    """Keyboard: the first Tab reaches "Skip to content", which moves focus to the main content."""
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto("/environments/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    browser_page.assert_clean()
