"""A walk through every page as each role, at 1366 and 390 px: no console error, no failed
request, no 4xx/5xx answer, nothing wider than the screen, no form control without a label.
With KILN_UPDATE_DOCS_SCREENSHOTS=1 (`make screenshots`) it also refreshes the pictures of the
README's tour in docs/screenshots/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import api
from tests.e2e.conftest import WatchedPage

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDTHS = (1366, 390)
# Pages beyond the navigation: (user, path) and the detail pages found by following a list's
# first link (list path, link selector).
# {env}, {rollout} and {experiment} are the pages `subjects` makes or finds.
EXTRA = {
    "alice": [
        "/environments/new/",
        "/chaos/new/",
        "/rollouts/new/",
        "/environments/showback/",
        "/environments/{env}/",
        "/rollouts/{rollout}/",
        "/chaos/{experiment}/",
    ]
}
DETAILS = [
    ("/environments/", "table.data tbody a[href^='/environments/env_']"),
    ("/rollouts/", "table.data tbody a[href^='/rollouts/']"),
    ("/chaos/", "table.data tbody a[href^='/chaos/']"),
    ("/audit/", "table.audit-events tbody td:first-child a"),
]
# Form controls without an accessible name: no <label for>, no wrapping <label>, no
# aria-label or aria-labelledby (hidden inputs, buttons and submit inputs name themselves).
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea')].filter(el => {
  if (['hidden', 'submit', 'button', 'reset', 'image'].includes(el.type)) return false;
  if (el.closest('label') || el.getAttribute('aria-label')) return false;
  const by = el.getAttribute('aria-labelledby');
  if (by && by.split(/\\s+/).some(id => (document.getElementById(id)?.textContent || '').trim())) return false;
  return !(el.id && document.querySelector(`label[for="${CSS.escape(el.id)}"]`));
}).map(el => el.outerHTML.slice(0, 120))"""
TOUR = {
    ("alice", "/"): "1-home",
    ("alice", "/environments/new/"): "2-request",
    ("alice", "/environments/"): "3-environments",
    ("alice", "/rollouts/"): "4-rollouts",
    ("carol", "/environments/approvals/"): "5-approvals",
    ("erin", "/audit/"): "6-audit",
    ("alice", "/environments/{env}/"): "7-environment",
    ("alice", "/rollouts/{rollout}/"): "8-rollout",
    ("alice", "/scheduler/"): "9-scheduler",
    ("alice", "/chaos/{experiment}/"): "10-chaos",
}
# At a phone's width: (user, path) -> file name.
PHONE_TOUR = {("alice", "/environments/{env}/"): "11-phone-environment"}


@pytest.fixture(scope="module")
def subjects(kiln) -> Iterator[dict[str, str]]:
    """alice's READY environment, the demo's finished checkout rollout (charts complete) and a
    chaos experiment running on checkout: the detail pages the walk and the tour show."""
    env = api.environment(kiln, "tour", ttl_hours=24)
    api.environment_status(kiln, env["id"], "READY")

    def finished_checkout():
        rollouts = api.call(kiln, "GET", "/api/v1/rollouts/", "engineer")[1]["results"]
        return next(
            (r for r in rollouts if r["service"]["name"] == "checkout" and r["finished"]), None
        )

    rollout = api.wait_for(finished_checkout, timeout=120, what="the demo rollout to finish")
    experiment = api.running_experiment(kiln, "checkout-delay", seconds=600)
    try:
        yield {"env": env["id"], "rollout": rollout["id"], "experiment": experiment["id"]}
    finally:
        api.stop(kiln, experiment=experiment)


def _leave_between_polls(page) -> None:
    """On a page that polls every second (a running experiment's lease and injections), wait
    for both polls to answer before moving on, so leaving does not cut a request short."""
    if page.locator("[hx-trigger='every 1s']").count() == 0:
        return
    with (
        page.expect_response(lambda r: "part=lease" in r.url),
        page.expect_response(lambda r: "part=injections" in r.url),
    ):
        pass


def _picture(page, name: str) -> None:
    """The screen from the top; the rollout's whole page, so its four charts are in it."""
    if os.environ.get("KILN_UPDATE_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(DOCS / f"{name}.png"), full_page=name == "8-rollout")


@pytest.mark.parametrize("user", ["alice", "carol", "erin", "root"])
def test_every_page_as_each_role_at_desktop_and_phone_width(
    browser_page: WatchedPage, subjects, user
):
    page = browser_page.page
    failures: list[str] = []

    def failed(request) -> None:
        # Leaving a page cancels its polls in flight (the chaos panels poll every second):
        # ERR_ABORTED on a background request is the navigation's doing, not a failure.
        if request.failure == "net::ERR_ABORTED" and not request.is_navigation_request():
            return
        failures.append(f"failed {request.url}: {request.failure}")

    page.on("requestfailed", failed)
    page.on(
        "response",
        lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None,
    )
    browser_page.login(user)
    paths = page.eval_on_selector_all(
        "nav.mainnav a", "links => links.map(a => a.getAttribute('href'))"
    )
    paths = ["/", *paths, *EXTRA.get(user, [])]
    for list_path, selector in DETAILS:
        if list_path in paths:
            browser_page.goto(list_path)
            link = page.locator(selector).first
            if link.count():
                paths.append(link.get_attribute("href"))
    assert len(paths) >= 4, paths
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for template in paths:
            path = template.format(**subjects)
            browser_page.goto(path)
            page.wait_for_load_state("networkidle")
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, f"{user} {path} is {scroll} px wide at {width} px"
            if width == WIDTHS[0]:
                unlabelled = page.evaluate(UNLABELLED)
                assert unlabelled == [], f"{user} {path}: controls without a label {unlabelled}"
            name = (TOUR if width == 1366 else PHONE_TOUR).get((user, template))
            if name:
                _picture(page, name)
            _leave_between_polls(page)
    assert failures == [], failures
    browser_page.assert_clean()
