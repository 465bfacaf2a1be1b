"""At a phone's width (390 px) no page scrolls sideways: wide tables scroll inside their own box."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import WatchedPage

PHONE = {"width": 390, "height": 844}

# (user, path): the list pages whose tables are wider than a phone.
PAGES = [
    ("alice", "/environments/"),
    ("alice", "/environments/showback/"),
    ("carol", "/environments/approvals/"),
    ("erin", "/audit/"),
    ("alice", "/rollouts/"),
    ("alice", "/chaos/"),
    ("alice", "/scheduler/"),
]


@pytest.mark.parametrize(("user", "path"), PAGES)
def test_no_page_scrolls_sideways_on_a_phone(browser_page: WatchedPage, user, path):
    page = browser_page.page
    page.set_viewport_size(PHONE)
    browser_page.login(user)
    browser_page.goto(path)
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.scrollWidth")
    browser_page.screenshot(f"phone{path.replace('/', '-').rstrip('-')}")
    assert width <= PHONE["width"], f"{path} is {width} px wide on a {PHONE['width']} px phone"
    browser_page.assert_clean()
