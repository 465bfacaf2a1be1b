"""An auditor proves one event from the browser: the explorer shows the tree head, "Prove this
event" verifies the inclusion proof on the page and in the browser, and the downloaded bundle,
public key and verifier check it offline with nothing else."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.api import wait_for
from tests.e2e.conftest import WatchedPage


def _no_sideways_scroll(page) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width


def test_auditor_proves_an_event_in_the_page_and_offline(browser_page: WatchedPage, tmp_path):
    page = browser_page.page
    browser_page.login("erin")
    wait_for(
        lambda: "covers head" in page.request.get(browser_page.base_url + "/audit/status/").text(),
        timeout=60,
        what="a checkpoint covering the head",
    )
    browser_page.goto("/audit/")
    card = page.locator("#audit-tlog")
    assert "entries" in card.inner_text() and page.locator("#tree-root").inner_text()
    page.locator("table.audit-events tbody td:first-child a").last.click()
    page.click("#prove")
    page.wait_for_function(
        "() => /verified/.test(document.querySelector('#proof-browser').innerText)", timeout=15000
    )
    assert page.locator("#proof-browser .badge").inner_text() == "verified"
    assert page.locator("#proof-verdict .badge").inner_text() == "verified"
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        _no_sideways_scroll(page)
    files = {}
    for name, selector in (("bundle", "#proof-download"), ("key", "a[href$='/audit/public-key/']"),
                           ("verifier", "a[href$='/audit/tlog_verify.py']")):  # fmt: skip
        with page.expect_download() as download:
            page.locator(selector).first.click()
        files[name] = tmp_path / download.value.suggested_filename
        download.value.save_as(files[name])
    run = subprocess.run(
        [sys.executable, str(files["verifier"]), "--public-key", str(files["key"]), "bundle",
         str(files["bundle"])],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0 and "is in the signed tree of size" in run.stdout, run.stderr
    browser_page.assert_clean()
