"""Narrow screens (360 and 390 px) and a desktop (1366 px): nothing scrolls sideways, every
navigation link is on screen and the navigation takes at most two rows, the audit table and the
approval queue stay inside their cards; a skip link leads to the content."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e import api
from tests.e2e.conftest import WatchedPage

# (user, path) of every kind of page, lists and details; {env}, {rollout}, {experiment} and
# {event} are the ones `subjects` makes. root sees the most navigation links.
PAGES = [
    ("alice", "/"),
    ("alice", "/environments/new/"),
    ("alice", "/environments/{env}/"),
    ("alice", "/environments/showback/"),
    ("alice", "/rollouts/"),
    ("alice", "/rollouts/{rollout}/"),
    ("alice", "/scheduler/"),
    ("alice", "/chaos/"),
    ("alice", "/chaos/new/"),
    ("alice", "/chaos/{experiment}/"),
    ("erin", "/audit/events/1/"),
    ("erin", "/audit/events/{event}/"),
    ("erin", "/audit/"),
    ("carol", "/environments/approvals/"),
    ("root", "/"),
]
NAV_TOPS = "links => links.map(a => Math.round(a.getBoundingClientRect().top))"


@pytest.fixture(scope="module")
def subjects(kiln) -> Iterator[dict[str, str]]:
    """A READY environment, a rollout and a chaos experiment running, and the experiment's audit
    event: the detail pages the narrow-screen walk opens."""
    env = api.environment(kiln, "narrow-env")
    api.environment_status(kiln, env["id"], "READY")
    rollout = api.running_rollout(kiln, "narrow-svc")
    experiment = api.running_experiment(kiln, "narrow-delay", seconds=600)

    def event():
        path = "/api/v1/audit/events/?action=chaos.experiment.created"
        events = api.call(kiln, "GET", path, "auditor")[1]["results"]
        return next((e["seq"] for e in events if experiment["id"] in e["target"]), None)

    try:
        seq = api.wait_for(event, what="the experiment's audit event")
        yield {
            "env": env["id"],
            "rollout": rollout["id"],
            "experiment": experiment["id"],
            "event": seq,
        }
    finally:
        api.stop(kiln, rollout=rollout, experiment=experiment)


@pytest.mark.parametrize("width", [360, 390])
def test_narrow_pages_fit_and_every_navigation_link_is_on_screen(
    browser_page: WatchedPage, subjects, width
):
    """Every page fits the screen; the navigation wraps rather than clip a link, on two rows
    at most (it took three at 390 px)."""
    page = browser_page.page
    page.set_viewport_size({"width": width, "height": 800})
    current = None
    for user, template in PAGES:
        path = template.format(**subjects)
        if user != current:
            page.context.clear_cookies()
            browser_page.login(user)
            current = user
        browser_page.goto(path)
        page.wait_for_load_state("networkidle")
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"{path} is {scroll} px wide at {width} px"
        rights = page.eval_on_selector_all(
            "nav.mainnav a", "links => links.map(a => Math.ceil(a.getBoundingClientRect().right))"
        )
        assert rights and max(rights) <= width, f"navigation on {path} is clipped: {rights}"
        rows = sorted(set(page.eval_on_selector_all("nav.mainnav a", NAV_TOPS)))
        assert len(rows) <= 2, f"{user}'s navigation takes {len(rows)} rows at {width} px: {rows}"
        if width == 360:
            name = template.replace("{", "").replace("}", "").replace("/", "-").rstrip("-")
            browser_page.screenshot(f"narrow-{user}{name}")
    browser_page.assert_clean()


def _open(browser_page: WatchedPage, user: str, path: str, *, width: int, height: int = 800):
    """`path` as `user` at `width` px; returns the page."""
    page = browser_page.page
    page.set_viewport_size({"width": width, "height": height})
    browser_page.login(user)
    browser_page.goto(path)
    return page


def test_audit_table_stays_inside_its_card_on_a_desktop(browser_page: WatchedPage):
    """Item 9: at 1366 px the audit table's right edge is inside its card."""
    page = _open(browser_page, "erin", "/audit/", width=1366, height=900)
    card = page.locator(".table-card").bounding_box()
    table = page.locator("table.audit-events").bounding_box()
    assert card and table and table["x"] + table["width"] <= card["x"] + card["width"] + 1
    # Long targets wrap inside their cell; the hash column is not pushed past the card.
    hash_right = page.eval_on_selector_all(
        "table.audit-events td.a-hash",
        "cells => Math.max(...cells.map(c => c.getBoundingClientRect().right))",
    )
    assert hash_right <= card["x"] + card["width"] + 1
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    # Targets link to what they name.
    link = page.locator(
        "table.audit-events a[href^='/environments/'], table.audit-events a[href^='/rollouts/']"
    ).first
    assert link.count() == 1
    browser_page.assert_clean()


def test_approval_queue_stays_inside_its_card_on_a_desktop(browser_page: WatchedPage, kiln):
    """At 1366 px the queue table's right edge is inside its card, with every request's plan
    opened to its diff and manifests (their long lines scroll in their own boxes)."""
    waiting = api.environment(kiln, "narrow-queue", env_class="staging")
    page = browser_page.page
    page.set_viewport_size({"width": 1366, "height": 900})
    browser_page.login("carol")
    browser_page.goto("/environments/approvals/")
    # (the plan has its own row beneath the request's; it was inside the Justification cell)
    plan = page.locator(
        f"#plan-{waiting['id']} details.portal-plan, #row-{waiting['id']} details.portal-plan"
    )
    plan.locator(":scope > summary").click()
    plan.locator("details > summary").first.click()
    assert plan.locator(".portal-plan-diff").is_visible()
    table = page.locator("table.portal-queue")
    card = table.locator("xpath=..")
    assert "card" in (card.get_attribute("class") or "").split()
    box, edge = table.bounding_box(), card.bounding_box()
    assert box and edge
    assert box["x"] + box["width"] <= edge["x"] + edge["width"] + 1, (box, edge)
    # Nothing in the row (the reason input, the buttons, the plan's code) ends past the card.
    rights = table.evaluate(
        "t => [...t.querySelectorAll('td, td input, td button, td pre')]"
        ".filter(e => e.offsetParent).map(e => e.getBoundingClientRect().right)"
    )
    assert max(rights) <= edge["x"] + edge["width"] + 1, max(rights)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    browser_page.screenshot("approval-queue-plan-open")
    # On a small laptop the ten columns did not fit: the Decide column was scrolled out of the
    # card. Class, requester and quota now go under the name, and the buttons stay in sight.
    page.set_viewport_size({"width": 1024, "height": 768})
    edge = card.bounding_box()
    approve = page.locator(f"#row-{waiting['id']} button[value=approve]").bounding_box()
    assert approve["x"] + approve["width"] <= edge["x"] + edge["width"] + 1, (approve, edge)
    assert page.locator(f"#row-{waiting['id']} .q-narrow").is_visible()
    browser_page.assert_clean()


def test_top_bar_keeps_its_height_on_a_long_page(browser_page: WatchedPage):
    """A page taller than the screen (a rollout with its charts) does not squeeze the top bar."""
    page = browser_page.page
    page.set_viewport_size({"width": 1366, "height": 900})
    browser_page.login("alice")
    browser_page.goto("/rollouts/")
    with page.expect_navigation():
        page.locator("table.data tbody a[href^='/rollouts/']").first.click()
    assert page.evaluate("document.documentElement.scrollHeight") > 900
    assert page.locator("header.topbar").bounding_box()["height"] == 56
    browser_page.assert_clean()


# Every link of the navigation inside the top bar, and the bar's height.
NAV_INSIDE_BAR = """() => {
    const bar = document.querySelector("header.topbar").getBoundingClientRect();
    const links = [...document.querySelectorAll("nav.mainnav a")].map(a => a.getBoundingClientRect());
    return {height: bar.height, inside: links.every(r => r.top >= bar.top && r.bottom <= bar.bottom
        && r.right <= bar.right), rows: new Set(links.map(r => Math.round(r.top))).size};
}"""


@pytest.mark.parametrize("user", ["root", "alice"])
def test_the_top_bar_grows_rather_than_clip_its_links_between_phone_and_desktop(
    browser_page: WatchedPage, user
):
    """The bar was 56 px high whatever its width: between 761 and 1,365 px the links wrapped
    above and below it, out of sight (a platform admin's six even at 1,366 px). Now they sit on
    one row, beside the rest on a wide screen or on a row of their own under it."""
    page = browser_page.page
    browser_page.login(user)
    for width in (1440, 1366, 1280, 1024, 900, 768):
        page.set_viewport_size({"width": width, "height": 800})
        browser_page.goto("/")
        bar = page.evaluate(NAV_INSIDE_BAR)
        assert bar["inside"] and bar["rows"] == 1, (user, width, bar)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        if width >= 1366:
            assert bar["height"] == 56, (user, width, bar)  # one row where there is room
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


def test_the_scheduler_page_keeps_its_tables_and_tags_inside_their_cards(
    browser_page: WatchedPage,
):
    """The nodes table fits a small laptop's card (type and zone share a column); on a phone a
    zone's spot quote wraps inside its cell; the commitment chart speaks in percentages and its
    legend shows the latest sample rather than dashes."""
    page = browser_page.page
    page.set_viewport_size({"width": 1024, "height": 800})
    browser_page.login("root")

    def drawn() -> bool:  # the first nodes sync (every 15 s) stores the first sample
        browser_page.goto("/scheduler/")
        return page.locator("table#nodes").count() and page.locator(".u-legend").count()

    api.wait_for(drawn, timeout=90, what="the scheduler page's nodes and commitment chart")
    card = page.locator("#nodes-section").bounding_box()
    table = page.locator("table#nodes").bounding_box()
    assert table["x"] + table["width"] <= card["x"] + card["width"] + 1, (table, card)
    legend = page.locator("#chart-commitment .u-legend")
    assert "--" not in legend.inner_text() and "%" in legend.inner_text()

    page.set_viewport_size({"width": 390, "height": 800})
    browser_page.goto("/scheduler/")
    page.locator("#pricing-section summary").click()
    edge = page.locator("#pricing-section").bounding_box()
    rights = page.eval_on_selector_all(
        "#pricing .badge", "tags => tags.map(t => t.getBoundingClientRect().right)"
    )
    assert rights and max(rights) <= edge["x"] + edge["width"] + 1, (max(rights), edge)
    browser_page.assert_clean()


def test_a_filter_bar_on_a_phone_lays_its_fields_in_even_halves(browser_page: WatchedPage):
    page = _open(browser_page, "alice", "/environments/", width=390)
    widths = page.eval_on_selector_all(
        "form.toolbar > label:not(.check) > input, form.toolbar > label:not(.check) > select",
        "boxes => boxes.map(b => Math.round(b.getBoundingClientRect().width))",
    )
    assert len(widths) == 4 and max(widths) - min(widths) <= 2, widths
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    browser_page.assert_clean()
