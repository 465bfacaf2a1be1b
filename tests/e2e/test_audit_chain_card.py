"""An auditor's home and explorer, at a desktop's width (1,280 px) and a phone's (390 px): the
home's Audit chain card (size, last checkpoint, last cosignature, last verification, Verify
now) and an attention item while the chain has never been verified; the explorer's Who filter
(people, system components) and a rollout's analysis ticks folded under the rollout; and the
rollout page's link to the document it names."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e import api
from tests.e2e.conftest import WatchedPage

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


def _fits(browser_page: WatchedPage, size: dict, what: str) -> None:
    width = browser_page.page.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"], f"{what} is {width} px wide at {size['width']} px"


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_auditors_home_shows_the_chain_and_verifies_it_now(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    page = browser_page.page
    page.set_viewport_size(size)
    browser_page.login("erin")
    card = page.locator("#audit-chain-card")
    expect(card).to_be_visible()
    assert re.search(r"\d+ entr(y|ies)", card.locator("#chain-size").inner_text())
    for fact in ("#chain-checkpoint", "#chain-cosignature", "#chain-verification"):
        expect(card.locator(fact)).not_to_be_empty()
    verify_item = page.locator("#attention .attention-item", has_text="Verify the audit chain")
    if "never" in card.locator("#chain-verification").inner_text():
        # Never verified: the auditor's list says so (the first run on a fresh server).
        expect(verify_item).to_have_count(1)
    _fits(browser_page, size, "the auditor's home")
    browser_page.screenshot(f"home-auditor-{screen}")
    with page.expect_navigation():
        card.locator("#chain-verify-now").click()
    page.wait_for_function(
        "() => /intact|broken/.test(document.querySelector('#last-verification').innerText)",
        timeout=45000,
    )
    browser_page.goto("/")
    expect(page.locator("#chain-verification")).to_contain_text("intact")
    expect(verify_item).to_have_count(0)
    browser_page.assert_clean()


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_explorer_shows_people_or_the_system_and_folds_a_rollouts_ticks(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    page = browser_page.page
    page.set_viewport_size(size)
    rollout = api.running_rollout(kiln, f"audit-ticks-{screen}")
    try:
        browser_page.login("erin")
        browser_page.goto("/audit/")
        page.select_option("#audit-who", "people")
        with page.expect_navigation():
            page.click(".audit-filters button[type=submit]")
        actors = page.locator("table.audit-events tbody tr:not(.tick-group) td:nth-child(3)")
        expect(actors.first).to_be_visible()
        assert not [a for a in actors.all_inner_texts() if a.strip().startswith("system:")]
        expect(page.locator("#audit-who")).to_have_value("people")
        page.select_option("#audit-who", "system")
        with page.expect_navigation():
            page.click(".audit-filters button[type=submit]")
        texts = actors.all_inner_texts()
        assert texts and all(a.strip().startswith("system:") for a in texts), texts

        # The demo's rollouts tick every few seconds: their ticks fold under each rollout.
        def grouped():
            browser_page.goto("/audit/?action=canary.tick.decided")
            return page.locator("tr.tick-group").count()

        api.wait_for(grouped, timeout=90, what="a rollout's ticks folded in the explorer")
        group = page.locator("tr.tick-group").first
        expect(group.locator("summary")).to_contain_text("analysis ticks of")
        group.locator("summary strong").click()  # not the rollout's link beside it
        expect(group.locator("ul.tick-list li").first).to_contain_text("canary.tick.decided")
        _fits(browser_page, size, "the explorer with a folded group open")
        browser_page.screenshot(f"audit-explorer-ticks-{screen}")

        # A document the rollout page names is a link to it, landing on its section.
        browser_page.goto(f"/rollouts/{rollout['id']}/")
        with page.expect_navigation():
            page.click("#rollout-glossary a:text('The decision rule')")
        expect(page.locator("h2#the-decision-rule")).to_be_visible()
        assert page.url.endswith("/docs/canary/#the-decision-rule")
        _fits(browser_page, size, "docs/canary.md as a page")
    finally:
        api.stop(kiln, rollout=rollout)
    browser_page.assert_clean()
