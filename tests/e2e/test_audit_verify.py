"""An auditor verifies from the browser: the public key downloads, "Verify now" runs a verification
job whose result the status panel shows, and the offline verifier accepts the downloaded key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.api import wait_for
from tests.e2e.conftest import WatchedPage

ROOT = Path(__file__).resolve().parents[2]


def _verify_offline(export: str, key: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.export.verify", export, "--public-key", key],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_auditor_downloads_the_key_and_verifies_now(browser_page: WatchedPage, tmp_path):
    """Item 10: no "run manage.py audit_verify"; Verify now shows verifying, then the result;
    the downloaded key verifies a downloaded export offline, and a wrong key is named as such."""
    page = browser_page.page
    browser_page.login("erin")
    browser_page.goto("/audit/")
    panel = page.locator("#audit-status")
    assert "manage.py audit_verify" not in panel.inner_text()
    with page.expect_download() as key_download:
        page.click("#public-key")
    key = tmp_path / "kiln-audit.pub"
    key_download.value.save_as(key)
    assert key.read_text().strip().count("+") >= 2  # a verifier key line <name>+<hash>+<key>
    with page.expect_navigation():
        page.click("text=Verify now")
    page.wait_for_function(
        "() => /intact|broken/.test(document.querySelector('#last-verification').innerText)",
        timeout=30000,
    )
    assert "intact" in page.locator("#last-verification").inner_text()
    browser_page.screenshot("audit-verified")
    # The writer signs a checkpoint once it falls idle; an export's tail must be covered by one.
    wait_for(
        lambda: "covers head" in page.request.get(browser_page.base_url + "/audit/status/").text(),
        timeout=60,
        what="a checkpoint covering the head",
    )
    # An open checkpoint note stays open when the status refresh swaps its card in anew.
    browser_page.goto("/audit/")
    page.click("#tlog-note summary")
    page.evaluate("document.getElementById('audit-tlog').dataset.old = '1'")
    page.evaluate(
        "htmx.ajax('GET', '/audit/status/', {target: '#audit-status', swap: 'outerHTML'})"
    )
    page.wait_for_function("() => !document.getElementById('audit-tlog').dataset.old")
    page.wait_for_function("() => document.getElementById('tlog-note').open", timeout=5000)
    with page.expect_download() as export_download:
        page.click("#export-jsonl")
    export = tmp_path / "export.jsonl"
    export_download.value.save_as(export)
    good = _verify_offline(str(export), str(key))
    assert good.returncode == 0 and "export intact" in good.stdout, good.stderr
    wrong = _verify_offline(str(export), str(export))  # the export passed as the key
    assert wrong.returncode == 2
    assert (
        wrong.stderr.startswith("cannot read the public key")
        and "Download public key" in wrong.stderr
    )
    browser_page.assert_clean()
