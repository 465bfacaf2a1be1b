"""At a phone's width (390 px) no page scrolls sideways: a table's rows stack into small cards,
each cell beside its column's name, so no column (Status, Approve, Target) is off to the side."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e import api
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
    cells = page.eval_on_selector_all(
        "table.data:not(.chart-table) tbody td",
        "cells => cells.map(c => [c.getAttribute('data-label') || '', c.colSpan,"
        " Math.ceil(c.getBoundingClientRect().right)])",
    )
    if path != "/chaos/":  # the demo runs no experiment: the chaos list may be empty
        assert cells, f"{path} shows no table"
    for label, span, right in cells:
        assert label or span > 1, f"a cell on {path} has no column name"
        assert right <= PHONE["width"], f"the {label} cell on {path} ends at {right} px"
    browser_page.assert_clean()


def test_every_environment_tab_is_on_screen_on_a_phone(browser_page: WatchedPage):
    page = browser_page.page
    page.set_viewport_size(PHONE)
    browser_page.login("alice")
    browser_page.goto("/environments/")
    page.locator("table.data tbody a").first.click()
    page.wait_for_load_state("networkidle")
    rights = page.eval_on_selector_all(
        "[role=tab]", "tabs => tabs.map(t => Math.ceil(t.getBoundingClientRect().right))"
    )
    # Overview, Progress, Resources, Nodes, Timeline, Policy, Manifests, Cost: none past the edge.
    assert len(rights) == 8 and max(rights) <= PHONE["width"], rights
    page.click("#tab-cost")
    assert page.locator("#panel-cost").is_visible()
    browser_page.assert_clean()


@pytest.mark.parametrize("width", [390, 1366])
def test_a_name_as_long_as_allowed_breaks_instead_of_widening_the_page(
    browser_page: WatchedPage, kiln, width
):
    # 40 characters, one word: the longest name the request form allows.
    name = f"long-{uuid.uuid4().hex[:6]}-" + "b" * 28
    env = api.environment(kiln, name)
    page = browser_page.page
    page.set_viewport_size({"width": width, "height": 844})
    browser_page.login("alice")
    for path in (f"/environments/{env['id']}/", "/environments/"):
        browser_page.goto(path)
        page.wait_for_load_state("networkidle")
        scrolled = page.evaluate("document.documentElement.scrollWidth")
        assert scrolled <= width, f"{path} is {scrolled} px wide at {width} px"
    browser_page.screenshot(f"long-name-{width}")
    browser_page.assert_clean()
