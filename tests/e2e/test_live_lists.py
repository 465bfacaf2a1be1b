"""Lists stream their changes and steering appears without a reload, at a desktop's width (1,280
px) and a phone's (390 px): the environment list follows an environment from its request to
READY, the rollout list a new rollout, the experiment list a new experiment's lease, and a
rollout's page shows Abort the moment the rollout runs. Each page is loaded once: a marker set
on its window after loading must still be there at the end (no reload happened)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e import api
from tests.e2e.conftest import WatchedPage

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


def _open_once(browser_page: WatchedPage, size: dict, path: str, user: str = "alice") -> None:
    page = browser_page.page
    page.set_viewport_size(size)
    browser_page.login(user)
    browser_page.goto(path)
    expect(page.locator("[data-live-state]")).to_have_text("live", timeout=15000)
    page.evaluate("window.__loadedOnce = true")


def _not_reloaded(browser_page: WatchedPage) -> None:
    assert browser_page.page.evaluate("window.__loadedOnce === true"), "the page was reloaded"


def _fits(browser_page: WatchedPage, size: dict, what: str) -> None:
    width = browser_page.page.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"], f"{what} is {width} px wide at {size['width']} px"


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_environment_list_shows_a_new_request_and_its_status_as_it_changes(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    _open_once(browser_page, size, "/environments/?q=live-")
    page = browser_page.page
    name = f"live-{screen}"
    env = api.environment(kiln, name)
    row = page.locator("#environment-rows tr", has=page.locator(f"a:text-is('{name}')"))
    expect(row).to_have_count(1, timeout=15000)  # a row new to the page arrives by itself
    expect(row.locator(".badge")).to_have_text("Ready", timeout=90000)
    api.environment_status(kiln, env["id"], "READY")
    _not_reloaded(browser_page)
    _fits(browser_page, size, "the live environment list")
    browser_page.screenshot(f"live-environments-{screen}")
    browser_page.assert_clean()


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_rollout_list_shows_a_new_rollout_without_a_reload(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    _open_once(browser_page, size, "/rollouts/")
    page = browser_page.page
    name = f"live-list-{screen}"
    rollout = api.running_rollout(kiln, name)
    try:
        row = page.locator(
            "#rollout-rows tr", has=page.locator(f"a:text-is('payments-prod/{name}')")
        )
        expect(row).to_have_count(1, timeout=15000)
        expect(row).to_contain_text("Running", timeout=15000)
        expect(row).to_contain_text("5%")
        _not_reloaded(browser_page)
        _fits(browser_page, size, "the live rollout list")
    finally:
        api.stop(kiln, rollout=rollout)
    # Aborted from elsewhere: the row says so on this page too.
    expect(row).to_contain_text("Aborted", timeout=15000)
    _not_reloaded(browser_page)
    browser_page.assert_clean()


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_experiment_list_shows_a_new_experiment_and_its_lease(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    _open_once(browser_page, size, "/chaos/")
    page = browser_page.page
    name = f"live-{screen}"
    experiment = api.running_experiment(kiln, name)
    try:
        row = page.locator("#experiment-rows tr", has=page.locator(f"a:text-is('{name}')"))
        expect(row).to_have_count(1, timeout=15000)
        expect(row).to_contain_text("Running", timeout=15000)
        # The lease's holder is on the row, as the controller holds it.
        expect(row.locator("td.mono").nth(1)).not_to_contain_text("none", timeout=15000)
        _not_reloaded(browser_page)
        _fits(browser_page, size, "the live experiment list")
        browser_page.screenshot(f"live-experiments-{screen}")
    finally:
        api.stop(kiln, experiment=experiment)
    expect(row).to_contain_text("Aborted", timeout=15000)
    _not_reloaded(browser_page)
    browser_page.assert_clean()


@pytest.mark.parametrize("screen", WIDTHS)
def test_a_rollouts_abort_appears_the_moment_it_runs_without_a_reload(
    browser_page: WatchedPage, kiln, screen
):
    size = WIDTHS[screen]
    page = browser_page.page
    page.set_viewport_size(size)
    browser_page.login("alice")
    name = f"steer-{screen}"
    status, service = api.call(
        kiln, "POST", "/api/v1/canary/services/", "platform-admin",
        {"team": "payments", "name": name, "namespace": "payments-prod",
         "sim_traffic_class": "low_traffic"},
    )  # fmt: skip
    assert status == 201, service
    body = {"service": service["id"], "baseline_version": "v1", "canary_version": "v2",
            "steps": [5, 100], "ticks_per_step": 5, "tick_seconds": 3600}  # fmt: skip
    status, rollout = api.call(kiln, "POST", "/api/v1/rollouts/", "engineer", body)
    assert status == 201, rollout
    try:
        # The page is opened at once: the rollout is most likely still pending (its first tick
        # is queued), and then the Decide card is on the page but hidden.
        browser_page.goto(f"/rollouts/{rollout['id']}/")
        page.evaluate("window.__loadedOnce = true")
        steer = page.locator("#steer")
        expect(steer).to_be_visible(timeout=20000)
        expect(steer.locator("button[value=abort]")).to_be_visible()
        expect(page.locator("#rollout-status .badge")).to_have_attribute("data-status", "running")
        _not_reloaded(browser_page)
        _fits(browser_page, size, "the rollout page with its Decide card")
        browser_page.screenshot(f"rollout-steer-{screen}")
    finally:
        api.stop(kiln, rollout=rollout)
    browser_page.assert_clean()
