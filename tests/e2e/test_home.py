"""The foundation's pages in headless Chromium: login, home, 404, sign-out and the API docs.

Every test also asserts the page logged no console error and broke no CSP rule.
"""

from __future__ import annotations

import urllib.request

import pytest

from tests.e2e.conftest import WatchedPage


def test_login_page_renders(browser_page: WatchedPage):
    response = browser_page.goto("/accounts/login/")
    page = browser_page.page
    assert response.status == 200
    assert page.title() == "Sign in · Kiln"
    assert page.locator("h1").inner_text() == "Sign in to Kiln"
    assert page.locator("#id_username").is_visible() and page.locator("#id_password").is_visible()
    # The stylesheet applied (it is a separate file: the CSP forbids inline styles).
    background = page.eval_on_selector(".topbar", "e => getComputedStyle(e).backgroundColor")
    assert background == "rgb(17, 24, 39)"
    browser_page.screenshot("login")
    browser_page.assert_clean()


def test_alice_logs_in_and_sees_home_with_nav_and_roles(browser_page: WatchedPage, kiln):
    browser_page.login("alice")
    page = browser_page.page
    assert page.url == kiln.base_url + "/"
    assert page.locator("h1").inner_text() == "Welcome, alice"
    header = page.locator("header.topbar")
    assert header.locator("a.brand").inner_text().strip() == "Kiln"
    nav = header.locator("nav[aria-label=Main]")
    assert nav.count() == 1
    assert header.locator(".who .user").inner_text() == "alice"
    assert header.locator(".who .badge.role").all_inner_texts() == ["engineer"]
    # The bell's count, a badge, is hidden when nothing waits (it showed "0" in amber).
    shown = page.evaluate(
        "() => { const b = document.getElementById('attention-bell-count'); const before ="
        " b.hidden; b.hidden = true; const display = getComputedStyle(b).display;"
        " b.hidden = before; return display; }"
    )
    assert shown == "none"
    facts = page.locator("dl.facts")
    assert facts.locator(".badge.role").all_inner_texts() == ["engineer"]
    assert "payments" in facts.inner_text()
    # Every navigation entry leads to a page that exists.
    for href in nav.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))"):
        assert page.request.get(kiln.base_url + href).status == 200, href
    browser_page.screenshot("home")
    browser_page.assert_clean()


def test_the_footer_leads_to_pages_not_raw_json(browser_page: WatchedPage, kiln):
    """Smaller item: the footer's "Status" and "API root" opened raw JSON (/readyz, /api/v1/).
    Now it names what it opens: the API docs (a page) and the OpenAPI document itself."""
    browser_page.login("alice")
    page = browser_page.page
    footer = page.locator("footer nav[aria-label=Footer] a")
    hrefs = footer.evaluate_all("links => links.map(a => a.href)")
    links = dict(zip(footer.all_inner_texts(), hrefs, strict=True))
    assert set(links) == {"API docs", "OpenAPI schema"}, links
    for text, href in links.items():
        assert not href.endswith(("/readyz", "/healthz", "/api/v1/")), (text, href)
        assert page.request.get(href).status == 200, href
    with page.expect_navigation():
        page.click("footer >> text=API docs")
    assert page.locator(".swagger-ui").count() == 1  # a page, not a JSON body
    assert "json" not in page.request.get(links["API docs"]).headers["content-type"]
    browser_page.assert_clean()


def test_roles_shown_follow_the_person(browser_page: WatchedPage):
    browser_page.login("root")
    badges = browser_page.page.locator("header .who .badge.role").all_inner_texts()
    assert badges == ["platform-admin"]
    assert browser_page.page.locator("a[href='/admin/']").count() == 1
    browser_page.assert_clean()


def test_wrong_password_is_refused_on_the_page(browser_page: WatchedPage):
    browser_page.goto("/accounts/login/")
    page = browser_page.page
    page.fill("#id_username", "alice")
    page.fill("#id_password", "not-her-password")
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert page.locator("[role=alert]").inner_text() == "That username and password do not match."
    assert page.locator("header .who").count() == 0
    browser_page.assert_clean()


def test_sign_out_returns_to_the_login_page(browser_page: WatchedPage, kiln):
    browser_page.login("carol")
    page = browser_page.page
    with page.expect_navigation():
        page.click("header .who button")
    assert page.url == kiln.base_url + "/accounts/login/"
    page.goto(kiln.base_url + "/")
    assert page.url == kiln.base_url + "/accounts/login/?next=/"
    browser_page.assert_clean()


def test_not_found_page(browser_page: WatchedPage):
    browser_page.login("alice")
    response = browser_page.goto("/no-such-page/")
    page = browser_page.page
    assert response.status == 404
    assert page.locator("h1").inner_text() == "Page not found"
    assert page.locator("a.button.primary").get_attribute("href") == "/"
    browser_page.screenshot("not-found")
    # The 404 itself is reported on the console as a failed resource; nothing else may be.
    assert [e for e in browser_page.console_errors if "404" not in e] == []
    assert browser_page.csp_violations == []


def test_api_docs_render_swagger_ui_within_the_csp(browser_page: WatchedPage):
    browser_page.goto("/api/docs/")
    page = browser_page.page
    page.wait_for_selector(".swagger-ui .opblock", timeout=15000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/api/v1/me/" in paths and "/api/v1/teams/" in paths
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("Kiln API")
    browser_page.screenshot("api-docs")
    browser_page.assert_clean()


def test_the_checker_sees_csp_violations(browser_page: WatchedPage, kiln):
    # Guard against a silent listener: a page that breaks the CSP must be reported.
    browser_page.goto("/accounts/login/")
    browser_page.page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = '1';"
        " document.body.appendChild(s); }"
    )
    browser_page.wait_until(lambda: browser_page.csp_violations, what="the CSP violation report")
    assert [v["directive"] for v in browser_page.csp_violations] == ["script-src-elem"]


@pytest.mark.parametrize("path", ["/static/kiln/kiln.css", "/static/vendor/htmx.min.js"])
def test_static_assets_are_served_by_kiln_itself(kiln, path):
    with urllib.request.urlopen(kiln.base_url + path, timeout=10) as response:  # noqa: S310
        assert response.status == 200


def test_admin_renders_for_a_platform_admin_within_the_csp(browser_page: WatchedPage):
    browser_page.login("root")
    response = browser_page.goto("/admin/")
    page = browser_page.page
    assert response.status == 200
    assert page.locator("#site-name").inner_text() == "Kiln administration"
    assert page.locator("a[href='/admin/kiln/team/']").count() >= 1
    browser_page.assert_clean()


def test_admin_turns_away_an_engineer(browser_page: WatchedPage, kiln):
    browser_page.login("alice")
    browser_page.goto("/admin/")
    assert browser_page.page.url.startswith(kiln.base_url + "/admin/login/")
    assert browser_page.page.locator("#site-name").count() == 1
    browser_page.assert_clean()


def test_every_page_in_the_navigation_renders_within_the_csp(each_browser_page: WatchedPage, kiln):
    # A platform admin sees every entry; each page must load, show a heading and break no rule,
    # in the headless shell the browser tests use and in the full Chromium.
    browser_page = each_browser_page
    browser_page.login("root")
    page = browser_page.page
    links = page.locator("nav[aria-label=Main] a")
    entries = links.evaluate_all("links => links.map(a => [a.textContent, a.getAttribute('href')])")
    for label, href in entries:
        response = page.goto(kiln.base_url + href)
        assert response.status == 200, (label, href, response.status)
        page.wait_for_timeout(300)  # let page scripts run (htmx, charts, sockets)
        assert page.locator("h1").count() >= 1, label
        assert page.locator("nav[aria-label=Main] a.active").inner_text() == label
    browser_page.assert_clean()
