"""A walk through every page as each role, at 1366 and 390 px: no console error, no failed
request, no 4xx/5xx answer, nothing wider than the screen, no form control without a label.
With KILN_UPDATE_DOCS_SCREENSHOTS=1 it also refreshes the pictures of the README's tour in docs/screenshots/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import WatchedPage

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDTHS = (1366, 390)
# Pages beyond the navigation: (user, path) and the detail pages found by following a list's
# first link (list path, link selector).
EXTRA = {
    "alice": ["/environments/new/", "/chaos/new/", "/rollouts/new/", "/environments/showback/"]
}
DETAILS = [
    ("/environments/", "table.data tbody a[href^='/environments/env_']"),
    ("/rollouts/", "table.data tbody a[href^='/rollouts/']"),
    ("/chaos/", "table.data tbody a[href^='/chaos/']"),
    ("/audit/", "table.audit-events tbody td:first-child a"),
]
# Tour pictures: (user, path or list to follow, file name).
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
}


@pytest.mark.parametrize("user", ["alice", "carol", "erin", "root"])
def test_every_page_as_each_role_at_desktop_and_phone_width(browser_page: WatchedPage, user):
    page = browser_page.page
    failures: list[str] = []
    page.on("requestfailed", lambda r: failures.append(f"failed {r.url}: {r.failure}"))
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
        for path in paths:
            browser_page.goto(path)
            page.wait_for_load_state("networkidle")
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, f"{user} {path} is {scroll} px wide at {width} px"
            if width == WIDTHS[0]:
                unlabelled = page.evaluate(UNLABELLED)
                assert unlabelled == [], f"{user} {path}: controls without a label {unlabelled}"
            name = TOUR.get((user, path))
            if name and width == 1366 and os.environ.get("KILN_UPDATE_DOCS_SCREENSHOTS") == "1":
                DOCS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(DOCS / f"{name}.png"))
    assert failures == [], failures
    browser_page.assert_clean()
