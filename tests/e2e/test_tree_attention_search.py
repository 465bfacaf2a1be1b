"""The environment's resource tree, the home page's attention list with in-page notices, and the
header's search, each at a desktop's width (1,366 px) and a phone's (390 px)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e import api
from tests.e2e.conftest import WatchedPage

WIDTHS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


def _fits(browser_page: WatchedPage, size: dict, what: str) -> None:
    width = browser_page.page.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"], f"{what} is {width} px wide at {size['width']} px"


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_resources_tab_shows_a_live_tree_of_the_environments_objects(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    env = api.environment(kiln, f"tree-{screen}")
    api.environment_status(kiln, env["id"], "READY")
    page = browser_page.page
    page.set_viewport_size(size)
    browser_page.login("alice")
    browser_page.goto(f"/environments/{env['id']}/")
    page.click("#tab-resources")
    tree = page.locator("#resource-tree")
    root = tree.locator("li[data-kind=Namespace]")
    expect(root).to_have_attribute("data-name", f"payments-tree-{screen}", timeout=15000)
    quota = root.locator("li[data-kind=ResourceQuota]")
    expect(quota).to_have_count(1)
    row = quota.locator(".tree-row")
    expect(row).to_contain_text("Healthy")
    expect(row).to_contain_text("Synced")
    quota.locator(".tree-events summary").click()
    # Newest first: the quota's creation is its oldest event, whether its Ready condition came
    # in the same second or a later one.
    events = quota.locator(".tree-events li")
    expect(events.last).to_contain_text("Created")
    expect(events.first).not_to_contain_text("Created")
    # Live: the tab reads the cluster again without a reload. A listener added after the page's
    # own counts the tree's swaps, so a count above zero means the page has reopened the events.
    page.evaluate(
        "() => { window.__treeSwaps = 0; document.addEventListener('htmx:afterSwap', (e) => {"
        " if (e.detail.target.id === 'resource-tree') { window.__treeSwaps += 1; } }); }"
    )
    with page.expect_response(lambda r: r.url.endswith("/tree/"), timeout=12000):
        pass
    page.wait_for_function("() => window.__treeSwaps > 0", timeout=12000)
    # ... and the events a person opened stay open across it.
    expect(quota.locator(".tree-events")).to_have_attribute("open", "")
    _fits(browser_page, size, "the Resources tab")
    browser_page.screenshot(f"environment-tree-{screen}")
    browser_page.assert_clean()


@pytest.mark.parametrize("screen", WIDTHS)
def test_what_needs_me_arrives_as_a_notice_and_can_be_dismissed(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    page = browser_page.page
    page.set_viewport_size(size)
    browser_page.login("carol")
    card = page.locator("#attention")
    expect(card).to_contain_text("Needs your attention")
    page.wait_for_load_state("networkidle")
    name = f"needs-{screen}"
    api.environment(kiln, name, env_class="staging")  # staging waits for an approver
    title = f"Approve or reject payments/{name}"
    notice = page.locator("#notices .notice", has_text=title)
    expect(notice).to_be_visible(timeout=25000)
    item = card.locator(".attention-item", has_text=title)
    expect(item).to_have_count(1, timeout=10000)
    expect(page.locator("#attention-bell-count")).to_be_visible()
    _fits(browser_page, size, "the home page with a notice")
    browser_page.screenshot(f"home-attention-{screen}")
    notice.locator(".notice-close").click()
    expect(notice).to_have_count(0)
    item.locator("button.dismiss").click()
    expect(page.locator("#attention .attention-item", has_text=title)).to_have_count(0)
    page.reload()
    expect(page.locator("#attention")).to_contain_text("Needs your attention")
    expect(page.locator("#attention .attention-item", has_text=title)).to_have_count(0)
    # Dismissed for carol only: the link still leads to the request.
    assert page.locator("#notices .notice", has_text=title).count() == 0
    browser_page.assert_clean()


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_header_search_opens_with_slash_and_finds_only_what_you_may_see(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    name = f"findme-{screen}"
    env = api.environment(kiln, name)
    page = browser_page.page
    page.set_viewport_size(size)
    browser_page.login("alice")
    browser_page.goto("/environments/")
    page.locator("body").press("/")
    expect(page.locator("#header-q")).to_be_focused()
    page.keyboard.type(name)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert re.search(r"/search/\?q=findme", page.url)
    results = page.locator(".search-results li[data-kind=environment]")
    expect(results).to_have_count(1)
    expect(results.locator("a")).to_have_attribute("href", f"/environments/{env['id']}/")
    _fits(browser_page, size, "the search results")
    browser_page.screenshot(f"search-{screen}")
    # By id too; and bob, of another team, finds nothing of payments'.
    browser_page.goto(f"/search/?q={env['id']}")
    expect(page.locator(".search-results a")).to_have_text(f"payments/{name}")
    page.context.clear_cookies()
    browser_page.login("bob")
    browser_page.goto(f"/search/?q={name}")
    expect(page.locator("#search-none")).to_be_visible()
    browser_page.assert_clean()
    # A query too short is a 400 that says why (the browser logs the status: checked above).
    browser_page.goto("/search/?q=x")
    expect(page.locator("#search-error")).to_contain_text("Type 2 to 100 characters")
