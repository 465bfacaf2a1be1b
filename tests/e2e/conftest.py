"""Browser-test fixtures: one standalone Kiln per session and headless Chromium pages that
record console errors and Content-Security-Policy violations.

    def test_x(kiln, browser_page):
        page = browser_page.page
        browser_page.login("alice")
        page.goto(kiln.base_url + "/rollouts/")
        ...
        browser_page.assert_clean()   # no console errors, no CSP violations

The server is a real `manage.py standalone` subprocess (SQLite and in-process
transports in a fresh KILN_VAR_DIR); `kiln.tokens[role]` and `kiln.logins[user]`
hold what it printed. The pages run in Debian's `chromium-headless-shell`, Chromium's
headless build from the same source and version as `chromium` and the one Playwright
itself runs headless: in the full browser the same tests cost half as much CPU
again (docs/operations.md). The navigation walk runs in the full `chromium` as well
(`each_browser_page`), and `make screenshots` takes the tour's pictures in it
(KILN_E2E_BROWSER). One browser serves the whole package (a launch per module
started a browser and Playwright's driver again each time) and ends with its last
test: Playwright's sync API keeps an event loop in the main thread, which
Django's ORM refuses to run beside, so the database tests that follow on the
same worker must not inherit it. The browser tests therefore use no ORM, and
the slow run gives them to one worker as one unit (tests/conftest.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, sync_playwright

from tests.kiln import standalone_process
from tests.kiln.standalone_process import Standalone

CHROMIUM = "/usr/bin/chromium"
HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"

# The session cookies each demo user's first sign-in left, by (server, username): `login`.
_SESSIONS: dict[tuple[str, str], list] = {}

# Runs before any page script; reports every CSP violation to the test through a binding.
_CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__kilnCspViolation({directive: e.violatedDirective, blocked: e.blockedURI,
                             source: e.sourceFile, line: e.lineNumber, sample: e.sample});
});
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kiln(tmp_path_factory) -> Iterator[Standalone]:
    """A standalone Kiln for the whole session, on a free port with a fresh var/ directory."""
    # Every browser test requests payments environments from this one server and leaves most of
    # them live; the default cap (20 live environments a team) would deny the later ones.
    server = standalone_process.start(
        tmp_path_factory.mktemp("kiln-e2e-var"),
        timeout=240,
        environment={"KILN_TEAM_LIMITS": "cpu=1024,memoryGi=4096,gpu=8,environments=200"},
    )
    try:
        yield server
    finally:
        code = standalone_process.stop(server, sig=signal.SIGINT)  # as Ctrl-C in `make run`
        assert code == 0, server.stderr()[-3000:]
        assert "Traceback" not in server.stderr()
        # Every page's static files streamed over uvicorn without Django's sync-iterator warning.
        assert "StreamingHttpResponse" not in server.stderr() + server.stdout()


@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    """Playwright's driver, one for the package's tests."""
    with sync_playwright() as driver:
        yield driver


def _launch(playwright: Playwright, executable: str) -> Iterator[Browser]:
    instance = playwright.chromium.launch(
        executable_path=executable, headless=True, args=CHROMIUM_ARGS
    )
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture(scope="package")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    """Debian's Chromium headless shell, one for the package's tests; KILN_E2E_BROWSER names
    another build (`make screenshots` takes the docs' pictures in the full Chromium)."""
    yield from _launch(playwright_driver, os.environ.get("KILN_E2E_BROWSER") or HEADLESS_SHELL)


@pytest.fixture
def full_chromium(playwright_driver: Playwright) -> Iterator[Browser]:
    """Debian's full Chromium, headless, for one test: closed after it, as it is seldom used."""
    yield from _launch(playwright_driver, CHROMIUM)


@dataclass
class WatchedPage:
    """A page plus everything it complained about."""

    page: Page
    base_url: str
    logins: dict[str, str]
    console_errors: list[str] = field(default_factory=list)
    csp_violations: list[dict] = field(default_factory=list)

    def goto(self, path: str):
        return self.page.goto(self.base_url + path)

    def login(self, username: str) -> None:
        """Sign in as a demo user and land on the home page, as the login form does.

        The first time in the run through the login form; after that with the session cookie
        that sign-in left, as a person who stays signed in, unless the session has ended (a
        test signed out), when the form signs in again. Each sign-in hashes the password
        (PBKDF2, costly by design), the standalone server's largest single cost when
        every test signed in anew (docs/operations.md)."""
        key = (self.base_url, username)
        if key in _SESSIONS:
            self.page.context.add_cookies(_SESSIONS[key])
            self.goto("/")
            if not self.page.url.startswith(self.base_url + "/accounts/login/"):
                return
        self.goto("/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", self.logins[username])
        with self.page.expect_navigation():
            self.page.click("button[type=submit]")
        _SESSIONS[key] = self.page.context.cookies()

    def wait_until(self, predicate: Callable[[], object], *, timeout: float = 10.0, what: str = ""):
        """Poll `predicate` until it returns something truthy and return that; fail with `what`
        after `timeout` s. Waits through the page, so its events (console messages, CSP reports)
        are delivered between the polls."""
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
            self.page.wait_for_timeout(50)
        return value

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_clean(self) -> None:
        """No console errors and no CSP violations so far."""
        assert self.csp_violations == [], self.csp_violations
        assert self.console_errors == [], self.console_errors


@pytest.fixture
def browser_page(browser: Browser, kiln: Standalone) -> Iterator[WatchedPage]:
    """A fresh browser context and page that records console errors and CSP violations."""
    with watched_page(browser, kiln) as page:
        yield page


@pytest.fixture(params=["headless-shell", "chromium"])
def each_browser_page(request, kiln: Standalone) -> Iterator[WatchedPage]:
    """`browser_page` in the headless shell, then in the full Chromium."""
    name = "browser" if request.param == "headless-shell" else "full_chromium"
    with watched_page(request.getfixturevalue(name), kiln) as page:
        yield page


@contextmanager
def watched_page(browser: Browser, kiln: Standalone) -> Iterator[WatchedPage]:
    """A fresh context and page in `browser`, watched for console errors and CSP violations."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    # The slow run's workers share two cores with the rest of the suite: a long page may take
    # more than Playwright's default 30 s to load there. A wait on an element keeps that default.
    page.set_default_navigation_timeout(90_000)
    watched = WatchedPage(page, kiln.base_url, kiln.logins)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.console_errors.append(f"{message.text} @ {message.location.get('url')}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: watched.console_errors.append(f"pageerror: {exc}"))
    page.expose_binding("__kilnCspViolation", lambda source, v: watched.csp_violations.append(v))
    page.add_init_script(_CSP_LISTENER)
    try:
        yield watched
    finally:
        context.close()
